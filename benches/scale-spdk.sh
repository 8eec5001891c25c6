#!/usr/bin/env bash
# benches/scale-spdk.sh -- issue 33's scale configuration scripted against
# SPDK's nvmf_tgt, by hand, to set beside benches/scale.sh's farflash rows.
# Not run by CI; SPDK is a benchmark peer only.
#
#   SPDK_DIR=/work/anchors/spdk bash benches/scale-spdk.sh
#   SUBS=16 NSPER=16 ADDS=100 CTRLS=16 IDLE_S=5 OUT= bash benches/scale-spdk.sh
#
# As an SPDK user would script it: SUBS subsystems x NSPER null bdevs
# (1 GiB, 4 KiB blocks) in one JSON configuration given at start
# (`nvmf_tgt --json`, SPDK's save_config order; max_namespaces = NSPER, as
# SPDK's default is 32 per subsystem; a listener on 127.0.0.1:PORT for each
# subsystem and for the discovery subsystem); the management calls through
# SPDK's own JSON-RPC client (python/spdk/rpc/client.py, what rpc.py uses),
# one after another on one connection (rpc.py reading commands on stdin does
# the same). nvmf_tgt runs as vs-spdk.sh runs it: -m 0x1 --no-huge -s MEM.
#   - start: exec to the listener accepting (every 2 ms), to `farflash
#     discover` listing the subsystems (every 10 ms), to framework_wait_init
#     answering; VmRSS and open fds then (--no-huge: DPDK's memory is plain
#     shared memory, counted in VmRSS as far as it was touched);
#   - save_config (the whole JSON, to a file); ROUNDS starts (medians) of
#     the one-bdev baseline, BIG_ROUNDS (1) of the big one (minutes each);
#   - ADDS namespaces added to a new subsystem of the loaded target: each a
#     bdev_null_create and an nvmf_subsystem_add_ns;
#   - CTRLS controllers (admin + 2 I/O queues, KATO 5 s) on one subsystem
#     with examples/ka_probe (which times every Keep Alive): the target's CPU
#     over IDLE_S seconds, VmRSS per queue, Keep Alive round trips, and then
#     KA_SAVES save_config calls beside them (the slow work of SPDK issue
#     3578), on the loaded target as it runs (reactor polling, SPDK's
#     default); INTERRUPT=1 then starts it again under --interrupt-mode.
#
# Writes the scale-spdk.sh section of docs/benchmarks.md (OUT= to change,
# empty to skip). Environment: SPDK_DIR (../anchors/spdk), SUBS (256), NSPER
# (64), ADDS (1000), CTRLS (1024), IDLE_S (30), ROUNDS (3), BIG_ROUNDS (1),
# KA_SAVES (1: one takes minutes with SPDK's client at 16,384 bdevs), MEM (4096, MB for -s), PORT (4710), TIMEOUT (1800 s a start
# may take), INTERRUPT (0), BUILD (1).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
NAME=scale-spdk.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
SUBS=${SUBS:-256}
NSPER=${NSPER:-64}
ADDS=${ADDS:-1000}
CTRLS=${CTRLS:-1024}
IDLE_S=${IDLE_S:-30}
ROUNDS=${ROUNDS:-3}
BIG_ROUNDS=${BIG_ROUNDS:-1}
KA_SAVES=${KA_SAVES:-1}
MEM=${MEM:-4096}
PORT=${PORT:-4710}
TIMEOUT=${TIMEOUT:-1800}
INTERRUPT=${INTERRUPT:-0}
OUT=${OUT-docs/benchmarks.md}
NULLS=$((SUBS * NSPER))
SOCK=$TMP/spdk.sock
PY=("python3" "$ROOT/benches/scale.py")
EX=$ROOT/target/release/examples
FF=$ROOT/target/release/farflash
TGT=$SPDK_DIR/build/bin/nvmf_tgt
[[ -x $TGT ]] || die "no SPDK target: $TGT is missing (../shared/tools/build-spdk.sh builds SPDK)"
export SPDK_PY=$SPDK_DIR/python
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
SPDK_VERSION=$(cat "$SPDK_DIR/VERSION" 2>/dev/null || git -C "$SPDK_DIR" describe --tags 2>/dev/null || echo unknown)

