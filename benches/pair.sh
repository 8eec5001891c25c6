#!/usr/bin/env bash
# benches/pair.sh -- farflash serve + farflash perf on 127.0.0.1, next to the
# kernel-TCP floor measured in the same run (../shared/limits/tcp_rr.c).
#
#   bash benches/pair.sh            # 3 runs per case, median reported
#   RUNS=5 RUNTIME=10 BACKEND=ram bash benches/pair.sh
#
# The target runs on core 0 (taskset -c 0), perf on core 1 (taskset -c 1,
# --cpus-allowed 1); the floor's server and client sit on the same cores
# with SPIN=1 (busy-poll), as perf does by default (--poll spin).
# Cases: 4 KiB randread at QD 1, 32 and 128; 4 KiB randwrite at QD 32;
# 128 KiB sequential read at QD 8. For each, the farflash figure, the floor
# and their ratio are printed, and docs/benchmarks.md is rewritten with the
# table, the date, the machine (nproc, CPU model) and the git commit.
#
# Environment: RUNS (3), RUNTIME seconds per run (5), RAMP seconds (1),
# BACKEND null|ram (null), SIZE of the namespace (1G), PORT (4520),
# FLOOR_PORT (5301), OUT (docs/benchmarks.md; empty = do not write).
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-3}
RUNTIME=${RUNTIME:-5}
RAMP=${RAMP:-1}
BACKEND=${BACKEND:-null}
SIZE=${SIZE:-1G}
PORT=${PORT:-4520}
FLOOR_PORT=${FLOOR_PORT:-5301}
OUT=${OUT-docs/benchmarks.md}
NQN=nqn.2026-11.io.farflash:bench
LIMITS=$ROOT/../shared/limits/tcp_rr.c

die() { echo "pair.sh: $*" >&2; exit 1; }

[[ -f $LIMITS ]] || die "$LIMITS is missing: the kernel-TCP floor cannot be measured (see ../shared/limits/README.md)"
[[ $BACKEND = null || $BACKEND = ram ]] || die "BACKEND must be null or ram"
for t in gcc taskset python3 cargo; do
	command -v "$t" >/dev/null || die "$t is required"
done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (target on core 0, perf on core 1)"

TMP=$(mktemp -d)
PIDS=()
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$TMP"
}
trap cleanup EXIT

LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)
echo "== building (release)"
cargo build --release --bin farflash >&2
FF=$ROOT/target/release/farflash
gcc -O2 -o "$TMP/tcp_rr" "$LIMITS"

echo "== starting farflash serve --$BACKEND $SIZE on core 0, 127.0.0.1:$PORT"
taskset -c 0 "$FF" serve --listen "127.0.0.1:$PORT" "--$BACKEND" "$SIZE" --nqn "$NQN" \
	--threads 1 --log-level warn >"$TMP/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 100); do
	grep -q "listening on" "$TMP/serve.log" && break
	sleep 0.1
done
grep -q "listening on" "$TMP/serve.log" || { cat "$TMP/serve.log" >&2; die "farflash serve did not start"; }

median() { python3 -c 'import sys,statistics; v=[float(x) for x in sys.argv[1:]]; print(statistics.median(v))' "$@"; }

# perf RW BS QD -> "iops bw_bytes p50_ns p99_ns usr sys"
run_perf() {
	taskset -c 1 "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" --rw "$1" --bs "$2" \
		--iodepth "$3" --runtime "$RUNTIME" --ramp_time "$RAMP" --cpus-allowed 1 \
		--output-format=json >"$TMP/perf.json" || die "perf $* failed"
	python3 - "$TMP/perf.json" "$1" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
a = j["aggregate"]
d = a["write"] if "write" in sys.argv[2] else a["read"]
p = d["clat_ns"]["percentile"]
print(d["iops"], d["bw_bytes"], p["50.000000"], p["99.000000"], j["cpu"]["usr_pct"], j["cpu"]["sys_pct"])
PY
}

# floor REQ RESP QD -> "ops"
run_floor() {
	SPIN=1 taskset -c 0 "$TMP/tcp_rr" server "$FLOOR_PORT" "$1" "$2" >/dev/null 2>&1 &
	local srv=$!
	sleep 0.3
	local line
	line=$(SPIN=1 taskset -c 1 "$TMP/tcp_rr" client "$FLOOR_PORT" "$1" "$2" "$3" "$RUNTIME") || die "tcp_rr client failed"
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
	echo "$line" | sed -n 's/.*ops\/s=\([0-9.]*\).*/\1/p'
}

# name rw bs qd data_bytes req resp
CASES=(
	"4k-randread-qd1 randread 4k 1 4096 72 4120"
	"4k-randread-qd32 randread 4k 32 4096 72 4120"
	"4k-randread-qd128 randread 4k 128 4096 72 4120"
	"4k-randwrite-qd32 randwrite 4k 32 4096 4168 24"
	"128k-read-qd8 read 128k 8 131072 72 131096"
)

