#!/bin/sh
# aen.sh -- guest script for run-linux-host: namespaces changed at run time
# reach the Linux host through an Asynchronous Event (Namespace Attribute
# Changed) -> Changed Namespace List -> rescan, while fio verify keeps
# running on another namespace without an error.
#
# The target starts with NSIDs 1 (RAM), 2 (file, 16 MiB) and 3 (RAM). fio
# writes and verifies NSID 3 in a loop the whole time. The host side watches
# $SHARE_DIR: "add" makes it add NSID 4 and grow NSID 2 to 32 MiB through
# the management API (farflash ctl); "remove" makes it remove NSID 4 by
# rewriting the configuration file and sending SIGHUP.
# Prints "PASS: aen (Ns)" or "FAIL: aen: reason".
set -eu
NQN=${NQN:?}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: aen: $*"
	touch /tmp/fio-stop
	cat /tmp/fio.log 2>/dev/null | tail -20
	dmesg | grep -i nvme | tail -20
	exit 1
}
. "${GUEST_FILES:-/guest/files}/lib.sh"
ns_count() { ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true; }
ns_count() { ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true; }
count_is() { [ "$(ns_count)" = "$1" ]; }
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" >/dev/null || fail "nvme connect"
wait_ok "3 namespaces present" count_is 3
wait_ok "namespace 2 is 16 MiB" sectors_are 2 32768
fio_dev=/dev/$(ns_dev 3)

# fio verify on NSID 3, in a loop until told to stop.
fio_loop_start "$fio_dev" --bsrange=4k-64k
wait_ok "fio verify running" test -s /tmp/fio-runs

echo add >"$SHARE_DIR/request"
wait_ok "namespace 4 appeared" count_is 4
wait_ok "namespace 2 grew to 32 MiB" sectors_are 2 65536
dev=/dev/$(ns_dev 4)
head -c 65536 /dev/urandom >/tmp/pat
dd if=/tmp/pat of="$dev" bs=4096 oflag=direct 2>/dev/null || fail "write to $dev"
dd if="$dev" of=/tmp/back bs=4096 count=16 iflag=direct 2>/dev/null || fail "read from $dev"
cmp /tmp/pat /tmp/back >/dev/null || fail "data read back from the new namespace differs"
echo "  ok: I/O on the new namespace"
d2=/dev/$(ns_dev 2)
dd if=/tmp/pat of="$d2" bs=4096 seek=$((16 << 20 >> 12)) oflag=direct 2>/dev/null || fail "write beyond the old end of $d2"
echo "  ok: I/O beyond namespace 2's old end"

echo remove >"$SHARE_DIR/request"
wait_ok "namespace 4 removed" count_is 3
runs_before=$(cat /tmp/fio-runs)
wait_ok "fio verify went on after the changes" sh -c "[ \$(cat /tmp/fio-runs) -gt $runs_before ]"
fio_loop_stop "the namespace changes, on namespace 3"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: aen ($(since "$T0")s)"
