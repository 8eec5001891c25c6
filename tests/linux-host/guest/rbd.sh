#!/bin/sh
# rbd.sh -- guest script for run-linux-host against `farflash serve --rbd`
# (tests/interop_rbd.rs): first interop.sh's scenarios (given with -f, same
# environment), then "rbd-resize": the image grown in Ceph reaches the Linux
# host as a bigger disk through an Asynchronous Event, and the new blocks
# take a fio verify.
#
# The host side watches $SHARE_DIR/request: "resize" makes it run
# `rbd resize --size $RBD_GROWN_MIB` on the image.
# Environment: NQN, RBD_SIZE_MIB, RBD_GROWN_MIB (and interop.sh's).
# Prints "PASS: rbd-resize (Ns)" or "FAIL: rbd-resize: reason".
set -eu
NQN=${NQN:?}
rc=0
bash "${GUEST_FILES:-/guest/files}/interop.sh" || rc=$?
[ "$rc" = 0 ] || echo "(interop.sh exited with $rc)"

T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: rbd-resize: $*"
	dmesg | grep -i nvme | tail -20
	exit 1
}
. "${GUEST_FILES:-/guest/files}/lib.sh"
[ -n "${SHARE_DIR:-}" ] || fail "needs the 9p share (-s)"
nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" >/dev/null || fail "nvme connect"
wait_ok "namespace 1 is ${RBD_SIZE_MIB} MiB" sectors_are 1 $((RBD_SIZE_MIB * 2048))
echo resize >"$SHARE_DIR/request"
wait_ok "namespace 1 grew to ${RBD_GROWN_MIB} MiB" sectors_are 1 $((RBD_GROWN_MIB * 2048))
dmesg | grep -iE 'nvme.*(rescan|size|capacity)' | tail -3 | sed 's/^/  /' || true
dev=/dev/$(ns_dev 1)
out=$(fio --name=tail --filename="$dev" --ioengine=libaio --direct=1 --rw=randwrite --bs=4k \
	--offset=$((RBD_SIZE_MIB << 20)) --size=1m --iodepth=4 --verify=crc32c --verify_fatal=1 \
	--do_verify=1 --verify_state_save=0 --eta=never 2>&1) || fail "fio on the new blocks: $(echo "$out" | tail -5)"
! echo "$out" | grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error' ||
	fail "fio reported verify/I/O errors on the new blocks"
echo "  ok: fio verify on the new blocks (1 MiB past the old end)"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: rbd-resize ($(awk -v a="$T0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')s)"
exit "$rc"
