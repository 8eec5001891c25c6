# shellcheck shell=bash
# benches/lib.sh -- shared by the benchmark scripts (sourced, not run).
# Expects ROOT (the repository) and NAME (the script's name, for messages).
# Scripts that measure the kernel-TCP floor set NEED_FLOOR=1 before sourcing.

die() { echo "$NAME: $*" >&2; exit 1; }

# A scratch directory and the background processes to stop on exit.
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT

if [[ ${NEED_FLOOR:-0} = 1 ]]; then
	LIMITS=$ROOT/../shared/limits/tcp_rr.c
	[[ -f $LIMITS ]] || die "$LIMITS is missing: the kernel-TCP floor cannot be measured (see ../shared/limits/README.md)"
	# tcp_rr, built from ../shared/limits into $TMP.
	TCP_RR=$TMP/tcp_rr
	gcc -O2 -o "$TCP_RR" "$LIMITS"
fi

# The load when the script started, for run_facts.
LOAD_START=$(cut -d' ' -f1-3 /proc/loadavg)

# The working tree's commit, short, and "(with uncommitted changes)" after it
# when the code differs from it.
tree_commit() {
	local commit dirty
	commit=$(git -C "$ROOT" rev-parse --short HEAD 2>/dev/null || echo unknown)
	dirty=$(git -C "$ROOT" diff --quiet HEAD -- crates src benches examples 2>/dev/null || echo " (with uncommitted changes)")
	echo "$commit$dirty"
}

# run_facts [COMMIT-SUFFIX]: the "- date", "- machine" and "- commit" lines
# that head a section of docs/benchmarks.md (SUFFIX follows the commit).
run_facts() {
	local cpu
	cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -1)
	echo "- date: $(date -u '+%Y-%m-%d %H:%M UTC')"
	echo "- machine: $(nproc) CPUs, ${cpu:-unknown CPU}, $(uname -r);" \
		"load average $LOAD_START at the start, $(cut -d' ' -f1-3 /proc/loadavg) at the end"
	echo "- commit: $(tree_commit)${1:-}"
}

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# wait_listen PORT [PID LOG]: waits until something accepts on 127.0.0.1:PORT;
# with PID, fails at once (with LOG's tail) when that process has exited.
wait_listen() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		[[ -z ${2:-} ]] || kill -0 "$2" 2>/dev/null ||
			die "the process meant to listen on $1 exited:${3:+ $(tail -5 "$3")}"
		sleep 0.05
	done
	die "nothing listens on $1"
}

# CPU time (user + system) of a process so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }

# write_section FILE KEY: replaces the part of FILE between the markers
# "<!-- KEY -->" and "<!-- /KEY -->" with standard input (appends the
# section if FILE has none), so that several scripts share one document.
write_section() {
	cat >"$TMP/section.body"
	python3 - "$1" "$2" "$TMP/section.body" "$TMP/section.new" <<'PY'
import os, sys
path, key, src, tmp = sys.argv[1:]
body = open(src).read().rstrip("\n") + "\n"
begin, end = f"<!-- {key} -->\n", f"<!-- /{key} -->\n"
old = open(path).read() if os.path.exists(path) else ""
if begin in old and end in old:
    a, rest = old.split(begin, 1)
    _, b = rest.split(end, 1)
    new = a + begin + body + end + b
else:
    new = old + ("\n" if old and not old.endswith("\n\n") else "") + begin + body + end
open(tmp, "w").write(new)
os.replace(tmp, path)
PY
}

# idle_cpu_pct TARGET_PID PORT NQN IDLE_HOSTS_BINARY [COUNT [QUEUES]]: connects
# COUNT (4) idle hosts (examples/idle_hosts: admin + QUEUES (1) I/O queues each,
# keep-alives) to the target, waits until all are connected, lets them settle
# 5 s, and prints the target's CPU over the next 30 s in % of one core.
idle_cpu_pct() {
	local target=$1 count=${5:-4} queues=${6:-1} hosts t0 t1
	"$4" "127.0.0.1:$2" "$3" "$count" "$queues" "$((40 + count / 10))" >"$TMP/idle.log" 2>&1 &
	hosts=$!
	PIDS+=("$hosts")
	until grep -q connected "$TMP/idle.log"; do
		kill -0 "$hosts" 2>/dev/null || die "idle hosts failed: $(cat "$TMP/idle.log")"
		sleep 0.1
	done
	sleep 5
	t0=$(cpu_ticks "$target")
	sleep 30
	t1=$(cpu_ticks "$target")
	wait "$hosts" || die "idle hosts failed: $(cat "$TMP/idle.log")"
	echo "  target CPU: $((t1 - t0)) ticks in 30 s" >&2
	python3 -c "print('%.2f' % (100.0 * ($t1 - $t0) / $(getconf CLK_TCK) / 30))"
}

# For scripts that start one target at a time (vs-spdk.sh, tls-vs-spdk.sh):
# target_started LOG, right after starting it in the background (`... &`),
# records it as TARGET_PID and waits until it listens on T_PORT; stop_target
# stops it (SIGTERM) and waits for it.
target_started() {
	TARGET_PID=$!
	PIDS+=("$TARGET_PID")
	wait_listen "$T_PORT" "$TARGET_PID" "$1"
}
stop_target() {
	kill -TERM "$TARGET_PID" 2>/dev/null || true
	wait "$TARGET_PID" 2>/dev/null || true
	TARGET_PID=""
}

# spdk_tcp_config NQN PORT: an nvmf_tgt JSON configuration (stdout) with the
# TCP transport at its defaults and one subsystem NQN, open to any host, of
# one 1 GiB malloc bdev (512-byte blocks), listening on 127.0.0.1:PORT.
spdk_tcp_config() {
	cat <<EOF
{"subsystems": [
 {"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 2097152, "block_size": 512}}]},
 {"subsystem": "nvmf", "config": [
  {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
  {"method": "nvmf_create_subsystem", "params": {"nqn": "$1", "allow_any_host": true, "serial_number": "SPDK0001"}},
  {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$1", "namespace": {"bdev_name": "M0"}}},
  {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$1",
    "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$2"}}}]}]}
EOF
}

# rotated ROUND ITEM...: the items, one per line, in the order of round ROUND
# (1-based): each round starts one further along, so that no configuration
# always runs first (right after SPDK's target has freed its memory, say).
rotated() {
	local r=$1 k
	shift
	for k in $(seq 0 $(($# - 1))); do
		local i=$(((k + r - 1) % $# + 1))
		echo "${!i}"
	done
}
