#!/usr/bin/env bash
# benches/scale.sh -- issue 33: one target with many subsystems, namespaces
# and controllers.
#
#   bash benches/scale.sh                                   # the issue's sizes
#   SUBS=16 NSPER=16 FILES=256 ADDS=100 DSUBS=64 CTRLS=16 ROUNDS=1 IDLE_S=5 OUT=/tmp/x.md bash benches/scale.sh
#
# Null namespaces: SUBS subsystems x NSPER namespaces (256 x 64 = 16,384),
# written as a TOML file (benches/scale.py gen-null) and built through the
# management API (subsystem_create, namespace_add); file namespaces: FILES
# sparse 1 MiB files in a temporary directory, 64 per subsystem. For each:
#   - start: exec to the listener accepting a TCP connection (polled every
#     2 ms), to `farflash discover` answering (every 10 ms) and to the
#     management socket answering; VmRSS and open file descriptors
#     (/proc/PID/fd) once discovery answered; farflash's own memory per
#     namespace = (VmRSS - VmRSS of a target with one null namespace) / N;
#   - save_config (to a file) and load_config (the saved file: nothing
#     changes; and the file into a target holding one namespace: everything
#     is created), as the management client sees them;
#   - ADDS namespace_add calls, one after another, into a new subsystem of
#     the loaded target: total, mean of the first and of the last 100;
#   - the whole null configuration through the API from a one-namespace
#     target (stopped after BUILD_BUDGET seconds, default 120);
#   - the file namespaces under `ulimit -Sn 1024` (the usual default soft
#     limit) and `ulimit -n 1024` (soft and hard): started, or the error.
# Discovery: `farflash discover` against DSUBS (1024) subsystems must list
# them all (a log of 1 MiB, read in pieces).
# Controllers (CTRLS, default 1024; 0 skips): examples/idle_hosts connects
# CTRLS controllers (admin + 2 I/O queues, KATO 5 s) to one subsystem of the
# loaded null target: VmRSS per idle queue, the target's CPU over IDLE_S
# seconds (default 30), keep-alive expiries (must stay 0), and
# examples/connect_time's connect (admin + 2 I/O queues) beside them.
# Keep-alives beside slow work (KA_SLOW=1, default; 0 skips; needs CTRLS >
# 0): examples/ka_probe connects CTRLS controllers (admin + 2 I/O queues,
# KATO 5 s) and times every Keep Alive on the host (each controller every
# 2.5 s) while the target runs, KA_WINDOW_S (10) seconds each, one after
# another: nothing; save_config of the null configuration, repeated; a burst
# of namespace_add into the controllers' subsystem, then namespace_remove of
# each;
# connects with DH-HMAC-CHAP ffdhe8192 (the DH runs on the offload thread);
# KA_DIRTY (256 KiB) written into each of KA_FILES (1024) files behind file
# namespaces, then a Flush of each (examples/flush_all), repeated. Per
# window: Keep Alive round trip p50/p99/max, the latest completion after its
# due time, failures, and the target's keep_alive_expiries (must stay 0).
#
# Writes its section of docs/benchmarks.md (OUT= to change, empty to skip).
# Environment: BIN (target/release/farflash; BUILD=0 skips the build), SUBS
# (256), NSPER (64), FILES (4096), ADDS (1000), DSUBS (1024), CTRLS (1024), KA_SLOW (1),
# KA_WINDOW_S (10), KA_FILES (1024), KA_DIRTY (262144), ROUNDS (3:
# starts per configuration, medians), IDLE_S (30), BUILD_BUDGET (120), PORT
# (4550), TIMEOUT (120, seconds a start may take).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
NAME=scale.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

