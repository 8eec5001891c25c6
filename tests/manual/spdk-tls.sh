#!/usr/bin/env bash
# tests/manual/spdk-tls.sh -- NVMe/TCP over TLS 1.3 between farflash and SPDK
# (issue 32), by hand: not run by CI (SPDK is built from source). What it
# printed on 2026-11-27 is in docs/interop.md ("NVMe/TCP over TLS 1.3 with
# SPDK v25.09").
#
#   cargo build --release --bin farflash
#   SPDK_DIR=../anchors/spdk bash tests/manual/spdk-tls.sh
#
# 1. SPDK's nvmf_tgt with a TLS listener (`nvmf_subsystem_add_listener -k`,
#    `keyring_file_add_key`, `nvmf_subsystem_add_host --psk`), one host with
#    a SHA-256 key and one with a SHA-384 key; farflash's host tries every
#    identity version x derivation (`identify`), then `perf --verify crc32c`
#    with the combination that works.
# 2. `farflash serve --listen tls:` with the default `tls_derivation`
#    (libnvme-1.10 first) and with `--tls-derivation rfc8446`; SPDK's
#    spdk_nvme_perf (`-S ssl --psk-path`) against both, then bdevperf's
#    verify workload (`bdev_nvme_attach_controller --psk`) against the second.
#
# Every SPDK process runs on core 1 (-m/-c 0x2) with --no-huge -s 1024
# --disable-cpumask-locks; farflash on core 0. Ports PORT..PORT+2 (4910).
# Each check prints "pass"/"FAIL"/"refused (expected)" and the line that
# says why; the script exits non-zero when an expectation is not met.
set -uo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/../.." && pwd)
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
FF=${FF:-$ROOT/target/release/farflash}
PORT=${PORT:-4910}
P_SPDK=$PORT P_FF_DEFAULT=$((PORT + 1)) P_FF_RFC=$((PORT + 2))
export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs
NVMF_TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPERF=$SPDK_DIR/build/bin/spdk_nvme_perf
BPERF=$SPDK_DIR/build/examples/bdevperf
for b in "$FF" "$NVMF_TGT" "$SPERF" "$BPERF"; do
	[[ -x $b ]] || { echo "spdk-tls.sh: $b is missing" >&2; exit 2; }
done
SPDK_OPTS=(--no-huge -s 1024)
TMP=$(mktemp -d)
PIDS=()
cleanup() {
	local p
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; wait "$p" 2>/dev/null; done
	rm -rf "$TMP"
}
trap cleanup EXIT
FAILED=0
SUB=nqn.2026-11.io.farflash:spdktls
host() { echo "nqn.2026-11.io.farflash:host$1"; }
rpc() { local s=$1; shift; python3 "$SPDK_DIR/scripts/rpc.py" -s "$s" "$@"; }
wait_sock() { local _; for _ in $(seq 100); do [[ -S $1 ]] && return 0; sleep 0.1; done; return 1; }
wait_port() { local _; for _ in $(seq 100); do (: </dev/tcp/127.0.0.1/"$1") 2>/dev/null && return 0; sleep 0.1; done; return 1; }
# result NAME EXPECT(pass|fail) RC LOG PATTERN: one line per check.
result() {
	local name=$1 expect=$2 rc=$3 log=$4 pat=$5 why
	why=$(grep -E -m1 "$pat" "$log" | sed 's/.*transport error: //' | cut -c1-420)
	if [[ $expect = pass && $rc = 0 ]]; then
		echo "pass                | $name | $why"
	elif [[ $expect = fail && $rc != 0 ]]; then
		echo "refused (expected)  | $name | $why"
	else
		echo "FAIL (rc $rc)       | $name | $why"
		FAILED=1
	fi
}

