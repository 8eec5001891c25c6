#!/bin/bash
# rdma-farflash-sweep.sh -- guest script for run-linux-host: `farflash sweep
# --transport tcp,rdma` inside the guest, over Soft-RoCE (rdma_rxe on the
# guest's NIC): a tiny plan (random 4 KiB reads, QD 1 and 4, one job) runs
# every point locally, over NVMe/TCP and over NVMe/RDMA against the
# `farflash serve` the sweep starts on $ADDR (docs/sweep.md, docs/rdma.md).
# The results folder is copied to the 9p share ($SHARE_DIR/transport/),
# where tests/interop_rdma.rs checks it.
#
# Needs the image of tests/interop_rdma.rs (RDMA modules, the farflash
# binary and the rxe verbs provider) and `run-linux-host -s DIR`; $FARFLASH
# names the binary; $RUNTIME and $RAMP (default 1s, 100ms) the sweep's
# time per point. Prints PASS:/FAIL: lines; exit status 0 when all passed.
set -uo pipefail

ADDR=${RDMA_ADDR:-10.0.2.15}
FF=${FARFLASH:?FARFLASH names the farflash binary}
OUT=/tmp/sweep-out
. "${GUEST_FILES:-/guest/files}/rdma-lib.sh"

set_up rxe rxe_up
[[ -d ${SHARE_DIR:-} ]] || {
	fail share "no 9p share (run-linux-host -s DIR)"
	exit 1
}

cat >/tmp/transport.toml <<'PLAN'
name = "transport"
description = "random read, 4K, QD 1 and 4, 1 job: local, NVMe/TCP, NVMe/RDMA"
rw = "randread"
vary = "iodepth"
values = [1, 4]
bs = 4096
numjobs = 1
PLAN

NOTE="Soft-RoCE (rdma_rxe) in a QEMU guest under TCG (no KVM), 2 emulated vCPUs: \
a software RDMA stack on an emulated CPU. The TCP/RDMA ratios measure that, and \
say nothing about an RDMA NIC. Made by tests/interop_rdma.rs."
timeout 240 "$FF" sweep --plan /tmp/transport.toml --transport tcp,rdma --address "$ADDR" \
	--runtime "${RUNTIME:-1s}" --ramp "${RAMP:-100ms}" --size 16M --dir /tmp/sweep-data \
	--out "$OUT" --note "$NOTE"
st=$?
if ((st == 0)) && [[ -s $OUT/transport/results.json ]]; then
	pass sweep-tcp-rdma
else
	fail sweep-tcp-rdma "farflash sweep exited with $st"
fi
# The backing file the sweep created is gone.
if [[ -z $(ls -A /tmp/sweep-data 2>/dev/null) ]]; then
	pass sweep-data-removed
else
	fail sweep-data-removed "$(ls /tmp/sweep-data)"
fi
cat "$OUT/transport/report.md" 2>/dev/null | sed -n '/## Summary/,/## Run/p'
if cp -r "$OUT/transport" "$SHARE_DIR/" && sync; then
	pass results-copied
else
	fail results-copied "cp to $SHARE_DIR failed"
fi
exit $FAILED