if [[ ${BUILD:-1} = 1 ]]; then
	(cd "$ROOT" && cargo build -q --release --bin farflash --example ka_probe)
fi

now_ns() { date +%s%N; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }
py() { python3 -c "$1"; }

# start JSON SUBS [EXTRA...]: nvmf_tgt on JSON; sets SPID, START_MS,
# SERVE_MS, READY_MS, RECORDS (as scale.sh's start). SPDK listens and
# answers discovery while its configuration still loads: serving is when
# `farflash discover` lists all SUBS subsystems.
start() {
	local t0 t1 t2 deadline waiter json=$1 subs=$2 n
	shift 2
	rm -f "$SOCK" "$TMP/waiting"
	"${PY[@]}" spdk-wait "$SOCK" "$TIMEOUT" "$TMP/waiting" >"$TMP/ready" &
	waiter=$!
	until [[ -e $TMP/waiting ]]; do sleep 0.01; done
	t0=$(now_ns)
	"$TGT" -m 0x1 --no-huge -s "$MEM" -r "$SOCK" --json "$json" "$@" >"$TMP/tgt.log" 2>&1 &
	SPID=$!
	PIDS+=("$SPID")
	deadline=$((t0 + TIMEOUT * 1000000000))
	until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
		kill -0 "$SPID" 2>/dev/null || die "nvmf_tgt exited: $(tail -5 "$TMP/tgt.log")"
		(($(now_ns) < deadline)) || die "nvmf_tgt did not listen within $TIMEOUT s"
		sleep 0.002
	done
	t1=$(now_ns)
	until "$FF" discover -a 127.0.0.1 -s "$PORT" -k 0 >"$TMP/discover.out" 2>&1 &&
		n=$(grep -c '^subnqn: *nqn.2016-06.io.spdk.scale:' "$TMP/discover.out") && ((n >= subs)); do
		kill -0 "$SPID" 2>/dev/null || die "nvmf_tgt exited: $(tail -5 "$TMP/tgt.log")"
		(($(now_ns) < deadline)) || die "nvmf_tgt did not answer a discovery within $TIMEOUT s: $(tail -3 "$TMP/discover.out")"
		sleep 0.01
	done
	t2=$(now_ns)
	wait "$waiter" || die "the RPC socket did not answer"
	START_MS=$(((t1 - t0) / 1000000))
	SERVE_MS=$(((t2 - t0) / 1000000))
	READY_MS=$((($(cat "$TMP/ready") - t0) / 1000000))
	RECORDS=$(sed -n 's/^Discovery Log Number of Records \([0-9]*\).*/\1/p' "$TMP/discover.out")
}
stop() {
	kill -TERM "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
	PIDS=("${PIDS[@]/$SPID/}")
	SPID=""
}
rpc_ms() {
	local r
	r=$("${PY[@]}" spdk-rpc "$SOCK" "$1" "$2" "${3:-}")
	[[ $r == *" ok" ]] || die "$1: $r"
	echo "${r%% *}"
}

"${PY[@]}" spdk-gen "$TMP/one.json" 1 1 "$PORT"
"${PY[@]}" spdk-gen "$TMP/null.json" "$SUBS" "$NSPER" "$PORT"

