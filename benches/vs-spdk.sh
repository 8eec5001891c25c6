#!/usr/bin/env bash
# benches/vs-spdk.sh -- farflash's NVMe/TCP target against SPDK's, side by side.
#
#   SPDK_DIR=/path/to/spdk bash benches/vs-spdk.sh
#   RUNS=3 RUNTIME=5 WARMUP=2 ROWS="qd1 qd32" SPDK_DIR=... bash benches/vs-spdk.sh
#
# SPDK_DIR is an SPDK build (v25.09: ../shared/tools/build-spdk.sh makes one
# in ../anchors/spdk, the default here) with build/bin/nvmf_tgt and
# build/bin/spdk_nvme_perf. SPDK is a benchmark peer only: nothing in the
# test suite needs it.
#
# Targets on core 0, initiators on core 1, all on 127.0.0.1:
#   SPDK:     nvmf_tgt -m 0x1 --no-huge, TCP transport with its defaults, one
#             1 GiB malloc bdev of 512-byte blocks (started from a JSON config)
#   farflash: taskset -c 0 farflash serve --ram 1G --ram-commit (defaults otherwise:
#             adaptive polling, one event loop per allowed CPU = 1), and the
#             same with --poll always
#   initiators: spdk_nvme_perf -c 0x2 --no-huge, and farflash perf
#             --cpus-allowed 1 (busy-poll)
# Every target is preconditioned first: one sequential 128 KiB write pass over
# the whole namespace (farflash perf), so no run measures first-touch page
# faults. Each initiator then runs WARMUP seconds before it measures
# (spdk_nvme_perf -a, farflash perf --ramp_time): both skip the same start-up
# transient of a fresh connection.
# Per round and row, back to back: SPDK target x spdk_nvme_perf, farflash x
# spdk_nvme_perf, farflash always-poll x spdk_nvme_perf, SPDK target x
# farflash perf, farflash x farflash perf, and the initiator's ceiling
# (spdk_nvme_perf x farflash --null), in an order that rotates
# by one from round to round. Every target runs alone (SPDK's
# reactor spins on core 0). A ratio is the median over rounds of the
# per-round ratios. Target CPU per I/O = its user+system time over the run
# (warm-up included) divided by the I/Os the initiator's rate gives for the
# same time (this VM has no cycle counters).
# Then: idle farflash target with 4 idle hosts (30 s), adaptive polling.
#
# Writes its section of docs/benchmarks.md (OUT= to change, empty to skip).
#
# BASE=<git rev>: farflash at that commit against farflash as the working tree
# has it ("HEAD"), for a change that must not be slower than the commit
# before it (issue 31: at least 0.97 on every row):
#
#   BASE=HEAD~1 bash benches/vs-spdk.sh
#   BASE=eb4dc34 RUNS=3 ROWS="qd1 qd32" MIN_RATIO=0.97 bash benches/vs-spdk.sh
#
# BASE is checked out in a temporary git worktree (git worktree add --detach,
# removed on exit) and built there (cargo build --release --offline; online if
# that fails for want of a download) into a CARGO_TARGET_DIR of its own:
# BASE_TARGET_DIR, by default a temporary directory (name a kept one to build
# the dependencies only once).
# Per round and row, back to back, in an order that rotates from round to
# round: farflash at BASE, farflash at HEAD, and SPDK's target when SPDK_DIR
# has nvmf_tgt (the anchor: it shows how much the machine itself drifted),
# each under spdk_nvme_perf. Both farflash targets are started, pinned and
# preconditioned the same way (--ram-commit is left out for both when BASE
# predates it; the prefill touches every page either way). HEAD / BASE = the
# median over rounds of the per-round ratios; a row meets the bar when it is
# at least MIN_RATIO. IDLE=1 measures both idle. Writes the "vs-commit"
# section of OUT, not vs-spdk.sh's; only spdk_nvme_perf is required of SPDK.
#
# Environment: SPDK_DIR, RUNS (5), RUNTIME seconds (3), WARMUP seconds (1), ROWS (all: qd1 qd32
# qd128 write32 read128k), IDLE (1: measure idle CPU), PREFILL (1: precondition each target
# with one sequential write pass before its run, see prefill()), PORT (4520),
# SPDK_PORT (4521), OUT; BASE, BASE_TARGET_DIR, MIN_RATIO (0.97) as above; BASE_BIN, a
# binary already built from BASE, instead of building it.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME=vs-spdk.sh
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
RUNS=${RUNS:-5} RUNTIME=${RUNTIME:-3} WARMUP=${WARMUP:-1} IDLE=${IDLE:-1} PREFILL=${PREFILL:-1}
ROWS=${ROWS:-qd1 qd32 qd128 write32 read128k}
PORT=${PORT:-4520} SPDK_PORT=${SPDK_PORT:-4521}
OUT=${OUT-docs/benchmarks.md}
BASE=${BASE:-} BASE_TARGET_DIR=${BASE_TARGET_DIR:-} MIN_RATIO=${MIN_RATIO:-0.97}
FF_NQN=nqn.2026-11.io.farflash:default
SPDK_NQN=nqn.2016-06.io.spdk:bench
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

