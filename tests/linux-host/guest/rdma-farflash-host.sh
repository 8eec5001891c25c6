#!/bin/bash
# rdma-farflash-host.sh -- guest script for run-linux-host: farflash's
# NVMe/RDMA HOST (`-t rdma`) inside the guest, over Soft-RoCE (rdma_rxe on
# the guest's NIC), against the guest kernel's nvmet-rdma target (a
# RAM-backed null_blk namespace) and against farflash's own RDMA target
# (docs/rdma.md, "The host side").
#
# Needs the image of tests/interop_rdma.rs (RDMA modules, the farflash
# binary and the rxe verbs provider); $FARFLASH names the binary, $REJECT
# (when set) the example that asks the target for a QID it refuses, $FUSED
# (when set) the example that drives fused Compare and Write over RDMA.
# Prints PASS:/FAIL: lines; exit status 0 when all passed.
set -uo pipefail

ADDR=${RDMA_ADDR:-10.0.2.15}
KPORT=4420 # the kernel's nvmet-rdma
FPORT=4430 # farflash serve --listen rdma:
KNQN=nqn.2014-08.io.farflash:rdma-kernel-target
FNQN=nqn.2026-11.io.farflash:rdma-host
FF=${FARFLASH:?FARFLASH names the farflash binary}
LOG=/tmp/farflash.log
. "${GUEST_FILES:-/guest/files}/rdma-lib.sh"

set_up rxe-and-nvmet-rdma eval 'rxe_up && nvmet_rdma_nullb "$KNQN" "$ADDR" "$KPORT"'

# Every farflash host command is bounded: a hang is a failure, not a stuck VM.
ff() { timeout 60 "$FF" "$@"; }

out=$(ff discover -t rdma -a "$ADDR" -s "$KPORT" 2>&1)
echo "$out"
if grep -q "trtype: *rdma" <<<"$out" && grep -q "subnqn: *$KNQN" <<<"$out"; then
	pass discover-rdma-kernel
else
	fail discover-rdma-kernel "no rdma entry for $KNQN"
fi

out=$(ff identify -t rdma -a "$ADDR" -s "$KPORT" -n "$KNQN" --nsid 1 2>&1)
echo "$out" | head -n 40
# 64 MiB of 512-byte blocks: NSZE 131072 (0x20000).
if grep -q "NVME Identify Namespace 1" <<<"$out" && grep -Eq "nsze *: *(131072|0x20000)" <<<"$out"; then
	pass identify-rdma-kernel
else
	fail identify-rdma-kernel "no namespace 1 of 64 MiB"
fi

# 4 KiB writes go in the capsule (nvmet-rdma's 4 KiB of inline data),
# 128 KiB ones by the target's RDMA READ; every read back by RDMA WRITE.
perf_verify() { # NAME PORT NQN
	local name=$1 port=$2 nqn=$3 bs ok=1
	for bs in 4k 128k; do
		out=$(ff perf -t rdma -a "$ADDR" -s "$port" -n "$nqn" --rw randwrite --bs "$bs" \
			--size 4M --iodepth 8 --verify crc32c 2>&1)
		st=$?
		echo "$out" | tail -n 12
		if ((st != 0)); then
			ok=0
			fail "$name" "perf --verify bs=$bs exited with $st"
		fi
	done
	((ok)) && pass "$name"
}
perf_verify perf-verify-rdma-kernel "$KPORT" "$KNQN"

# Two jobs: two I/O queues of one controller, reads and writes mixed, the
# jobs sleeping on the completion channel between completions (--poll block).
out=$(ff perf -t rdma -a "$ADDR" -s "$KPORT" -n "$KNQN" --rw randrw --bs 4k --iodepth 4 \
	--numjobs 2 --runtime 2s --size 8M --poll block 2>&1)
st=$?
echo "$out" | tail -n 12
if ((st == 0)) && grep -qi "iops" <<<"$out"; then
	pass perf-rdma-kernel-2-queues
else
	fail perf-rdma-kernel-2-queues "perf exited with $st"
fi

# Refused connects end with a clear error, not a hang.
out=$(ff identify -t rdma -a "$ADDR" -s "$KPORT" -n nqn.2014-08.io.farflash:no-such-subsystem 2>&1)
st=$?
echo "$out"
if ((st != 0 && st != 124)) && grep -qi "connect" <<<"$out" && grep -q "NVMe status" <<<"$out"; then
	pass reject-wrong-nqn
else
	fail reject-wrong-nqn "status $st"
fi
out=$(ff discover -t rdma -a "$ADDR" -s 4499 2>&1)
st=$?
echo "$out"
if ((st != 0 && st != 124)) && grep -q "rejected" <<<"$out"; then
	pass reject-no-listener
else
	fail reject-no-listener "status $st"
fi
# farflash host against farflash target, both in the guest.
"$FF" serve --listen "rdma:$ADDR:$FPORT" --nqn "$FNQN" --ram 64M --threads 1 \
	--log-level "${FARFLASH_LOG:-info}" >"$LOG" 2>&1 &
PID=$!
if serve_ready grep -q "listening on rdma:$ADDR:$FPORT" "$LOG"; then
	perf_verify perf-verify-rdma-farflash "$FPORT" "$FNQN"
	out=$(ff discover -t rdma -a "$ADDR" -s "$FPORT" 2>&1)
	grep -q "subnqn: *$FNQN" <<<"$out" && pass discover-rdma-farflash ||
		fail discover-rdma-farflash "no entry for $FNQN: $out"
	# Fused Compare and Write over RDMA (Base §3.4.2): in-capsule and
	# RDMA READ halves, the refusals, two hosts hammering test-and-set.
	if [[ -n ${FUSED:-} ]]; then
		out=$(timeout 300 "$FUSED" "$ADDR:$FPORT" "$FNQN" 2>&1)
		st=$?
		echo "$out"
		if ((st == 0)) && (($(grep -c "^ok: " <<<"$out") == 10)); then
			pass fused-rdma-farflash
		else
			fail fused-rdma-farflash "status $st"
			show_log
		fi
	fi
	# QID 1000 is beyond the target's queue count: the Reject's STS 03h
	# must reach the user as an error naming it.
	if [[ -n ${REJECT:-} ]]; then
		out=$(timeout 60 "$REJECT" "$ADDR:$FPORT" 1000 32 2>&1)
		st=$?
		echo "$out"
		if ((st == 0)) && grep -q "STS 0x03" <<<"$out" && grep -q "invalid QID" <<<"$out"; then
			pass reject-qid-sts
		else
			fail reject-qid-sts "status $st"
		fi
	fi
	serve_stop farflash-target-exit-clean
else
	fail perf-verify-rdma-farflash "farflash serve did not come up"
	show_log
fi
exit $FAILED
