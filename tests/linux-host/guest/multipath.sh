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
	nvme connect -t tcp -a "$TARGET_ADDR" -s "$p" -n "$NQN" >/dev/null || fail "nvme connect to port $p"
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
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: multipath ($(awk -v a="$T0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')s)"
