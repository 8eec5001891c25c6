#!/usr/bin/env bash
# benches/ats.sh -- fused Compare and Write under contention (issue 43):
# starts `farflash serve` (release, RAM namespace, 2 event-loop threads) on
# 127.0.0.1, then runs benches/ats.rs: HOSTS hosts (2) hammer test-and-set
# on LBA 0 with 4 KiB writes to the LBAs beside it at QD (32), PAIRS pairs
# each (5,000,000: 10 million over 2 hosts), failing on a torn block or a lost increment; then the
# QD 1 cost of a fused pair against a plain write. Prints its results; the
# numbers belong in docs/benchmarks.md ("Fused Compare and Write").
#
#   bash benches/ats.sh                  # the full run
#   PAIRS=2000 QD1_OPS=500 bash benches/ats.sh   # a smoke run
#
# Environment: PAIRS, QD, HOSTS, BLOCK (512), QD1_OPS (20000), PORT (4530),
# PROFILE (release; dev for a quick build).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
PORT=${PORT:-4530} PROFILE=${PROFILE:-release}
NQN=nqn.2026-11.io.farflash:ats
BLOCK=${BLOCK:-512}
dir=release
[[ $PROFILE = release ]] || dir=debug
cargo build -q --profile "$PROFILE" --bin farflash
bin=$ROOT/target/$dir/farflash
log=$(mktemp)
"$bin" serve --listen "127.0.0.1:$PORT" --nqn "$NQN" --ram 1G --block-size "$BLOCK" \
	--threads 2 --log-level warn >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
for _ in $(seq 300); do
	grep -q "listening on" "$log" && break
	kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "ats.sh: farflash serve exited" >&2; exit 1; }
	sleep 0.1
done
grep -q "listening on" "$log" || { cat "$log"; echo "ats.sh: farflash serve did not start" >&2; exit 1; }
FARFLASH_ATS_ADDR=127.0.0.1:$PORT FARFLASH_ATS_NQN=$NQN BLOCK=$BLOCK \
	cargo bench -q --profile "$PROFILE" --bench ats
