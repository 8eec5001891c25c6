#!/usr/bin/env bash
# benches/cpu-poll.sh -- CPU that follows the load, by default (issue 44; issue
# 34 before it): farflash's polling modes against busy polling, against
# SPDK's target polling and in its interrupt mode, at saturation and at paced
# loads, target and host side, in paired rounds; and the floor this machine
# sets under any design that sleeps.
#
#   SPDK_DIR=/path/to/spdk bash benches/cpu-poll.sh
#   ROUNDS=3 QDS="1 4" MODES="always hybrid" PARTS="saturation paced" bash benches/cpu-poll.sh
#
# SPDK_DIR is an SPDK build (v25.09; ../shared/tools/build-spdk.sh makes one in
# ../anchors/spdk, the default) with build/bin/nvmf_tgt and
# build/bin/spdk_nvme_perf. Not part of the test suite (SPDK is a benchmark
# peer only).
#
# Every target runs alone on core 0, every initiator on core 1, 127.0.0.1:
#   SPDK:      nvmf_tgt -m 0x1 --no-huge, TCP transport with its defaults, a
#              1 GiB malloc bdev (its reactor busy-polls at any load);
#   SPDK-intr: the same with --interrupt-mode, where it starts and serves I/O
#              on this kernel (probed first; where it does not, the report
#              says so with its log);
#   farflash:  taskset -c 0 farflash serve --ram 1G --ram-commit --poll MODE,
#              for each of MODES (always adaptive hybrid never; the default,
#              as the start-up banner names it, is marked).
# Each target is preconditioned (one sequential 128 KiB write pass, farflash
# perf). The target's CPU (user + system, /proc) is taken over a window inside
# the measured part: from 1 s after the warm-up to 0.5 s before the end.
#
# PARTS (all by default, in this order):
#   saturation  spdk_nvme_perf 4 KiB random reads at each of QDS for WARMUP +
#               RUNTIME s, per round against every target back to back, in an
#               order that rotates from round to round. Per round: each mode's
#               IOPS over --poll always's; the bars take the lowest round and
#               the median.
#   paced       farflash perf 4 KiB random reads at PACED_QDS, paced with
#               --rate_iops at each of LOADS % of the saturation farflash perf
#               reaches against --poll always (measured first, per QD), per
#               round against the default mode, always, never and SPDK (both
#               modes): target CPU, p50 latency, IOPS per CPU-%.
#   host        farflash perf against SPDK's (polling) target: --poll hybrid
#               (the default) against spin and block, at saturation (QDS) and
#               paced (PACED_QDS x LOADS of spin's saturation): host CPU
#               (perf's usr_cpu + sys_cpu), IOPS, p50.
#   starts      STARTS fresh default targets, each QD 128 once, each beside a
#               fresh SPDK target (the anchor: what the machine's drift is).
#   idle        the default target with 4 idle hosts connected, and with
#               IDLE_CTRLS controllers, 30 s each, against --poll adaptive (the
#               default before issue 44) the same way.
#   floor       ../shared/limits/tcp_rr (a server that only echoes) at QD 1
#               and 4, its server busy-polling against blocking in recv, with
#               its CPU; and examples/timer_cost (a precise timer sleep here).
#
# Writes its section of docs/benchmarks.md (OUT= to change, empty to skip).
# Environment: SPDK_DIR, IDLE_CTRLS (1024), ROUNDS (10), PACED_ROUNDS (3), RUNTIME (5), WARMUP (2),
# QDS ("1 4 32 128"), PACED_QDS ("1 4"), LOADS ("5 10 25 50"),
# MODES ("always adaptive hybrid never"), STARTS (10), PARTS, PORT (4530),
# SPDK_PORT (4531), FLOOR_PORT (5303), METRICS_PORT (4532), OUT; SAT_TARGETS (the
# saturation part's targets: "spdk spdk-intr" and MODES by default; e.g.
# "always hybrid" for the bars alone).
#
# farflash's targets serve /metrics (--metrics 127.0.0.1:METRICS_PORT): over each
# CPU window the event loop's timed sleeps, lost bets and share of the window
# asleep are read from it, so a mode that sleeps at full load shows per round.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME="cpu-poll.sh"
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
ROUNDS=${ROUNDS:-10} PACED_ROUNDS=${PACED_ROUNDS:-3} RUNTIME=${RUNTIME:-5} WARMUP=${WARMUP:-2}
STARTS=${STARTS:-10} IDLE_CTRLS=${IDLE_CTRLS:-1024}
QDS=${QDS:-1 4 32 128} PACED_QDS=${PACED_QDS:-1 4} LOADS=${LOADS:-5 10 25 50}
MODES=${MODES:-always adaptive hybrid never}
PARTS=${PARTS:-saturation paced host starts idle floor}
PORT=${PORT:-4530} SPDK_PORT=${SPDK_PORT:-4531} FLOOR_PORT=${FLOOR_PORT:-5303} METRICS_PORT=${METRICS_PORT:-4532}
OUT=${OUT-docs/benchmarks.md}
FF_NQN=nqn.2026-11.io.farflash:default
SPDK_NQN=nqn.2016-06.io.spdk:bench
# Only the floor part needs ../shared/limits/tcp_rr.
[[ " ${PARTS:-floor} " != *" floor "* ]] || NEED_FLOOR=1
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

