#!/usr/bin/env bash
# benches/rbd.sh -- the farflash gateway against librbd used directly, on the
# same single-node Ceph cluster (tests/ceph/cluster.sh): 4 KiB random reads
# and writes at QD 1 and QD 32, in alternating pairs. "direct" is fio's rbd
# engine (librbd in the benchmark's process); "farflash" is `farflash serve
# --rbd` measured by `farflash perf` over NVMe/TCP on 127.0.0.1. A pair's
# ratio is farflash/direct IOPS; each row gives the median ratio (goal: at
# least 0.9) and the medians of p50 and p99 total latency.
#
#   bash benches/rbd.sh                      # 5 pairs of 10 s runs per row
#   RUNS=3 RUNTIME=5 OUT= bash benches/rbd.sh
#
# Placement (PLACE): "client" (the default) gives each side the same core: fio
# runs on core 1 (its librbd threads with it, as they inherit its affinity),
# and so does the whole gateway side: `farflash serve` with all its threads
# (`taskset -c 1`, `--threads 1 --cpus-allowed 1`; librbd's included) and
# `farflash perf`. The Ceph daemons are not pinned in either. The gateway side
# thus carries its NVMe/TCP host on the core fio has to itself. "split" runs
# the target's event loop on core 0 (`--cpus-allowed 0`) and fio and perf on
# core 1, the target's librbd threads unpinned: they then compete with the
# OSD on both cores while fio's stay on core 1, which cost the gateway about
# a quarter of its QD 32 reads (docs/rbd.md). "float" pins nothing. The target
# sleeps in epoll (`--poll never`) and perf blocks for completions (`--poll
# block`), as fio does: on a small machine that also runs the OSD, a spinning
# event loop and a spinning perf would take the cores the OSD and librbd need
# (measured here at QD 1: 699 IOPS spinning, 1945 sleeping, against fio's
# 2400-3000). rbd_cache is off for both (farflash turns it off; the
# benchmark's ceph.conf says so for fio). The image (SIZE, 1G) is written
# once before the runs, so reads reach the OSD.
#
# Where the gateway's time goes at QD 1: each randread QD 1 pair also runs the
# same target and perf on a null namespace (`--null`, no storage): its latency
# is the NVMe/TCP exchange alone (perf's command, the target's pass, the
# response), the part of the gateway's read that is not librbd's.
#
# Priority (PRIO): "normal" (the default) runs everything under the normal
# scheduler. "rt" runs both clients of the cluster at SCHED_FIFO priority
# 10: fio, and `farflash serve` and `farflash perf` (every thread, librbd's
# included), so their wake-ups are served at once instead of behind the
# OSD's time slices. The Ceph daemons stay under the normal scheduler: at
# SCHED_FIFO two of the OSD's op threads (tp_osd_tp) once spun for 20
# minutes on both cores, starving the threads they waited for and every
# client (docs/rbd.md). Every run is bounded (`timeout`), so a stall fails
# the benchmark instead of hanging it.
#
# Writes its section of docs/benchmarks.md (OUT= to change, empty to skip;
# PRIO=rt writes a section of its own).
# Environment: RUNS (5), RUNTIME (10), RAMP (2), SIZE (1G), PORT (4540),
# PLACE (client, split or float), PRIO (normal or rt), RWS ("randread randwrite"),
# QDS ("1 32"), POLL (never: the target's --poll), PERF_POLL (block: perf's
# --poll), OUT, NOTE (a line on the run's conditions, e.g. other work on the
# machine).
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-5} RUNTIME=${RUNTIME:-10} RAMP=${RAMP:-2} SIZE=${SIZE:-1G}
PORT=${PORT:-4540} POLL=${POLL:-never} PERF_POLL=${PERF_POLL:-block} PLACE=${PLACE:-client}
PRIO=${PRIO:-normal} RWS=${RWS:-randread randwrite} QDS=${QDS:-1 32}
OUT=${OUT-docs/benchmarks.md} NOTE=${NOTE-}
NQN=nqn.2026-11.io.farflash:bench
NAME=rbd.sh SECTION=rbd.sh
# The longest a run may take (ramp, runtime, connecting) before it counts as a stall.
LIMIT=$((RAMP + RUNTIME + 60))
case $PRIO in
normal) RTP=() ;;
rt) RTP=(chrt -f 10) SECTION="rbd.sh rt" ;;
*) echo "rbd.sh: PRIO=$PRIO: normal or rt" >&2; exit 1 ;;
esac
case $PLACE in
float) FIO_CPUS=() SERVE_TASKSET=() SERVE_CPUS=() PERF_TASKSET=() PERF_CPUS=() ;;
split) FIO_CPUS=(taskset -c 1) SERVE_TASKSET=() SERVE_CPUS=(--cpus-allowed 0) PERF_TASKSET=(taskset -c 1) PERF_CPUS=(--cpus-allowed 1) ;;
client) FIO_CPUS=(taskset -c 1) SERVE_TASKSET=(taskset -c 1) SERVE_CPUS=(--cpus-allowed 1) PERF_TASKSET=(taskset -c 1) PERF_CPUS=(--cpus-allowed 1) ;;
*) echo "rbd.sh: PLACE=$PLACE: client, split or float" >&2; exit 1 ;;
esac
for t in taskset python3 cargo fio rbd; do command -v "$t" >/dev/null || { echo "rbd.sh: $t is required" >&2; exit 1; }; done
fio --enghelp 2>/dev/null | grep -qw rbd || { echo "rbd.sh: this fio has no rbd engine" >&2; exit 1; }
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