for t in taskset python3 cargo; do command -v "$t" >/dev/null || die "$t is required"; done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (targets on core 0, initiators on core 1)"
[[ $MIN_RATIO =~ ^[0-9]*\.?[0-9]+$ ]] || die "MIN_RATIO=$MIN_RATIO is not a number"

# ---- rows ---------------------------------------------------------------------
declare -A ROW_NAME=(
	[qd1]="4 KiB randread QD 1" [qd32]="4 KiB randread QD 32" [qd128]="4 KiB randread QD 128"
	[write32]="4 KiB randwrite QD 32" [read128k]="128 KiB read QD 8")
declare -A ROW_ARGS=(
	[qd1]="randread 4096 1" [qd32]="randread 4096 32" [qd128]="randread 4096 128"
	[write32]="randwrite 4096 32" [read128k]="read 131072 8")
declare -A BAR=([qd32]=1.2)
for row in $ROWS; do
	[[ -n ${ROW_ARGS[$row]:-} ]] || die "unknown row $row (have: ${!ROW_ARGS[*]})"
done
if [[ -n $BASE ]]; then
	BASE_REV=$(git -C "$ROOT" rev-parse --verify --quiet "$BASE^{commit}") ||
		die "BASE=$BASE is not a commit of this repository"
	BASE_SHORT=$(git -C "$ROOT" rev-parse --short "$BASE_REV")
	HEAD_SHORT=$(tree_commit)
fi

TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
[[ -x $SPERF ]] || die "no SPDK build in SPDK_DIR=$SPDK_DIR: build/bin/spdk_nvme_perf (the initiator) is missing (../shared/tools/build-spdk.sh builds SPDK)"
HAVE_SPDK_TGT=0
[[ -x $TGT ]] && HAVE_SPDK_TGT=1
[[ -n $BASE || $HAVE_SPDK_TGT = 1 ]] || die "no SPDK target in SPDK_DIR=$SPDK_DIR: build/bin/nvmf_tgt is missing (only BASE= runs without it)"
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SPDK_VERSION=$(awk '$1 == "#define" && $2 == "SPDK_VERSION_MAJOR" {ma = $3}
	$1 == "#define" && $2 == "SPDK_VERSION_MINOR" {mi = $3}
	END {if (ma != "") printf "v%d.%02d", ma, mi}' "$SPDK_DIR/include/spdk/version.h" 2>/dev/null || true)
[[ -n $SPDK_VERSION ]] || SPDK_VERSION=$(git -C "$SPDK_DIR" describe --tags 2>/dev/null || echo "unknown version")

echo "== building (release)"
cargo build -q --release --bin farflash --example idle_hosts
FF=$ROOT/target/release/farflash
IDLE_HOSTS=$ROOT/target/release/examples/idle_hosts
# How every farflash target with a RAM namespace is started (BASE's too).
FF_SERVE=(--ram 1G --ram-commit)

# BASE=: farflash at that commit, built in a temporary worktree -> FF_BASE.
if [[ -n $BASE && -n ${BASE_BIN:-} ]]; then
	# A binary already built from BASE (the caller vouches for its commit).
	[[ -x $BASE_BIN ]] || die "BASE_BIN=$BASE_BIN is not an executable"
	FF_BASE=$BASE_BIN
	echo "== farflash at BASE $BASE_SHORT: $BASE_BIN (not rebuilt)"
	if ! "$FF_BASE" serve --help | grep -q -- --ram-commit; then
		FF_SERVE=(--ram 1G)
		echo "  BASE $BASE_SHORT has no --ram-commit: both farflash targets start without it"
	fi
elif [[ -n $BASE ]]; then
	BASE_WT=$TMP/base-src
	remove_base_worktree() {
		[[ ! -d $BASE_WT ]] || git -C "$ROOT" worktree remove --force "$BASE_WT" >/dev/null 2>&1 || true
		cleanup
	}
	trap remove_base_worktree EXIT
	echo "== building farflash at BASE $BASE_SHORT (release, worktree $BASE_WT)"
	git -C "$ROOT" worktree add --quiet --detach "$BASE_WT" "$BASE_REV" ||
		die "git worktree add of BASE=$BASE failed"
	BASE_TARGET=${BASE_TARGET_DIR:-$TMP/base-target}
	build_base() {
		(cd "$BASE_WT" && CARGO_TARGET_DIR=$BASE_TARGET cargo build --release "$@" --bin farflash) \
			>"$TMP/base-build.log" 2>&1
	}
	# Online only when the offline build failed for want of something to download.
	build_base --offline || { grep -q offline "$TMP/base-build.log" && echo "  offline build failed, trying online" && build_base; } ||
		die "BASE=$BASE ($BASE_SHORT) does not build (CARGO_TARGET_DIR=$BASE_TARGET):
$(tail -20 "$TMP/base-build.log")"
	FF_BASE=$BASE_TARGET/release/farflash
	[[ -x $FF_BASE ]] || die "the build of BASE $BASE_SHORT left no $FF_BASE"
	if ! "$FF_BASE" serve --help | grep -q -- --ram-commit; then
		FF_SERVE=(--ram 1G)
		echo "  BASE $BASE_SHORT has no --ram-commit: both farflash targets start without it"
	fi
fi

py() { python3 -c "$1"; }

# ---- targets ------------------------------------------------------------------
spdk_tcp_config "$SPDK_NQN" "$SPDK_PORT" >"$TMP/spdk.json"

TARGET_PID=""
start_target() { # spdk | ff | ffbase | ffalways | ffnull -> TARGET_PID, T_PORT, T_NQN
	local log=$TMP/ff.log
	case $1 in
	spdk)
		log=$TMP/spdk-tgt.log
		"$TGT" -m 0x1 --no-huge -s 2048 -r "$TMP/spdk.sock" --json "$TMP/spdk.json" >"$log" 2>&1 &
		T_PORT=$SPDK_PORT T_NQN=$SPDK_NQN
		;;
	ff | ffbase | ffalways | ffnull)
		local bin=$FF extra=("${FF_SERVE[@]}")
		[[ $1 = ffbase ]] && bin=$FF_BASE
		[[ $1 = ffalways ]] && extra+=(--poll always)
		[[ $1 = ffnull ]] && extra=(--null 1G)
		taskset -c 0 "$bin" serve --listen "127.0.0.1:$PORT" --log-level warn "${extra[@]}" \
			>"$log" 2>&1 &
		T_PORT=$PORT T_NQN=$FF_NQN
		;;
	esac
	target_started "$log"
}

