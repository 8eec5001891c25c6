#!/usr/bin/env bash
# benches/tls-vs-spdk.sh -- farflash's NVMe/TCP TLS target against SPDK's,
# under SPDK's initiator with a PSK (issue 32), paired in rounds.
#
#   bash benches/tls-vs-spdk.sh                         # RUNS=5 RUNTIME=5
#   RUNS=3 ROWS="qd1 qd32" OUT= bash benches/tls-vs-spdk.sh
#
# SPDK_DIR is an SPDK build (v25.09: ../shared/tools/build-spdk.sh makes one
# in ../anchors/spdk, the default) with nvmf_tgt and spdk_nvme_perf; SPDK is
# a benchmark peer only, nothing in the test suite needs it.
#
# One SHA-256 configured PSK (`farflash gen-tls-key`, TLS_AES_128_GCM_SHA256)
# for one host NQN. Targets on core 0, each alone, started for each run:
#   spdk-tls:   nvmf_tgt -m 0x1 --no-huge -s 2048, TCP transport defaults, a
#               1 GiB malloc bdev, listener with `secure_channel` (the `-k` of
#               nvmf_subsystem_add_listener), the host added with `psk` naming
#               a `keyring_file_add_key` key
#   spdk-plain: the same without secure_channel or PSK
#   ff-tls:     taskset -c 0 farflash serve --ram 1G --ram-commit --listen tls:...
#               --allow-host H --tls-key H=FILE --tls-derivation rfc8446 (SPDK's
#               host offers a version 0 identity keyed the RFC 8446 way)
#   ff-plain:   the same target with a plaintext listener, no key
# The initiator on core 1: spdk_nvme_perf --no-huge -s 1024 -c 0x2 -t RUNTIME
# -a WARMUP, with `-S ssl --psk-path FILE` for the TLS targets (its `-S ssl`
# is OpenSSL in user space, as farflash's record layer). Every target is first
# preconditioned by one sequential 128 KiB write pass of farflash perf (over
# TLS for the TLS targets), as benches/vs-spdk.sh does.
# Per round and row the four run back to back in an order that rotates from
# round to round. Ratios are medians of per-round ratios.
# Target CPU per I/O: its user+system time over warm-up and run divided by
# the I/Os; SPDK's reactor spins, so its figure is its wall time per I/O
# (and farflash's adaptive polling spins between I/Os too). TLS's cost per
# I/O for a target: its TLS figure less its plaintext figure. Under
# spdk_nvme_perf -S ssl the initiator limits every TLS row, so both figures
# include polling (an upper bound of the cost, not its price at saturation).
#
# Goals (issue 32): ff-tls / spdk-tls >= 1.2 on every row; TLS costing
# farflash no more CPU per 4 KiB I/O than it costs SPDK.
#
# Environment: SPDK_DIR, RUNS (5), RUNTIME (5), WARMUP (1), ROWS (qd1 qd32
# read128k), PORT (4530), SPDK_PORT (4531), OUT (docs/benchmarks.md; empty
# to only print), LOAD_MAX (1.0: refuses to start on a busier machine).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME="tls-vs-spdk.sh"
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"

SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
RUNS=${RUNS:-5} RUNTIME=${RUNTIME:-5} WARMUP=${WARMUP:-1}
ROWS=${ROWS:-qd1 qd32 read128k}
PORT=${PORT:-4530} SPDK_PORT=${SPDK_PORT:-4531}
OUT=${OUT-docs/benchmarks.md}
LOAD_MAX=${LOAD_MAX:-1.0}
HOST=nqn.2014-08.org.nvmexpress:uuid:a0c0b0e0-0000-4000-8000-0000000071a6
FF_NQN=nqn.2026-11.io.farflash:bench-tls
SPDK_NQN=nqn.2016-06.io.spdk:bench-tls
TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf

for t in taskset python3 cargo; do command -v "$t" >/dev/null || die "$t is required"; done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (targets on core 0, the initiator on core 1)"
[[ -x $TGT && -x $SPERF ]] ||
	die "no SPDK build in SPDK_DIR=$SPDK_DIR (build/bin/nvmf_tgt and spdk_nvme_perf; ../shared/tools/build-spdk.sh builds one)"
