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
. "${GUEST_FILES:-/guest/files}/lib.sh"
connect_paths
for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
	[ -f "$c/cntlid" ] || continue
	echo "  path $(basename "$c"): cntlid $(cat "$c/cntlid") state $(cat "$c/state")"
done
fio --name=verify --filename="$dev" --ioengine=libaio --direct=1 \
	--rw=randwrite --bs=4k --size=2m --iodepth=4 \
	--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
	--eta=never >/tmp/fio.log 2>&1 || fail "fio verify on $dev"
echo "  ok: fio verify on $dev"

# --- the phases run while fio verify loops on the head ---
set -- $TARGET_PORTS
PA=$1 PB=$2
req=0
# ask a|b ARGS...: the host side runs `farflash ctl ARGS` on target A or B.
ask() {
	req=$((req + 1))
	echo "$*" >"$SHARE_DIR/.ctl.$req" && mv "$SHARE_DIR/.ctl.$req" "$SHARE_DIR/ctl.$req"
	wait_for 300 "the host side did not run: $*" test -f "$SHARE_DIR/ctl.$req.done"
	[ "$(cat "$SHARE_DIR/ctl.$req.done")" = ok ] || fail "farflash ctl $*: $(cat "$SHARE_DIR/ctl.$req.done")"
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
	wait_for 300 "path B still live 30 s after its listener was removed" state_is_not b live
	progress "with B's listener removed"
	ask b listener add "127.0.0.1:$PB"
	wait_for 600 "path B not live again 60 s after its listener came back" state_is b live
	progress "after B's listener came back"
	echo "  ok: listener of B removed (failover to A) and added again (reconnected), no fio error"
}
if [ -n "${SHARE_DIR:-}" ]; then
	# The first target (CNTLID 1..999) is SIGKILLed by the host side and
	# restarted on the same port while fio verify runs on the head: the
	# host fails I/O over to the other path, reconnects (reconnect_delay 1 s)
	# and fio sees no error.
	fio_loop_start "$dev"
	ana_and_listener_phases
	echo kill >"$SHARE_DIR/request"
	wait_for 600 "the host side did not restart the target" test -f "$SHARE_DIR/restarted"
	echo "  ok: target A killed and restarted"
	wait_for 600 "path A not live again after 60 s" state_is a live
	echo "  ok: both paths live again"
	progress "after the restart"
	fio_loop_stop "the kill"
fi
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: multipath ($(since "$T0")s)"
