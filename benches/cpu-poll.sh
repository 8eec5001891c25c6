#!/usr/bin/env bash
# benches/cpu-poll.sh -- CPU in proportion to the work (issue 34): farflash's
# polling modes against busy polling and against SPDK's target, with the
# target's CPU, side by side in paired rounds; and the floor this machine
# sets under any design that sleeps.
#
#   SPDK_DIR=/path/to/spdk bash benches/cpu-poll.sh
#   ROUNDS=3 QDS="1 4" MODES="always hybrid" bash benches/cpu-poll.sh
#
# SPDK_DIR is an SPDK build (v25.09; ../shared/tools/build-spdk.sh makes one in
# ../anchors/spdk, the default) with build/bin/nvmf_tgt and
# build/bin/spdk_nvme_perf. Not part of the test suite (SPDK is a benchmark
# peer only).
#
# Every target runs alone on core 0, every initiator on core 1, 127.0.0.1:
#   SPDK:     nvmf_tgt -m 0x1 --no-huge, TCP transport with its defaults, a
#             1 GiB malloc bdev (its reactor busy-polls at any load)
#   farflash: taskset -c 0 farflash serve --ram 1G --ram-commit --poll MODE,
#             for each of MODES (always adaptive hybrid never; adaptive is
#             the default)
# Each target is preconditioned (one sequential 128 KiB write pass, farflash
# perf), then spdk_nvme_perf runs 4 KiB random reads at QD for WARMUP +
# RUNTIME s. The target's CPU (user + system, /proc) is taken over a window
# inside the measured part: from 1 s after the warm-up to 0.5 s before the end.
#
# Per round and QD, back to back, in an order that rotates from round to round:
# SPDK's target and farflash in every mode. Per round: a mode's IOPS and mean
# latency over --poll always's, and its IOPS per CPU-% over SPDK's; medians
# over rounds. The bars are issue 34's.
#
# Then:
#   - the host: farflash perf QD 1 against SPDK's target, --poll spin against
#     --poll block, host CPU (perf's usr_cpu + sys_cpu) and mean latency, paired;
#   - no bad regimes: STARTS fresh default targets, each QD 128 once, each
#     beside a fresh SPDK target (the anchor: what the machine's drift is);
#   - idle: the default target with 4 idle hosts connected, 30 s;
#   - the floor: ../shared/limits/tcp_rr (a server that only echoes) at QD 1
#     and 4, its server busy-polling against blocking in recv, with its CPU;
#     and examples/timer_cost (what a precise timer sleep costs here).
#
# Writes its section of docs/benchmarks.md (OUT= to change, empty to skip).
# Environment: SPDK_DIR, ROUNDS (5), RUNTIME (5), WARMUP (2), QDS ("1 4 32 128"),
# MODES ("always adaptive hybrid never"), STARTS (10), PORT (4530),
# SPDK_PORT (4531), FLOOR_PORT (5303), OUT.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME="cpu-poll.sh"
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-5} WARMUP=${WARMUP:-2} STARTS=${STARTS:-10}
QDS=${QDS:-1 4 32 128} MODES=${MODES:-always adaptive hybrid never}
PORT=${PORT:-4530} SPDK_PORT=${SPDK_PORT:-4531} FLOOR_PORT=${FLOOR_PORT:-5303}
OUT=${OUT-docs/benchmarks.md}
FF_NQN=nqn.2026-11.io.farflash:default
SPDK_NQN=nqn.2016-06.io.spdk:bench
NEED_FLOOR=1
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

for t in taskset python3 cargo gcc; do command -v "$t" >/dev/null || die "$t is required"; done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (targets on core 0, initiators on core 1)"
[[ $RUNTIME =~ ^[0-9]+$ && $RUNTIME -ge 3 ]] || die "RUNTIME=$RUNTIME: a whole number of seconds, at least 3"
[[ $WARMUP =~ ^[0-9]+$ && $ROUNDS =~ ^[1-9][0-9]*$ && $STARTS =~ ^[1-9][0-9]*$ ]] ||
	die "WARMUP, ROUNDS and STARTS are whole numbers (ROUNDS, STARTS at least 1)"
