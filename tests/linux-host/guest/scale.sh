#!/bin/sh
# scale.sh -- guest script for run-linux-host (issue 33, docs/management.md
# "Limits and large targets"): the Linux host against a target with many
# subsystems and namespaces.
#
# scale-discover: `nvme discover` lists every one of the $SUBSYSTEMS
#   subsystems whose NQN starts with $PREFIX (a discovery log of about 1 MiB,
#   which nvme-cli reads in 4 KiB pieces and checks GENCTR across).
# scale-namespaces: `nvme connect` to $NQN, a subsystem of $NAMESPACES
#   namespaces: every block device appears, and a 64 KiB pattern written to
#   the first and to the last namespace reads back.
# Prints "PASS: <scenario> (Ns)" or "FAIL: <scenario>: reason".
set -eu
PREFIX=${PREFIX:?}
SUBSYSTEMS=${SUBSYSTEMS:?}
NQN=${NQN:?}
NAMESPACES=${NAMESPACES:?}
SCENARIO=scale-discover
fail() {
	echo "FAIL: $SCENARIO: $*"
	dmesg | grep -i nvme | tail -20
	exit 1
}
. "${GUEST_FILES:-/guest/files}/lib.sh"

T0=$(now)
nvme discover -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" >/tmp/discover 2>/tmp/discover.err ||
	fail "nvme discover: $(tail -3 /tmp/discover.err)"
listed=$(grep -c "^subnqn: *$PREFIX" /tmp/discover || true)
[ "$listed" = "$SUBSYSTEMS" ] || fail "nvme discover listed $listed of $SUBSYSTEMS subsystems"
echo "  ok: $listed subsystems listed"
echo "PASS: scale-discover ($(since "$T0")s)"

SCENARIO=scale-namespaces
T0=$(now)
ns_count() { ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true; }
count_is() { [ "$(ns_count)" = "$1" ]; }
# dev_of NSID: the block device whose namespace is NSID (device numbers
# follow the kernel's scan, not NSIDs; nvmeXcYnZ are multipath's hidden
# per-controller paths).
dev_of() {
	for b in /sys/block/nvme*n*; do
		case ${b##*/} in *c*) continue ;; esac
		[ "$(cat "$b/nsid" 2>/dev/null)" = "$1" ] && echo "${b##*/}" && return 0
	done
	return 0
}
nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" >/dev/null || fail "nvme connect"
# Identify for every namespace, then a block device each: minutes under TCG.
wait_for 6000 "$NAMESPACES namespaces present: $(ns_count) after 600 s" count_is "$NAMESPACES"
echo "  ok: $NAMESPACES block devices after $(since "$T0") s"
head -c 65536 /dev/urandom >/tmp/pat
for nsid in 1 "$NAMESPACES"; do
	d=$(dev_of "$nsid")
	[ -n "$d" ] || fail "no block device for namespace $nsid"
	dd if=/tmp/pat of="/dev/$d" bs=4096 oflag=direct 2>/dev/null || fail "write to /dev/$d"
	dd if="/dev/$d" of=/tmp/back bs=4096 count=16 iflag=direct 2>/dev/null || fail "read from /dev/$d"
	cmp /tmp/pat /tmp/back >/dev/null || fail "data read back from namespace $nsid differs"
	echo "  ok: verified I/O on namespace $nsid (/dev/$d)"
done
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: scale-namespaces ($(since "$T0")s)"