echo "== building (release)"
cargo build -q --release --bin farflash
FF=$ROOT/target/release/farflash

echo "== starting a single-node Ceph cluster"
CEPH=$TMP/ceph
stop_cluster() { bash "$ROOT/tests/ceph/cluster.sh" stop "$CEPH" >/dev/null 2>&1 || true; }
trap 'stop_cluster; cleanup' EXIT
CEPH_IMAGE_SIZE=$SIZE bash "$ROOT/tests/ceph/cluster.sh" start "$CEPH" >/dev/null
CONF=$CEPH/ceph.conf
printf '\n[client.admin]\nrbd_cache = false\n' >>"$CONF"
export CEPH_CONF=$CONF

echo "== writing the image once ($SIZE)"
fio --name=fill --ioengine=rbd --clientname=admin --pool=rbd --rbdname=test --rw=write \
	--bs=4M --iodepth=4 --size="$SIZE" --output=/dev/null

# metrics FILE SIDE: "IOPS P50_US P99_US MEAN_US" of the read or write side of a fio-style JSON
# (fio: jobs[0]; farflash perf: aggregate).
metrics() {
	python3 - "$1" "$2" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
j = d["aggregate"] if "aggregate" in d else d["jobs"][0]
s = j[sys.argv[2]]
p = s["lat_ns"]["percentile"]
print(f'{s["iops"]:.0f} {p["50.000000"] / 1000:.0f} {p["99.000000"] / 1000:.0f} {s["lat_ns"]["mean"] / 1000:.0f}')
PY
}

direct() { # RW QD -> "IOPS P50 P99 MEAN"
	timeout -k 5 "$LIMIT" "${RTP[@]}" "${FIO_CPUS[@]}" fio --name=direct --ioengine=rbd --clientname=admin --pool=rbd --rbdname=test \
		--rw="$1" --bs=4k --iodepth="$2" --size="$SIZE" --time_based --runtime="$RUNTIME" \
		--ramp_time="$RAMP" --lat_percentiles=1 --output-format=json --output="$TMP/direct.json" ||
		die "fio (rbd engine) failed"
	metrics "$TMP/direct.json" "${1#rand}"
}