# Keys: SPDK's keyring_file wants the bare string (no newline: its parser
# checks that the last byte is ':') in a 0600 file.
for h in 256 384; do
	m=1
	[[ $h = 384 ]] && m=2
	key=$("$FF" gen-tls-key -m $m -n "$(host $h)" -c "$SUB" | grep '^NVMeTLSkey-1:' | tail -1)
	(umask 077 && printf %s "$key" >"$TMP/k$h.psk")
done

echo "== 1. SPDK nvmf_tgt (TLS listener 127.0.0.1:$P_SPDK) <- farflash host"
TS=$TMP/tgt.sock
"$NVMF_TGT" -m 0x2 "${SPDK_OPTS[@]}" --disable-cpumask-locks -r "$TS" >"$TMP/nvmf_tgt.log" 2>&1 &
PIDS+=("$!")
TGT_PID=$!
wait_sock "$TS" || { echo "nvmf_tgt did not start"; cat "$TMP/nvmf_tgt.log"; exit 2; }
rpc "$TS" nvmf_create_transport -t TCP >/dev/null
rpc "$TS" bdev_malloc_create -b M0 64 512 >/dev/null
rpc "$TS" nvmf_create_subsystem "$SUB" -s SPDKTLS01
rpc "$TS" nvmf_subsystem_add_ns "$SUB" M0 >/dev/null
rpc "$TS" nvmf_subsystem_add_listener "$SUB" -t tcp -a 127.0.0.1 -s "$P_SPDK" -f ipv4 -k
for h in 256 384; do
	rpc "$TS" keyring_file_add_key "k$h" "$TMP/k$h.psk"
	rpc "$TS" nvmf_subsystem_add_host "$SUB" "$(host $h)" --psk "k$h"
done
for h in 256 384; do
	for id in 0 1; do
		for der in rfc8446 libnvme-1.10; do
			expect=fail
			[[ $id = 0 && $der = rfc8446 ]] && expect=pass
			log=$TMP/id.$h.$id.$der
			timeout 60 "$FF" identify -t tcp -a 127.0.0.1 -s "$P_SPDK" -n "$SUB" -q "$(host $h)" \
				--tls --tls-key "$TMP/k$h.psk" --tls-identity $id --tls-derivation $der >"$log" 2>&1
			result "SHA-$h identify --tls-identity $id --tls-derivation $der" $expect $? "$log" '^mn |error'
		done
	done
	for bs in 4k 128k; do
		log=$TMP/perf.$h.$bs
		timeout 120 "$FF" perf -t tcp -a 127.0.0.1 -s "$P_SPDK" -n "$SUB" -q "$(host $h)" --tls \
			--tls-key "$TMP/k$h.psk" --tls-identity 0 --tls-derivation rfc8446 --rw randwrite \
			--bs $bs --iodepth 8 --size 16M --verify crc32c --cpus-allowed 0 >"$log" 2>&1
		rc=$?
		grep -q 'verify_errors=0' "$log" || rc=1
		result "SHA-$h perf --verify crc32c randwrite $bs QD 8, 16 MiB" pass $rc "$log" 'verify_errors|error'
	done
done
echo "-- nvmf_tgt's log, the refusals:"
grep -E 'ERROR' "$TMP/nvmf_tgt.log" | grep -v 'spdk_sock_recv() failed' | sed 's/^\[[^]]*\] //' | cut -c1-200 | sort | uniq -c
kill "$TGT_PID"
wait "$TGT_PID" 2>/dev/null

echo "== 2. farflash serve (TLS) <- SPDK spdk_nvme_perf and bdevperf"
ARGS=(--nqn "$SUB" --ram 64M --threads 1 --cpus-allowed 0)
for h in 256 384; do ARGS+=(--allow-host "$(host $h)" --tls-key "$(host $h)=$TMP/k$h.psk"); done
"$FF" serve --listen tls:127.0.0.1:$P_FF_DEFAULT "${ARGS[@]}" --rpc-socket "$TMP/ff1.sock" >"$TMP/serve-default.log" 2>&1 &
PIDS+=("$!")
"$FF" serve --listen tls:127.0.0.1:$P_FF_RFC "${ARGS[@]}" --tls-derivation rfc8446 \
	--rpc-socket "$TMP/ff2.sock" >"$TMP/serve-rfc8446.log" 2>&1 &
