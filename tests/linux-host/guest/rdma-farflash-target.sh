#!/bin/bash
# rdma-farflash-target.sh -- guest script for run-linux-host: farflash's
# NVMe/RDMA target inside the guest, over Soft-RoCE (rdma_rxe on the guest's
# NIC), with the guest kernel's nvme-rdma as the host (docs/rdma.md).
#
# Needs an image with the RDMA modules, the farflash binary (--bin, which
# brings libibverbs and librdmacm) and the rxe verbs provider, which ldd does
# not list (--image-file .../libibverbs/librxe-rdmav34.so --image-file
# /etc/libibverbs.d/rxe.driver); $FARFLASH names the binary, $PROBE (when
# set) the hostile CM client run before the kernel host. See
# tests/interop_rdma.rs. Prints PASS:/FAIL: lines; exit status 0 when all
# passed.
set -uo pipefail

ADDR=${RDMA_ADDR:-10.0.2.15}
NQN=nqn.2026-11.io.farflash:rdma
FF=${FARFLASH:?FARFLASH names the farflash binary}
LOG=/tmp/farflash.log
. "${GUEST_FILES:-/guest/files}/rdma-lib.sh"

set_up rxe rxe_up nvme-rdma
truncate -s 64M /tmp/ns2.img

"$FF" serve --listen "rdma:$ADDR:4420" --listen "tcp:$ADDR:4421" --nqn "$NQN" \
	--ram 64M --file /tmp/ns2.img --threads 2 --log-level "${FARFLASH_LOG:-info}" >"$LOG" 2>&1 &
PID=$!
if serve_ready grep -q "listening on tcp:\|listening on $ADDR:4421" "$LOG" &&
	grep -q "listening on rdma:$ADDR:4420" "$LOG"; then
	pass serve-rdma
else
	fail serve-rdma "farflash serve did not come up"
	show_log
	exit 1
fi

# Hostile peer first ($PROBE: crates/rdma-verbs/examples/rdma_cm_probe/):
# bad CM private data is rejected with its STS, a misbehaving queue is
# disconnected, I/O queues of one controller: one destroyed with RDMA READs
# in flight, one with a bad key beside another carrying traffic; the target
# keeps serving (the kernel host below).
if [[ -n ${PROBE:-} ]]; then
	"$PROBE" "$ADDR:4420" "$NQN"
	st=$?
	if ((st == 0)) && kill -0 "$PID" 2>/dev/null; then
		pass hostile-cm-peer
	else
		fail hostile-cm-peer "probe status $st"
		show_log
	fi
fi

out=$(nvme discover -t rdma -a "$ADDR" -s 4420 2>&1)
echo "$out"
if grep -q "trtype: *rdma" <<<"$out" && grep -q "trtype: *tcp" <<<"$out" &&
	grep -q "rdma_cms: *rdma-cm" <<<"$out" && grep -q "subnqn: *$NQN" <<<"$out"; then
	pass discover-rdma-both-transports
else
	fail discover-rdma-both-transports "want rdma and tcp entries for $NQN"
fi

