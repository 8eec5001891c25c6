#!/usr/bin/env bash
# benches/tenants-isolation.sh -- one target, two tenants: does a noisy
# neighbour slow a quiet one? A victim host does 4 KiB random reads at QD 1
# on its RAM namespace, alone and then beside a neighbour host doing 128 KiB
# random writes at QD 128 on its own RAM namespace of the same subsystem,
# served by the same single event loop (`farflash serve`, release,
# transport.threads = 1, pinned to CPU 0). Both initiators are `farflash
# perf` on CPU 1 and sleep while they wait (--poll block), so that the
# neighbour's host side takes only the CPU its I/O needs.
# Host priority (PRIOS, each a full set of rounds): on a real deployment the
# tenants are separate machines; here both initiators share CPU 1, and a
# neighbour host pushing GiB/s delays the victim host's own wake-ups, which
# no target can prevent. `idle` runs the neighbour's perf under
# `chrt --idle 0` (SCHED_IDLE: it gets CPU 1 only when the victim's host
# does not want it), so what is measured is the target; `same` runs both at
# the same priority (the setup of the first version of this benchmark);
# `rt` gives each party the machine it would have in a deployment: the
# target SCHED_FIFO 60 on CPU 0 (a dedicated core, as an SPDK reactor on an
# isolated CPU has), the victim's host SCHED_FIFO 50 and the neighbour's
# SCHED_FIFO 10 on CPU 1 (the victim's host is never queued behind the
# neighbour's, as on separate machines), so that neither host-side CPU
# contention nor other processes on the machine are what is measured. Only
# the target's own work for the neighbour then stands between the victim and
# its solo figures (the unprotected mode shows how much that is).
# Modes (MODES, each a fresh target):
#   unprotected   fair_share_kib = 0, no limit
#   fair          fair sharing alone (fair_share_kib = FAIR_KIB, default 256)
#   fair@KIB      fair sharing alone with fair_share_kib = KIB
#   limited@RATE  fair_share_kib = 0, the neighbour's host limited to RATE
#                 (w_bytes_per_sec) through [[subsystem.qos]]
#   fair+limited@RATE  both
# ROUNDS paired rounds per mode (victim alone, then beside the neighbour,
# back to back); medians of the per-round ratios: IOPS beside / alone and
# p99 beside / alone. The bars (issue #14): IOPS >= 0.8, p99 <= 2.0.
# Writes its section of docs/benchmarks.md. Run on a quiet machine:
#
#   bash benches/tenants-isolation.sh                 # ROUNDS=5 RUNTIME=5 PRIOS='rt idle same'
#   ROUNDS=3 RUNTIME=3 MODES='unprotected fair' PRIOS=idle bash benches/tenants-isolation.sh
#   ROUNDS=1 RUNTIME=2 OUT=/tmp/x.md bash benches/tenants-isolation.sh   # smoke test
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-5} PORT=${PORT:-4541}
FAIR_KIB=${FAIR_KIB:-256} MODES=${MODES:-unprotected fair limited@200M limited@20M}
PRIOS=${PRIOS:-rt idle same}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
NAME=tenants-isolation.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
cargo build -q --release --bin farflash
FF=$ROOT/target/release/farflash
NQN=nqn.2026-11.io.farflash:tenants
VICTIM=nqn.2014-08.org.nvmexpress:uuid:a0000000-0000-4000-8000-00000000a1c7
NOISY=nqn.2014-08.org.nvmexpress:uuid:a0000000-0000-4000-8000-0000000a0159

config() { # MODE
	local fair=$FAIR_KIB
	[[ $1 = fair* ]] || fair=0
	[[ $1 = fair@* ]] && fair=${1#fair@}
	cat <<-TOML
		listen = ['127.0.0.1:$PORT']
		[transport]
		threads = 1
		fair_share_kib = $fair
		[[subsystem]]
		nqn = '$NQN'
		[[subsystem.namespace]]
		nsid = 1
		backend = 'ram'
		size = '256M'
		[[subsystem.namespace]]
		nsid = 2
		backend = 'ram'
		size = '1G'
	TOML
	if [[ $1 = *limited@* ]]; then
		printf "[[subsystem.qos]]\nhost = '%s'\nw_bytes_per_sec = '%s'\n" "$NOISY" "${1#*limited@}"
	fi
}

# the commands each party runs under, by host priority (PRIOS)
prefixes() { # PRIO: sets TPRE (target), VPRE (victim's host), NPRE (neighbour's host)
	case $1 in
	rt) TPRE=(chrt -f 60) VPRE=(chrt -f 50) NPRE=(chrt -f 10) ;;
	idle) TPRE=() VPRE=() NPRE=(chrt --idle 0) ;;
	same) TPRE=() VPRE=() NPRE=() ;;
	*)
		echo "unknown host priority '$1' in PRIOS (rt, idle, same)" >&2
		exit 2
		;;
	esac
}