# measure JSON ROUNDS SUBS: medians into M (start, serving, ready, VmRSS, fds,
# save_config); the last start keeps running.
measure() {
	local s=() v=() r=() m=() f=() c=() i
	for i in $(seq "$2"); do
		start "$1" "$3"
		s+=("$START_MS") v+=("$SERVE_MS") r+=("$READY_MS") m+=("$(rss_kib "$SPID")") f+=("$(fds "$SPID")")
		c+=("$(rpc_ms save_config '{}' "$TMP/saved.json")")
		echo "  start $i: listening after $START_MS ms, discovery answered after $SERVE_MS ms ($RECORDS records), RPC after $READY_MS ms, VmRSS ${m[-1]} KiB, ${f[-1]} fds, save_config ${c[-1]} ms" >&2
		((i == $2)) || stop
	done
	M=("$(median "${s[@]}")" "$(median "${v[@]}")" "$(median "${r[@]}")" "$(median "${m[@]}")" "$(median "${f[@]}")" "$(median "${c[@]}")")
}

echo "== SPDK $SPDK_VERSION: one null bdev (the baseline)" >&2
measure "$TMP/one.json" "$ROUNDS" 1
B=("${M[@]}")
stop
echo "== SPDK: $SUBS x $NSPER = $NULLS null bdevs from --json" >&2
measure "$TMP/null.json" "$BIG_ROUNDS" "$SUBS"
N=("${M[@]}")
SAVED_KIB=$(($(stat -c %s "$TMP/saved.json") / 1024))
read -r ADD_S ADD_FIRST ADD_LAST < <("${PY[@]}" spdk-adds "$SOCK" "nqn.2016-06.io.spdk.scale:adds" "$ADDS")
echo "  $ADDS namespaces added (bdev_null_create + nvmf_subsystem_add_ns): $ADD_S s (first 100: $ADD_FIRST ms each, last 100: $ADD_LAST ms each)" >&2

# ctrls MODE [EXTRA...]: CTRLS controllers with ka_probe on the loaded
# target; sets CTRL_ROW.
ctrls() {
	local mode=$1 rss0 rss1 c0 c1 pct per t0 conn_s
	shift
	echo "== SPDK ($mode): $CTRLS controllers (admin + 2 I/O queues, KATO 5 s) with Keep Alives timed" >&2
	# The loaded target still runs for the first; another mode starts anew.
	[[ -n ${SPID:-} ]] || start "$TMP/null.json" "$SUBS" "$@"
	rss0=$(rss_kib "$SPID")
	rm -f "$TMP/ka.in"
	mkfifo "$TMP/ka.in"
	t0=$(now_ns)
	"$EX/ka_probe" "127.0.0.1:$PORT" "$(printf 'nqn.2016-06.io.spdk.scale:s%05d' 0)" "$CTRLS" 2 16 <"$TMP/ka.in" >"$TMP/ka.out" 2>"$TMP/ka.err" &
	KPID=$!
	PIDS+=("$KPID")
	exec 5>"$TMP/ka.in"
	until grep -q connected "$TMP/ka.out"; do
		kill -0 "$KPID" 2>/dev/null || die "ka_probe failed: $(cat "$TMP/ka.err")"
		sleep 0.1
	done
	conn_s=$(py "print('%.1f' % (($(now_ns) - $t0) / 1e9))")
	echo "mark idle" >&5
	sleep 2
	rss1=$(rss_kib "$SPID")
	per=$(py "print('%.1f' % (($rss1 - $rss0) / $CTRLS / 3))")
	c0=$(cpu_ticks "$SPID")
	sleep "$IDLE_S"
	c1=$(cpu_ticks "$SPID")
	pct=$(py "print('%.2f' % (100.0 * ($c1 - $c0) / $(getconf CLK_TCK) / $IDLE_S))")
	echo "mark save_config" >&5
	local saves=() i
	for i in $(seq "$KA_SAVES"); do saves+=("$(rpc_ms save_config '{}' "$TMP/saved.json")"); done
	echo "end" >&5
	exec 5>&-
	wait "$KPID" || true
	local idle save
	idle=$(sed -n 's/^window idle: //p' "$TMP/ka.out")
	save=$(sed -n 's/^window save_config: //p' "$TMP/ka.out")
	local dropped
	dropped=$(grep -ci "keep.alive\|keep_alive\|kato" "$TMP/tgt.log" || true)
	echo "  connected in $conn_s s; VmRSS $rss0 -> $rss1 KiB ($per KiB per queue); CPU $pct % over $IDLE_S s" >&2
	echo "  Keep Alive, idle: $idle" >&2
	echo "  Keep Alive, $KA_SAVES save_config ($(median "${saves[@]}") ms each): $save" >&2
	echo "  target log lines about keep-alive: $dropped" >&2
	stop
	CTRL_ROWS+=("| SPDK $mode | $conn_s s | +$(((rss1 - rss0) / 1024)) MiB, $per KiB per queue | $pct % | idle: $idle | $KA_SAVES save_config ($(median "${saves[@]}") ms each) beside: $save | $dropped |")
}
CTRL_ROWS=()
if ((CTRLS > 0)); then
	ctrls "reactor polling (default)"
	[[ $INTERRUPT != 1 ]] || ctrls "--interrupt-mode" --interrupt-mode
