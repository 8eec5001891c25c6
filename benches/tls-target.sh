#!/usr/bin/env bash
# benches/tls-target.sh -- NVMe/TCP over TLS 1.3 against plaintext on the
# same farflash target (issue 32): one `farflash serve` (release) with a
# `tls:` listener and a plaintext one on a null namespace, the same
# subsystem behind both; `farflash perf` (its `--tls --tls-key`, the host
# side of issue 32) against each, back to back, in ROUNDS rounds so both
# see the same machine. Rows: 4 KiB randread QD 1 and QD 32, 128 KiB read
# QD 8. Per row: median IOPS of each, TLS/plain ratio, and the target's CPU
# per I/O (user + system ticks of the serve process over the run / I/Os),
# and the host's: farflash perf's own user + system time over its measured
# window (`usr_cpu` + `sys_cpu` of its JSON) / I/Os; perf busy-polls, so its
# figure is its wall time per I/O.
#
# Writes its section of docs/benchmarks.md. Run on a quiet machine (it
# refuses to measure when the 1-minute load is above LOAD_MAX):
#
#   bash benches/tls-target.sh                          # ROUNDS=5 RUNTIME=10
#   PROFILE=debug ROUNDS=1 RUNTIME=2 OUT=/tmp/x.md bash benches/tls-target.sh   # smoke test
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-10} WARMUP=${WARMUP:-2}
PORT_TLS=${PORT_TLS:-4541} PORT_PLAIN=${PORT_PLAIN:-4542}
LOAD_MAX=${LOAD_MAX:-0.5}
OUT=${OUT:-$ROOT/docs/benchmarks.md}
NAME=tls-target.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

load=$(cut -d' ' -f1 /proc/loadavg)
if [[ ${PROFILE:-release} = release ]] && python3 -c "import sys; sys.exit(not float('$load') > float('$LOAD_MAX'))"; then
	die "load average $load is above LOAD_MAX=$LOAD_MAX: not measuring on a busy machine"
fi
if [[ ${PROFILE:-release} = release ]]; then
	cargo build -q --release --bin farflash
else
	cargo build -q --bin farflash
fi
FF=$ROOT/target/${PROFILE:-release}/farflash
"$FF" perf --help 2>&1 | grep -q -- '--tls' ||
	die "farflash perf has no --tls yet (the host side of issue 32): nothing to measure TLS with"

HOST=nqn.2014-08.org.nvmexpress:uuid:a0c0b0e0-0000-4000-8000-0000000071a5
NQN=nqn.2026-11.io.farflash:bench-tls
KEY=$("$FF" gen-tls-key -m 1 -n "$HOST" -c "$NQN" | grep "^NVMeTLSkey-" | tail -1)
[[ $KEY = NVMeTLSkey-1:* ]] || die "gen-tls-key printed no key: $KEY"
KEYFILE=$TMP/host.psk
(umask 077 && echo "$KEY" >"$KEYFILE")
{
	echo "listen = ['tls:127.0.0.1:$PORT_TLS', '127.0.0.1:$PORT_PLAIN']"
	echo "[transport]"
	echo "threads = 1"
	echo "cpus_allowed = '0'"
	echo "[[subsystem]]"
	echo "nqn = '$NQN'"
	echo "[[subsystem.host]]"
	echo "nqn = '$HOST'"
	echo "tls_key = '$KEYFILE'"
	echo "[[subsystem.namespace]]"
	echo "backend = 'null'"
	echo "size = '1G'"
} >"$TMP/tls.toml"
"$FF" serve --config "$TMP/tls.toml" --log-level warn >"$TMP/serve.log" 2>&1 &
TARGET_PID=$!
PIDS+=("$TARGET_PID")
wait_listen "$PORT_PLAIN" "$TARGET_PID" "$TMP/serve.log"