devs=()
# Log lines from here on are the kernel host's queues (zero-copy check below).
pre=$(wc -l <"$LOG")
if nvme connect -t rdma -a "$ADDR" -s 4420 -n "$NQN" --nr-io-queues=2; then
	for _ in $(seq 1 50); do
		devs=()
		for b in /sys/block/nvme*n*; do
			n=${b##*/}
			[[ $n = nvme*c*n* ]] && continue # per-path nodes of native multipath
			[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$NQN" ]] || continue
			devs+=("/dev/$n")
		done
		((${#devs[@]} == 2)) && break
		sleep 0.2
	done
	tr=$(for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) = "$NQN" ]] && cat "$c/transport"
	done)
	queues=$(dmesg | grep -o "creating [0-9]* I/O queues" | tail -n 1)
	echo "kernel: $queues; devices: ${devs[*]}"
	if ((${#devs[@]} == 2)) && [[ $tr = rdma && $queues = "creating 2 I/O queues" ]]; then
		pass "connect-rdma (${devs[*]})"
	else
		fail connect-rdma "devices '${devs[*]}', transport '$tr', '$queues'"
		devs=()
		show_log
	fi
else
	fail connect-rdma "nvme connect failed"
	dmesg | tail -n 20
	show_log
fi

# Both namespaces (RAM, file): 4 KiB writes travel in the capsule, 128 KiB
# ones by RDMA READ; every verify read comes back by RDMA WRITE.
for d in "${devs[@]}"; do
	ok=1
	for bs in 4k 128k; do
		if ! fio --name=v --filename="$d" --direct=1 --ioengine=libaio --iodepth=4 \
			--rw=randwrite --bs=$bs --size=4M --verify=crc32c --do_verify=1 \
			--numjobs=1 --output-format=terse >/dev/null; then
			ok=0
			fail "fio-verify-rdma $d" "fio bs=$bs failed"
		fi
	done
	((ok)) && pass "fio-verify-rdma $d"
done

# Deeper: 32 writes of 256 KiB (MDTS) in flight (8 MiB, 16 MiB in all), more than the
# first 4 MiB chunk of the queue's pool holds: the pool grows a chunk, the
# queue registers it before using it (checked in the log below).
if ((${#devs[@]})); then
	if fio --name=deep --filename="${devs[0]}" --direct=1 --ioengine=libaio --iodepth=32 \
		--rw=randwrite --bs=256k --size=16M --verify=crc32c --do_verify=1 \
		--numjobs=1 --output-format=terse >/dev/null; then
		pass "deep-fio-verify-rdma ${devs[0]}"
	else
		fail deep-fio-verify-rdma "fio bs=256k iodepth=32 failed"
	fi
fi

# Connected and idle: the workers sleep in epoll (the CQs' completion
# channels and the CM channels registered there) instead of polling: less
# than 0.5 s of CPU in 3 s (a spinning worker takes about 3 s).
cpu() { awk '{ print $14 + $15 }' "/proc/$PID/stat"; }
if ((${#devs[@]})); then
	sleep 1
	c0=$(cpu)
	sleep 3
	c1=$(cpu)
	ticks=$((c1 - c0))
	if ((ticks < 50)); then
		pass "idle-sleeps ($ticks ticks in 3 s)"
	else
		fail idle-sleeps "$ticks CPU ticks in 3 s while idle"
	fi
fi

if ((${#devs[@]})); then
	nvme disconnect -n "$NQN" >/dev/null && pass disconnect-rdma || fail disconnect-rdma "disconnect failed"
fi

# Zero copy (docs/rdma.md): the kernel host's I/O queues moved all their
# data (fio's 128 KiB writes by RDMA READ, every read by RDMA WRITE)
# to and from the commands' own buffers, registered chunks of the queue's
# pool, never through a staging slot. Each queue logs its counts when it
# closes: "RDMA queue closed ... qid=N direct=D staged=S".
if ((${#devs[@]})); then
	io=""
	for _ in $(seq 1 50); do
		io=$(tail -n +"$((pre + 1))" "$LOG" | grep "RDMA queue closed" | grep -v " qid=0 ")
		(($(grep -c . <<<"$io") >= 2)) && break
		sleep 0.2
	done
	echo "$io"
	n=$(grep -c "qid=" <<<"$io")
	staged=$(grep -o "staged=[0-9]*" <<<"$io" | awk -F= '{ s += $2 } END { print s + 0 }')
	direct=$(grep -o "direct=[0-9]*" <<<"$io" | awk -F= '{ s += $2 } END { print s + 0 }')
	chunks=$(grep -o "chunks=[0-9]*" <<<"$io" | awk -F= '$2 > m { m = $2 } END { print m + 0 }')
	# Per device fio makes 32 writes of 128 KiB, their 32 verify reads, and
	# 1024 verify reads of 4 KiB (4 KiB writes travel in the capsule): 2182
	# transfers measured once; the block layer may merge some, so the bound
	# only says that fio's traffic moved directly.
	# The deep run needed a second chunk on at least one queue.
	if ((n == 2 && staged == 0 && direct >= 1000 && chunks >= 2)); then
		pass "zero-copy-io-queues ($direct direct transfers, $staged staged, up to $chunks chunks)"
	else
		fail zero-copy-io-queues "$n I/O queues closed, $direct direct and $staged staged transfers, up to $chunks chunks registered"
		show_log
	fi
fi

serve_stop target-exit-clean
exit $FAILED
