#!/usr/bin/env bash
# benches/metrics.sh -- what Prometheus metrics cost (issue #13): the same
# target with and without `--metrics` (the listener turns latency sampling
# on; a scrape every second, as Prometheus would), 4 KiB random read at
# QD 32, in alternating pairs. A pair's ratio is on/off IOPS; the row is the
# median of the ratios (target: at least 0.97).
#
#   bash benches/metrics.sh                 # 7 pairs of 5 s runs
#   RUNS=9 RUNTIME=10 bash benches/metrics.sh
#
# Target on core 0 (`--threads 1 --cpus-allowed 0`), perf on core 1. Writes
# its section of docs/benchmarks.md (OUT= to change, empty to skip).
# Environment: RUNS (7), RUNTIME (5), RAMP (1), BACKEND null|ram (null),
# PORT (4530), MPORT (9530), OUT.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
RUNS=${RUNS:-7} RUNTIME=${RUNTIME:-5} RAMP=${RAMP:-1}
BACKEND=${BACKEND:-null}
PORT=${PORT:-4530} MPORT=${MPORT:-9530}
OUT=${OUT-docs/benchmarks.md}
NQN=nqn.2026-11.io.farflash:bench
NAME=metrics.sh
for t in taskset python3 cargo curl; do command -v "$t" >/dev/null || { echo "metrics.sh: $t is required" >&2; exit 1; }; done
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

echo "== building (release)"
cargo build -q --release --bin farflash
FF=$ROOT/target/release/farflash

serve() { # ARGS... -> SERVE_PID
	local commit=()
	[[ $BACKEND = ram ]] && commit=(--ram-commit) # no first-write page faults
	"$FF" serve --listen "127.0.0.1:$PORT" --nqn "$NQN" "--$BACKEND" 1G "${commit[@]}" --threads 1 \
		--cpus-allowed 0 --rpc-socket none --log-level warn "$@" >"$TMP/serve.log" 2>&1 &
	SERVE_PID=$!
	PIDS+=("$SERVE_PID")
	wait_listen "$PORT"
}
stop_serve() { kill -TERM "$SERVE_PID" 2>/dev/null || true; wait "$SERVE_PID" 2>/dev/null || true; }

# run on|off -> IOPS
run() {
	local scraper=""
	if [[ $1 = on ]]; then
		serve --metrics "127.0.0.1:$MPORT"
		# Scrape every second while perf runs, like Prometheus.
		(while :; do curl -s -o /dev/null "http://127.0.0.1:$MPORT/metrics" || true; sleep 1; done) &
		scraper=$!
	else
		serve
	fi
	taskset -c 1 "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" --rw randread --bs 4k \
		--iodepth 32 --runtime "$RUNTIME" --ramp_time "$RAMP" --cpus-allowed 1 \
		--output-format=json >"$TMP/perf.json" || die "perf failed"
	[[ -n $scraper ]] && { kill "$scraper" 2>/dev/null || true; wait "$scraper" 2>/dev/null || true; }
	stop_serve
	python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["aggregate"]["read"]["iops"])' "$TMP/perf.json"
}

ratios=() on=() off=() lines=()
for r in $(seq "$RUNS"); do
	# Alternate which goes first, so a drift of the machine hits both.
	if ((r % 2)); then a=$(run off); b=$(run on); else b=$(run on); a=$(run off); fi
	off+=("$a") on+=("$b")
	ratio=$(python3 -c "print($b / $a)")
	ratios+=("$ratio")
	lines+=("- pair $r: off ${a%.*} IOPS, on ${b%.*} IOPS, ratio $(printf '%.3f' "$ratio")")
	echo "${lines[-1]}"
done
med=$(median "${ratios[@]}")
verdict=$(python3 -c "print('met' if $med >= 0.97 else 'NOT met')")
echo "== metrics on/off, 4 KiB randread QD 32: median ratio $(printf '%.3f' "$med") ($verdict; bar 0.97)"
[[ -n $OUT ]] || exit 0
{
	echo "## Metrics on against off (benches/metrics.sh)"
	echo
	run_facts
	echo "- target: \`--$BACKEND 1G --threads 1 --cpus-allowed 0\`, with and without \`--metrics\` (scraped every second); perf: 4 KiB randread QD 32 on core 1, ${RUNTIME} s after ${RAMP} s of ramp, $RUNS alternating pairs"
	echo
	printf '%s\n' "${lines[@]}"
	echo
	echo "**Median on/off ratio: $(printf '%.3f' "$med")** ($verdict; the bar is 0.97)."
} | write_section "$OUT" metrics.sh
