#!/usr/bin/env bash
# benches/scale-pair.sh -- issue 33: the 4 KiB randread QD 1 and QD 32 rows
# against one namespace of the loaded target (SUBS x NSPER null namespaces,
# CTRLS idle controllers connected) and against the same target with one
# subsystem (one null namespace, nothing else connected), paired in rounds.
#
#   bash benches/scale-pair.sh
#   RUNS=3 RUNTIME=3 CTRLS=64 OUT= bash benches/scale-pair.sh
#
# As benches/vs-spdk.sh: each target alone on core 0 (`taskset -c 0
# farflash serve --config FILE`: one event loop), the initiator on core 1:
# spdk_nvme_perf (SPDK_DIR, default ../anchors/spdk) when built, else
# `farflash perf --cpus-allowed 1`; both measure after WARMUP seconds. The
# loaded target's idle controllers (examples/idle_hosts: admin + 2 I/O queues
# each, KATO 5 s, Keep Alives running) are on core 1 too, connected to the
# subsystem the initiator reads from (its namespace 1). In each round both
# targets run both rows, the target order alternating from round to round;
# loaded / one = the median of the per-round ratios (bar: at least 0.95).
#
# Writes the scale-pair.sh section of docs/benchmarks.md (OUT= to change,
# empty to skip). Environment: SPDK_DIR, RUNS (5), RUNTIME (3), WARMUP (1),
# SUBS (256), NSPER (64), CTRLS (1024), PORT (4720), BUILD (1).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
NAME=scale-pair.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
RUNS=${RUNS:-5} RUNTIME=${RUNTIME:-3} WARMUP=${WARMUP:-1}
SUBS=${SUBS:-256} NSPER=${NSPER:-64} CTRLS=${CTRLS:-1024}
PORT=${PORT:-4720}
OUT=${OUT-docs/benchmarks.md}
NQN=nqn.2026-11.io.farflash.scale:s00000
FF=$ROOT/target/release/farflash
EX=$ROOT/target/release/examples
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (target on core 0, initiator on core 1)"

if [[ ${BUILD:-1} = 1 ]]; then
	(cd "$ROOT" && cargo build -q --release --bin farflash --example idle_hosts)
fi
INITIATOR=farflash
if [[ -x $SPERF ]]; then
	INITIATOR=spdk
	export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
fi
py() { python3 -c "$1"; }

python3 "$ROOT/benches/scale.py" gen-null "$TMP/loaded.toml" "$SUBS" "$NSPER" "$PORT"
python3 "$ROOT/benches/scale.py" gen-null "$TMP/one.toml" 1 1 "$PORT"

TPID="" HPID=""
# start loaded|one: the target on core 0 (and, loaded, the idle controllers).
start() {
	taskset -c 0 "$FF" serve --config "$TMP/$1.toml" --log-level warn >"$TMP/serve.log" 2>&1 &
	TPID=$!
	PIDS+=("$TPID")
	wait_listen "$PORT" "$TPID" "$TMP/serve.log"
	if [[ $1 = loaded ]]; then
		taskset -c 1 "$EX/idle_hosts" "127.0.0.1:$PORT" "$NQN" "$CTRLS" 2 100000 >"$TMP/idle.log" 2>&1 &
		HPID=$!
		PIDS+=("$HPID")
		until grep -q connected "$TMP/idle.log"; do
			kill -0 "$HPID" 2>/dev/null || die "idle hosts failed: $(cat "$TMP/idle.log")"
			sleep 0.1
		done
	fi
}
stop() {
	local p
	for p in $HPID $TPID; do
		kill -TERM "$p" 2>/dev/null || true
		wait "$p" 2>/dev/null || true
	done
	TPID="" HPID=""
}