# ---- initiators -----------------------------------------------------------------
# initiator spdk|ff RW BS QD -> "iops" ; the target's CPU ticks over the run in $TMP/ticks
run_initiator() {
	local ini=$1 rw=$2 bs=$3 qd=$4 t0 t1
	t0=$(cpu_ticks "$TARGET_PID")
	if [[ $ini = spdk ]]; then
		local mix=()
		[[ $rw = randrw ]] && mix=(-M 50)
		"$SPERF" --no-huge -s 1024 -c 0x2 -q "$qd" -o "$bs" -w "$rw" "${mix[@]}" -t "$RUNTIME" -a "$WARMUP" \
			-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$T_PORT subnqn:$T_NQN" \
			>"$TMP/sperf.log" 2>&1 || die "spdk_nvme_perf $rw $bs QD $qd failed: $(tail -5 "$TMP/sperf.log")"
		t1=$(cpu_ticks "$TARGET_PID")
		awk '/^Total/ {print $3; found = 1} END {exit !found}' "$TMP/sperf.log" ||
			die "no Total line from spdk_nvme_perf: $(tail -5 "$TMP/sperf.log")"
	else
		"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw "$rw" --bs "$bs" --iodepth "$qd" \
			--runtime "$RUNTIME" --ramp_time "$WARMUP" --cpus-allowed 1 --output-format=json >"$TMP/fperf.json" ||
			die "farflash perf $rw $bs QD $qd failed"
		t1=$(cpu_ticks "$TARGET_PID")
		py "import json; a = json.load(open('$TMP/fperf.json'))['aggregate']; print(a['read']['iops'] + a['write']['iops'])"
	fi
	echo $((t1 - t0)) >"$TMP/ticks"
}

# Preconditions the running target: one sequential 128 KiB write pass over
# its whole namespace (farflash perf with no runtime stops after one pass).
# Both targets keep their data in memory that is only backed on first touch
# (SPDK's --no-huge malloc bdev is shared memory: a page fault, a page
# allocation and a clearing per first access; 25 % of its time at QD 128
# in the first seconds), so without it every run measures page faults.
prefill() {
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw write --bs 128k --iodepth 16 \
		--cpus-allowed 1 --output-format=json >"$TMP/prefill.json" || die "prefill of $T_NQN failed"
}

# One measurement: TARGET INITIATOR RW BS QD -> "iops cpu_us_per_io"
# (run in a subshell, whose exit stops the target it started even on a failure)
measure() {
	trap stop_target EXIT
	start_target "$1"
	[[ $PREFILL = 1 && $1 != ffnull ]] && prefill
	local iops ticks
	iops=$(run_initiator "$2" "$3" "$4" "$5")
	ticks=$(cat "$TMP/ticks")
	stop_target
	# The ticks cover the warm-up too: the rate is taken as steady over both.
	py "print($iops, 1e6 * $ticks / $(getconf CLK_TCK) / max(1.0, $iops * ($RUNTIME + $WARMUP)))"
}

f2() { py "print('%.3f' % $1)"; }
met() { py "print('yes' if $1 else 'no')"; }
# rate ROW IOPS -> "N IOPS", or "N MiB/s" for a row of 128 KiB I/Os
rate() {
	local bs
	read -r _ bs _ <<<"${ROW_ARGS[$1]}"
	if ((bs >= 131072)); then py "print('%.0f MiB/s' % ($2 * $bs / 1048576))"; else py "print('%.0f IOPS' % $2)"; fi
}
# spread "V1 V2 ..." -> "min–max"; spread_pct "V1 V2 ..." -> (max - min) / median in %
spread() { py "v = [float(x) for x in '$1'.split()]; print('%.3f–%.3f' % (min(v), max(v)))"; }
spread_pct() {
	py "import statistics as s; v = [float(x) for x in '$1'.split()]; print('%.0f %%' % (100 * (max(v) - min(v)) / s.median(v)))"
}

# ---- rounds -------------------------------------------------------------------
# Runs per round: target x initiator.
if [[ -n $BASE ]]; then
	# farflash at BASE and at HEAD, and SPDK's target as the anchor.
	COMBOS=("ffbase spdk" "ff spdk")
	[[ $HAVE_SPDK_TGT = 1 ]] && COMBOS+=("spdk spdk")