gateway() { # RW QD [NAMESPACE...] -> "IOPS P50 P99 MEAN" (default namespace: the RBD image)
	local rw=$1 qd=$2
	shift 2
	(($#)) || set -- --rbd rbd/test --ceph-conf "$CONF"
	"${RTP[@]}" "${SERVE_TASKSET[@]}" "$FF" serve --listen "127.0.0.1:$PORT" --nqn "$NQN" "$@" \
		--threads 1 "${SERVE_CPUS[@]}" --poll "$POLL" --rpc-socket none --log-level warn >"$TMP/serve.log" 2>&1 &
	local pid=$!
	PIDS+=("$pid")
	wait_listen "$PORT"
	timeout -k 5 "$LIMIT" "${RTP[@]}" "${PERF_TASKSET[@]}" "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" --rw "$rw" --bs 4k \
		--iodepth "$qd" --size "$SIZE" --runtime "$RUNTIME" --ramp_time "$RAMP" "${PERF_CPUS[@]}" --poll "$PERF_POLL" \
		--output-format=json >"$TMP/perf.json" || die "farflash perf failed ($(tail -3 "$TMP/serve.log"))"
	kill -TERM "$pid" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
	metrics "$TMP/perf.json" "${rw#rand}"
}

rows=() lines=() hops=()
for rw in $RWS; do
	for qd in $QDS; do
		ratios=() d50=() d99=() f50=() f99=()
		for r in $(seq "$RUNS"); do
			# Alternate which goes first, so a drift of the machine hits both.
			if ((r % 2)); then read -r d_iops dp50 dp99 dmean <<<"$(direct "$rw" "$qd")"; read -r f_iops fp50 fp99 fmean <<<"$(gateway "$rw" "$qd")"
			else read -r f_iops fp50 fp99 fmean <<<"$(gateway "$rw" "$qd")"; read -r d_iops dp50 dp99 dmean <<<"$(direct "$rw" "$qd")"; fi
			ratio=$(python3 -c "print($f_iops / max($d_iops, 1))")
			ratios+=("$ratio") d50+=("$dp50") d99+=("$dp99") f50+=("$fp50") f99+=("$fp99")
			hop=
			if [[ $rw = randread && $qd = 1 ]]; then
				read -r _ np50 _ nmean <<<"$(gateway randread 1 --null "$SIZE")"
				hops+=("$np50")
				hop="; null namespace (the NVMe/TCP exchange alone) p50 ${np50} µs, mean ${nmean} µs"
			fi
			lines+=("- $rw QD $qd pair $r: direct $d_iops IOPS (p50 ${dp50} µs, p99 ${dp99} µs, mean ${dmean} µs), farflash $f_iops IOPS (p50 ${fp50} µs, p99 ${fp99} µs, mean ${fmean} µs), ratio $(printf '%.3f' "$ratio")$hop")
			echo "${lines[-1]}"
		done
		med=$(median "${ratios[@]}")
		verdict=$(python3 -c "print('met' if $med >= 0.9 else 'NOT met')")
		rows+=("| $rw | $qd | $(median "${d50[@]}") / $(median "${d99[@]}") | $(median "${f50[@]}") / $(median "${f99[@]}") | $(printf '%.3f' "$med") ($verdict) |")
		echo "== $rw QD $qd: median farflash/direct $(printf '%.3f' "$med") ($verdict; goal 0.9)"
	done
done
[[ -n $OUT ]] || exit 0
{
	if [[ $PRIO = rt ]]; then
		echo "## Ceph RBD at real-time priority: the farflash gateway against librbd directly (PRIO=rt benches/rbd.sh)"
	else
		echo "## Ceph RBD: the farflash gateway against librbd directly (benches/rbd.sh)"
	fi
	echo
	run_facts
	[[ -z $NOTE ]] || echo "- conditions: $NOTE"
	echo "- cluster: tests/ceph/cluster.sh (1 mon, 1 mgr, 1 BlueStore OSD on a sparse file, pool size 1), image $SIZE written once, rbd_cache off"
	if [[ $PLACE = client ]]; then
		echo "- placement client: fio's rbd engine (with its librbd threads) on core 1; farflash: \`serve --rbd rbd/test --threads 1 --cpus-allowed 1 --poll $POLL\` with all its threads (librbd's included) and \`farflash perf --poll $PERF_POLL\` on core 1; the Ceph daemons unpinned"
	elif [[ $PLACE = split ]]; then
		echo "- placement split: fio's rbd engine on core 1; farflash: \`serve --rbd rbd/test --threads 1 --cpus-allowed 0 --poll $POLL\`, \`farflash perf --poll $PERF_POLL\` on core 1"
	else
		echo "- placement float (nothing pinned): fio's rbd engine; farflash: \`serve --rbd rbd/test --threads 1 --poll $POLL\`, \`farflash perf --poll $PERF_POLL\`"
	fi
	[[ $PRIO = normal ]] || echo "- priority rt: fio, serve and perf (all their threads) at SCHED_FIFO 10; the Ceph daemons under the normal scheduler"
	echo "- 4 KiB, ${RUNTIME} s after ${RAMP} s of ramp, $RUNS alternating pairs per row; the NVMe/TCP exchange alone (null namespace, randread QD 1, same target and perf settings): median p50 $(median "${hops[@]}") µs"
	echo
	echo "| workload | QD | direct p50 / p99 (µs) | farflash p50 / p99 (µs) | median IOPS ratio (goal 0.9) |"
	echo "| --- | --- | --- | --- | --- |"
	printf '%s\n' "${rows[@]}"
	echo
	printf '%s\n' "${lines[@]}"
} | write_section "$OUT" "$SECTION"