load=$(cut -d' ' -f1 /proc/loadavg)
python3 -c "import sys; sys.exit(float('$load') > float('$LOAD_MAX'))" ||
	die "load average $load is above LOAD_MAX=$LOAD_MAX: not measuring on a busy machine"
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

declare -A ROW_NAME=([qd1]="4 KiB randread QD 1" [qd32]="4 KiB randread QD 32" [read128k]="128 KiB read QD 8")
declare -A ROW_ARGS=([qd1]="randread 4096 1" [qd32]="randread 4096 32" [read128k]="read 131072 8")
for row in $ROWS; do [[ -n ${ROW_ARGS[$row]:-} ]] || die "unknown row $row (have: ${!ROW_ARGS[*]})"; done

echo "== building (release)"
cargo build -q --release --bin farflash
FF=$ROOT/target/release/farflash
KEY=$("$FF" gen-tls-key -m 1 -n "$HOST" -c "$FF_NQN" | grep "^NVMeTLSkey-" | tail -1)
[[ $KEY = NVMeTLSkey-1:01:* ]] || die "gen-tls-key printed no SHA-256 key: $KEY"
KEYFILE=$TMP/host.psk
(umask 077 && printf %s "$KEY" >"$KEYFILE")

spdk_config() { # tls|plain -> JSON
	local secure=false keyring="" psk=""
	if [[ $1 = tls ]]; then
		secure=true psk=", \"psk\": \"key0\""
		keyring='{"subsystem": "keyring", "config": [
  {"method": "keyring_file_add_key", "params": {"name": "key0", "path": "'"$KEYFILE"'"}}]},'
	fi
	cat <<EOF
{"subsystems": [ $keyring
 {"subsystem": "bdev", "config": [
  {"method": "bdev_malloc_create", "params": {"name": "M0", "num_blocks": 2097152, "block_size": 512}}]},
 {"subsystem": "nvmf", "config": [
  {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
  {"method": "nvmf_create_subsystem", "params": {"nqn": "$SPDK_NQN", "allow_any_host": false, "serial_number": "SPDK0001"}},
  {"method": "nvmf_subsystem_add_ns", "params": {"nqn": "$SPDK_NQN", "namespace": {"bdev_name": "M0"}}},
  {"method": "nvmf_subsystem_add_host", "params": {"nqn": "$SPDK_NQN", "host": "$HOST"$psk}},
  {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$SPDK_NQN", "secure_channel": $secure,
    "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$SPDK_PORT"}}}]}]}
EOF
}
spdk_config tls >"$TMP/spdk-tls.json"
spdk_config plain >"$TMP/spdk-plain.json"

TARGET_PID=""
start_target() { # spdk-tls|spdk-plain|ff-tls|ff-plain -> TARGET_PID, T_PORT, T_NQN
	local log=$TMP/$1.log
	case $1 in
	spdk-*)
		"$TGT" -m 0x1 --no-huge -s 2048 -r "$TMP/spdk.sock" --json "$TMP/$1.json" >"$log" 2>&1 &
		T_PORT=$SPDK_PORT T_NQN=$SPDK_NQN
		;;
	ff-tls)
		taskset -c 0 "$FF" serve --ram 1G --ram-commit --nqn "$FF_NQN" --listen "tls:127.0.0.1:$PORT" \
			--allow-host "$HOST" --tls-key "$HOST=$KEYFILE" --tls-derivation rfc8446 --log-level warn >"$log" 2>&1 &
		T_PORT=$PORT T_NQN=$FF_NQN
		;;
	ff-plain)
		taskset -c 0 "$FF" serve --ram 1G --ram-commit --nqn "$FF_NQN" --listen "127.0.0.1:$PORT" \
			--allow-host "$HOST" --log-level warn >"$log" 2>&1 &
		T_PORT=$PORT T_NQN=$FF_NQN
		;;
	esac
	target_started "$log"
}

