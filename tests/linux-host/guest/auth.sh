#!/bin/bash
# auth.sh -- guest script for run-linux-host (a kernel with NVMe in-band
# authentication, e.g. --kernel 6.12): the Linux host (nvme-tcp, nvme-cli)
# connects with DH-HMAC-CHAP to the target at $TARGET_ADDR:$TARGET_PORT.
#
# The cases come from $GUEST_FILES/auth-cases, one per line:
#   NAME SUBNQN EXPECT HASH GROUP HOST_SECRET CTRL_SECRET
# EXPECT: ok       connect, the kernel logs "authenticated with hash HASH
#                  dhgroup GROUP", 1 MiB written and read back, disconnect
#         fio      as ok, plus fio randwrite with crc32c verify
#         reauth   as ok, and while fio runs, the same secret is written to
#                  the controller's sysfs dhchap_secret: the kernel must
#                  re-authenticate every queue and fio must verify
#         rotate   as reauth with a new secret: the line's two extra fields
#                  NEW_SECRET SIGNAL_PORT; while fio runs, a connection to
#                  $TARGET_ADDR:SIGNAL_PORT has the test give the target the
#                  new key (management API; it answers "ok"), then
#                  NEW_SECRET goes to sysfs and every queue must
#                  re-authenticate with it
#         refused  the connect must fail and leave no controller
# HOST_SECRET "-": connect without --dhchap-secret; CTRL_SECRET "-": no
# --dhchap-ctrl-secret (unidirectional).
#
# Prints "PASS: NAME (Ns)" or "FAIL: NAME: reason" per case, then
# "AUTH RESULT: ..."; exits 1 if any case failed.
set -euo pipefail
shopt -s nullglob