ROWS=()
RUNLOG=()
printf '\n%-20s %12s %12s %9s %9s %12s %7s %12s\n' case "IOPS" "MiB/s" "p50 us" "p99 us" "floor IOPS" ratio "perf cpu %"
for c in "${CASES[@]}"; do
	read -r name rw bs qd data req resp <<<"$c"
	iops=() bw=() p50=() p99=() floor=() cpu=() ratio=()
	for r in $(seq "$RUNS"); do
		read -r i b m n u s < <(run_perf "$rw" "$bs" "$qd")
		iops+=("$i") bw+=("$b") p50+=("$m") p99+=("$n") cpu+=("$(python3 -c "print($u+$s)")")
		floor+=("$(run_floor "$req" "$resp" "$qd")")
		# Paired: each run's figure over the floor measured right after it.
		ratio+=("$(python3 -c "f=float('${floor[-1]}' or 0); print($i/f if f else 0)")")
		echo "  $name run $r: farflash ${i%.*} IOPS, floor ${floor[-1]%.*} ops/s" >&2
		RUNLOG+=("- $name run $r: ${i%.*} / ${floor[-1]%.*}")
	done
	mi=$(median "${iops[@]}") mb=$(median "${bw[@]}") m50=$(median "${p50[@]}") m99=$(median "${p99[@]}")
	mf=$(median "${floor[@]}") mc=$(median "${cpu[@]}") mr=$(median "${ratio[@]}")
	read -r fmt_iops fmt_mib fmt_p50 fmt_p99 fmt_floor fmt_ratio fmt_cpu < <(python3 -c "
i,b,p5,p9,f,c,r=$mi,$mb,$m50,$m99,$mf,$mc,$mr
print('%.0f %.1f %.1f %.1f %.0f %.2f %.0f' % (i, b/1048576, p5/1000, p9/1000, f, r, c))")
	printf '%-20s %12s %12s %9s %9s %12s %7s %12s\n' "$name" "$fmt_iops" "$fmt_mib" "$fmt_p50" "$fmt_p99" "$fmt_floor" "$fmt_ratio" "$fmt_cpu"
	ROWS+=("| $name | $fmt_iops | $fmt_mib | $fmt_p50 | $fmt_p99 | $fmt_floor | $(python3 -c "print('%.1f' % ($mf*$data/1048576))") | $fmt_ratio | $fmt_cpu |")
done

if [[ -n $OUT ]]; then
	COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)
	DIRTY=$(git diff --quiet HEAD -- 2>/dev/null || echo " (with uncommitted changes)")
	CPU=$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | sed 's/^ *//')
	{
		echo "# Benchmarks: farflash serve + farflash perf vs the kernel-TCP floor"
		echo
		echo "Written by \`benches/pair.sh\`; do not edit by hand. Re-run it to refresh."
		echo
		echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "- machine: $(nproc) CPUs, ${CPU:-unknown CPU}, $(uname -r);" \
			"load average $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
		echo "- commit: $COMMIT$DIRTY"
		echo "- target: \`farflash serve --$BACKEND $SIZE --threads 1\` on core 0; perf on core 1 (\`--cpus-allowed 1\`, busy-poll)"
		echo "- each figure: median of $RUNS runs of ${RUNTIME} s after ${RAMP} s ramp; latency = completion latency"
		echo "- floor: \`tcp_rr\` (../shared/limits) with SPIN=1, server core 0, client core 1, same run;"
		echo "  request/response bytes: 72/4120 (4 KiB reads), 4168/24 (4 KiB writes), 72/131096 (128 KiB reads)"
		echo
		echo "| case | IOPS | MiB/s | p50 µs | p99 µs | floor ops/s | floor MiB/s | ratio to floor | perf CPU % |"
		echo "|---|---|---|---|---|---|---|---|---|"
		printf '%s\n' "${ROWS[@]}"
		echo
		echo "The ratio is the median over runs of (farflash IOPS / floor ops/s measured right"
		echo "after it): 1.00 would mean the NVMe/TCP protocol, the target and the host cost"
		echo "nothing beyond kernel TCP itself. IOPS, latency and floor columns are medians of"
		echo "their own. This is a shared 2-core development machine whose other jobs make"
		echo "single runs vary by 2x or more: quote ratios, not absolutes, and re-run on a"
		echo "quiet machine for figures worth comparing."
		echo
		echo "Per-run figures (farflash IOPS / floor ops/s):"
		echo
		printf '%s\n' "${RUNLOG[@]}"
	} >"$OUT"
	echo
	echo "wrote $OUT"
fi