PIDS+=("$!")
wait_port $P_FF_DEFAULT && wait_port $P_FF_RFC || { echo "farflash serve did not start"; exit 2; }
for port in $P_FF_DEFAULT $P_FF_RFC; do
	expect=fail what="default tls_derivation (libnvme-1.10 first)"
	[[ $port = "$P_FF_RFC" ]] && expect=pass what="--tls-derivation rfc8446"
	for h in 256 384; do
		log=$TMP/sperf.$port.$h
		timeout 60 "$SPERF" "${SPDK_OPTS[@]}" -c 0x2 -q 8 -o 4096 -w randrw -M 50 -t 2 -S ssl \
			-r "trtype:TCP adrfam:IPv4 traddr:127.0.0.1 trsvcid:$port subnqn:$SUB hostnqn:$(host $h)" \
			--psk-path "$TMP/k$h.psk" >"$log" 2>&1
		# spdk_nvme_perf exits 0 when no controller attached: judge by its output.
		rc=$?
		grep -q '^Total' "$log" || rc=1
		result "SHA-$h spdk_nvme_perf -S ssl --psk-path -> farflash, $what" $expect $rc "$log" '^Total|Failed to attach'
	done
done
echo "-- farflash's log ($P_FF_DEFAULT, default derivations):"
grep -E 'WARN|secure channel' "$TMP/serve-default.log" | cut -c29-260
echo "-- farflash's log ($P_FF_RFC, rfc8446):"
grep -E 'WARN|secure channel' "$TMP/serve-rfc8446.log" | cut -c29-260 | sort -u -k4 | head -4

BS=$TMP/bperf.sock
# bdevperf verify: 4 KiB QD 32 and 32 KiB QD 8 (see docs/interop.md for 64 KiB and up).
for run in "256 4096 32" "384 4096 32" "256 32768 8" "384 32768 8"; do
	read -r h o q <<<"$run"
	rm -f "$BS"
	"$BPERF" -m 0x2 "${SPDK_OPTS[@]}" --disable-cpumask-locks -z -r "$BS" -q "$q" -o "$o" -w verify -t 3 \
		>"$TMP/bperf.log" 2>&1 &
	BP=$!
	PIDS+=("$BP")
	wait_sock "$BS" || { echo "bdevperf did not start"; exit 2; }
	rpc "$BS" keyring_file_add_key "k$h" "$TMP/k$h.psk"
	rpc "$BS" bdev_nvme_attach_controller -b "FF$h" -t tcp -a 127.0.0.1 -s $P_FF_RFC -f ipv4 -n "$SUB" \
		-q "$(host $h)" --psk "k$h" >/dev/null
	timeout 90 python3 "$SPDK_DIR/examples/bdev/bdevperf/bdevperf.py" -t 60 -s "$BS" perform_tests >"$TMP/bp.json" 2>&1
	rc=$?
	python3 -c "import json,sys; r=json.load(open('$TMP/bp.json'))['results'][0]; sys.exit(not (r['io_failed']==0 and r['iops']>0))" \
		2>/dev/null || rc=1
	python3 -c "import json; r=json.load(open('$TMP/bp.json'))['results'][0]; print('verify iops %.0f io_failed %d' % (r['iops'], r['io_failed']))" \
		>"$TMP/bp.txt" 2>&1
	result "SHA-$h bdevperf -w verify -o $o -q $q, bdev_nvme_attach_controller --psk -> farflash rfc8446" pass $rc "$TMP/bp.txt" .
	kill $BP
	wait $BP 2>/dev/null
done
exit $FAILED