for t in taskset python3 cargo gcc; do command -v "$t" >/dev/null || die "$t is required"; done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (targets on core 0, initiators on core 1)"
[[ $RUNTIME =~ ^[0-9]+$ && $RUNTIME -ge 3 ]] || die "RUNTIME=$RUNTIME: a whole number of seconds, at least 3"
[[ $WARMUP =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ && $PACED_ROUNDS =~ ^[1-9][0-9]*$ && $STARTS =~ ^[1-9][0-9]*$ ]] ||
	die "WARMUP, ROUNDS, PACED_ROUNDS and STARTS are whole numbers (all but WARMUP at least 1)"
for m in $MODES; do
	[[ $m =~ ^(always|adaptive|hybrid|never)$ ]] || die "MODES: unknown mode $m (always adaptive hybrid never)"
done
[[ " $MODES " == *" always "* ]] || die "MODES must include always (every ratio is against it)"
for q in $QDS $PACED_QDS; do [[ $q =~ ^[1-9][0-9]*$ ]] || die "QDS, PACED_QDS: $q is not a queue depth"; done
for l in $LOADS; do [[ $l =~ ^[1-9][0-9]?$ ]] || die "LOADS: $l is not a percentage below 100"; done
for p in $PARTS; do
	[[ $p =~ ^(saturation|paced|host|starts|idle|floor)$ ]] || die "PARTS: unknown part $p (saturation paced host starts idle floor)"
done
part() { [[ " $PARTS " == *" $1 "* ]]; }

TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
if part saturation || part paced || part host || part starts; then
	[[ -x $TGT && -x $SPERF ]] ||
		die "no SPDK build in SPDK_DIR=$SPDK_DIR (build/bin/nvmf_tgt, build/bin/spdk_nvme_perf; ../shared/tools/build-spdk.sh builds one)"
fi
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== building (release)"
cargo build -q --release --bin farflash --example idle_hosts --example timer_cost
FF=$ROOT/target/release/farflash
IDLE_HOSTS=$ROOT/target/release/examples/idle_hosts
TIMER_COST=$ROOT/target/release/examples/timer_cost
HZ=$(getconf CLK_TCK)
RES=$TMP/results.tsv # kind, round, qd, who, then the figures
: >"$RES"
py() { python3 -c "$1"; }

spdk_tcp_config "$SPDK_NQN" "$SPDK_PORT" >"$TMP/spdk.json"

TARGET_PID=""
# start_target spdk | spdk-intr | MODE | default -> TARGET_PID, T_PORT, T_NQN (preconditioned)
start_target() {
	local log=$TMP/target.log poll=()
	case $1 in
	spdk | spdk-intr)
		[[ $1 = spdk ]] || poll=(--interrupt-mode)
		"$TGT" -m 0x1 --no-huge -s 2048 "${poll[@]}" -r "$TMP/spdk.sock" --json "$TMP/spdk.json" >"$log" 2>&1 &
		T_PORT=$SPDK_PORT T_NQN=$SPDK_NQN T_METRICS=""
		;;
	*)
		[[ $1 = default ]] || poll=(--poll "$1")
		taskset -c 0 "$FF" serve --ram 1G --ram-commit "${poll[@]}" --listen "127.0.0.1:$PORT" \
			--metrics "127.0.0.1:$METRICS_PORT" --rpc-socket none --log-level warn >"$log" 2>&1 &
		T_PORT=$PORT T_NQN=$FF_NQN T_METRICS=$METRICS_PORT
		;;
	esac
	target_started "$log"
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw write --bs 128k --iodepth 16 \
		--cpus-allowed 1 --output-format=json >"$TMP/prefill.json" || die "prefill of $1's target failed"
}

