#!/bin/sh
# multipath.sh -- guest script for run-linux-host: two farflash targets
# export one subsystem over one file (same NQN, serial, NGUID; disjoint
# CNTLID ranges, docs/ha.md). The Linux host's native multipath must join
# them: one subsystem with two controllers, one namespace block device, and
# fio verify on it passes. $TARGET_PORTS holds the two targets' ports.
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
