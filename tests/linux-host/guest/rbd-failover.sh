#!/bin/sh
# rbd-failover.sh -- guest script for run-linux-host: two farflash gateways
# export one RBD image as NSID 1 of one subsystem (same NQN, serial, NGUID,
# ANA group 1; CNTLIDs 1.. on A, 1000.. on B; tests/interop_rbd.rs). A is
# optimized (it owns the image's exclusive lock), B inaccessible. While
# fio verify loops on the multipath head:
#   1. the host side SIGKILLs A and, as the operator, makes B optimized
#      (B breaks the dead A's lock, blocklisting it, and takes it): fio goes
#      on through B with no error; a block written through A before its
#      death reads back the same through B;
#   2. the host side restarts A as non-optimized (it takes no lock), the
#      kernel reconnects to it, then fails back in order: B inaccessible
#      (releases the lock), A optimized (acquires it): writes go down A's
#      path only, no fio error.
# The host side runs what $SHARE_DIR/req.N asks ("kill-a", "restart-a",
# "failback") and answers in req.N.done ("ok ..." or what failed).
# Prints "PASS: rbd-failover (Ns)" or "FAIL: rbd-failover: reason".
set -eu
NQN=${NQN:?}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: rbd-failover: $*"
	tail -20 /tmp/fio.log 2>/dev/null || true
	dmesg | grep -i nvme | tail -20
	exit 1
}
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
. "${GUEST_FILES:-/guest/files}/lib.sh"
connect_paths

req=0
# ask WORD: the host side acts (see above); fails unless it answers "ok ...".
ask() {
	req=$((req + 1))
	echo "$1" >"$SHARE_DIR/.req.$req" && mv "$SHARE_DIR/.req.$req" "$SHARE_DIR/req.$req"
	wait_for 600 "the host side did not answer $1 in 60 s" test -f "$SHARE_DIR/req.$req.done"
	answer=$(cat "$SHARE_DIR/req.$req.done")
	case "$answer" in ok*) echo "  host side: $1: $answer" ;; *) fail "host side: $1: $answer" ;; esac
}
wait_ana a optimized
wait_ana b inaccessible
echo "  ok: path A optimized, path B inaccessible"

# A block outside fio's 2 MiB, written through A before it dies.
dd if=/dev/urandom of=/tmp/block bs=64k count=16 2>/dev/null
dd if=/tmp/block of="$dev" bs=64k seek=64 oflag=direct conv=fsync 2>/dev/null || fail "dd to $dev"
before=$(md5sum </tmp/block)

fio_loop_start "$dev"
progress "before the failover"

# 1. A dies; the operator (host side) makes B optimized.
t=$(now)
ask kill-a
wait_ana b optimized
progress "after the failover"
echo "  ok: failover: fio verify went on through B, a run completed $(since "$t") s after the kill"
after=$(dd if="$dev" bs=64k skip=64 count=16 iflag=direct 2>/dev/null | md5sum)
[ "$after" = "$before" ] || fail "the block written through A reads back different through B"
echo "  ok: the block written through A before its death reads back the same through B"

# 2. A back as non-optimized, then failback in order.
ask restart-a
wait_for 600 "path A not live again 60 s after the restart" state_is a live
wait_ana a non-optimized
progress "with A back as non-optimized"
t=$(now)
ask failback
wait_ana a optimized
wait_ana b inaccessible
progress "after the failback"
echo "  ok: failback: A optimized, B inaccessible after $(since "$t") s"
wb=$(writes b) wa=$(writes a)
progress "only on A"
[ "$(writes b)" = "$wb" ] || fail "path B got writes after the failback"
[ "$(writes a)" -gt "$wa" ] || fail "path A got no writes after the failback"
echo "  ok: writes go down path A only"
fio_loop_stop "the failover and the failback"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: rbd-failover ($(since "$T0")s)"