for m in $MODES; do
	[[ $m =~ ^(always|adaptive|hybrid|never)$ ]] || die "MODES: unknown mode $m (always adaptive hybrid never)"
done
[[ " $MODES " == *" always "* ]] || die "MODES must include always (every ratio is against it)"
for q in $QDS; do [[ $q =~ ^[1-9][0-9]*$ ]] || die "QDS: $q is not a queue depth"; done

TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
[[ -x $TGT && -x $SPERF ]] ||
	die "no SPDK build in SPDK_DIR=$SPDK_DIR (build/bin/nvmf_tgt, build/bin/spdk_nvme_perf; ../shared/tools/build-spdk.sh builds one)"
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== building (release)"
cargo build -q --release --bin farflash --example idle_hosts --example timer_cost
FF=$ROOT/target/release/farflash
IDLE_HOSTS=$ROOT/target/release/examples/idle_hosts
TIMER_COST=$ROOT/target/release/examples/timer_cost
HZ=$(getconf CLK_TCK)
RES=$TMP/results.tsv # kind, round, qd, who, then the figures
: >"$RES"

spdk_tcp_config "$SPDK_NQN" "$SPDK_PORT" >"$TMP/spdk.json"

TARGET_PID=""
start_target() { # spdk | MODE | default -> TARGET_PID, T_PORT, T_NQN (preconditioned)
	local log=$TMP/target.log poll=()
	if [[ $1 = spdk ]]; then
		"$TGT" -m 0x1 --no-huge -s 2048 -r "$TMP/spdk.sock" --json "$TMP/spdk.json" >"$log" 2>&1 &
		T_PORT=$SPDK_PORT T_NQN=$SPDK_NQN
	else
		[[ $1 = default ]] || poll=(--poll "$1")
		taskset -c 0 "$FF" serve --ram 1G --ram-commit "${poll[@]}" --listen "127.0.0.1:$PORT" \
			--rpc-socket none --log-level warn >"$log" 2>&1 &
		T_PORT=$PORT T_NQN=$FF_NQN
	fi
	target_started "$log"
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw write --bs 128k --iodepth 16 \
		--cpus-allowed 1 --output-format=json >"$TMP/prefill.json" || die "prefill of $1's target failed"
}

# spdk_nvme_perf QD against the running target -> "iops mean_us target_cpu_pct"
sperf() {
	local qd=$1 sp t0 t1 n0 n1
	"$SPERF" --no-huge -s 1024 -c 0x2 -q "$qd" -o 4096 -w randread -t "$RUNTIME" -a "$WARMUP" \
		-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$T_PORT subnqn:$T_NQN" >"$TMP/sperf.log" 2>&1 &
	sp=$!
	sleep "$((WARMUP + 1))"
	t0=$(cpu_ticks "$TARGET_PID") n0=$(date +%s%N)
	sleep "$(py "print($RUNTIME - 1.5)")"
	t1=$(cpu_ticks "$TARGET_PID") n1=$(date +%s%N)
	wait "$sp" || die "spdk_nvme_perf QD $qd failed: $(tail -5 "$TMP/sperf.log")"
	local iops lat
	read -r iops lat < <(awk '/^Total/ {print $3, $5; found = 1} END {exit !found}' "$TMP/sperf.log") ||
		die "no Total line from spdk_nvme_perf: $(tail -5 "$TMP/sperf.log")"
	echo "$iops $lat $(py "print(100.0 * ($t1 - $t0) / $HZ / (($n1 - $n0) / 1e9))")"
}
py() { python3 -c "$1"; }

# ---- target modes against always-poll and SPDK ------------------------------------
read -ra MODE_LIST <<<"$MODES"
WHO=(spdk "${MODE_LIST[@]}")
for qd in $QDS; do
	echo "== 4 KiB randread QD $qd"
	for r in $(seq "$ROUNDS"); do
		line="  round $r:"
		for w in $(rotated "$r" "${WHO[@]}"); do
			start_target "$w"
			read -r iops lat cpu < <(sperf "$qd")
			stop_target
			printf 'tgt\t%s\t%s\t%s\t%s\t%s\t%s\n' "$r" "$qd" "$w" "$iops" "$lat" "$cpu" >>"$RES"
			line+=" $w ${iops%.*} IOPS ${lat} µs ${cpu%.*} %;"
		done
		echo "${line%;}"
	done
