#!/usr/bin/env bash
# benches/spdk-interop.sh -- SPDK's initiator against `farflash serve`, checked
# and recorded (the issue #10 interop checks; SPDK is a peer the test suite
# cannot install, so this is run by hand and its record kept in docs/).
#
#   SPDK_DIR=/path/to/spdk bash benches/spdk-interop.sh
#
# SPDK_DIR is an SPDK build (v25.09: ../shared/tools/build-spdk.sh makes one in
# ../anchors/spdk, the default) with build/bin/spdk_nvme_perf and
# build/examples/identify (or build/bin/spdk_nvme_identify).
#
# Target: `taskset -c 0 farflash serve --ram 1G --ram-commit` (defaults otherwise) on
# 127.0.0.1:PORT. Initiator on core 1 with --no-huge: spdk_nvme_identify,
# then spdk_nvme_perf 4 KiB randread, randwrite and a 50/50 randrw mix at QD 1
# and 32, RUNTIME seconds each, each its own association (connect, I/O,
# detach). A check fails when a command exits non-zero or prints an
# `*ERROR*` or `*WARNING*` line (detach included), or when the target logs a
# warning or an error. Writes its section of docs/interop.md (OUT= to change,
# empty to skip) with the target's log and every command's output; exits
# non-zero when a check failed.
# Environment: SPDK_DIR, RUNTIME (3), PORT (4420), OUT.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME=spdk-interop.sh
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
RUNTIME=${RUNTIME:-3} PORT=${PORT:-4420}
OUT=${OUT-docs/interop.md}
NQN=nqn.2026-11.io.farflash:default
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
SIDENT=$SPDK_DIR/build/bin/spdk_nvme_identify
[[ -x $SIDENT ]] || SIDENT=$SPDK_DIR/build/examples/identify
[[ -x $SPERF && -x $SIDENT ]] || die "no SPDK build in SPDK_DIR=$SPDK_DIR (want spdk_nvme_perf and spdk_nvme_identify)"
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

echo "== building (release)"
cargo build -q --release --bin farflash
FF=$ROOT/target/release/farflash
taskset -c 0 "$FF" serve --ram 1G --ram-commit --listen "127.0.0.1:$PORT" >"$TMP/ff.log" 2>&1 &
PIDS+=("$!")
wait_listen "$PORT"

TRID="trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$PORT subnqn:$NQN"
FAILED=0 RESULTS=() OUTPUTS=()
# check NAME COMMAND... : runs it on core 1, keeps its output, judges it.
check() {
	local name=$1 rc=0 bad
	shift
	echo "== $name"
	taskset -c 1 "$@" >"$TMP/out" 2>&1 || rc=$?
	bad=$(grep -cE '\*ERROR\*|\*WARNING\*' "$TMP/out" || true)
	if [[ $rc = 0 && $bad = 0 ]]; then
		RESULTS+=("| $name | exit 0, no error or warning line | pass |")
	else
		RESULTS+=("| $name | exit $rc, $bad error/warning lines | **FAIL** |")
		FAILED=1
		tail -20 "$TMP/out" >&2
	fi
	OUTPUTS+=("$(printf '### %s\n\n```\n$ %s\n%s\n```\n' "$name" "${*##*/}" "$(cat "$TMP/out")")")
}

check "spdk_nvme_identify" "$SIDENT" --no-huge -s 1024 -r "$TRID"
for qd in 1 32; do
	for rw in randread randwrite randrw; do
		mix=()
		[[ $rw = randrw ]] && mix=(-M 50)
		check "spdk_nvme_perf $rw QD $qd" "$SPERF" --no-huge -s 1024 -c 0x2 -q "$qd" -o 4096 -w "$rw" "${mix[@]}" \
			-t "$RUNTIME" -r "$TRID"
	done
done

kill -TERM "${PIDS[0]}"
wait "${PIDS[0]}" 2>/dev/null || true
PIDS=()
if grep -qE '^[[:space:]]*(WARN|ERROR)[[:space:]]' "$TMP/ff.log"; then
	RESULTS+=("| farflash serve log | warnings or errors logged | **FAIL** |")
	FAILED=1
else
	RESULTS+=("| farflash serve log | no warning or error | pass |")
fi
printf '%s\n' "${RESULTS[@]}"

if [[ -n $OUT ]]; then
	SPDK_VERSION=$(awk '$1 == "#define" && $2 == "SPDK_VERSION_MAJOR" {ma = $3}
		$1 == "#define" && $2 == "SPDK_VERSION_MINOR" {mi = $3}
		END {if (ma != "") printf "v%d.%02d", ma, mi}' "$SPDK_DIR/include/spdk/version.h" 2>/dev/null || true)
	{
		echo "## SPDK ${SPDK_VERSION:-(unknown version)} initiator against \`farflash serve\`"
		echo
		echo "Written by \`benches/spdk-interop.sh\`; do not edit by hand. Re-run it to refresh."
		echo
		run_facts "; SPDK ${SPDK_VERSION:-unknown}"
		echo "- target: \`taskset -c 0 farflash serve --ram 1G --ram-commit --listen 127.0.0.1:$PORT\` (defaults otherwise)"
		echo "- initiator on core 1, \`--no-huge -s 1024\`: \`spdk_nvme_identify\`, then \`spdk_nvme_perf\` 4 KiB"
		echo "  randread, randwrite and a 50/50 randrw mix at QD 1 and 32, $RUNTIME s each, each its own"
		echo "  association (connect, I/O, detach)"
		echo "- a check passes when the command exits 0 and prints no \`*ERROR*\` or \`*WARNING*\` line,"
		echo "  detach included; the target's log must hold no warning or error"
		echo "- in CI: \`parked_aer_cid_reused_by_property_get\` replays what SPDK does at detach (an AER"
		echo "  outstanding, its CID reused by a Property Get of CC: the AER is retired, no Command ID"
		echo "  Conflict); before that fix detach logged \`Failed to read the CC register\`"
		echo "- not checked: \`spdk_nvme_discover\` needs hugepages (it takes no \`--no-huge\`), which this"
		echo "  VM does not have"
		echo
		echo "| check | result | |"
		echo "|---|---|---|"
		printf '%s\n' "${RESULTS[@]}"
		echo
		echo "farflash's log of the whole session:"
		echo
		echo '```'
		cat "$TMP/ff.log"
		echo '```'
		echo
		printf '%s\n\n' "${OUTPUTS[@]}"
	} | write_section "$OUT" spdk-interop.sh
	echo "wrote the spdk-interop.sh section of $OUT"
fi
exit $FAILED