else
	# "ffnull spdk" is the initiator's ceiling: spdk_nvme_perf against a target
	# that does no storage work (farflash --null, default polling).
	COMBOS=("spdk spdk" "ff spdk" "ffalways spdk" "spdk ff" "ff ff" "ffnull spdk")
fi
declare -A LABEL=([ffbase]=BASE [ff]=HEAD [spdk]=SPDK)

declare -A MED     # MED[row,combo] = median IOPS;  MED[row,combo,cpu] = median CPU µs per I/O
declare -A RATIO   # RATIO[row,name] = median per-round ratio
declare -A ROUNDS_OF # BASE mode: ROUNDS_OF[row] = per-round HEAD / BASE, ROUNDS_OF[row,spdk] = SPDK's IOPS
RUNLOG=() ROUND_ROWS=()
for row in $ROWS; do
	read -r rw bs qd <<<"${ROW_ARGS[$row]}"
	echo "== ${ROW_NAME[$row]}"
	declare -A V=()
	for r in $(seq "$RUNS"); do
		line="${ROW_NAME[$row]} round $r:" order=()
		# The order rotates from round to round (rotated, lib.sh).
		mapfile -t ordered < <(rotated "$r" "${COMBOS[@]}")
		for c in "${ordered[@]}"; do
			read -r tg in <<<"$c"
			read -r iops cpu < <(measure "$tg" "$in" "$rw" "$bs" "$qd")
			V[$c,$r]=$iops V[$c,$r,cpu]=$cpu
			line+=" ${tg}/${in} ${iops%.*} IOPS (target ${cpu:0:5} µs CPU/IO);"
			order+=("${LABEL[$tg]:-$tg}")
		done
		echo "  $line"
		RUNLOG+=("- ${line%;}")
		if [[ -n $BASE ]]; then
			pr=$(py "print(${V[ff spdk,$r]} / ${V[ffbase spdk,$r]})")
			ROUNDS_OF[$row]+=" $pr"
			anchor="–"
			if [[ $HAVE_SPDK_TGT = 1 ]]; then
				ROUNDS_OF[$row,spdk]+=" ${V[spdk spdk,$r]}"
				anchor=$(rate "$row" "${V[spdk spdk,$r]}")
			fi
			ROUND_ROWS+=("| ${ROW_NAME[$row]} | $r | $(
				IFS=,
				echo "${order[*]}"
			) | $(rate "$row" "${V[ffbase spdk,$r]}") | $(rate "$row" "${V[ff spdk,$r]}") | $(f2 "$pr") | $anchor | $(
				py "print('%.2f / %.2f' % (${V[ffbase spdk,$r,cpu]}, ${V[ff spdk,$r,cpu]}))") |")
		fi
	done
	for c in "${COMBOS[@]}"; do
		vals=() cpus=()
		for r in $(seq "$RUNS"); do vals+=("${V[$c,$r]}") cpus+=("${V[$c,$r,cpu]}"); done
		MED[$row,$c]=$(median "${vals[@]}") MED[$row,$c,cpu]=$(median "${cpus[@]}")
	done
	ratio() { # NUMERATOR-COMBO DENOMINATOR-COMBO -> median of per-round ratios
		local rs=() r
		for r in $(seq "$RUNS"); do rs+=("$(py "print(${V[$1,$r]} / ${V[$2,$r]})")"); done
		median "${rs[@]}"
	}
	if [[ -n $BASE ]]; then
		RATIO[$row,commit]=$(ratio "ff spdk" "ffbase spdk")
		if [[ $HAVE_SPDK_TGT = 1 ]]; then
			RATIO[$row,base_spdk]=$(ratio "ffbase spdk" "spdk spdk")
			RATIO[$row,head_spdk]=$(ratio "ff spdk" "spdk spdk")
		fi
	else
		RATIO[$row,tgt]=$(ratio "ff spdk" "spdk spdk")
		RATIO[$row,tgt_always]=$(ratio "ffalways spdk" "spdk spdk")
		RATIO[$row,adaptive]=$(ratio "ff spdk" "ffalways spdk")
		RATIO[$row,perf]=$(ratio "spdk ff" "spdk spdk")
		RATIO[$row,tgt_ffperf]=$(ratio "ff ff" "spdk ff")
		RATIO[$row,ceiling]=$(ratio "ff spdk" "ffnull spdk")
		RATIO[$row,spdk_ceiling]=$(ratio "spdk spdk" "ffnull spdk")
	fi
	unset V
