#!/usr/bin/env bash
# benches/auth-connect.sh -- connect time with NVMe in-band authentication
# (DH-HMAC-CHAP, SHA-256) against without: one farflash serve (release)
# with four subsystems, none / null group / ffdhe2048 / ffdhe8192, and
# examples/connect_time connecting ITER times to each, in ROUNDS rounds so
# that every mode sees the same machine. A connect is: admin queue
# (Connect, authentication, properties, Identify, Number of Queues) plus
# IOQ I/O queues (each Connect + authentication), timed until all are up.
# Writes its section of docs/benchmarks.md. Run on a quiet machine:
#
#   bash benches/auth-connect.sh           # ROUNDS=5 ITER=20 IOQ=2
#   PROFILE=debug ROUNDS=1 ITER=2 OUT=/tmp/x.md bash benches/auth-connect.sh  # smoke test
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-5} ITER=${ITER:-20} IOQ=${IOQ:-2} PORT=${PORT:-4531}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
NAME=auth-connect.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
# PROFILE=debug: a quick functional run (its numbers mean nothing).
if [[ ${PROFILE:-release} = release ]]; then
	cargo build -q --release --bin farflash --example connect_time
else
	cargo build -q --bin farflash --example connect_time
fi
BIN=$ROOT/target/${PROFILE:-release}
FF=$BIN/farflash
CT=$BIN/examples/connect_time
HOST=nqn.2014-08.org.nvmexpress:uuid:a0c0b0e0-0000-4000-8000-00000000c0ce
PREFIX=nqn.2026-11.io.farflash:bench-auth
SECRET=$("$FF" gen-dhchap-key -m 1 -n "$HOST")
MODES="none null ffdhe2048 ffdhe8192"

{
	echo "listen = ['127.0.0.1:$PORT']"
	for m in $MODES; do
		echo "[[subsystem]]"
		echo "nqn = '$PREFIX:$m'"
		if [[ $m != none ]]; then
			echo "[[subsystem.host]]"
			echo "nqn = '$HOST'"
			echo "dhchap_key = '$SECRET'"
			echo "dhchap_hash = ['sha256']"
			echo "dhchap_dhgroup = ['$m']"
		fi
		echo "[[subsystem.namespace]]"
		echo "backend = 'null'"
		echo "size = '1G'"
	done
} >"$TMP/auth.toml"
"$FF" serve --config "$TMP/auth.toml" --log-level warn >"$TMP/serve.log" 2>&1 &
PIDS+=($!)
wait_listen "$PORT"

declare -A P50
for r in $(seq "$ROUNDS"); do
	for m in $MODES; do
		s=$SECRET
		[[ $m != none ]] || s=-
		line=$("$CT" "127.0.0.1:$PORT" "$PREFIX:$m" "$HOST" "$s" - "$ITER" "$IOQ")
		echo "round $r $m: $line"
		P50[$m]+=" $(sed -n 's/.*p50_ms=\([0-9.]*\).*/\1/p' <<<"$line")"
	done
done
! grep -qiE 'error|panic' "$TMP/serve.log" || die "the target logged errors: $(cat "$TMP/serve.log")"

{
	echo "## Connect time with in-band authentication (benches/auth-connect.sh)"
	echo
	run_facts
	echo "- $ROUNDS rounds of $ITER connects per mode; a connect = admin queue + $IOQ I/O queues, each authenticated (SHA-256, unidirectional); farflash host and target on loopback, ${PROFILE:-release} build"
	echo
	echo "| mode | median of the rounds' p50 connect time (ms) | vs none |"
	echo "|---|---|---|"
	base=$(median ${P50[none]})
	for m in $MODES; do
		v=$(median ${P50[$m]})
		echo "| $m | $v | $(python3 -c "print(f'{$v / $base:.2f}x')") |"
	done
} | write_section "$OUT" auth-connect.sh
echo "wrote the auth-connect.sh section of $OUT"
