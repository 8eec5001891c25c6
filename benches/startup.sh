#!/usr/bin/env bash
# benches/startup.sh -- start-up time and memory of the default target:
# `farflash serve` with the embedded default (one subsystem, a 1 GiB RAM
# namespace), listening on 127.0.0.1:$PORT instead of 4420.
#
#   OLD=/path/to/old/farflash [NEW=target/release/farflash] bash benches/startup.sh
#
# For each binary, in alternating rounds (ROUNDS, default 7): the time from
# exec to the listener accepting a TCP connection (polled every 2 ms, so
# the resolution is a few ms), and VmRSS at that moment. Medians go to the
# "startup.sh" section of docs/benchmarks.md. OLD_LABEL and NEW_LABEL name
# the two (default: their --version lines).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
NAME=startup.sh
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

NEW=${NEW:-$ROOT/target/release/farflash}
OLD=${OLD:?set OLD to the farflash binary to compare with}
ROUNDS=${ROUNDS:-7}
PORT=${PORT:-4540}
for b in "$OLD" "$NEW"; do [[ -x $b ]] || die "$b is not an executable"; done
OLD_LABEL=${OLD_LABEL:-$("$OLD" --version)}
NEW_LABEL=${NEW_LABEL:-$("$NEW" --version)}

# one BIN -> "MS KIB": start, wait for the listener, read VmRSS, stop.
one() {
	local bin=$1 t0 t1 pid rss deadline
	t0=$(date +%s%N)
	"$bin" serve --listen "127.0.0.1:$PORT" --rpc-socket none --log-level warn >"$TMP/serve.log" 2>&1 &
	pid=$!
	PIDS+=("$pid")
	deadline=$((t0 + 30000000000))
	until (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null || die "$bin exited: $(cat "$TMP/serve.log")"
		(($(date +%s%N) < deadline)) || die "$bin did not listen within 30 s"
		sleep 0.002
	done
	t1=$(date +%s%N)
	rss=$(awk '/^VmRSS:/ {print $2}' "/proc/$pid/status")
	kill -TERM "$pid"
	wait "$pid" || true
	PIDS=("${PIDS[@]/$pid/}")
	echo "$(((t1 - t0) / 1000)) $rss"
}

declare -a old_ms old_kib new_ms new_kib
for r in $(seq "$ROUNDS"); do
	read -r us kib < <(one "$OLD")
	old_ms+=("$(python3 -c "print('%.1f' % ($us / 1000))")")
	old_kib+=("$kib")
	read -r us2 kib2 < <(one "$NEW")
	new_ms+=("$(python3 -c "print('%.1f' % ($us2 / 1000))")")
	new_kib+=("$kib2")
	echo "round $r: old $((us / 1000)) ms, $kib KiB; new $((us2 / 1000)) ms, $kib2 KiB" >&2
done

fmt_ms() { python3 -c "print('%.1f' % float('$1'))"; }
fmt_mb() { python3 -c "print('%.1f' % (float('$1') / 1024))"; }
om=$(median "${old_ms[@]}")
nm=$(median "${new_ms[@]}")
ok=$(median "${old_kib[@]}")
nk=$(median "${new_kib[@]}")

{
	echo "## Start-up time and memory of the default target"
	echo
	echo "Written by \`benches/startup.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts
	echo "- target: \`farflash serve --listen 127.0.0.1:$PORT --rpc-socket none\`, the embedded default"
	echo "  otherwise (one subsystem, a 1 GiB RAM namespace), release builds; $ROUNDS rounds, the two"
	echo "  binaries alternating; start-up = exec to the listener accepting a TCP connection"
	echo "  (polled every 2 ms), VmRSS read at that moment; medians"
	echo
	echo "| binary | start-up (ms) | VmRSS (MB) | runs (ms) | runs (VmRSS KiB) |"
	echo "|---|---:|---:|---|---|"
	echo "| before: $OLD_LABEL | $(fmt_ms "$om") | $(fmt_mb "$ok") | ${old_ms[*]} | ${old_kib[*]} |"
	echo "| after: $NEW_LABEL | $(fmt_ms "$nm") | $(fmt_mb "$nk") | ${new_ms[*]} | ${new_kib[*]} |"
	echo
	echo "Before issue 30 (eb4dc34) the default RAM namespace was committed up front when it fit in"
	echo "half of MemAvailable (the whole GiB faulted in before listening) and the binary linked"
	echo "librbd, librados, libceph-common, libibverbs, librdmacm and libiscsi, loaded and relocated"
	echo "at every exec. Now RAM is committed as written (\`--ram-commit\` for benchmarks) and those"
	echo "libraries are opened only by the feature that uses them. Start-up times on this shared"
	echo "2-core VM vary with its load (see the load averages above); the ratio is what holds."
} | tee /dev/stderr | write_section "$ROOT/docs/benchmarks.md" startup.sh
