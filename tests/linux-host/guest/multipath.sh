#!/bin/sh
# multipath.sh -- guest script for run-linux-host: two farflash targets
# export one subsystem over one file (same NQN, serial, NGUID; disjoint
# CNTLID ranges, docs/ha.md). The Linux host's native multipath must join
# them: one subsystem with two controllers, one namespace block device, and
# fio verify on it passes. With $SHARE_DIR, while fio verify loops on the
# head: ANA states flipped on the targets through `farflash ctl` (asked of
# the host side through ctl.N files): the kernel's ana_state follows and
# writes go down the optimized path only; target B's listener removed and
# added back; target A SIGKILLed and restarted. $TARGET_PORTS holds the two
# targets' ports (A first).
# Prints "PASS: multipath (Ns)" or "FAIL: multipath: reason".
set -eu
NQN=${NQN:?}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: multipath: $*"
	cat /tmp/fio.log 2>/dev/null | tail -20
	dmesg | grep -i nvme | tail -20
	exit 1
}
[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] || fail "nvme_core.multipath is off"
for p in $TARGET_PORTS; do
	nvme connect -t tcp -a "$TARGET_ADDR" -s "$p" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 >/dev/null || fail "nvme connect to port $p"
done
i=0
until [ "$(ls /sys/class/nvme-subsystem/ 2>/dev/null | grep -c '^nvme-subsys')" = 1 ] &&
	[ "$(ls /sys/class/nvme-subsystem/nvme-subsys*/ | grep -c '^nvme[0-9]*$')" = 2 ]; do
	i=$((i + 1))
	[ $i -le 300 ] || fail "not one subsystem with two controllers after 30 s: $(ls /sys/class/nvme-subsystem/*/)"
	sleep 0.1
done
echo "  ok: one subsystem, two controllers"
heads=$(ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true)
[ "$heads" = 1 ] || fail "$heads namespace block devices, want one multipath head"
dev=/dev/$(ls /sys/block | grep '^nvme[0-9]*n[0-9]*$')
for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
	[ -f "$c/cntlid" ] || continue
	echo "  path $(basename "$c"): cntlid $(cat "$c/cntlid") state $(cat "$c/state")"
done
fio --name=verify --filename="$dev" --ioengine=libaio --direct=1 \
	--rw=randwrite --bs=4k --size=2m --iodepth=4 \
	--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
	--eta=never >/tmp/fio.log 2>&1 || fail "fio verify on $dev"
echo "  ok: fio verify on $dev"