perf() { # HOSTNQN NSID RW BS QD RUNTIME
	${PRE:+"${PRE[@]}"} "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" -q "$1" --nsid "$2" --rw "$3" \
		--bs "$4" --iodepth "$5" --runtime "$6" --ramp_time 1 --cpus-allowed 1 --poll block \
		--output-format=json
}

# victim's IOPS and p99 (µs) from perf JSON on stdin
victim_figures() {
	python3 -c '
import json, sys
j = json.load(sys.stdin)["jobs"][0]["read"]
print(round(j["iops"]), round(j["clat_ns"]["percentile"]["99.000000"] / 1000, 1))'
}


declare -A IOPS_R P99_R ALONE BESIDE
KEYS=()
for prio in $PRIOS; do for mode in $MODES; do KEYS+=("$prio/$mode"); done; done
for r in $(seq "$ROUNDS"); do
	for key in "${KEYS[@]}"; do
		prio=${key%%/*} mode=${key#*/}
		prefixes "$prio"
		config "$mode" >"$TMP/t.toml"
		${TPRE:+"${TPRE[@]}"} taskset -c 0 "$FF" serve --config "$TMP/t.toml" --log-level warn >"$TMP/serve.log" 2>&1 &
		T=$!
		PIDS+=("$T")
		wait_listen "$PORT"
		# precondition both namespaces (no first-touch page faults measured)
		perf "$VICTIM" 1 write 128k 16 1 >/dev/null
		perf "$NOISY" 2 write 128k 16 2 >/dev/null
		read -r a_iops a_p99 < <(PRE=("${VPRE[@]}") && perf "$VICTIM" 1 randread 4k 1 "$RUNTIME" | victim_figures)
		(PRE=("${NPRE[@]}") && perf "$NOISY" 2 randwrite 128k 128 $((RUNTIME + 3))) >"$TMP/noisy.json" &
		N=$!
		sleep 1
		read -r b_iops b_p99 < <(PRE=("${VPRE[@]}") && perf "$VICTIM" 1 randread 4k 1 "$RUNTIME" | victim_figures)
		wait "$N"
		n_bw=$(python3 -c 'import json,sys; print(round(json.load(open(sys.argv[1]))["jobs"][0]["write"]["bw"] / 1024))' "$TMP/noisy.json")
		kill "$T"
		wait "$T" 2>/dev/null || true
		echo "round $r $prio $mode: victim alone $a_iops IOPS p99 ${a_p99} us; beside the neighbour $b_iops IOPS p99 ${b_p99} us; neighbour ${n_bw} MiB/s"
		IOPS_R[$key]+=" $(python3 -c "print($b_iops / $a_iops)")"
		P99_R[$key]+=" $(python3 -c "print($b_p99 / $a_p99)")"
		ALONE[$key]+=" $a_iops/$a_p99"
		BESIDE[$key]+=" $b_iops/$b_p99/$n_bw"
	done
done

{
	echo "## One target, two tenants: a noisy neighbour beside a quiet victim (benches/tenants-isolation.sh)"
	echo
	run_facts
	echo "- target: \`taskset -c 0 farflash serve\` (release), one event loop, one subsystem with two RAM namespaces (256 MiB, 1 GiB);" \
		"victim host: 4 KiB randread QD 1 on NSID 1; neighbour host: 128 KiB randwrite QD 128 on NSID 2;" \
		"both \`farflash perf --cpus-allowed 1 --poll block\`; $ROUNDS rounds of ${RUNTIME} s, victim alone then beside the neighbour, in a fresh target per mode and round"
	echo "- modes: unprotected (\`fair_share_kib = 0\`, no limit); fair sharing alone (\`fair_share_kib = $FAIR_KIB\`, or the KIB of fair@KIB); limited@RATE: the neighbour's host limited (\`fair_share_kib = 0\`, \`[[subsystem.qos]] host = neighbour, w_bytes_per_sec = RATE\`)"
	echo "- host priority: rt = the target \`chrt -f 60\` on CPU 0 (a dedicated core), the victim's host \`chrt -f 50\`, the neighbour's \`chrt -f 10\` (as on separate machines: neither host-side CPU contention nor other processes are measured); idle = the neighbour's perf under \`chrt --idle 0\` (SCHED_IDLE), the rest normal; same = everything at normal priority"
	echo
	echo "| host priority | mode | victim IOPS beside / alone (≥ 0.8) | victim p99 beside / alone (≤ 2.0) | rounds: alone IOPS/p99 µs | rounds: beside IOPS/p99 µs/neighbour MiB/s |"
	echo "|---|---|---|---|---|---|"
	for key in "${KEYS[@]}"; do
		echo "| ${key%%/*} | ${key#*/} | $(python3 -c "print(f'{$(median ${IOPS_R[$key]}):.3f}')") | $(python3 -c "print(f'{$(median ${P99_R[$key]}):.2f}')") |${ALONE[$key]} |${BESIDE[$key]} |"
	done
} | write_section "$OUT" tenants-isolation.sh
echo "wrote the tenants-isolation.sh section of $OUT"