BIN=${BIN:-$ROOT/target/release/farflash}
SUBS=${SUBS:-256}
NSPER=${NSPER:-64}
FILES=${FILES:-4096}
ADDS=${ADDS:-1000}
CTRLS=${CTRLS:-1024}
DSUBS=${DSUBS:-1024}
ROUNDS=${ROUNDS:-3}
IDLE_S=${IDLE_S:-30}
BUILD_BUDGET=${BUILD_BUDGET:-120}
PORT=${PORT:-4550}
TIMEOUT=${TIMEOUT:-120}
KA_SLOW=${KA_SLOW:-1}
KA_WINDOW_S=${KA_WINDOW_S:-10}
KA_FILES=${KA_FILES:-1024}
KA_DIRTY=${KA_DIRTY:-262144}
OUT=${OUT-docs/benchmarks.md}
NULLS=$((SUBS * NSPER))
SOCK=$TMP/rpc.sock
PY=("python3" "$ROOT/benches/scale.py")
EX=$ROOT/target/release/examples

if [[ ${BUILD:-1} = 1 ]]; then
	(cd "$ROOT" && cargo build -q --release --bin farflash --example idle_hosts --example connect_time \
		--example ka_probe --example flush_all)
fi
[[ -x $BIN ]] || die "$BIN is not an executable"

py() { python3 -c "$1"; }
now_ns() { date +%s%N; }
rss_kib() { awk '/^VmRSS/ {print $2}' "/proc/$1/status"; }
fds() { find "/proc/$1/fd" -mindepth 1 -maxdepth 1 | wc -l; }

# start TOML: starts the target on TOML; sets SPID, START_MS (exec to the
# listener accepting), SERVE_MS (exec to `farflash discover` answering;
# RECORDS: the records it listed) and READY_MS (exec to the management
# socket answering). Returns 1, with the log in $TMP/serve.log, if it exits.
start() {
	local t0 t1 t2 deadline waiter
	rm -f "$SOCK" "$TMP/waiting"
	"${PY[@]}" wait "$SOCK" "$TIMEOUT" "$TMP/waiting" >"$TMP/ready" &
	waiter=$!
	until [[ -e $TMP/waiting ]]; do sleep 0.01; done
	t0=$(now_ns)
	"$BIN" serve --config "$1" --rpc-socket "$SOCK" --log-level warn >"$TMP/serve.log" 2>&1 &
	SPID=$!
	PIDS+=("$SPID")
	deadline=$((t0 + TIMEOUT * 1000000000))
	until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
		if ! kill -0 "$SPID" 2>/dev/null; then
			wait "$SPID" || true
			kill "$waiter" 2>/dev/null || true
			wait "$waiter" 2>/dev/null || true
			return 1
		fi
		(($(now_ns) < deadline)) || die "the target did not listen within $TIMEOUT s"
		sleep 0.002
	done
	t1=$(now_ns)
	until "$BIN" discover -a 127.0.0.1 -s "$PORT" -k 0 >"$TMP/discover.out" 2>&1; do
		kill -0 "$SPID" 2>/dev/null || return 1
		(($(now_ns) < deadline)) || die "the target did not answer a discovery within $TIMEOUT s"
		sleep 0.01
	done
	t2=$(now_ns)
	wait "$waiter" || die "the management socket did not answer"
	START_MS=$(((t1 - t0) / 1000000))
	SERVE_MS=$(((t2 - t0) / 1000000))
	READY_MS=$((($(cat "$TMP/ready") - t0) / 1000000))
	RECORDS=$(sed -n 's/^Discovery Log Number of Records \([0-9]*\).*/\1/p' "$TMP/discover.out")
}

stop() {
	kill -TERM "$SPID" 2>/dev/null || true
	wait "$SPID" 2>/dev/null || true
	PIDS=("${PIDS[@]/$SPID/}")
}

# rpc METHOD JSON: "MS ok" or "MS error CODE MESSAGE".
rpc() { "${PY[@]}" rpc "$SOCK" "$1" "$2"; }
rpc_ms() {
	local r
	r=$(rpc "$1" "$2")
	[[ $r == *" ok" ]] || die "$1: $r"
	echo "${r%% *}"
}