fi

mib() { py "print('%.1f' % ($1 / 1024))"; }
kib_per() { py "print('%.1f' % (($1 - ${B[3]}) / $2))"; }
[[ -n $OUT ]] || exit 0
{
	echo "## The same scale configuration against SPDK's nvmf_tgt (benches/scale-spdk.sh)"
	echo
	echo "Written by \`benches/scale-spdk.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts "; SPDK $SPDK_VERSION"
	echo "- target: \`nvmf_tgt -m 0x1 --no-huge -s $MEM --json FILE\` (one reactor), null bdevs of 1 GiB"
	echo "  (4 KiB blocks), max_namespaces $NSPER per subsystem (SPDK's default is 32), a TCP listener per"
	echo "  subsystem and one for discovery; calls through SPDK's JSON-RPC client, one after another;"
	echo "  starts: medians of $ROUNDS (the big configuration: $BIG_ROUNDS), measured as benches/scale.sh measures farflash's (management ="
	echo "  framework_wait_init answering); VmRSS includes DPDK's --no-huge memory as far as touched"
	echo
	echo "| configuration | listening (ms) | serving (ms) | management (ms) | VmRSS (MiB) | memory per namespace (KiB) | open fds | save_config (ms) |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|"
	echo "| 1 null bdev | ${B[0]} | ${B[1]} | ${B[2]} | $(mib "${B[3]}") | | ${B[4]} | ${B[5]} |"
	echo "| $SUBS x $NSPER = $NULLS null bdevs | ${N[0]} | ${N[1]} | ${N[2]} | $(mib "${N[3]}") | $(kib_per "${N[3]}" "$NULLS") | ${N[4]} | ${N[5]} (a $SAVED_KIB KiB JSON) |"
	echo
	echo "$ADDS namespaces added to a new subsystem of the loaded target (bdev_null_create and"
	echo "nvmf_subsystem_add_ns each): $ADD_S s, the first 100 $ADD_FIRST ms each, the last 100 $ADD_LAST ms each."
	if ((${#CTRL_ROWS[@]} > 0)); then
		echo
		echo "$CTRLS controllers x 3 queues (examples/ka_probe: Keep Alive every 2.5 s per controller, each timed"
		echo "on the host; late = completion - when it was due) on one subsystem of the loaded target:"
		echo
		echo "| reactor | connected in | memory | target CPU over $IDLE_S s | Keep Alive, idle | Keep Alive beside save_config | target log lines on keep-alive |"
		echo "|---|---|---|---|---|---|---|"
		printf '%s\n' "${CTRL_ROWS[@]}"
	fi
} | tee /dev/stderr | write_section "$OUT" scale-spdk.sh
echo "wrote the scale-spdk.sh section of $OUT"