done

# ---- the host: farflash perf QD 1 against SPDK's target ---------------------------
echo "== farflash perf QD 1 against SPDK's target: --poll spin against --poll block"
start_target spdk
for r in $(seq "$ROUNDS"); do
	line="  round $r:"
	for p in $([[ $((r % 2)) = 1 ]] && echo spin block || echo block spin); do
		"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw randread --bs 4096 --iodepth 1 \
			--runtime "$RUNTIME" --ramp_time "$WARMUP" --cpus-allowed 1 --poll "$p" \
			--output-format=json >"$TMP/host.json" || die "farflash perf --poll $p failed"
		read -r iops lat cpu < <(py "import json; a = json.load(open('$TMP/host.json'))['aggregate']
print(a['read']['iops'], a['read']['lat_ns']['mean'] / 1000, a['usr_cpu'] + a['sys_cpu'])")
		printf 'host\t%s\t1\t%s\t%s\t%s\t%s\n' "$r" "$p" "$iops" "$lat" "$cpu" >>"$RES"
		line+=" $p ${iops%.*} IOPS ${lat:0:5} µs host ${cpu%.*} %;"
	done
	echo "${line%;}"
done
stop_target

# ---- no bad regimes: QD 128 over fresh starts -------------------------------------
echo "== QD 128 over $STARTS fresh starts of the default target, each beside a fresh start of SPDK's"
# SPDK's target, started the same way right after, is the anchor: how much
# of the spread is the machine's.
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

# ---- idle ---------------------------------------------------------------------------
echo "== idle: the default target with 4 idle hosts, 30 s"
taskset -c 0 "$FF" serve --ram 1G --listen "127.0.0.1:$PORT" --rpc-socket none --log-level warn \
	>"$TMP/target.log" 2>&1 &
T_PORT=$PORT
target_started "$TMP/target.log"
# The default mode, as the banner names it ("..., poll MODE)").
DEFAULT_POLL=$(sed -n 's/.*poll \([a-z]*\)).*/\1/p' "$TMP/target.log" | head -1)
[[ -n $DEFAULT_POLL ]] || die "the target's banner names no poll mode: $(head -3 "$TMP/target.log")"
idle=$(idle_cpu_pct "$TARGET_PID" "$PORT" "$FF_NQN" "$IDLE_HOSTS")
stop_target
printf 'idle\t1\t0\tdefault\t0\t0\t%s\n' "$idle" >>"$RES"
echo "  $idle % of a core"

# ---- the floor ------------------------------------------------------------------------
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

# ---- report -----------------------------------------------------------------------------
python3 - "$RES" "$MODES" "$QDS" "$ROUNDS" "$RUNTIME" "$WARMUP" "$STARTS" "$DEFAULT_POLL" >"$TMP/report.md" <<'PY'
import collections, statistics, sys
path, modes, qds, rounds, runtime, warmup, starts, default = sys.argv[1:]
modes, qds = modes.split(), [int(q) for q in qds.split()]
rows = [l.rstrip("\n").split("\t") for l in open(path) if l.strip()]
R = collections.defaultdict(dict)  # (kind, qd, who) -> round -> (a, b, c)
for kind, r, qd, who, *v in rows:
    R[(kind, int(qd), who)][int(r)] = tuple(float(x) for x in v)
med = statistics.median
def ratios(kind, qd, a, b, f):
    xa, xb = R[(kind, qd, a)], R[(kind, qd, b)]
    return [f(xa[r], xb[r]) for r in sorted(xa) if r in xb]
def m(kind, qd, who, i):
    return med(v[i] for v in R[(kind, qd, who)].values())
yes = lambda ok: "yes" if ok else "no"
eff = lambda v: v[0] / max(v[2], 0.1)  # IOPS per CPU-%

print(f"- {rounds} rounds per QD; spdk_nvme_perf `--no-huge -c 0x2 -o 4096 -w randread -t {runtime} -a {warmup}`;"
      " target CPU over the measured part less 1.5 s; medians over rounds of per-round ratios")
print()
print("| QD | target | IOPS | mean µs | target CPU % | IOPS / always | latency / always | IOPS per CPU-% / SPDK's |")
print("|---|---|---|---|---|---|---|---|")
for qd in qds:
    for who in ["spdk"] + modes:
        if not R[("tgt", qd, who)]:
            continue
        iops, lat, cpu = (m("tgt", qd, who, i) for i in range(3))
        if who == "spdk":
            vs_a = lat_a = "–"
        else:
            vs_a = "%.3f" % med(ratios("tgt", qd, who, "always", lambda x, y: x[0] / y[0]))
            lat_a = "%.3f" % med(ratios("tgt", qd, who, "always", lambda x, y: x[1] / y[1]))
        vs_s = "%.2f" % med(ratios("tgt", qd, who, "spdk", lambda x, y: eff(x) / eff(y)))
        name = "SPDK" if who == "spdk" else f"farflash `--poll {who}`" + (" (default)" if who == default else "")
        print(f"| {qd} | {name} | {iops:,.0f} | {lat:.2f} | {cpu:.1f} | {vs_a} | {lat_a} | {vs_s} |")
print()

# The bars, for each farflash mode.
def bar_rows(mode):
    out = []
    def have(qd):
        return R[("tgt", qd, mode)] and R[("tgt", qd, "always")]
    if have(1):
        lat = med(ratios("tgt", 1, mode, "always", lambda x, y: x[1] / y[1]))
        cpu = m("tgt", 1, mode, 2)
        out.append(("QD 1: latency ≤ 1.10x always, target CPU ≤ 50 %", f"{lat:.3f}x, {cpu:.1f} %", lat <= 1.10 and cpu <= 50))
    if have(4):
        io = med(ratios("tgt", 4, mode, "always", lambda x, y: x[0] / y[0]))
        cpu = m("tgt", 4, mode, 2)
        out.append(("QD 4: IOPS ≥ 0.95 of always, target CPU ≤ 70 %", f"{io:.3f}, {cpu:.1f} %", io >= 0.95 and cpu <= 70))
    for qd in (32, 128):
        if have(qd):
            io = med(ratios("tgt", qd, mode, "always", lambda x, y: x[0] / y[0]))
            out.append((f"QD {qd}: IOPS ≥ 0.97 of always", f"{io:.3f}", io >= 0.97))
    for qd, need in ((1, 2.0), (4, 1.5)):
        if R[("tgt", qd, mode)] and R[("tgt", qd, "spdk")]:
            e = med(ratios("tgt", qd, mode, "spdk", lambda x, y: eff(x) / eff(y)))
            out.append((f"QD {qd}: IOPS per CPU-% ≥ {need}x SPDK's", f"{e:.2f}x", e >= need))
    return out
print("| bar (issue 34) | " + " | ".join(f"`--poll {x}`" for x in modes if x != "always") + " |")
print("|---|" + "---|" * len([x for x in modes if x != "always"]))
table = {x: bar_rows(x) for x in modes if x != "always"}
names = [b[0] for b in next(iter(table.values()), [])]
for i, name in enumerate(names):
    cells = []
    for x in modes:
        if x == "always":
            continue
        _, val, ok = table[x][i]
        cells.append(f"{val} ({yes(ok)})")
    print(f"| {name} | " + " | ".join(cells) + " |")
h = R[("host", 1, "spin")], R[("host", 1, "block")]
if h[0] and h[1]:
    lat = med(ratios("host", 1, "block", "spin", lambda x, y: x[1] / y[1]))
    cpu = m("host", 1, "block", 2)
    print(f"| farflash perf QD 1 → SPDK: host CPU ≤ 60 % at latency ≤ 1.10x busy-poll (`--poll block`) | "
          f"{lat:.3f}x, {cpu:.1f} % ({yes(lat <= 1.10 and cpu <= 60)}) |" + " |" * (len(table) - 1))
s = [v[0] for v in R[("start", 128, "default")].values()]
sa = [v[0] for v in R[("start", 128, "spdk")].values()]
if s:
    low = min(s) / med(s)
    anchor = f"; SPDK's target, started beside each: {min(sa) / med(sa):.3f}" if sa else ""
    print(f"| QD 128 over {len(s)} fresh starts: lowest ≥ 0.9 of median (default, `{default}`) | {low:.3f} ({yes(low >= 0.9)}{anchor}) |" + " |" * (len(table) - 1))
i = R[("idle", 0, "default")]
if i:
    v = next(iter(i.values()))[2]
    print(f"| idle, 4 hosts connected: < 1 % of a core (default, `{default}`) | {v:.2f} % ({yes(v < 1)}) |" + " |" * (len(table) - 1))
print()

if h[0] and h[1]:
    print("Host: farflash perf QD 1 against SPDK's target")
    print()
    print("| `--poll` | IOPS | mean µs | host CPU % |")
    print("|---|---|---|---|")
    for p in ("spin", "block"):
        print(f"| {p} | {m('host', 1, p, 0):,.0f} | {m('host', 1, p, 1):.2f} | {m('host', 1, p, 2):.1f} |")
    print()
if s:
    print(f"QD 128 fresh starts, IOPS: farflash {', '.join('%.0f' % x for x in s)} (median {med(s):,.0f})")
    if sa:
        print(f"; SPDK's target started right after each: {', '.join('%.0f' % x for x in sa)} (median {med(sa):,.0f})")
    print()
print("The floor: `tcp_rr` (../shared/limits), 72-byte requests, 4,120-byte responses, client busy-polling "
      "on core 1, server on core 0 busy-polling (`SPIN=1`) or blocking in `recv` (`SPIN=0`): a server "
      "with no work of its own")
print()
print("| QD | server | ops/s | µs per op | server CPU % | CPU µs per op | latency / spin |")
print("|---|---|---|---|---|---|---|")
for qd in (1, 4):
    for who in ("spin", "block"):
        if not R[("floor", qd, who)]:
            continue
        ops, us, cpu = (m("floor", qd, who, k) for k in range(3))
        rel = "–" if who == "spin" else "%.3f" % med(ratios("floor", qd, "block", "spin", lambda x, y: x[1] / y[1]))
        print(f"| {qd} | {who} | {ops:,.0f} | {us:.2f} | {cpu:.1f} | {cpu / 100 * 1e6 / ops:.2f} | {rel} |")
print()
t = sorted(R[("timer", 0, w)][1] + (int(w),) for w in {k[2] for k in R if k[0] == "timer"})
if t:
    print("A precise timer sleep here (`examples/timer_cost`: timerfd in epoll, timer slack 1 ns, 20,000 each):")
    print()
    print("| asked µs | took µs p50 | p99 | CPU µs charged per sleep |")
    print("|---|---|---|---|")
    for p50, p99, cpu, req in sorted(t, key=lambda x: x[3]):
        print(f"| {req} | {p50:.2f} | {p99:.2f} | {cpu:.2f} |")
    print()
print("Per round (IOPS, mean µs, target CPU %):")
print()
for qd in qds:
    for r in range(1, int(rounds) + 1):
        parts = []
        for who in ["spdk"] + modes:
            v = R[("tgt", qd, who)].get(r)
            if v:
                parts.append(f"{who} {v[0]:.0f} {v[1]:.2f} {v[2]:.1f}")
        print(f"- QD {qd} round {r}: " + "; ".join(parts))
PY

{
	echo "## CPU in proportion to the work: polling modes, SPDK and the floor (issue 34)"
	echo
	echo "Written by \`benches/cpu-poll.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts ""
	echo "- targets on core 0 alone: SPDK \`nvmf_tgt -m 0x1 --no-huge\` (malloc bdev), farflash \`serve --ram 1G --ram-commit --poll MODE\`; initiators on core 1"
	cat "$TMP/report.md"
} >"$TMP/section.md"
cat "$TMP/section.md"
[[ -z $OUT ]] || write_section "$ROOT/$OUT" cpu-poll <"$TMP/section.md"