# measure TOML ROUNDS: sets M (median start, serving, management, VmRSS, fds over
# ROUNDS starts); the last start keeps running (SPID).
measure() {
	local s=() v=() r=() m=() f=() i
	for i in $(seq "$2"); do
		start "$1" || die "the target did not start: $(tail -5 "$TMP/serve.log")"
		s+=("$START_MS") v+=("$SERVE_MS") r+=("$READY_MS") m+=("$(rss_kib "$SPID")") f+=("$(fds "$SPID")")
		echo "  start $i: listening after $START_MS ms, discovery answered after $SERVE_MS ms ($RECORDS records), management after $READY_MS ms, VmRSS ${m[-1]} KiB, ${f[-1]} fds" >&2
		((i == $2)) || stop
	done
	M=("$(median "${s[@]}")" "$(median "${v[@]}")" "$(median "${r[@]}")" "$(median "${m[@]}")" "$(median "${f[@]}")")
}

cat >"$TMP/base.toml" <<EOF
listen = ["127.0.0.1:$PORT"]
[[subsystem]]
nqn = "nqn.2026-11.io.farflash.scale:base"
  [[subsystem.namespace]]
  backend = "null"
  size = "1G"
EOF
"${PY[@]}" gen-null "$TMP/null.toml" "$SUBS" "$NSPER" "$PORT"

echo "== one null namespace (the baseline of memory and descriptors)" >&2
measure "$TMP/base.toml" "$ROUNDS"
B_START=${M[0]} B_SERVE=${M[1]} B_READY=${M[2]} B_RSS=${M[3]} B_FDS=${M[4]}
stop

echo "== $SUBS x $NSPER = $NULLS null namespaces from a TOML file" >&2
measure "$TMP/null.toml" "$ROUNDS"
N_START=${M[0]} N_SERVE=${M[1]} N_READY=${M[2]} N_RSS=${M[3]} N_FDS=${M[4]}
N_SAVE=$(rpc_ms save_config "{\"path\": \"$TMP/saved.toml\"}")
N_LOAD=$(rpc_ms load_config "{\"path\": \"$TMP/saved.toml\"}")
echo "  save_config $N_SAVE ms, load_config (unchanged) $N_LOAD ms" >&2
read -r ADD_S ADD_FIRST ADD_LAST < <("${PY[@]}" adds "$SOCK" "nqn.2026-11.io.farflash.scale:adds" "$ADDS")
echo "  $ADDS namespace_add: $ADD_S s (first 100: $ADD_FIRST ms each, last 100: $ADD_LAST ms each)" >&2

CTRL_LINE=""
if ((CTRLS > 0)); then
	echo "== $CTRLS controllers (admin + 2 I/O queues, KATO 5 s) on that target" >&2
	NQN0="nqn.2026-11.io.farflash.scale:s00000"
	rss0=$(rss_kib "$SPID")
	hold=$((IDLE_S + 60 + CTRLS / 20))
	t0=$(now_ns)
	"$EX/idle_hosts" "127.0.0.1:$PORT" "$NQN0" "$CTRLS" 2 "$hold" >"$TMP/idle.log" 2>&1 &
	IDLE_PID=$!
	PIDS+=("$IDLE_PID")
	until grep -q connected "$TMP/idle.log"; do
		kill -0 "$IDLE_PID" 2>/dev/null || die "idle hosts failed: $(cat "$TMP/idle.log")"
		sleep 0.1
	done
	CONNECT_ALL_S=$(py "print('%.1f' % (($(now_ns) - $t0) / 1e9))")
	sleep 2
	rss1=$(rss_kib "$SPID")
	QUEUES=$((CTRLS * 3))
	PER_QUEUE=$(py "print('%.1f' % (($rss1 - $rss0) / $QUEUES))")
	c0=$(cpu_ticks "$SPID")
	sleep "$IDLE_S"
	c1=$(cpu_ticks "$SPID")
	IDLE_PCT=$(py "print('%.2f' % (100.0 * ($c1 - $c0) / $(getconf CLK_TCK) / $IDLE_S))")
	NEXT=$("$EX/connect_time" "127.0.0.1:$PORT" "$NQN0" "nqn.2014-08.org.nvmexpress:uuid:00000000-0000-0000-0000-999999999999" - - 5 2)
	EXPIRED=$("${PY[@]}" field "$SOCK" stats keep_alive_expiries)
	kill -TERM "$IDLE_PID" 2>/dev/null || true
	wait "$IDLE_PID" 2>/dev/null || true
	echo "  connected in $CONNECT_ALL_S s; VmRSS $rss0 -> $rss1 KiB ($PER_QUEUE KiB per queue); idle CPU $IDLE_PCT %; keep-alive expiries $EXPIRED; next connect: $NEXT" >&2
	CTRL_LINE="| $CTRLS controllers x 3 queues, connected in $CONNECT_ALL_S s | VmRSS +$(((rss1 - rss0) / 1024)) MiB, $PER_QUEUE KiB per idle queue | idle CPU $IDLE_PCT % of a core over $IDLE_S s | keep-alive expiries $EXPIRED | connect beside them (admin + 2 I/O queues): ${NEXT} |"