ADDR=${TARGET_ADDR:?}
PORT=${TARGET_PORT:?}
CASES=${GUEST_FILES:-/guest/files}/auth-cases
WORK=/tmp/auth
mkdir -p "$WORK"
echo 0 >"$WORK/mark"

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
fail() {
	echo "FAIL: $NAME: $*"
	exit 99
}
ok() { echo "  ok: $*"; }
indent() { sed 's/^/  | /'; }
mark() {
	local n
	n=$(($(cat "$WORK/mark") + 1))
	echo "$n" >"$WORK/mark"
	MARK="auth-mark-$n"
	echo "$MARK $*" >/dev/kmsg
}
kmsg_since_mark() { dmesg | sed -n "/ $MARK /,\$p" | sed 1d; }
ctrls() { # controllers of subsystem $1
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) = "$1" ]] && echo "${c##*/}"
	done
	return 0
}
ns_dev() { # the block device of namespace 1 of subsystem $1
	local b n
	for b in /sys/block/nvme*n*; do
		n=${b##*/}
		[[ $n = nvme*c*n* ]] && continue # per-path nodes of native multipath
		[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$1" ]] || continue
		[[ $(cat "$b/nsid" 2>/dev/null) = 1 ]] || continue
		echo "/dev/$n"
		return 0
	done
	return 1
}
disconnect_all() {
	nvme disconnect -n "$1" >/dev/null 2>&1 || true
}
fio_verify() { # DEV SIZE -> runs fio, fails on errors
	local out rc=0
	out=$(timeout 600 fio --name=auth --filename="$1" --ioengine=libaio --direct=1 \
		--rw=randwrite --bsrange=4k-128k --size="$2" --iodepth=8 \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
		--eta=never 2>&1) || rc=$?
	echo "$out" | grep -E 'err=|issued rwts' | indent || true
	[[ $rc = 0 ]] || {
		echo "$out" | tail -n 20 | indent
		fail "fio exited with $rc"
	}
	! grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error' <<<"$out" ||
		fail "fio reported verify/I/O errors"
	ok "fio randwrite $2 with crc32c verify"
}

run_case() { # NAME SUBNQN EXPECT HASH GROUP HOST_SECRET CTRL_SECRET [NEW_SECRET SIGNAL_PORT]
	local subnqn=$2 expect=$3 hash=$4 group=$5 hs=$6 cs=$7 ns=${8:-} sig=${9:-} reply=""
	local args=(-t tcp -a "$ADDR" -s "$PORT" -n "$subnqn") out rc=0 c dev log n
	[[ $hs = - ]] || args+=(--dhchap-secret="$hs")
	[[ $cs = - ]] || args+=(--dhchap-ctrl-secret="$cs")
	echo "  nvme connect -n $subnqn hash $hash group $group$([[ $hs = - ]] && echo ', no secret')$([[ $cs = - ]] || echo ', bidirectional')"
	mark "$NAME"
	out=$(timeout 120 nvme connect "${args[@]}" 2>&1) || rc=$?
	echo "$out" | grep -v DHHC | indent || true
	if [[ $expect = refused ]]; then
		[[ $rc != 0 ]] || fail "the connect succeeded"
		sleep 1
		[[ -z $(ctrls "$subnqn") ]] || fail "a controller exists after the refused connect"
		kmsg_since_mark | grep -iE 'auth|fail|error' | grep -v DHHC | head -n 5 | indent || true
		ok "refused (nvme connect exit $rc)"
		return 0
	fi
	[[ $rc = 0 ]] || fail "nvme connect exited with $rc"
	c=$(ctrls "$subnqn")
	[[ -n $c ]] || fail "no controller after the connect"
	[[ $(cat "/sys/class/nvme/$c/state") = live ]] || fail "controller $c is not live"
	log=$(kmsg_since_mark)
	echo "$log" | grep -iE 'auth' | indent || true
	grep -q "qid 0: authenticated with hash hmac($hash) dhgroup $group" <<<"$log" ||
		fail "the kernel did not log 'qid 0: authenticated with hash hmac($hash) dhgroup $group'"
	if [[ $cs != - ]]; then
		grep -q "qid 0: controller authenticated" <<<"$log" ||
			fail "the kernel did not log 'qid 0: controller authenticated'"
	fi
	ok "authenticated with hmac($hash) / $group$([[ $cs = - ]] || echo ', controller authenticated too')"
	n=0
	until dev=$(ns_dev "$subnqn") && [[ -b $dev ]]; do
		n=$((n + 1))
		[[ $n -lt 50 ]] || fail "no block device for namespace 1"
		sleep 0.1
	done
	head -c 1048576 /dev/urandom >"$WORK/pattern"
	dd if="$WORK/pattern" of="$dev" bs=1M count=1 oflag=direct status=none || fail "write to $dev failed"
	dd if="$dev" of="$WORK/back" bs=1M count=1 iflag=direct status=none || fail "read from $dev failed"
	cmp -s "$WORK/pattern" "$WORK/back" || fail "read-back differs"
	ok "1 MiB written and read back on $dev"
	case $expect in
	fio) fio_verify "$dev" 8m ;;
	reauth | rotate)
		fio_verify "$dev" 4m
		mark "$NAME reauth"
		(fio_verify "$dev" 16m >"$WORK/fio.out" 2>&1; echo $? >"$WORK/fio.rc") &
		sleep 2
		if [[ $expect = rotate ]]; then
			# The target takes the new key first (live controllers stay).
			exec 3<>"/dev/tcp/$ADDR/$sig" || fail "cannot reach the signal port $sig"
			read -r -t 60 reply <&3 || true
			exec 3<&-
			[[ $reply = ok ]] || fail "the target did not take the new key: ${reply:-no answer}"
			ok "the target has the new key"
			hs=$ns
		fi
		printf '%s' "$hs" >"/sys/class/nvme/$c/dhchap_secret" || fail "write to sysfs dhchap_secret failed"
		wait
		cat "$WORK/fio.out"
		[[ $(cat "$WORK/fio.rc") = 0 ]] || fail "fio during re-authentication failed"
		log=$(kmsg_since_mark)
		echo "$log" | grep -iE 'auth' | indent || true
		grep -q "re-authenticating controller" <<<"$log" || fail "no 're-authenticating controller' in the kernel log"
		grep -q "qid 0: authenticated with hash" <<<"$log" || fail "qid 0 did not re-authenticate"
		grep -qiE 'authentication failed|reset|reconnect' <<<"$log" && fail "re-authentication failed or reset the controller"
		[[ $(cat "/sys/class/nvme/$c/state") = live ]] || fail "controller $c is not live after re-authentication"
		ok "re-authenticated while fio ran; fio verified"
		;;
	esac
	out=$(nvme disconnect -n "$subnqn" 2>&1) || fail "nvme disconnect failed: $out"
	ok "disconnected"
}

[[ -r $CASES ]] || {
	echo "FAIL: setup: no $CASES"
	exit 1
}
passed=0 failed=0 failures=""
while read -r NAME subnqn expect hash group hs cs ns sig; do
	[[ -z $NAME || $NAME = \#* ]] && continue
	echo "=== $NAME"
	t=$(now)
	rc=0
	(run_case "$NAME" "$subnqn" "$expect" "$hash" "$group" "$hs" "$cs" "$ns" "$sig") || rc=$?
	if [[ $rc = 0 ]]; then
		echo "PASS: $NAME ($(since "$t")s)"
		passed=$((passed + 1))
	else
		[[ $rc = 99 ]] || echo "FAIL: $NAME: exited with $rc"
		failed=$((failed + 1))
		failures+=" $NAME"
		disconnect_all "$subnqn"
	fi
done <"$CASES"
echo "AUTH RESULT: $passed passed, $failed failed${failures:+ ($failures )}"
[[ $failed = 0 ]]
