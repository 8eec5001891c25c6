# shellcheck shell=bash
# benches/lib.sh -- shared by the benchmark scripts (sourced, not run).
# Expects ROOT (the repository) and NAME (the script's name, for messages).

die() { echo "$NAME: $*" >&2; exit 1; }

LIMITS=$ROOT/../shared/limits/tcp_rr.c
[[ -f $LIMITS ]] || die "$LIMITS is missing: the kernel-TCP floor cannot be measured (see ../shared/limits/README.md)"

# A scratch directory and the background processes to stop on exit.
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
	rm -rf "$TMP"
}
trap cleanup EXIT

# tcp_rr, built from ../shared/limits into $TMP.
TCP_RR=$TMP/tcp_rr
gcc -O2 -o "$TCP_RR" "$LIMITS"

median() { python3 -c 'import sys,statistics; print(statistics.median(float(x) for x in sys.argv[1:]))' "$@"; }

# Waits until something accepts on 127.0.0.1:PORT.
wait_listen() {
	for _ in $(seq 200); do
		(exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null && return 0
		sleep 0.05
	done
	die "nothing listens on $1"
}