ROWS=("randread 4k 1" "randread 4k 32" "read 128k 8")
# measure MODE RW BS QD -> "iops target_cpu_us_per_io host_cpu_us_per_io"
measure() {
	local mode=$1 rw=$2 bs=$3 qd=$4 port=$PORT_PLAIN t0 t1 iops
	local extra=()
	if [[ $mode = tls ]]; then
		port=$PORT_TLS
		extra=(--tls --tls-key "$KEYFILE")
	fi
	t0=$(cpu_ticks "$TARGET_PID")
	"$FF" perf -t tcp -a 127.0.0.1 -s "$port" -n "$NQN" -q "$HOST" "${extra[@]}" --rw "$rw" --bs "$bs" \
		--iodepth "$qd" --runtime "$RUNTIME" --ramp_time "$WARMUP" --cpus-allowed 1 \
		--output-format=json >"$TMP/perf.json" 2>"$TMP/perf.err" ||
		die "farflash perf $mode $rw $bs QD $qd failed: $(tail -5 "$TMP/perf.err")"
	t1=$(cpu_ticks "$TARGET_PID")
	python3 -c "
import json
a = json.load(open('$TMP/perf.json'))['aggregate']
iops = a['read']['iops'] + a['write']['iops']; ticks = $t1 - $t0; hz = $(getconf CLK_TCK)
ios = iops * ($RUNTIME + $WARMUP)
host = 1e6 * (a['usr_cpu'] + a['sys_cpu']) / 100 / iops if iops else 0
print('%.0f %.2f %.2f' % (iops, 1e6 * ticks / hz / ios if ios else 0, host))"
}

declare -A V
for r in $(seq "$ROUNDS"); do
	for row in "${ROWS[@]}"; do
		read -r rw bs qd <<<"$row"
		# Alternate which goes first, round by round.
		if ((r % 2)); then order="plain tls"; else order="tls plain"; fi
		for m in $order; do
			read -r iops cpu hcpu < <(measure "$m" "$rw" "$bs" "$qd")
			V[$row,$m,$r]=$iops V[$row,$m,cpu,$r]=$cpu V[$row,$m,hcpu,$r]=$hcpu
			echo "round $r $row $m: $iops IOPS, target $cpu, host $hcpu µs CPU per I/O" >&2
		done
	done
done

{
	echo "## NVMe/TCP over TLS against plaintext, same target (benches/tls-target.sh)"
	echo
	run_facts
	echo "- $ROUNDS rounds of ${RUNTIME} s (+${WARMUP} s ramp) per row and mode, order alternating; null namespace; target one event loop on CPU 0 (adaptive polling), farflash perf on CPU 1 (busy-poll: its CPU per I/O is its wall time per I/O); medians"
	echo
	echo "| row | plain IOPS | TLS IOPS | TLS/plain | target CPU µs/I/O plain | TLS | host CPU µs/I/O plain | TLS |"
	echo "|---|---|---|---|---|---|---|---|"
	for row in "${ROWS[@]}"; do
		p=() t=() pc=() tc=() ph=() th=()
		for r in $(seq "$ROUNDS"); do
			p+=("${V[$row,plain,$r]}") t+=("${V[$row,tls,$r]}")
			pc+=("${V[$row,plain,cpu,$r]}") tc+=("${V[$row,tls,cpu,$r]}")
			ph+=("${V[$row,plain,hcpu,$r]}") th+=("${V[$row,tls,hcpu,$r]}")
		done
		mp=$(median "${p[@]}") mt=$(median "${t[@]}")
		ratio=$(python3 -c "print('%.3f' % ($mt / $mp if $mp else 0))")
		echo "| $row | ${mp%.*} | ${mt%.*} | $ratio | $(median "${pc[@]}") | $(median "${tc[@]}") | $(median "${ph[@]}") | $(median "${th[@]}") |"
	done
} | write_section "$OUT" tls-target
echo "wrote the tls-target section of $OUT" >&2