# --- helpers for the phases run while fio verify loops on the head ---
set -- $TARGET_PORTS
PA=$1 PB=$2
req=0
# ask a|b ARGS...: the host side runs `farflash ctl ARGS` on target A or B.
ask() {
	req=$((req + 1))
	echo "$*" >"$SHARE_DIR/.ctl.$req" && mv "$SHARE_DIR/.ctl.$req" "$SHARE_DIR/ctl.$req"
	i=0
	until [ -f "$SHARE_DIR/ctl.$req.done" ]; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "the host side did not run: $*"
		sleep 0.1
	done
	[ "$(cat "$SHARE_DIR/ctl.$req.done")" = ok ] || fail "farflash ctl $*: $(cat "$SHARE_DIR/ctl.$req.done")"
}
# path a|b: the path block device (sysfs) of target A's (CNTLID < 1000) or B's controller.
path() {
	for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
		[ -f "$c/cntlid" ] || continue
		id=$(cat "$c/cntlid")
		case "$1:$((id < 1000))" in
		a:1 | b:0) ls -d /sys/block/nvme*c"${c##*/nvme}"n1 ;;
		esac
	done
}
# wait_ana a|b STATE: the kernel shows that path in STATE (within 30 s).
wait_ana() {
	p=$(path "$1")
	i=0
	until [ "$(cat "$p/ana_state" 2>/dev/null)" = "$2" ]; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "path $1 ($p) is $(cat "$p/ana_state" 2>/dev/null), not $2, after 30 s"
		sleep 0.1
	done
}
# ctrl_state a|b: the state of target A's or B's controller (live, connecting ...).
ctrl_state() {
	for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
		[ -f "$c/cntlid" ] || continue
		id=$(cat "$c/cntlid")
		case "$1:$((id < 1000))" in
		a:1 | b:0) cat "$c/state" ;;
		esac
	done
}
writes() { awk '{ print $5 }' "$(path "$1")/stat"; }
# progress: one more fio verify run completes (and none failed).
progress() {
	runs=$(cat /tmp/fio-runs 2>/dev/null || echo 0)
	i=0
	until [ "$(cat /tmp/fio-runs 2>/dev/null || echo 0)" -gt "$runs" ]; do
		[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed)"
		i=$((i + 1))
		[ $i -le 600 ] || fail "fio made no progress in 60 s ($*)"
		sleep 0.1
	done
}
# only_on a|b: over one fio run, writes went down that path only.
only_on() {
	other=b
	[ "$1" = a ] || other=a
	w1=$(writes "$1") o1=$(writes $other)
	progress "only on $1"
	w2=$(writes "$1") o2=$(writes $other)
	[ "$o2" = "$o1" ] || fail "path $other got $((o2 - o1)) writes; want all on $1"
	[ "$w2" -gt "$w1" ] || fail "path $1 got no writes"
}
ana_and_listener_phases() {
	progress "before the ANA phase"
	# (a) ANA: A inaccessible, then A non-optimized / B optimized, then the
	# other way round; the kernel reads the ANA log on the ANA Change event.
	ask a ana set "$NQN" "127.0.0.1:$PA" 1 inaccessible
	wait_ana a inaccessible
	wait_ana b optimized
	progress "after A became inaccessible"
	only_on b
	echo "  ok: ANA: path A inaccessible, I/O on path B only, no fio error"
	ask a ana set "$NQN" "127.0.0.1:$PA" 1 non-optimized
	wait_ana a non-optimized
	progress "after A became non-optimized"
	only_on b
	ask b ana set "$NQN" "127.0.0.1:$PB" 1 non-optimized
	ask a ana set "$NQN" "127.0.0.1:$PA" 1 optimized
	wait_ana b non-optimized
	wait_ana a optimized
	progress "after B became non-optimized"
	only_on a
	ask b ana set "$NQN" "127.0.0.1:$PB" 1 optimized
	wait_ana b optimized
	echo "  ok: ANA: I/O follows the optimized path (A, then B non-optimized), no fio error"
	# (b) B's listener removed: its connections close, I/O fails over to A;
	# added again: the kernel reconnects.
	ask b listener remove "127.0.0.1:$PB"
	i=0
	until [ "$(ctrl_state b)" != live ]; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "path B still live 30 s after its listener was removed"
		sleep 0.1
	done
	progress "with B's listener removed"
	ask b listener add "127.0.0.1:$PB"
	i=0
	until [ "$(ctrl_state b)" = live ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "path B not live again 60 s after its listener came back"
		sleep 0.1
	done
	progress "after B's listener came back"
	echo "  ok: listener of B removed (failover to A) and added again (reconnected), no fio error"
}
if [ -n "${SHARE_DIR:-}" ]; then
	# The first target (CNTLID 1..999) is SIGKILLed by the host side and
	# restarted on the same port while fio verify runs on the head: the
	# host fails I/O over to the other path, reconnects (reconnect_delay 1 s)
	# and fio sees no error.
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
	ana_and_listener_phases
	echo kill >"$SHARE_DIR/request"
	i=0
	until [ -f "$SHARE_DIR/restarted" ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "the host side did not restart the target"
		sleep 0.1
	done
	echo "  ok: target A killed and restarted"
	i=0
	until [ "$(cat /sys/class/nvme-subsystem/nvme-subsys*/nvme*/state 2>/dev/null | grep -c live)" = 2 ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "path A not live again after 60 s"
		sleep 0.1
	done
	echo "  ok: both paths live again"
	runs=$(cat /tmp/fio-runs 2>/dev/null || echo 0)
	i=0
	until [ "$(cat /tmp/fio-runs 2>/dev/null || echo 0)" -gt "$runs" ] || [ -f /tmp/fio-failed ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "fio made no progress after the restart"
		sleep 0.1
	done
	touch /tmp/fio-stop
	wait "$loop" || true
	[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed)"
	! grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error|err= *[1-9]' /tmp/fio.log ||
		fail "fio reported verify/I/O errors"
	echo "  ok: fio verify across the kill: $(cat /tmp/fio-runs) runs, no error"
fi
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: multipath ($(awk -v a="$T0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')s)"