# nap_counts: the running farflash target's event-loop sleeps from /metrics,
# summed over workers -> "timed_sleeps missed slept_seconds" ("" for SPDK).
nap_counts() {
	[[ -n ${T_METRICS:-} ]] || return 0
	py "import re, urllib.request
t = urllib.request.urlopen('http://127.0.0.1:$T_METRICS/metrics', timeout=5).read().decode()
def tot(name, kind=None):
    s = 0.0
    for l in t.splitlines():
        if l.startswith(name + '{') and (kind is None or 'kind=\"%s\"' % kind in l):
            s += float(l.rsplit(' ', 1)[1])
    return s
print(tot('farflash_worker_sleeps_total', 'timed'), tot('farflash_worker_missed_sleeps_total'), tot('farflash_worker_slept_seconds_total'))"
}

# cpu_window PID: sleeps from now through the measured window of a run that
# started now (warm-up + 1 s to the end less 0.5 s) -> PID's CPU over it, %.
# Also writes $TMP/nap: the farflash target's timed sleeps, lost bets and % of
# the window asleep over it ("- - -" for SPDK).
cpu_window() {
	local t0 t1 n0 n1 a b
	sleep "$((WARMUP + 1))"
	a=$(nap_counts) t0=$(cpu_ticks "$1") n0=$(date +%s%N)
	sleep "$(py "print($RUNTIME - 1.5)")"
	t1=$(cpu_ticks "$1") n1=$(date +%s%N) b=$(nap_counts)
	if [[ -n $a && -n $b ]]; then
		py "a = [float(x) for x in '$a'.split()]; b = [float(x) for x in '$b'.split()]
print('%d %d %.2f' % (b[0] - a[0], b[1] - a[1], 100.0 * (b[2] - a[2]) / (($n1 - $n0) / 1e9)))" >"$TMP/nap"
	else
		echo "- - -" >"$TMP/nap"
	fi
	py "print(100.0 * ($t1 - $t0) / $HZ / (($n1 - $n0) / 1e9))"
}

# spdk_nvme_perf QD against the running target -> "iops mean_us target_cpu_pct"
sperf() {
	local qd=$1 sp cpu
	"$SPERF" --no-huge -s 1024 -c 0x2 -q "$qd" -o 4096 -w randread -t "$RUNTIME" -a "$WARMUP" \
		-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$T_PORT subnqn:$T_NQN" >"$TMP/sperf.log" 2>&1 &
	sp=$!
	cpu=$(cpu_window "$TARGET_PID")
	wait "$sp" || die "spdk_nvme_perf QD $qd failed: $(tail -5 "$TMP/sperf.log")"
	local iops lat
	read -r iops lat < <(awk '/^Total/ {print $3, $5; found = 1} END {exit !found}' "$TMP/sperf.log") ||
		die "no Total line from spdk_nvme_perf: $(tail -5 "$TMP/sperf.log")"
	echo "$iops $lat $cpu"
}

# fperf QD RATE POLL against the running target (RATE 0: unpaced) ->
# "iops p50_us target_cpu_pct host_cpu_pct"
fperf() {
	local qd=$1 rate=$2 pmode=$3 fp cpu pace=()
	[[ $rate = 0 ]] || pace=(--rate_iops "$rate")
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw randread --bs 4096 --iodepth "$qd" \
		"${pace[@]}" --runtime "$RUNTIME" --ramp_time "$WARMUP" --cpus-allowed 1 --poll "$pmode" \
		--output-format=json >"$TMP/fperf.json" 2>"$TMP/fperf.err" &
	fp=$!
	cpu=$(cpu_window "$TARGET_PID")
	wait "$fp" || die "farflash perf QD $qd rate $rate --poll $pmode failed: $(tail -5 "$TMP/fperf.err")"
	echo "$(py "import json; a = json.load(open('$TMP/fperf.json'))['aggregate']
r = a['read']
print(r['iops'], r['lat_ns']['percentile']['50.000000'] / 1000, end=' ')
print($cpu, a['usr_cpu'] + a['sys_cpu'])")"
}

