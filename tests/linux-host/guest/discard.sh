#!/bin/sh
# discard.sh -- guest script for run-linux-host: `blkdiscard` from the Linux
# host gives a thin volume's space back, visibly (issue 42).
#
# The target exports one pool volume ($VOLUME_SIZE bytes, clusters of
# $CLUSTER bytes, 4 KiB blocks) as NSID 1 of $NQN. The guest checks what
# Identify and the block layer say about deallocation (the kernel's
# discard_granularity must be $GRANULARITY), writes $WRITE_MIB MiB,
# discards a range that covers whole clusters and two half clusters, then the
# whole device; after each step it asks the host side (through the 9p share:
# "$SHARE_DIR/request" = "PHASE EXPECTED-ALLOCATED-BYTES") to check the
# volume's `allocated` through the management API, and waits for its answer
# ("$SHARE_DIR/answer.PHASE": "ok" or the reason it failed). Reads of every
# discarded byte return zeroes, the rest reads back as written.
# Prints "PASS: discard (Ns)" or "FAIL: discard: reason".
set -eu
NQN=${NQN:?} CLUSTER=${CLUSTER:?} GRANULARITY=${GRANULARITY:?} WRITE_MIB=${WRITE_MIB:-64}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: discard: $*"
	dmesg | grep -i nvme | tail -20
	exit 1
}
. "${GUEST_FILES:-/guest/files}/lib.sh"
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
MIB=1048576
# Every offset and length below is a multiple of U (half of the smallest
# cluster, 64 KiB).
U=32768

# ask PHASE EXPECTED: the host side sees the volume's allocated bytes reach
# EXPECTED (it waits for the pool's commit), or says what it saw instead.
ask() {
	echo "$1 $2" >"$SHARE_DIR/.request" && mv "$SHARE_DIR/.request" "$SHARE_DIR/request"
	wait_for 600 "the host side did not answer for $1" test -s "$SHARE_DIR/answer.$1"
	a=$(cat "$SHARE_DIR/answer.$1")
	[ "$a" = ok ] || fail "$1: $a"
	echo "  ok: $1: allocated = $2 bytes"
}
# zeroes OFFSET LENGTH (multiples of U): that byte range of $dev reads as zeroes.
zeroes() {
	dd if="$dev" of=/tmp/got bs=$U skip=$(($1 / U)) count=$(($2 / U)) iflag=direct 2>/dev/null ||
		fail "read $2 bytes at $1"
	head -c "$2" /dev/zero >/tmp/zero
	cmp /tmp/got /tmp/zero >/dev/null || fail "$2 bytes at $1 do not read as zeroes after the discard"
}
# same OFFSET LENGTH (multiples of U): that byte range of $dev reads back as written.
same() {
	dd if="$dev" of=/tmp/got bs=$U skip=$(($1 / U)) count=$(($2 / U)) iflag=direct 2>/dev/null ||
		fail "read $2 bytes at $1"
	dd if=/tmp/pat of=/tmp/want bs=$U skip=$(($1 / U)) count=$(($2 / U)) 2>/dev/null
	cmp /tmp/got /tmp/want >/dev/null || fail "$2 bytes at $1 differ from what was written"
}

nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" >/dev/null || fail "nvme connect"
has_ns() { [ -n "$(ns_dev 1)" ]; }
wait_ok "the volume's block device appeared" has_ns
name=$(ns_dev 1)
dev=/dev/$name

# What Identify says (NVMe Base 2.0, Identify Namespace): DLFEAT bits 2:0 =
# 001b, deallocated blocks read as zeroes; NSFEAT bit 4 (OPTPERF) with
# NPDG and NPDA (0's based, in blocks) = one cluster.
id=$(nvme id-ns "$dev" 2>&1) || fail "nvme id-ns: $id"
field() { echo "$id" | awk -v f="$1" '$1 == f { print $3; exit }'; }
dlfeat=$(($(field dlfeat)))
nsfeat=$(($(field nsfeat)))
[ $((dlfeat & 7)) = 1 ] || fail "DLFEAT is $dlfeat: deallocated blocks are not said to read as zeroes"
[ $((nsfeat & 16)) = 16 ] || fail "NSFEAT is $nsfeat: no OPTPERF, so no NPDG/NPDA"
for f in npdg npda; do
	v=$(field $f)
	[ -n "$v" ] || fail "nvme id-ns shows no $f"
	[ $(((v + 1) * 4096)) = "$CLUSTER" ] || fail "$f is $v ($(((v + 1) * 4096)) bytes), not one cluster ($CLUSTER)"
done
echo "  ok: DLFEAT $dlfeat, NSFEAT $nsfeat, NPDG = NPDA = one cluster ($CLUSTER bytes)"
# What the block layer makes of it: discard on, and its granularity,
# $GRANULARITY: Linux 6.1 (and 6.12) set discard_granularity to the logical
# block size and do not read NPDG/NPDA (nvme_config_discard), so a host
# that wants space back must discard whole clusters itself.
q=/sys/block/$name/queue
max=$(cat $q/discard_max_bytes)
gran=$(cat $q/discard_granularity)
[ "$max" -ge "$CLUSTER" ] || fail "discard_max_bytes is $max"
echo "  discard_granularity $gran, discard_max_bytes $max (kernel $(uname -r))"
[ "$gran" = "$GRANULARITY" ] || fail "discard_granularity is $gran, want $GRANULARITY"

# Write WRITE_MIB MiB (a cache flush at the end: conv=fsync).
head -c $((WRITE_MIB * MIB)) /dev/urandom >/tmp/pat
dd if=/tmp/pat of="$dev" bs=$MIB oflag=direct conv=fsync 2>/dev/null || fail "write $WRITE_MIB MiB"
ask written $((WRITE_MIB * MIB))

# A range from half a cluster before 16 MiB to half a cluster after
# 48 MiB: the 32 whole clusters in it are freed, the two halves zeroed.
half=$((CLUSTER / 2))
start=$((16 * MIB - half)) len=$((32 * MIB + 2 * half))
blkdiscard -o $start -l $len "$dev" || fail "blkdiscard -o $start -l $len"
ask range $(((WRITE_MIB - 32) * MIB))
zeroes $start $len
same 0 $start
same $((start + len)) $((WRITE_MIB * MIB - start - len))
echo "  ok: the discarded range reads as zeroes, the rest as written"

blkdiscard "$dev" || fail "blkdiscard of the whole device"
ask all 0
zeroes 0 $((WRITE_MIB * MIB))
echo "  ok: the whole device reads as zeroes"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: discard ($(since "$T0")s)"
