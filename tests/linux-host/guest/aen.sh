#!/bin/sh
# aen.sh -- guest script for run-linux-host: namespaces added and removed at
# run time reach the Linux host through an Asynchronous Event (Namespace
# Attribute Changed) -> Changed Namespace List -> rescan.
#
# The host side watches $SHARE_DIR: when this script writes "add" to
# $SHARE_DIR/request it adds namespace 2 to the target (config + SIGHUP);
# "remove" removes it again. Prints "PASS: aen (Ns)" or "FAIL: aen: reason".
set -eu
NQN=${NQN:?}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() { echo "FAIL: aen: $*"; dmesg | grep -i nvme | tail -20; exit 1; }
ns_count() { ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true; }
wait_ns() { # COUNT WHAT
	i=0
	until [ "$(ns_count)" = "$1" ]; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "$2: $(ns_count) namespace devices after 30 s, want $1"
		sleep 0.1
	done
	echo "  ok: $2 after $((i / 10)).$((i % 10)) s"
}
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" >/dev/null || fail "nvme connect"
wait_ns 1 "namespace 1 present"
echo add >"$SHARE_DIR/request"
wait_ns 2 "namespace 2 appeared"
dev=/dev/$(ls /sys/block | grep '^nvme[0-9]*n2$' | head -1)
head -c 65536 /dev/urandom >/tmp/pat
dd if=/tmp/pat of="$dev" bs=4096 oflag=direct 2>/dev/null || fail "write to $dev"
dd if="$dev" of=/tmp/back bs=4096 count=16 iflag=direct 2>/dev/null || fail "read from $dev"
cmp /tmp/pat /tmp/back >/dev/null || fail "data read back from the new namespace differs"
echo "  ok: I/O on the new namespace"
echo remove >"$SHARE_DIR/request"
wait_ns 1 "namespace 2 removed"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: aen ($(awk -v a="$T0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')s)"