# run QD -> IOPS of 4 KiB randread on namespace 1
run() {
	if [[ $INITIATOR = spdk ]]; then
		"$SPERF" --no-huge -s 1024 -c 0x2 -q "$1" -o 4096 -w randread -t "$RUNTIME" -a "$WARMUP" \
			-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN ns:1" \
			>"$TMP/sperf.log" 2>&1 || die "spdk_nvme_perf QD $1 failed: $(tail -5 "$TMP/sperf.log")"
		awk '/^Total/ {print $3; found = 1} END {exit !found}' "$TMP/sperf.log" ||
			die "no Total line from spdk_nvme_perf: $(tail -5 "$TMP/sperf.log")"
	else
		"$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" --nsid 1 --rw randread --bs 4096 --iodepth "$1" \
			--runtime "$RUNTIME" --ramp_time "$WARMUP" --cpus-allowed 1 --output-format=json >"$TMP/fperf.json" ||
			die "farflash perf QD $1 failed"
		py "import json; print(json.load(open('$TMP/fperf.json'))['aggregate']['read']['iops'])"
	fi
}

declare -A V
ROUND_ROWS=()
for r in $(seq "$RUNS"); do
	order=(loaded one)
	((r % 2 == 1)) || order=(one loaded)
	for t in "${order[@]}"; do
		start "$t"
		V[$t,1,$r]=$(run 1)
		V[$t,32,$r]=$(run 32)
		if [[ $t = loaded ]]; then
			grep -q "keep-alive failed" "$TMP/idle.log" && die "idle hosts: $(cat "$TMP/idle.log")"
		fi
		stop
	done
	q1=$(py "print('%.3f' % (${V[loaded,1,$r]} / ${V[one,1,$r]}))")
	q32=$(py "print('%.3f' % (${V[loaded,32,$r]} / ${V[one,32,$r]}))")
	R1+=("$q1") R32+=("$q32")
	echo "  round $r (${order[*]}): QD 1 ${V[loaded,1,$r]%.*} / ${V[one,1,$r]%.*} = $q1; QD 32 ${V[loaded,32,$r]%.*} / ${V[one,32,$r]%.*} = $q32" >&2
	ROUND_ROWS+=("| $r | ${order[*]} | ${V[loaded,1,$r]%.*} | ${V[one,1,$r]%.*} | $q1 | ${V[loaded,32,$r]%.*} | ${V[one,32,$r]%.*} | $q32 |")
done
M1=$(median "${R1[@]}") M32=$(median "${R32[@]}")
spread() { py "v = [float(x) for x in '$*'.split()]; print('%.3f–%.3f' % (min(v), max(v)))"; }
met() { py "print('yes' if $1 >= 0.95 else 'no')"; }
SUMMARY="loaded / one, medians of $RUNS rounds: QD 1 $(py "print('%.3f' % $M1)") (rounds $(spread "${R1[@]}"); ≥ 0.95: $(met "$M1")), QD 32 $(py "print('%.3f' % $M32)") (rounds $(spread "${R32[@]}"); ≥ 0.95: $(met "$M32"))"
echo "$SUMMARY" >&2
[[ -n $OUT ]] || exit 0
INI="\`spdk_nvme_perf --no-huge -s 1024 -c 0x2 -t $RUNTIME -a $WARMUP\` (SPDK $(cat "$SPDK_DIR/VERSION" 2>/dev/null || echo "?"))"
[[ $INITIATOR = spdk ]] || INI="\`farflash perf --cpus-allowed 1 --runtime $RUNTIME --ramp_time $WARMUP\`"
{
	echo "## 4 KiB randread on the loaded target against one subsystem (benches/scale-pair.sh)"
	echo
	echo "Written by \`benches/scale-pair.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts
	echo "- loaded: \`taskset -c 0 farflash serve --config\` with $SUBS x $NSPER null namespaces (1 GiB each) and"
	echo "  $CTRLS idle controllers (examples/idle_hosts, admin + 2 I/O queues, KATO 5 s, on core 1) connected"
	echo "  to the subsystem read from; one: the same with one subsystem of one null namespace, nothing"
	echo "  else connected; the initiator reads namespace 1 of that subsystem from core 1: $INI"
	echo "- $RUNS rounds, both rows on both targets per round, the target order alternating; ratios"
	echo "  per round, then their median"
	echo
	echo "| round | order | QD 1 loaded (IOPS) | QD 1 one | loaded / one | QD 32 loaded (IOPS) | QD 32 one | loaded / one |"
	echo "|---|---|---:|---:|---:|---:|---:|---:|"
	printf '%s\n' "${ROUND_ROWS[@]}"
	echo
	echo "$SUMMARY."
} | write_section "$OUT" scale-pair.sh
echo "wrote the scale-pair.sh section of $OUT"
