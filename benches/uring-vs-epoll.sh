#!/usr/bin/env bash
# benches/uring-vs-epoll.sh -- would io_uring sockets beat busy-polled
# recv + send here? The same tcp_rr client (../shared/limits/tcp_rr.c,
# SPIN=1, core 1) against two servers on core 0 that answer alike: tcp_rr's
# own (busy-polled non-blocking recv, then send: two syscalls per round
# trip, the shape of farflash's engine) and examples/uring_rr.rs (send and
# the next recv in one io_uring_enter, completions busy-polled). 72-byte
# requests, 4120-byte responses (a 4 KiB read's C2HData); QD 1, 32, 128;
# ROUNDS (5) alternating rounds of RUNTIME (2) s; medians of the per-round
# ratios uring / epoll-style.
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-2} PORT=${PORT:-5303}
NAME=uring-vs-epoll.sh
NEED_FLOOR=1
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
cargo build -q --release --example uring_rr
URING=$ROOT/target/release/examples/uring_rr

client() { # QD -> "ops p50_us"
	local l
	l=$(SPIN=1 taskset -c 1 "$TCP_RR" client "$PORT" 72 4120 "$1" "$RUNTIME")
	python3 -c "import re,sys; l=sys.argv[1]; p=re.search(r'p50_us=([0-9.]+)', l); print(re.search(r'ops/s=([0-9.]+)', l).group(1), p.group(1) if p else 0)" "$l"
}
run() { # SERVER-KIND QD
	if [[ $1 = epoll ]]; then
		SPIN=1 taskset -c 0 "$TCP_RR" server "$PORT" 72 4120 >/dev/null 2>&1 &
	else
		taskset -c 0 "$URING" "$PORT" 72 4120 >/dev/null 2>&1 &
	fi
	local srv=$!
	PIDS+=("$srv")
	wait_listen "$PORT"
	client "$2"
	kill "$srv" 2>/dev/null || true
	wait "$srv" 2>/dev/null || true
}

for qd in 1 32 128; do
	ratios=() lat=()
	for r in $(seq "$ROUNDS"); do
		# $(...) waits for the server to be gone before the next one starts.
		e=$(run epoll "$qd") u=$(run uring "$qd")
		read -r eo ep <<<"$e"
		read -r uo up <<<"$u"
		ratios+=("$(python3 -c "print($uo / $eo)")")
		[[ $qd = 1 ]] && lat+=("$(python3 -c "print($up / $ep)")")
		echo "QD $qd round $r: recv+send ${eo%.*} ops/s (p50 $ep µs), io_uring ${uo%.*} ops/s (p50 $up µs)"
	done
	python3 - "$qd" "${ratios[*]}" "${lat[*]:-}" <<'PY'
import statistics as st, sys
qd, r, l = sys.argv[1], [float(x) for x in sys.argv[2].split()], sys.argv[3].split()
s = f"QD {qd}: io_uring / recv+send ops/s = {st.median(r):.2f} (median of {len(r)} rounds)"
if l:
    s += f", p50 latency ratio {st.median(float(x) for x in l):.2f}"
print(s)
PY
done