# One measurement: TARGET RW BS QD -> "iops target_cpu_us_per_io" (in a
# subshell, whose exit stops the target it started even on a failure).
measure() {
	trap stop_target EXIT
	local tg=$1 rw=$2 bs=$3 qd=$4 tls=() ptls=() t0 t1 iops
	start_target "$tg"
	if [[ $tg = *-tls ]]; then
		tls=(-S ssl --psk-path "$KEYFILE")
		ptls=(--tls --tls-key "$KEYFILE" --tls-identity 0 --tls-derivation rfc8446)
	fi
	# Precondition: no first-touch page faults in the measurement.
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" -q "$HOST" "${ptls[@]}" --rw write --bs 128k \
		--iodepth 16 --cpus-allowed 1 --output-format=json >"$TMP/prefill.json" 2>"$TMP/prefill.err" ||
		die "prefill of $tg failed: $(tail -3 "$TMP/prefill.err")"
	t0=$(cpu_ticks "$TARGET_PID")
	"$SPERF" --no-huge -s 1024 -c 0x2 -q "$qd" -o "$bs" -w "$rw" -t "$RUNTIME" -a "$WARMUP" "${tls[@]}" \
		-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$T_PORT subnqn:$T_NQN hostnqn:$HOST" \
		>"$TMP/sperf.log" 2>&1 || die "spdk_nvme_perf $tg $rw $bs QD $qd failed: $(tail -5 "$TMP/sperf.log")"
	t1=$(cpu_ticks "$TARGET_PID")
	iops=$(awk '/^Total/ {print $3; found = 1} END {exit !found}' "$TMP/sperf.log") ||
		die "no Total line from spdk_nvme_perf against $tg: $(tail -5 "$TMP/sperf.log")"
	stop_target
	python3 -c "print($iops, 1e6 * ($t1 - $t0) / $(getconf CLK_TCK) / max(1.0, $iops * ($RUNTIME + $WARMUP)))"
}

py() { python3 -c "$1"; }
f2() { py "print('%.2f' % $1)"; }
f3() { py "print('%.3f' % $1)"; }
met() { py "print('yes' if $1 else 'no')"; }
rate() { # ROW IOPS -> "N IOPS" or "N MiB/s"
	local bs
	read -r _ bs _ <<<"${ROW_ARGS[$1]}"
	if ((bs >= 131072)); then py "print('%.0f MiB/s' % ($2 * $bs / 1048576))"; else py "print('%.0f IOPS' % $2)"; fi
}
spread() { py "v = [float(x) for x in '$1'.split()]; print('%.2f–%.2f' % (min(v), max(v)))"; }

COMBOS=(spdk-tls ff-tls spdk-plain ff-plain)
declare -A V MED RATIO ROUNDS_OF
RUNLOG=()
for row in $ROWS; do
	read -r rw bs qd <<<"${ROW_ARGS[$row]}"
	echo "== ${ROW_NAME[$row]}"
	for r in $(seq "$RUNS"); do
		line="${ROW_NAME[$row]} round $r:"
		for c in $(rotated "$r" "${COMBOS[@]}"); do
			read -r iops cpu < <(measure "$c" "$rw" "$bs" "$qd")
			V[$row,$c,$r]=$iops V[$row,$c,$r,cpu]=$cpu
			line+=" $c $(rate "$row" "$iops") ($(f2 "$cpu") µs CPU/IO);"
		done
		echo "  $line"
		RUNLOG+=("- ${line%;}")
		ROUNDS_OF[$row]+=" $(py "print(${V[$row,ff-tls,$r]} / ${V[$row,spdk-tls,$r]})")"
	done
	for c in "${COMBOS[@]}"; do
		vals=() cpus=()
		for r in $(seq "$RUNS"); do vals+=("${V[$row,$c,$r]}") cpus+=("${V[$row,$c,$r,cpu]}"); done
		MED[$row,$c]=$(median "${vals[@]}") MED[$row,$c,cpu]=$(median "${cpus[@]}")
	done
	ratio() { # NUM DEN -> median of the per-round ratios
		local rs=() r
		for r in $(seq "$RUNS"); do rs+=("$(py "print(${V[$row,$1,$r]} / ${V[$row,$2,$r]})")"); done
		median "${rs[@]}"
	}
	RATIO[$row,tls]=$(ratio ff-tls spdk-tls)
	RATIO[$row,plain]=$(ratio ff-plain spdk-plain)
	RATIO[$row,ff_cost]=$(ratio ff-tls ff-plain)
	RATIO[$row,spdk_cost]=$(ratio spdk-tls spdk-plain)
