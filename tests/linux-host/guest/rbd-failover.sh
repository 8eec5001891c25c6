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
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
fail() {
	echo "FAIL: rbd-failover: $*"
	tail -20 /tmp/fio.log 2>/dev/null || true
	dmesg | grep -i nvme | tail -20
	exit 1
}
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] || fail "nvme_core.multipath is off"
set -- $TARGET_PORTS
PA=$1 PB=$2
for p in $PA $PB; do
	nvme connect -t tcp -a "$TARGET_ADDR" -s "$p" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 >/dev/null ||
		fail "nvme connect to port $p"
done
i=0
until [ "$(ls /sys/class/nvme-subsystem/nvme-subsys*/ 2>/dev/null | grep -c '^nvme[0-9]*$')" = 2 ]; do
	i=$((i + 1))
	[ $i -le 300 ] || fail "not one subsystem with two controllers after 30 s"
	sleep 0.1
done
heads=$(ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true)
[ "$heads" = 1 ] || fail "$heads namespace block devices, want one multipath head"
dev=/dev/$(ls /sys/block | grep '^nvme[0-9]*n[0-9]*$')
echo "  ok: one subsystem, two controllers, head $dev"

req=0
# ask WORD: the host side acts (see above); fails unless it answers "ok ...".
ask() {
	req=$((req + 1))
	echo "$1" >"$SHARE_DIR/.req.$req" && mv "$SHARE_DIR/.req.$req" "$SHARE_DIR/req.$req"
	i=0
	until [ -f "$SHARE_DIR/req.$req.done" ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "the host side did not answer $1 in 60 s"
		sleep 0.1
	done
	answer=$(cat "$SHARE_DIR/req.$req.done")
	case "$answer" in ok*) echo "  host side: $1: $answer" ;; *) fail "host side: $1: $answer" ;; esac
}
# path a|b: sysfs block directory of A's (CNTLID < 1000) or B's path.
path() {
	for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
		[ -f "$c/cntlid" ] || continue
		id=$(cat "$c/cntlid")
		case "$1:$((id < 1000))" in
		a:1 | b:0) ls -d /sys/block/nvme*c"${c##*/nvme}"n1 2>/dev/null || true ;;
		esac
	done
}
wait_ana() { # a|b STATE
	i=0
	until [ "$(cat "$(path "$1")/ana_state" 2>/dev/null)" = "$2" ]; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "path $1 is not $2 after 30 s"
		sleep 0.1
	done
}
ctrl_live() { # a|b
	for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
		[ -f "$c/cntlid" ] || continue
		id=$(cat "$c/cntlid")
		case "$1:$((id < 1000))" in
		a:1 | b:0) [ "$(cat "$c/state")" = live ] && return 0 ;;
		esac
	done
	return 1
}
writes() { awk '{ print $5 }' "$(path "$1")/stat"; }
progress() { # WHAT: one more fio verify run completes, none failed
	runs=$(cat /tmp/fio-runs 2>/dev/null || echo 0)
	i=0
	until [ "$(cat /tmp/fio-runs 2>/dev/null || echo 0)" -gt "$runs" ]; do
		[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed) ($1)"
		i=$((i + 1))
		[ $i -le 600 ] || fail "fio made no progress in 60 s ($1)"
		sleep 0.1
	done
}
wait_ana a optimized
wait_ana b inaccessible
echo "  ok: path A optimized, path B inaccessible"

# A block outside fio's 2 MiB, written through A before it dies.
dd if=/dev/urandom of=/tmp/block bs=64k count=16 2>/dev/null
dd if=/tmp/block of="$dev" bs=64k seek=64 oflag=direct conv=fsync 2>/dev/null || fail "dd to $dev"
before=$(md5sum </tmp/block)

rm -f /tmp/fio-stop /tmp/fio-failed /tmp/fio-runs
(
	n=0
	while [ ! -f /tmp/fio-stop ]; do
		n=$((n + 1))
		fio --name=verify --filename="$dev" --ioengine=libaio --direct=1 \
			--rw=randwrite --bs=4k --size=2m --iodepth=4 \
			--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
			--eta=never >>/tmp/fio.log 2>&1 || { echo "fio run $n failed" >/tmp/fio-failed; break; }
		echo "$n" >/tmp/fio-runs
	done
) &
loop=$!
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
i=0
until ctrl_live a; do
	i=$((i + 1))
	[ $i -le 600 ] || fail "path A not live again 60 s after the restart"
	sleep 0.1
done
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
touch /tmp/fio-stop
wait "$loop" || true
[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed)"
! grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error|err= *[1-9]' /tmp/fio.log ||
	fail "fio reported verify/I/O errors"
echo "  ok: fio verify across the failover and the failback: $(cat /tmp/fio-runs) runs, no error"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: rbd-failover ($(since "$T0")s)"