# SPDK's interrupt mode, where it works on this kernel: starts, listens and
# serves a second of QD 1 reads. INTR=1 when it does, else INTR_WHY says why.
INTR=0 INTR_WHY="not probed (no part needs SPDK)"
probe_interrupt_mode() {
	local log=$TMP/intr.log pid ok=0
	"$TGT" -m 0x1 --no-huge -s 2048 --interrupt-mode -r "$TMP/spdk.sock" --json "$TMP/spdk.json" >"$log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	for _ in $(seq 200); do
		kill -0 "$pid" 2>/dev/null || break
		if (exec 3<>"/dev/tcp/127.0.0.1/$SPDK_PORT") 2>/dev/null; then ok=1 && break; fi
		sleep 0.05
	done
	if [[ $ok = 1 ]] && timeout 20 "$SPERF" --no-huge -s 1024 -c 0x2 -q 1 -o 4096 -w randread -t 1 \
		-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$SPDK_PORT subnqn:$SPDK_NQN" >"$TMP/intr-perf.log" 2>&1 &&
		grep -q '^Total' "$TMP/intr-perf.log"; then
		INTR=1 INTR_WHY=""
	elif [[ $ok = 1 ]]; then
		INTR_WHY="it listens but a 1 s QD 1 read run failed: $(tail -3 "$TMP/intr-perf.log" | tr '\n' ' ')"
	else
		INTR_WHY="it did not start: $(tail -3 "$log" | tr '\n' ' ')"
	fi
	kill -TERM "$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}
if part saturation || part paced; then
	probe_interrupt_mode
	echo "== SPDK --interrupt-mode: $([[ $INTR = 1 ]] && echo works || echo "does not work here: $INTR_WHY")"
fi
SPDK_WHO=(spdk)
[[ $INTR = 0 ]] || SPDK_WHO+=(spdk-intr)

# The default mode, as the banner names it ("..., poll MODE)").
taskset -c 0 "$FF" serve --ram 64M --listen "127.0.0.1:$PORT" --rpc-socket none --log-level warn >"$TMP/target.log" 2>&1 &
T_PORT=$PORT
target_started "$TMP/target.log"
DEFAULT_POLL=$(sed -n 's/.*poll \([a-z]*\)).*/\1/p' "$TMP/target.log" | head -1)
stop_target
[[ -n $DEFAULT_POLL ]] || die "the target's banner names no poll mode: $(head -3 "$TMP/target.log")"
[[ " $MODES " == *" $DEFAULT_POLL "* ]] || die "MODES must include the default, $DEFAULT_POLL"
echo "== the default polling: $DEFAULT_POLL"

read -ra MODE_LIST <<<"$MODES"

# ---- saturation: every target under spdk_nvme_perf -----------------------------------
part_saturation() {
	local who=("${SPDK_WHO[@]}" "${MODE_LIST[@]}") qd r w line iops lat cpu ns nm np
	[[ -z ${SAT_TARGETS:-} ]] || read -ra who <<<"$SAT_TARGETS"
	for qd in $QDS; do
		echo "== saturation: 4 KiB randread QD $qd"
		for r in $(seq "$ROUNDS"); do
			line="  round $r:"
			for w in $(rotated "$r" "${who[@]}"); do
				start_target "$w"
				read -r iops lat cpu < <(sperf "$qd")
				stop_target
				printf 'tgt\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$w" "$iops" "$lat" "$cpu" >>"$RES"
				read -r ns nm np <"$TMP/nap"
				printf 'nap\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$w" "$ns" "$nm" "$np" >>"$RES"
				line+=" $w ${iops%.*} IOPS ${lat} µs ${cpu%.*} %"
				[[ $ns = - || $np = 0.00 ]] || line+=" (asleep $np %, $ns sleeps, $nm lost)"
				line+=";"
			done
			echo "${line%;}"
		done
	done
}

# ---- paced: farflash perf --rate_iops against the default, always, never, SPDK -------
part_paced() {
	local qd r w l rate line iops p50 cpu hcpu sat
	declare -A SAT
	start_target always
	for qd in $PACED_QDS; do
		read -r iops p50 cpu hcpu < <(fperf "$qd" 0 spin)
		SAT[$qd]=${iops%.*}
		printf 'sat\t1\t%s\talways\t%s\t%s\t%s\t%s\n' "$qd" "$iops" "$p50" "$cpu" "$hcpu" >>"$RES"
		echo "== paced: saturation of farflash perf QD $qd against --poll always: ${SAT[$qd]} IOPS"
	done
	stop_target
	local who=("$DEFAULT_POLL" always never "${SPDK_WHO[@]}")
	for r in $(seq "$PACED_ROUNDS"); do
		for w in $(rotated "$r" "${who[@]}"); do
			start_target "$w"
			line="  round $r, $w:"
			for qd in $PACED_QDS; do
				for l in $LOADS; do
					rate=$((SAT[$qd] * l / 100))
					((rate > 0)) || die "QD $qd: $l % of ${SAT[$qd]} IOPS is no rate"
					read -r iops p50 cpu hcpu < <(fperf "$qd" "$rate" block)
					printf 'paced\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$w" "$iops" "$p50" "$cpu" "$hcpu" "$l" >>"$RES"
					line+=" QD $qd $l % ${iops%.*} IOPS p50 ${p50:0:5} µs ${cpu%.*} %;"
				done
			done
			stop_target
			echo "${line%;}"
		done
	done
}

# ---- the host: farflash perf against SPDK's target ------------------------------------
part_host() {
	local qd r p l rate line iops p50 cpu hcpu
	declare -A SAT
	start_target spdk
	echo "== host: farflash perf against SPDK's target, --poll hybrid (default), spin, block"
	for qd in $QDS; do
		for r in $(seq "$ROUNDS"); do
			line="  QD $qd round $r:"
			for p in $(rotated "$r" hybrid spin block); do
				read -r iops p50 cpu hcpu < <(fperf "$qd" 0 "$p")
				printf 'host\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t0\n' "$r" "$qd" "$p" "$iops" "$p50" "$cpu" "$hcpu" >>"$RES"
				line+=" $p ${iops%.*} IOPS host ${hcpu%.*} %;"
				[[ $p != spin || $r != 1 ]] || SAT[$qd]=${iops%.*}
			done
			echo "${line%;}"
		done
	done
	for qd in $PACED_QDS; do
		[[ -n ${SAT[$qd]:-} ]] || {
			read -r iops p50 cpu hcpu < <(fperf "$qd" 0 spin)
			SAT[$qd]=${iops%.*}
		}
		for r in $(seq "$PACED_ROUNDS"); do
			line="  paced QD $qd round $r:"
			for l in $LOADS; do
				rate=$((SAT[$qd] * l / 100))
				for p in $(rotated "$r" hybrid spin block); do
					read -r iops p50 cpu hcpu < <(fperf "$qd" "$rate" "$p")
					printf 'hpaced\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$p" "$iops" "$p50" "$cpu" "$hcpu" "$l" >>"$RES"
					line+=" $l % $p ${hcpu%.*} %;"
				done
			done
			echo "${line%;}"
		done
	done
	stop_target
}

# ---- no bad regimes: QD 128 over fresh starts -------------------------------------------
part_starts() {
	local s w line iops lat cpu
	echo "== QD 128 over $STARTS fresh starts of the default target, each beside a fresh start of SPDK's"
	for s in $(seq "$STARTS"); do
		line="  start $s:"
		for w in default spdk; do
			start_target "$w"
			read -r iops lat cpu < <(sperf 128)
			stop_target
			printf 'start\t%s\t128\t%s\t%s\t%s\t%s\n' "$s" "$w" "$iops" "$lat" "$cpu" >>"$RES"
			line+=" $w ${iops%.*} IOPS;"
		done
		echo "${line%;}"
	done
}

# ---- idle -----------------------------------------------------------------------------------
# The default against adaptive (the default before issue 44), with 4 idle hosts
# (admin + 1 I/O queue) and with IDLE_CTRLS controllers (admin + 2 I/O queues).
part_idle() {
	local idle w n q poll
	for n in 4 "$IDLE_CTRLS"; do
		q=$([[ $n = 4 ]] && echo 1 || echo 2)
		for w in default adaptive; do
			poll=()
			[[ $w = default ]] || poll=(--poll "$w")
			echo "== idle: $w target with $n idle controllers ($q I/O queues each), 30 s"
			taskset -c 0 "$FF" serve --ram 1G "${poll[@]}" --listen "127.0.0.1:$PORT" --rpc-socket none \
				--log-level warn >"$TMP/target.log" 2>&1 &
			T_PORT=$PORT
			target_started "$TMP/target.log"
			idle=$(idle_cpu_pct "$TARGET_PID" "$PORT" "$FF_NQN" "$IDLE_HOSTS" "$n" "$q")
			stop_target
			printf 'idle\t1\t%s\t%s\t0\t0\t%s\n' "$n" "$w" "$idle" >>"$RES"
			echo "  $idle % of a core"
		done
	done
}

# ---- the floor --------------------------------------------------------------------------------
part_floor() {
	local r qd spin srv t0 t1 n0 n1 ops who req p50 p99 cpu
	echo "== the floor: tcp_rr, server busy-polling against blocking, and timer sleeps"
	for r in $(seq "$ROUNDS"); do
		for qd in 1 4; do
			for spin in 1 0; do
				SPIN=$spin taskset -c 0 "$TCP_RR" server "$FLOOR_PORT" 72 4120 >/dev/null 2>&1 &
				srv=$!
				PIDS+=("$srv")
				wait_listen "$FLOOR_PORT" "$srv"
				t0=$(cpu_ticks "$srv") n0=$(date +%s%N)
				SPIN=1 taskset -c 1 "$TCP_RR" client "$FLOOR_PORT" 72 4120 "$qd" "$RUNTIME" >"$TMP/rr.out"
				t1=$(cpu_ticks "$srv") n1=$(date +%s%N)
				kill "$srv" 2>/dev/null || true
				wait "$srv" 2>/dev/null || true
				ops=$(sed -n 's/.*ops\/s=\([0-9.]*\).*/\1/p' "$TMP/rr.out")
				[[ -n $ops ]] || die "tcp_rr gave no ops/s: $(cat "$TMP/rr.out")"
				who=$([[ $spin = 1 ]] && echo spin || echo block)
				printf 'floor\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$who" "$ops" \
					"$(py "print(1e6 * $qd / $ops)")" "$(py "print(100.0 * ($t1 - $t0) / $HZ / (($n1 - $n0) / 1e9))")" >>"$RES"
			done
		done
	done
	taskset -c 0 "$TIMER_COST" >"$TMP/timer.out" || die "timer_cost failed"
	# Lines "req_us=R p50_us=A p99_us=B cpu_us=C".
	while read -r req p50 p99 cpu; do
		printf 'timer\t1\t0\t%s\t%s\t%s\t%s\n' "${req#req_us=}" "${p50#p50_us=}" "${p99#p99_us=}" "${cpu#cpu_us=}" >>"$RES"
	done <"$TMP/timer.out"
}

for p in $PARTS; do "part_$p"; done

# ---- report -----------------------------------------------------------------------------------
python3 "$ROOT/benches/cpu-poll-report.py" "$RES" "$MODES" "$QDS" "$PACED_QDS" "$LOADS" "$ROUNDS" \
	"$PACED_ROUNDS" "$RUNTIME" "$WARMUP" "$DEFAULT_POLL" "$INTR_WHY" >"$TMP/report.md"

{
	echo "## CPU in proportion to the work: polling modes, SPDK and the floor (issues 34, 44)"
	echo
	echo "Written by \`benches/cpu-poll.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts ""
	echo "- parts: $PARTS"
	echo "- targets on core 0 alone: SPDK \`nvmf_tgt -m 0x1 --no-huge\` (malloc bdev; and with \`--interrupt-mode\`), farflash \`serve --ram 1G --ram-commit --poll MODE\` (default: \`$DEFAULT_POLL\`); initiators on core 1"
	cat "$TMP/report.md"
} >"$TMP/section.md"
cat "$TMP/section.md"
[[ -z $OUT ]] || write_section "$ROOT/$OUT" cpu-poll <"$TMP/section.md"