done

# idle_of BINARY -> its idle CPU in % of a core: `serve --ram 64M` (adaptive
# polling) with 4 idle hosts, 30 s (run in a subshell, like measure)
idle_of() {
	trap stop_target EXIT
	taskset -c 0 "$1" serve --ram 64M --listen "127.0.0.1:$PORT" --log-level warn >"$TMP/ff.log" 2>&1 &
	TARGET_PID=$!
	PIDS+=("$TARGET_PID")
	wait_listen "$PORT" "$TARGET_PID" "$TMP/ff.log"
	idle_cpu_pct "$TARGET_PID" "$PORT" "$FF_NQN" "$IDLE_HOSTS"
	stop_target
}
IDLE_PCT="" IDLE_BASE_PCT=""
if [[ $IDLE = 1 ]]; then
	echo "== idle farflash target (adaptive), 4 idle hosts with keep-alives, 30 s"
	if [[ -n $BASE ]]; then
		IDLE_BASE_PCT=$(idle_of "$FF_BASE")
		echo "  BASE: $IDLE_BASE_PCT % of one core"
	fi
	IDLE_PCT=$(idle_of "$FF")
	echo "  = $IDLE_PCT % of one core"
fi

# ---- report -------------------------------------------------------------------
# The lines of both sections on how the targets are started and measured.
prefill_facts() {
	if [[ $PREFILL = 1 ]]; then
		echo "  every target runs alone, started for each run and preconditioned by one sequential 128 KiB"
		echo "  write pass over its whole namespace before the warm-up (no first-touch page faults in the"
		echo "  measurement: SPDK's \`--no-huge\` malloc bdev spends a quarter of its time in them at first)"
	else
		echo "  every target runs alone, started for each run (not preconditioned: PREFILL=0)"
	fi
}
cpu_facts() {
	echo "- target CPU per I/O: the target's user+system time during warm-up and run over the I/Os"
	echo "  the measured rate gives for that time"
	echo "  (this VM exposes no cycle counters); SPDK's reactor spins, so its figure is its wall time"
}
SPDK_TARGET_FACT="\`nvmf_tgt -m 0x1 --no-huge -s 2048\`, TCP transport defaults, 1 GiB malloc bdev"

