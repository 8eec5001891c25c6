#!/usr/bin/env bash
# benches/engine.sh -- the engine rows of the performance issue that
# benches/pair.sh does not cover, measured on this machine:
#   1. 4 KiB randread QD 1 p50: farflash (adaptive and always-poll target)
#      against the kernel-TCP floor's p50 (../shared/limits/tcp_rr.c, SPIN=1),
#      medians of RUNS runs; adaptive vs always must be within 15 %.
#   2. idle CPU of the target (adaptive) over 30 s with 4 connected, idle
#      hosts whose keep-alives flow.
#   3. target memory with 1,000 connected, idle queue pairs (250 controllers
#      x (admin + 3 I/O queues)), beyond its resting size.
#   4. throughput of 16 connections spread over the cores against one, each
#      connection at queue depth 32 (so each keeps its batching).
# Prints a table and writes docs/engine-benchmarks.md (OUT= to change, empty
# to skip). Environment: RUNS (5), RUNTIME (5 s), PORT (4530).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-5} RUNTIME=${RUNTIME:-5} PORT=${PORT:-4530} FLOOR_PORT=${FLOOR_PORT:-5311}
OUT=${OUT-docs/engine-benchmarks.md}
NQN=nqn.2026-11.io.farflash:default
FF=$ROOT/target/release/farflash
IDLE=$ROOT/target/release/examples/idle_hosts
TCP_RR_SRC=$ROOT/../shared/limits/tcp_rr.c
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT
die() { echo "engine.sh: $*" >&2; exit 1; }
[[ -f $TCP_RR_SRC ]] || die "$TCP_RR_SRC is missing (the kernel-TCP floor)"
cargo build -q --release --bin farflash --example idle_hosts
gcc -O2 -o "$TMP/tcp_rr" "$TCP_RR_SRC"
ulimit -n 8192 2>/dev/null || true