fi
stop

KA_ROWS=()
if [[ $KA_SLOW = 1 ]] && ((CTRLS > 0)); then
	echo "== keep-alives of $CTRLS controllers beside slow work" >&2
	# The null configuration, a subsystem whose one host must authenticate
	# with ffdhe8192, and one of KA_FILES file namespaces.
	AUTH_HOST=nqn.2014-08.org.nvmexpress:uuid:a0c0b0e0-0000-4000-8000-0000000033a0
	AUTH_NQN=nqn.2026-11.io.farflash.scale:auth
	FILES_NQN=nqn.2026-11.io.farflash.scale:f00000
	SECRET=$("$BIN" gen-dhchap-key -m 1 -n "$AUTH_HOST")
	"${PY[@]}" gen-file "$TMP/kafiles.toml" "$TMP/kafiles" "$KA_FILES" "$KA_FILES" "$PORT"
	{
		cat "$TMP/null.toml"
		echo
		echo "[[subsystem]]"
		echo "nqn = '$AUTH_NQN'"
		echo "[[subsystem.host]]"
		echo "nqn = '$AUTH_HOST'"
		echo "dhchap_key = '$SECRET'"
		echo "dhchap_hash = ['sha512']"
		echo "dhchap_dhgroup = ['ffdhe8192']"
		echo "[[subsystem.namespace]]"
		echo "backend = 'null'"
		echo "size = '1G'"
		tail -n +2 "$TMP/kafiles.toml" | sed "s/nqn.2026-11.io.farflash.scale:s00000/$FILES_NQN/"
	} >"$TMP/ka.toml"
	start "$TMP/ka.toml" || die "the target did not start: $(tail -5 "$TMP/serve.log")"
	NQN0="nqn.2026-11.io.farflash.scale:s00000"
	rm -f "$TMP/ka.in"
	mkfifo "$TMP/ka.in"
	"$EX/ka_probe" "127.0.0.1:$PORT" "$NQN0" "$CTRLS" 2 16 <"$TMP/ka.in" >"$TMP/ka.out" 2>"$TMP/ka.err" &
	KPID=$!
	PIDS+=("$KPID")
	exec 5>"$TMP/ka.in"
	until grep -q connected "$TMP/ka.out"; do
		kill -0 "$KPID" 2>/dev/null || die "ka_probe failed: $(cat "$TMP/ka.err")"
		sleep 0.1
	done
	expiries() { "${PY[@]}" field "$SOCK" stats keep_alive_expiries; }
	# window NAME WHAT: closes the window before it (the probe prints its line)
	# and opens NAME, whose slow work WHAT describes (for the row).
	KA_NAMES=() KA_WHAT=() KA_EXP=()
	window() {
		echo "mark $1" >&5
		KA_NAMES+=("$1") KA_EXP+=("$(expiries)")
	}
	window idle
	sleep "$KA_WINDOW_S"
	KA_WHAT+=("none ($KA_WINDOW_S s)")

	window save_config
	t0=$(now_ns) saves=()
	while (($(now_ns) - t0 < KA_WINDOW_S * 1000000000)); do
		saves+=("$(rpc_ms save_config "{\"path\": \"$TMP/kasaved.toml\"}")")
	done
	KA_WHAT+=("${#saves[@]} save_config of the $NULLS-namespace target, one after another: median $(py "print('%.1f' % $(median "${saves[@]}"))") ms, longest $(printf '%s\n' "${saves[@]}" | sort -g | tail -1) ms")

	window namespace_add
	read -r b_n b_s b_max < <("${PY[@]}" burst-add "$SOCK" "$NQN0" "$KA_WINDOW_S" 4000 "$TMP/burst.nsids")
	KA_WHAT+=("$b_n namespace_add (null), one after another, into the controllers' subsystem (a namespace-change AEN to each of its $CTRLS controllers) in $b_s s; slowest call $b_max ms")

	window namespace_remove
	read -r b_n b_s b_max < <("${PY[@]}" burst-remove "$SOCK" "$NQN0" "$TMP/burst.nsids")
	KA_WHAT+=("namespace_remove of those $b_n, one after another, in $b_s s; slowest call $b_max ms")

	window auth
	t0=$(now_ns) a_n=0 a_p50=()
	while (($(now_ns) - t0 < KA_WINDOW_S * 1000000000)); do
		"$EX/connect_time" "127.0.0.1:$PORT" "$AUTH_NQN" "$AUTH_HOST" "$SECRET" - 4 2 >"$TMP/ct1" 2>&1 &
		c1=$!
		"$EX/connect_time" "127.0.0.1:$PORT" "$AUTH_NQN" "$AUTH_HOST" "$SECRET" - 4 2 >"$TMP/ct2" 2>&1 ||
			die "connect_time: $(cat "$TMP/ct2")"
		wait "$c1" || die "connect_time: $(cat "$TMP/ct1")"
		a_n=$((a_n + 8))
		r2=$(cat "$TMP/ct2")
		a_p50+=("$(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$r2")")
	done
	KA_WHAT+=("$a_n connects with DH-HMAC-CHAP (SHA-512, ffdhe8192; admin + 2 I/O queues, each authenticated), two processes at a time: median of the connect p50s $(median "${a_p50[@]}") ms")

	window flush
	t0=$(now_ns) f_n=0 f_max=0
	while (($(now_ns) - t0 < KA_WINDOW_S * 1000000000)); do
		"${PY[@]}" dirty "$TMP/kafiles" "$KA_DIRTY"
		r=$("$EX/flush_all" "127.0.0.1:$PORT" "$FILES_NQN" 32 1) || die "flush_all failed"
		f_n=$((f_n + 1))
		m=$(sed -n 's/.*max_ms=\([0-9.]*\).*/\1/p' <<<"$r")
		f_max=$(py "print(max($f_max, $m))")
	done
	KA_WHAT+=("$f_n passes of: $((KA_DIRTY / 1024)) KiB written into each of the $KA_FILES files (page cache, no sync), then a Flush of each of the $KA_FILES file namespaces, 32 at a time; slowest Flush $f_max ms")
	echo "end" >&5
	exec 5>&-
	KA_EXP+=("$(expiries)")
	wait "$KPID" || echo "  ka_probe reported failed Keep Alives: $(grep -h 'failures=[1-9]' "$TMP/ka.out" | head -3)" >&2
	for i in "${!KA_NAMES[@]}"; do
		n=${KA_NAMES[$i]}
		line=$(sed -n "s/^window $n: //p" "$TMP/ka.out")
		[[ -n $line ]] || die "ka_probe printed no window $n: $(cat "$TMP/ka.out" "$TMP/ka.err")"
		exp=$((KA_EXP[i + 1] - KA_EXP[i]))
		echo "  $n: ${KA_WHAT[$i]}; Keep Alives: $line; target keep-alive expiries: $exp" >&2
		kv() { sed -n "s/.*\b$1=\([^ ]*\).*/\1/p" <<<"$line"; }
		KA_ROWS+=("| $n | ${KA_WHAT[$i]} | $(kv kas) | $(kv p50_ms) | $(kv p99_ms) | $(kv max_ms) | $(kv late_max_ms) | $(kv failures) | $exp |")
	done
	stop
fi

echo "== discovery of $DSUBS subsystems (one null namespace each)" >&2
"${PY[@]}" gen-null "$TMP/disc.toml" "$DSUBS" 1 "$PORT"
start "$TMP/disc.toml" || die "the target did not start: $(tail -5 "$TMP/serve.log")"
t0=$(now_ns)
"$BIN" discover -a 127.0.0.1 -s "$PORT" -k 0 >"$TMP/discover.out" || die "discover failed: $(tail -3 "$TMP/discover.out")"
D_MS=$((($(now_ns) - t0) / 1000000))
D_RECORDS=$(sed -n 's/^Discovery Log Number of Records \([0-9]*\).*/\1/p' "$TMP/discover.out")
D_LISTED=$(grep -c '^subnqn: *nqn.2026-11.io.farflash.scale:' "$TMP/discover.out" || true)
echo "  farflash discover: $D_RECORDS records, $D_LISTED subsystems listed, in $D_MS ms" >&2
((D_LISTED == DSUBS)) || die "farflash discover listed $D_LISTED of $DSUBS subsystems"
stop

echo "== load_config of the $NULLS null namespaces into a one-namespace target" >&2
start "$TMP/base.toml" || die "the target did not start: $(tail -5 "$TMP/serve.log")"
N_LOAD_NEW=$(rpc_ms load_config "{\"path\": \"$TMP/null.toml\"}")
echo "  $N_LOAD_NEW ms" >&2
stop

echo "== the $NULLS null namespaces through the API (budget $BUILD_BUDGET s)" >&2
start "$TMP/base.toml" || die "the target did not start: $(tail -5 "$TMP/serve.log")"
read -r API_DONE API_TOTAL API_S API_LAST < <("${PY[@]}" build "$SOCK" "$SUBS" "$NSPER" "$BUILD_BUDGET")
echo "  $API_DONE of $API_TOTAL namespaces in $API_S s (the last namespace_add: $API_LAST ms)" >&2
stop

echo "== $FILES file namespaces (1 MiB sparse files, 64 per subsystem)" >&2
"${PY[@]}" gen-file "$TMP/file.toml" "$TMP/files" "$FILES" 64 "$PORT"
measure "$TMP/file.toml" "$ROUNDS"
F_START=${M[0]} F_SERVE=${M[1]} F_READY=${M[2]} F_RSS=${M[3]} F_FDS=${M[4]}
F_SAVE=$(rpc_ms save_config "{\"path\": \"$TMP/fsaved.toml\"}")
F_LOAD=$(rpc_ms load_config "{\"path\": \"$TMP/fsaved.toml\"}")
echo "  save_config $F_SAVE ms, load_config (unchanged) $F_LOAD ms" >&2
stop

# limited N: starts the file configuration under `ulimit N` (a subshell);
# prints what happened.
limited() {
	local what
	what=$(
		ulimit "$1" 1024
		if start "$TMP/file.toml"; then
			echo "started: listening after $START_MS ms, $(fds "$SPID") fds"
			w=$(sed -n 's/.* WARN //p' "$TMP/serve.log" | head -1 | cut -c1-240)
			[[ -z $w ]] || echo "; warned: $w"
			stop
		else
			echo "refused: $({ grep -m1 'error' "$TMP/serve.log" || tail -1 "$TMP/serve.log"; } | head -c 400)"
		fi
	)
	echo "$what" | tr '\n' ' ' | sed 's/ *$//; s/|/\\|/g'
}
echo "== $FILES file namespaces under ulimit -Sn 1024, then -n 1024 (soft and hard)" >&2
SOFT=$(limited -Sn)
echo "  soft 1024: $SOFT" >&2
HARD=$(limited -n)
echo "  hard 1024: $HARD" >&2

kib_per() { py "print('%.1f' % (($1 - $B_RSS) / $2))"; }
mib() { py "print('%.1f' % ($1 / 1024))"; }
[[ -n $OUT ]] || exit 0
{
	echo "## Scale: thousands of namespaces, subsystems and controllers (benches/scale.sh)"
	echo
	echo "Written by \`benches/scale.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts
	echo "- target: \`farflash serve --config FILE\` (2 event-loop threads), release build; null namespaces"
	echo "  of 1 GiB, file namespaces on sparse 1 MiB files in a temporary directory, 64 per subsystem;"
	echo "  starts: medians of $ROUNDS; listening = exec to the listener accepting (polled every 2 ms),"
	echo "  serving = exec to \`farflash discover\` listing the subsystems (polled every 10 ms; VmRSS"
	echo "  and fds read then), management = exec to the management socket answering (polled every"
	echo "  2 ms, beside); own memory per namespace = (VmRSS - VmRSS of"
	echo "  a one-namespace target, $(mib "$B_RSS") MiB) / namespaces; times of the management client"
	echo "  (benches/scale.py, one request after another on one connection)"
	echo
	echo "| configuration | listening (ms) | serving (ms) | management (ms) | VmRSS (MiB) | own memory per namespace (KiB) | open fds | save_config (ms) | load_config unchanged (ms) |"
	echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
	echo "| 1 null namespace | $B_START | $B_SERVE | $B_READY | $(mib "$B_RSS") | | $B_FDS | | |"
	echo "| $SUBS x $NSPER = $NULLS null namespaces | $N_START | $N_SERVE | $N_READY | $(mib "$N_RSS") | $(kib_per "$N_RSS" "$NULLS") | $N_FDS | $N_SAVE | $N_LOAD |"
	echo "| $FILES file namespaces | $F_START | $F_SERVE | $F_READY | $(mib "$F_RSS") | $(kib_per "$F_RSS" "$FILES") | $F_FDS | $F_SAVE | $F_LOAD |"
	echo
	echo "| management | result |"
	echo "|---|---|"
	echo "| \`farflash discover\` against $DSUBS subsystems (one listener) | $D_RECORDS records, every subsystem listed, in $D_MS ms (the process included) |"
	echo "| load_config of the $NULLS null namespaces into a one-namespace target | $N_LOAD_NEW ms |"
	echo "| $ADDS namespace_add into a new subsystem of the loaded target | $ADD_S s: the first 100 $ADD_FIRST ms each, the last 100 $ADD_LAST ms each |"
	echo "| the $NULLS null namespaces through the API (subsystem_create, namespace_add; stopped after $BUILD_BUDGET s) | $API_DONE of $API_TOTAL in $API_S s, the last namespace_add $API_LAST ms |"
	echo "| $FILES file namespaces under \`ulimit -Sn 1024\` | $SOFT |"
	echo "| $FILES file namespaces under \`ulimit -n 1024\` (soft and hard) | $HARD |"
	if [[ -n $CTRL_LINE ]]; then
		echo
		echo "| controllers | memory | idle CPU | keep-alive | connect |"
		echo "|---|---|---|---|---|"
		echo "$CTRL_LINE"
	fi
	if ((${#KA_ROWS[@]} > 0)); then
		echo
		echo "Keep-alives beside slow work: $CTRLS controllers x 3 queues (KATO 5 s) on one subsystem of the"
		echo "$NULLS-namespace target (plus a subsystem whose host authenticates with ffdhe8192 and one of"
		echo "$KA_FILES file namespaces), each sending its own Keep Alive every 2.5 s from examples/ka_probe"
		echo "(16 threads, phases spread over the period), every Keep Alive timed on the host: round trip"
		echo "(send to completion) and late = completion - when it was due; failures: Keep Alives answered"
		echo "with an error or not within 10 s; expiries: the target's keep_alive_expiries (\`stats\`) over"
		echo "the window. Each kind of slow work runs for about $KA_WINDOW_S s, one after another:"
		echo
		echo "| window | slow work on the target | Keep Alives | p50 (ms) | p99 (ms) | max (ms) | late, max (ms) | failures | target keep-alive expiries |"
		echo "|---|---|---:|---:|---:|---:|---:|---:|---:|"
		printf '%s\n' "${KA_ROWS[@]}"
	fi
	echo
	echo "This is a shared 2-core VM whose speed changes by up to 2x from one minute to the next"
	echo "(see the load averages above): compare rows of one run, not runs."
} | tee /dev/stderr | write_section "$OUT" scale.sh
echo "wrote the scale.sh section of $OUT"