done

TABLE=$(
	echo "| row | SPDK TLS | farflash TLS | farflash / SPDK, TLS (≥ 1.2) | per round | plaintext: farflash / SPDK | TLS / plain: SPDK, farflash | target CPU µs per I/O, SPDK plain → TLS | farflash plain → TLS | TLS's CPU per I/O, SPDK / farflash |"
	echo "|---|---|---|---|---|---|---|---|---|---|"
	for row in $ROWS; do
		t=${RATIO[$row,tls]}
		sc=$(py "print(${MED[$row,spdk-tls,cpu]} - ${MED[$row,spdk-plain,cpu]})")
		fc=$(py "print(${MED[$row,ff-tls,cpu]} - ${MED[$row,ff-plain,cpu]})")
		echo "| ${ROW_NAME[$row]} | $(rate "$row" "${MED[$row,spdk-tls]}") | $(rate "$row" "${MED[$row,ff-tls]}") | $(f3 "$t") $(met "$t >= 1.2") | $(spread "${ROUNDS_OF[$row]}") | $(f3 "${RATIO[$row,plain]}") | $(f3 "${RATIO[$row,spdk_cost]}"), $(f3 "${RATIO[$row,ff_cost]}") | $(f2 "${MED[$row,spdk-plain,cpu]}") → $(f2 "${MED[$row,spdk-tls,cpu]}") | $(f2 "${MED[$row,ff-plain,cpu]}") → $(f2 "${MED[$row,ff-tls,cpu]}") | $(f2 "$sc") / $(f2 "$fc") |"
	done
)
echo
echo "$TABLE"
[[ -n $OUT ]] || exit 0
SPDK_VERSION=$(awk '$1 == "#define" && $2 == "SPDK_VERSION_MAJOR" {ma = $3}
	$1 == "#define" && $2 == "SPDK_VERSION_MINOR" {mi = $3}
	END {if (ma != "") printf "v%d.%02d", ma, mi}' "$SPDK_DIR/include/spdk/version.h" 2>/dev/null || true)
[[ -n $SPDK_VERSION ]] || SPDK_VERSION=$(git -C "$SPDK_DIR" describe --tags 2>/dev/null || echo "unknown version")
{
	echo "## farflash's TLS target against SPDK's (benches/tls-vs-spdk.sh)"
	echo
	echo "Written by \`benches/tls-vs-spdk.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts "; SPDK $SPDK_VERSION"
	echo "- one SHA-256 PSK (TLS_AES_128_GCM_SHA256), version 0 identity, RFC 8446 derivation (SPDK's host);"
	echo "  both targets alone on core 0, started for each run and preconditioned by one sequential"
	echo "  128 KiB write pass; SPDK: \`nvmf_tgt -m 0x1 --no-huge -s 2048\`, 1 GiB malloc bdev, listener"
	echo "  \`secure_channel\`; farflash: \`serve --ram 1G --ram-commit --listen tls:...\` (adaptive polling)"
	echo "- initiator on core 1: \`spdk_nvme_perf --no-huge -s 1024 -c 0x2 -t $RUNTIME -a $WARMUP -S ssl --psk-path\`"
	echo "  (plaintext rows without \`-S ssl\`)"
	echo "- $RUNS rounds; in a round each row runs the four targets back to back, in an order that rotates"
	echo "  from round to round; ratios are medians of per-round ratios, rates and CPU medians over rounds"
	echo "- target CPU per I/O: user+system time over warm-up and run / I/Os; SPDK's reactor spins, so its"
	echo "  figure is wall time per I/O, and farflash's adaptive polling spins between I/Os too; TLS's CPU"
	echo "  per I/O = TLS less plaintext. farflash's TLS rows are limited by spdk_nvme_perf \`-S ssl\`"
	echo "  (its target serves several times more TLS reads to farflash perf: benches/tls-target.sh), so"
	echo "  its figures include polling: an upper bound of what TLS costs it, not its price at saturation"
	echo
	echo "$TABLE"
	echo
	echo "### Per round"
	echo
	printf '%s\n' "${RUNLOG[@]}"
} | write_section "$OUT" tls-vs-spdk
echo "wrote the tls-vs-spdk section of $OUT"
