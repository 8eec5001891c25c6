#!/usr/bin/env bash
# scripts/durability-loop.sh [N] [--release]
#
# Runs N (default 200) crash-and-verify iterations of the durability test
# (tests/reliability_durability.rs, the ignored `durability_loop`): a host
# writes random LBAs of a file namespace while `farflash serve` is killed at
# a random moment (SIGKILL; every third iteration SIGTERM), then the target
# is restarted on the same file and every block is checked against what the
# host knew was acknowledged / made durable (Flush or FUA).
#
# --release builds farflash in release mode (more writes per iteration).
# FARFLASH_DURABILITY_SEED=<seed> replays a run (each run prints its seed;
# iteration i uses seed + i). Namespace files go to target/tmp and are
# removed after each successful iteration; a failing one is kept and named.
#
# Prints one line per iteration and a summary; exits non-zero on the first
# violation.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"

N=200
PROFILE=()
for arg in "$@"; do
	case $arg in
	--release) PROFILE=(--release) ;;
	-h | --help)
		sed -n '2,17p' "$0" | sed 's/^# \{0,1\}//'
		exit 0
		;;
	*[!0-9]* | '')
		echo "usage: $0 [N] [--release]" >&2
		exit 2
		;;
	*) N=$arg ;;
	esac
done

LOG=$(mktemp "${TMPDIR:-/tmp}/durability-loop.XXXXXX.log")
echo "durability loop: $N iterations${PROFILE:+ (release)}; full output in $LOG"
T0=$(date +%s)
set +e
FARFLASH_DURABILITY_ITERS=$N cargo test -q "${PROFILE[@]}" --test reliability_durability \
	-- --ignored --exact durability_loop --nocapture 2>&1 | tee "$LOG" |
	grep --line-buffered -E '^(  seed|durability summary|FARFLASH_DURABILITY_SEED=)|panicked|failed'
RC=${PIPESTATUS[0]}
set -e
echo "----"
if [[ $RC = 0 ]] && grep -q '^durability summary' "$LOG"; then
	grep '^durability summary' "$LOG"
	echo "RESULT: PASS ($N iterations, $(($(date +%s) - T0))s)"
	rm -f "$LOG"
else
	grep -A3 'durability iteration' "$LOG" || tail -n 40 "$LOG"
	echo "RESULT: FAIL (exit $RC); full output in $LOG"
	exit 1
fi
