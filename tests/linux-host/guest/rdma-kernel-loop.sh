#!/bin/bash
# rdma-kernel-loop.sh -- guest script for run-linux-host: NVMe over RDMA
# between the guest kernel's own nvmet-rdma target and nvme-rdma host, over
# Soft-RoCE (rdma_rxe) on the guest's NIC. The foundation of the farflash
# RDMA tests (docs/rdma.md): it proves that the image, the modules and the
# rxe device work under TCG before farflash is put between them.
#
# Needs an image with the RDMA modules and iproute2's rdma tool:
#   run-linux-host --bin rdma --module rdma_rxe --module rdma_ucm \
#     --module ib_uverbs --module nvme-rdma --module nvmet-rdma \
#     --module crc32_generic tests/linux-host/guest/rdma-kernel-loop.sh
# Prints PASS:/FAIL: lines; exit status 0 when all passed.
set -uo pipefail

ADDR=${RDMA_ADDR:-10.0.2.15}
PORT=${RDMA_PORT:-4420}
NQN=nqn.2014-08.io.farflash:rdma-kernel-loop
. "${GUEST_FILES:-/guest/files}/rdma-lib.sh"

set_up rxe-and-nvmet-rdma eval 'rxe_up nvme-rdma && rdma link show && nvmet_rdma_nullb "$NQN" "$ADDR" "$PORT"'

out=$(nvme discover -t rdma -a "$ADDR" -s "$PORT" 2>&1)
echo "$out"
if grep -q "trtype: *rdma" <<<"$out" && grep -q "$NQN" <<<"$out"; then
	pass discover-rdma
else
	fail discover-rdma "no rdma entry for $NQN"
fi

if nvme connect -t rdma -a "$ADDR" -s "$PORT" -n "$NQN" --nr-io-queues=2; then
	dev=""
	for _ in $(seq 1 50); do
		for b in /sys/block/nvme*n*; do
			n=${b##*/}
			[[ $n = nvme*c*n* ]] && continue # per-path nodes of native multipath
			[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$NQN" ]] || continue
			dev=/dev/$n
		done
		[[ -n $dev && -b $dev ]] && break
		dev=""
		sleep 0.2
	done
	# the controller (the multipath head's device is the subsystem) is RDMA
	tr=$(for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) = "$NQN" ]] && cat "$c/transport"
	done)
	queues=$(dmesg | grep -o "creating [0-9]* I/O queues" | tail -n 1)
	echo "kernel: $queues"
	if [[ -n $dev && $tr = rdma && $queues = "creating 2 I/O queues" ]]; then
		pass "connect-rdma ($dev, $(ls -d /sys/class/nvme/nvme*/nvme*c*n1 2>/dev/null | wc -l) path)"
		if fio --name=v --filename="$dev" --direct=1 --ioengine=psync --rw=randwrite \
			--bs=4k --size=4M --verify=crc32c --do_verify=1 --numjobs=1 \
			--output-format=terse >/dev/null; then
			pass fio-verify-rdma
		else
			fail fio-verify-rdma "fio failed"
		fi
	else
		fail connect-rdma "no block device, transport '$tr', '$queues'; devices: $(ls /sys/block | tr '\n' ' ')"
	fi
	nvme disconnect -n "$NQN" >/dev/null && pass disconnect-rdma || fail disconnect-rdma "disconnect failed"
else
	fail connect-rdma "nvme connect failed"
	dmesg | tail -n 30
fi
exit $FAILED