if [[ -n $BASE ]]; then
	ALL_MET=yes
	TABLE=$(
		echo "| row | BASE $BASE_SHORT | HEAD ${HEAD_SHORT%% *} | HEAD / BASE | per round | ≥ $MIN_RATIO | target CPU µs per I/O, BASE / HEAD | SPDK (anchor) | SPDK's spread over rounds | BASE, HEAD / SPDK |"
		echo "|---|---|---|---|---|---|---|---|---|---|"
		for row in $ROWS; do
			q=${RATIO[$row,commit]} anchor="– | – | –"
			[[ $HAVE_SPDK_TGT = 1 ]] &&
				anchor="$(rate "$row" "${MED[$row,spdk spdk]}") | $(spread_pct "${ROUNDS_OF[$row,spdk]}") | $(f2 "${RATIO[$row,base_spdk]}"), $(f2 "${RATIO[$row,head_spdk]}")"
			echo "| ${ROW_NAME[$row]} | $(rate "$row" "${MED[$row,ffbase spdk]}") | $(rate "$row" "${MED[$row,ff spdk]}") | $(f2 "$q") | $(spread "${ROUNDS_OF[$row]}") | $(met "$q >= $MIN_RATIO") | $(py "print('%.2f / %.2f' % (${MED[$row,ffbase spdk,cpu]}, ${MED[$row,ff spdk,cpu]}))") | $anchor |"
		done
	)
	for row in $ROWS; do [[ $(met "${RATIO[$row,commit]} >= $MIN_RATIO") = yes ]] || ALL_MET=no; done
	ROUND_TABLE=$(
		echo "| row | round | order | BASE | HEAD | HEAD / BASE | SPDK | target CPU µs per I/O, BASE / HEAD |"
		echo "|---|---|---|---|---|---|---|---|"
		printf '%s\n' "${ROUND_ROWS[@]}"
	)
	IDLE_LINE=""
	[[ -n $IDLE_PCT ]] && IDLE_LINE="Idle target (adaptive polling), 4 idle hosts with keep-alives, 30 s: BASE $IDLE_BASE_PCT %, HEAD $IDLE_PCT % of a core."
	SUMMARY="HEAD $HEAD_SHORT / BASE $BASE_SHORT ≥ $MIN_RATIO on every row: $ALL_MET"
	echo
	echo "$TABLE"
	echo
	echo "$ROUND_TABLE"
	echo
	[[ -n $IDLE_LINE ]] && echo "$IDLE_LINE" && echo
	echo "$SUMMARY"
	if [[ -n $OUT ]]; then
		{
			echo "## farflash at $HEAD_SHORT against $BASE_SHORT"
			echo
			echo "Written by \`BASE=$BASE_SHORT benches/vs-spdk.sh\`; do not edit by hand. Re-run it to refresh."
			echo
			run_facts "; SPDK $SPDK_VERSION"
			echo "- HEAD: the working tree at $HEAD_SHORT; BASE: $(git -C "$ROOT" log -1 --format='%h of %cs' "$BASE_REV"),"
			if [[ -n ${BASE_BIN:-} ]]; then
				echo "  BASE's binary given (BASE_BIN, \`cargo build --release\` of that commit, not rebuilt by this run)"
			else
				echo "  built in a temporary worktree; both \`cargo build --release\`"
			fi
			echo "- farflash targets, both started the same way: \`taskset -c 0 farflash serve ${FF_SERVE[*]}\` with"
			echo "  its defaults otherwise (adaptive polling, one event loop per allowed CPU)"
			[[ ${FF_SERVE[*]} = *--ram-commit* ]] ||
				echo "  (no \`--ram-commit\`: BASE has not got it; before it, \`--ram\` was committed as written)"
			if [[ $HAVE_SPDK_TGT = 1 ]]; then
				echo "- SPDK target, the anchor (how much the machine itself drifted): $SPDK_TARGET_FACT (512-byte blocks)"
			else
				echo "- no SPDK target (SPDK_DIR has no build/bin/nvmf_tgt): no anchor"
			fi
			echo "- initiator on core 1: \`spdk_nvme_perf --no-huge -s 1024 -c 0x2 -t $RUNTIME -a $WARMUP\` (measures after the warm-up);"
			prefill_facts
			echo "- $RUNS rounds; in a round each row runs its ${#COMBOS[@]} targets back to back, in an order that"
			echo "  rotates from round to round; HEAD / BASE is the median of the per-round ratios (\"per round\":"
			echo "  their range), rates and CPU medians over rounds; bar: HEAD / BASE ≥ $MIN_RATIO (MIN_RATIO)"
			cpu_facts
			echo
			echo "$TABLE"
			echo
			echo "$SUMMARY."
			echo
			[[ -n $IDLE_LINE ]] && echo "$IDLE_LINE" && echo
			echo "### Per round"
			echo
			echo "$ROUND_TABLE"
		} | write_section "$OUT" vs-commit
		echo
		echo "wrote the vs-commit section of $OUT"
	fi
	exit 0
fi