median() { printf '%s\n' "$@" | sort -g | awk '{a[NR]=$1} END {print (NR%2) ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2}'; }
wait_listen() { for _ in $(seq 100); do (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0; sleep 0.1; done; die "nothing listens on $1"; }
serve() { # ARGS... -> starts the target in the background, sets SERVE_PID
	"$FF" serve --listen "127.0.0.1:$PORT" --log-level warn "$@" >"$TMP/serve.log" 2>&1 &
	SERVE_PID=$!
	PIDS+=("$SERVE_PID")
	wait_listen "$PORT"
}
stop_serve() { kill -TERM "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; }
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; } # utime + stime, clock ticks
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
perf_json() { # ARGS... -> "iops p50_ns"
	taskset -c 1 "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" --runtime "$RUNTIME" --ramp_time 1 \
		--output-format json "$@" | python3 -c '
import json, sys
d = json.load(sys.stdin)
a = d["aggregate"]["read"]
print(a["iops"], a["clat_ns"]["percentile"]["50.000000"])'
}

echo "== 1. QD 1 latency: adaptive and always-poll target against the floor"
declare -A P50 IOPS
for mode in adaptive always; do
	p=() i=()
	for r in $(seq "$RUNS"); do
		serve --null 1G --threads 1 --cpus-allowed 0 --poll "$mode"
		read -r iops p50 < <(perf_json --rw randread --bs 4k --iodepth 1 --cpus-allowed 1)
		stop_serve
		echo "  $mode run $r: $iops IOPS, p50 $p50 ns"
		p+=("$p50") i+=("$iops")
	done
	P50[$mode]=$(median "${p[@]}") IOPS[$mode]=$(median "${i[@]}")
done
fp=()
for r in $(seq "$RUNS"); do
	SPIN=1 taskset -c 0 "$TMP/tcp_rr" server "$FLOOR_PORT" 72 4120 >/dev/null 2>&1 &
	fpid=$!
	PIDS+=("$fpid")
	sleep 0.3
	line=$(SPIN=1 taskset -c 1 "$TMP/tcp_rr" client "$FLOOR_PORT" 72 4120 1 "$RUNTIME")
	kill "$fpid" 2>/dev/null || true
	wait "$fpid" 2>/dev/null || true
	v=$(sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p' <<<"$line")
	echo "  floor run $r: $line"
	fp+=("$v")
done
FLOOR_P50_US=$(median "${fp[@]}")

echo "== 2. idle CPU: 4 idle hosts with keep-alives, adaptive target, 30 s"
serve --ram 64M
"$IDLE" "127.0.0.1:$PORT" "$NQN" 4 1 40 >"$TMP/idle.log" 2>&1 &
ipid=$!
PIDS+=("$ipid")
sleep 5
t0=$(cpu_ticks "$SERVE_PID")
sleep 30
t1=$(cpu_ticks "$SERVE_PID")
wait "$ipid" || die "idle hosts failed: $(cat "$TMP/idle.log")"
stop_serve
HZ=$(getconf CLK_TCK)
IDLE_PCT=$(python3 -c "print('%.2f' % (100.0 * ($t1 - $t0) / $HZ / 30))")
echo "  target CPU: $((t1 - t0)) ticks in 30 s = ${IDLE_PCT} % of one core"

echo "== 3. memory with 1,000 idle queue pairs"
serve --ram 64M
sleep 0.5
rss0=$(rss_kib "$SERVE_PID")
"$IDLE" "127.0.0.1:$PORT" "$NQN" 250 3 15 >"$TMP/idle1000.log" 2>&1 &
ipid=$!
PIDS+=("$ipid")
for _ in $(seq 600); do grep -q "connected" "$TMP/idle1000.log" && break; kill -0 "$ipid" 2>/dev/null || break; sleep 0.1; done
grep -q "connected 1000 queue pairs" "$TMP/idle1000.log" || die "1000 queue pairs did not connect: $(cat "$TMP/idle1000.log")"
sleep 2
rss1=$(rss_kib "$SERVE_PID")
wait "$ipid" || die "idle hosts failed: $(cat "$TMP/idle1000.log")"
stop_serve
MEM_MIB=$(python3 -c "print('%.1f' % (($rss1 - $rss0) / 1024))")
echo "  target RSS: $rss0 KiB resting, $rss1 KiB with 1,000 queue pairs: +$MEM_MIB MiB"

echo "== 4. 16 connections against one (QD 32 each, target on both cores)"
one=() sixteen=()
for r in $(seq "$RUNS"); do
	serve --null 1G --threads 2 --poll never
	read -r a _ < <(perf_json --rw randread --bs 4k --iodepth 32 --numjobs 1 --poll block --cpus-allowed 0-1)
	read -r b _ < <(perf_json --rw randread --bs 4k --iodepth 32 --numjobs 16 --poll block --cpus-allowed 0-1)
	stop_serve
	echo "  run $r: 1 connection $a IOPS, 16 connections $b IOPS"
	one+=("$a") sixteen+=("$b")
done
ONE=$(median "${one[@]}") SIXTEEN=$(median "${sixteen[@]}")

read -r RATIO_P50 ADAPT_VS_ALWAYS SCALE < <(python3 -c "
pa, pw, f = ${P50[adaptive]} / 1000, ${P50[always]} / 1000, $FLOOR_P50_US
print('%.2f %.2f %.2f' % (pa / f, pa / pw, $SIXTEEN / $ONE))")
table=$(cat <<TABLE
| row | measured | bar | met |
|---|---|---|---|
| randread QD 1 p50, adaptive target / floor p50 | $(python3 -c "print('%.1f' % (${P50[adaptive]}/1000))") µs / ${FLOOR_P50_US} µs = ${RATIO_P50} | ≤ 1.5 | $(python3 -c "print('yes' if $RATIO_P50 <= 1.5 else 'no')") |
| adaptive vs always-poll, QD 1 p50 | $(python3 -c "print('%.1f' % (${P50[adaptive]}/1000))") µs / $(python3 -c "print('%.1f' % (${P50[always]}/1000))") µs = ${ADAPT_VS_ALWAYS} | within 15 % | $(python3 -c "print('yes' if abs($ADAPT_VS_ALWAYS - 1) <= 0.15 else 'no')") |
| idle target (adaptive), 4 idle hosts, 30 s | ${IDLE_PCT} % of one core | < 1 % | $(python3 -c "print('yes' if $IDLE_PCT < 1 else 'no')") |
| memory with 1,000 idle queue pairs | +${MEM_MIB} MiB | < 200 MiB | $(python3 -c "print('yes' if $MEM_MIB < 200 else 'no')") |
| 16 connections / 1 connection (QD 32 each) | ${SIXTEEN} / ${ONE} IOPS = ${SCALE} | ≥ 1.0 | $(python3 -c "print('yes' if $SCALE >= 1.0 else 'no')") |
TABLE
)
echo
echo "$table"
if [[ -n $OUT ]]; then
	{
		echo "# Engine benchmarks (benches/engine.sh)"
		echo
		echo "Written by \`benches/engine.sh\`; re-run it to refresh. See docs/performance.md for what the rows mean."
		echo
		echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
		echo "- machine: $(nproc) CPUs, $(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1), $(uname -r); load average $(cut -d' ' -f1-3 /proc/loadavg) at the end"
		echo "- commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates src benches examples || echo ' (with uncommitted changes)')"
		echo "- QD 1 rows: target on core 0 (\`--threads 1\`), perf on core 1 busy-polling; medians of $RUNS runs of ${RUNTIME} s; floor = tcp_rr SPIN=1 QD 1, 72/4120 bytes, same cores"
		echo
		echo "$table"
		echo
		echo "QD 1 per-run p50 (ns) and IOPS: adaptive ${P50[adaptive]} (${IOPS[adaptive]} IOPS median), always ${P50[always]} (${IOPS[always]} IOPS median); floor p50 runs (µs): ${fp[*]}"
	} >"$OUT"
	echo "wrote $OUT"
fi
