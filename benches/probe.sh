#!/usr/bin/env bash
# benches/probe.sh -- where QD 1 latency goes: the kernel-TCP floor, the
# thinnest possible NVMe/TCP host against farflash serve
# (examples/qd1_probe.rs, timed like the floor), and farflash perf, each
# 4 KiB random reads at QD 1, in rounds so that all three see the same
# machine. probe - floor is the target's share (protocol, engine, the 24
# extra header bytes); perf clat - probe is the host library's and perf's.
#
#   bash benches/probe.sh          # ROUNDS (7) of RUNTIME (2) s each
#
# Target on core 0 (--threads 1, adaptive), clients on core 1, as in
# benches/pair.sh. Prints per-round figures and the medians.
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
ROUNDS=${ROUNDS:-7} RUNTIME=${RUNTIME:-2} PORT=${PORT:-4521} FLOOR_PORT=${FLOOR_PORT:-5302}
NQN=nqn.2026-11.io.farflash:probe
NAME=probe.sh
NEED_FLOOR=1
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
cargo build -q --release --bin farflash --example qd1_probe
FF=$ROOT/target/release/farflash
PROBE=$ROOT/target/release/examples/qd1_probe
p50() { sed -n 's/.*p50_us=\([0-9.]*\).*/\1/p'; }
ops() { sed -n 's/.*ops\/s=\([0-9.]*\).*/\1/p'; }

F=() P=() C=() L=() FO=() PO=() CO=()
for r in $(seq "$ROUNDS"); do
	SPIN=1 taskset -c 0 "$TCP_RR" server "$FLOOR_PORT" 72 4120 >/dev/null 2>&1 &
	fp=$!
	PIDS+=("$fp")
	wait_listen "$FLOOR_PORT"
	fl=$(SPIN=1 taskset -c 1 "$TCP_RR" client "$FLOOR_PORT" 72 4120 1 "$RUNTIME")
	kill "$fp"
	wait "$fp" 2>/dev/null || true
	taskset -c 0 "$FF" serve --listen "127.0.0.1:$PORT" --nqn "$NQN" --null 1G --threads 1 \
		--cpus-allowed 0 --log-level warn >"$TMP/serve.log" 2>&1 &
	sp=$!
	PIDS+=("$sp")
	wait_listen "$PORT"
	pr=$(taskset -c 1 "$PROBE" "127.0.0.1:$PORT" "$NQN" "$RUNTIME")
	read -r pi pc pl < <(taskset -c 1 "$FF" perf -t tcp -a 127.0.0.1 -s "$PORT" -n "$NQN" \
		--rw randread --bs 4k --iodepth 1 --runtime "$RUNTIME" --cpus-allowed 1 -o json |
		python3 -c 'import json,sys; a=json.load(sys.stdin)["aggregate"]["read"]; print(a["iops"], a["clat_ns"]["percentile"]["50.000000"]/1e3, a["lat_ns"]["percentile"]["50.000000"]/1e3)')
	kill "$sp"
	wait "$sp" 2>/dev/null || true
	F+=("$(p50 <<<"$fl")") FO+=("$(ops <<<"$fl")") P+=("$(p50 <<<"$pr")") PO+=("$(ops <<<"$pr")")
	C+=("$pc") L+=("$pl") CO+=("$pi")
	printf 'round %s: p50 floor %s µs, probe %s µs, perf clat %.1f µs (lat %.1f); ops/s %s / %s / %.0f\n' \
		"$r" "${F[-1]}" "${P[-1]}" "$pc" "$pl" "${FO[-1]%.*}" "${PO[-1]%.*}" "$pi"
done
python3 - "${F[*]}" "${P[*]}" "${C[*]}" "${L[*]}" "${FO[*]}" "${PO[*]}" "${CO[*]}" <<'PY'
import statistics as st, sys
f, p, c, l, fo, po, co = ([float(x) for x in a.split()] for a in sys.argv[1:])
m = st.median
print(f"medians: p50 floor {m(f):.2f} µs, probe {m(p):.2f} µs, perf clat {m(c):.2f} µs, perf lat {m(l):.2f} µs")
print(f"  target's share (probe - floor, per round): {m([b - a for a, b in zip(f, p)]):+.2f} µs")
print(f"  host's share (perf clat - probe, per round): {m([b - a for a, b in zip(p, c)]):+.2f} µs")
print(f"  ops/s: floor {m(fo):.0f}, probe {m(po):.0f} ({m([b / a for a, b in zip(fo, po)]):.2f}), perf {m(co):.0f} ({m([b / a for a, b in zip(fo, co)]):.2f})")
PY