TABLE=$(
	echo "| row | SPDK target, IOPS | farflash target, IOPS | farflash / SPDK | bar | met | always-poll / SPDK | adaptive / always (≥ 0.95) | target CPU µs per I/O, SPDK / farflash | initiator ceiling, IOPS | SPDK, farflash / ceiling |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|"
	for row in $ROWS; do
		bar=${BAR[$row]:-1.0}
		r=${RATIO[$row,tgt]} a=${RATIO[$row,adaptive]}
		echo "| ${ROW_NAME[$row]} | $(py "print('%.0f' % ${MED[$row,spdk spdk]})") | $(py "print('%.0f' % ${MED[$row,ff spdk]})") | $(f2 "$r") | ≥ $bar | $(met "$r >= $bar") | $(f2 "${RATIO[$row,tgt_always]}") | $(f2 "$a") $(met "$a >= 0.95") | $(py "print('%.2f / %.2f' % (${MED[$row,spdk spdk,cpu]}, ${MED[$row,ff spdk,cpu]}))") | $(py "print('%.0f' % ${MED[$row,ffnull spdk]})") | $(f2 "${RATIO[$row,spdk_ceiling]}"), $(f2 "${RATIO[$row,ceiling]}") |"
	done
)
TABLE2=$(
	echo "| row | spdk_nvme_perf → SPDK, IOPS | farflash perf → SPDK, IOPS | farflash perf / spdk_nvme_perf (≥ 1.0) | farflash perf → farflash, IOPS | farflash / SPDK target under farflash perf |"
	echo "|---|---|---|---|---|---|"
	for row in $ROWS; do
		p=${RATIO[$row,perf]}
		echo "| ${ROW_NAME[$row]} | $(py "print('%.0f' % ${MED[$row,spdk spdk]})") | $(py "print('%.0f' % ${MED[$row,spdk ff]})") | $(f2 "$p") $(met "$p >= 1.0") | $(py "print('%.0f' % ${MED[$row,ff ff]})") | $(f2 "${RATIO[$row,tgt_ffperf]}") |"
	done
)
echo
echo "$TABLE"
echo
echo "$TABLE2"
[[ -n $IDLE_PCT ]] && echo && echo "idle target, 4 idle hosts: $IDLE_PCT % of a core"

if [[ -n $OUT ]]; then
	{
		echo "## farflash's target against SPDK's"
		echo
		echo "Written by \`benches/vs-spdk.sh\`; do not edit by hand. Re-run it to refresh."
		echo
		run_facts "; SPDK $SPDK_VERSION"
		echo "- SPDK target: $SPDK_TARGET_FACT"
		echo "  (512-byte blocks); farflash target: \`taskset -c 0 farflash serve --ram 1G --ram-commit\` with its defaults"
		echo "  (adaptive polling, one event loop per allowed CPU), and \`--poll always\` for the always-poll column"
		echo "- initiators on core 1: \`spdk_nvme_perf --no-huge -s 1024 -c 0x2 -t $RUNTIME -a $WARMUP\`, \`farflash perf"
		echo "  --cpus-allowed 1 --runtime $RUNTIME --ramp_time $WARMUP\` (busy-poll; both measure after the warm-up);"
		prefill_facts
		echo "- $RUNS rounds; in a round each row runs its six pairings back to back, in an order that"
		echo "  rotates from round to round; ratios are medians of the per-round ratios, IOPS and CPU"
		echo "  medians over rounds"
		echo "- initiator ceiling: spdk_nvme_perf against \`farflash serve --null 1G\` (no storage"
		echo "  work): about what one initiator core can drive at all; a target near it is"
		echo "  limited by the initiator, and no target can beat SPDK's by more than ceiling / SPDK"
		cpu_facts
		echo
		echo "### Under SPDK's initiator (spdk_nvme_perf)"
		echo
		echo "$TABLE"
		echo
		echo "### The initiators against SPDK's target, and both targets under farflash perf"
		echo
		echo "$TABLE2"
		echo
		if [[ -n $IDLE_PCT ]]; then
			echo "Idle farflash target (adaptive polling), 4 idle hosts connected with keep-alives, 30 s:"
			echo "$IDLE_PCT % of a core (bar: < 1 %: $(met "$IDLE_PCT < 1"))."
			echo
		fi
		echo "### Per round"
		echo
		printf '%s\n' "${RUNLOG[@]}"
	} | write_section "$OUT" vs-spdk.sh
	echo
	echo "wrote the vs-spdk.sh section of $OUT"
fi
