#!/bin/bash
# tls-host.sh -- guest script: the Linux 6.12 host, its TLS handshakes done
# by tlshd, against `farflash serve` on the machine over NVMe/TCP with TLS
# 1.3 (tests/interop_tls.rs, issue 32). Needs an image made with
# run-linux-host --kernel 6.12 --tls and -f tls-lib.sh -f lib.sh.
#
# Keys go into the .nvme keyring with nvme-cli 2.13's check-tls-key
# --insert; each controller is made by writing to /dev/nvme-fabrics with
# `tls,tls_key=SERIAL` (nvme-cli 2.13's `connect --tls` does not find the
# inserted key here), so that the identity (version 0 or 1) is chosen.
#
# environment (besides run-linux-host's):
#   NQN          the subsystem
#   TLS_CASES    lines "NAME HOSTNQN KEY VERSION ok|refused": ok = the
#                controller goes live, uses that key (sysfs tls_key), and a
#                1 MiB pattern written through it reads back; refused = the
#                connect fails and no controller remains
#   ROTATE       "HOSTNQN OLDKEY NEWKEY": with a controller on OLDKEY
#                (identity 0) doing fio verify, the host side is asked
#                ($SHARE_DIR/rotate) to give the host NEWKEY through
#                farflash's management; then a new controller with NEWKEY
#                (identity 1) goes live and does I/O, one with OLDKEY
#                (identity 1) is refused, and the first controller keeps
#                its association (same cntlid, no reset) and fio never fails
# Prints "PASS: NAME (SECS s)" or "FAIL: NAME: WHY" per check; exits 1 if any failed.
set -u
FAILED=0
fail() {
	echo "FAIL: ${CASE:-setup}: $*"
	exit 1
}
# shellcheck source-path=SCRIPTDIR source=tls-lib.sh
. "$GUEST_FILES/tls-lib.sh"
# shellcheck source-path=SCRIPTDIR source=lib.sh
. "$GUEST_FILES/lib.sh"
tls_start

# hostid_of HOSTNQN: the UUID of a uuid NQN (the kernel refuses one host
# ID under two NQNs).
hostid_of() { echo "${1##*:uuid:}"; }

# connect HOSTNQN SERIAL [tls|plain]: a controller through /dev/nvme-fabrics;
# prints the kernel's answer ("instance=N,cntlid=M").
connect() {
	local opts="nqn=$NQN,transport=tcp,traddr=$TARGET_ADDR,trsvcid=$TARGET_PORT"
	opts+=",hostnqn=$1,hostid=$(hostid_of "$1"),duplicate_connect"
	[[ ${3:-tls} = plain ]] || opts+=",tls,tls_key=0x$2"
	local line
	exec 3<>/dev/nvme-fabrics || return 1
	if ! printf '%s' "$opts" >&3 2>/tmp/connect.err; then
		exec 3>&-
		return 1
	fi
	IFS= read -r line <&3
	exec 3>&-
	echo "$line"
}
ctrl_dir() { echo "/sys/class/nvme/nvme${1#instance=}" | sed 's/,cntlid=.*//'; }
drop() { echo 1 >"$1/delete_controller" 2>/dev/null || true; }
# drop_all: no controller left (after a case, however it ended).
no_controllers() { [[ -z $(ls /sys/class/nvme/ 2>/dev/null) ]]; }
drop_all() {
	local c
	for c in /sys/class/nvme/nvme*; do [[ -e $c ]] && drop "$c"; done
	wait_for 300 "controllers remain: $(ls /sys/class/nvme/)" no_controllers
}

# io_check CTRLDIR: a 1 MiB random pattern written and read back through
# namespace 1, at 32 MiB (clear of the 2 MiB fio verifies at 0).
io_check() {
	local dev inst=${1##*/nvme}
	# (not $n: lib.sh's wait_for sets it)
	wait_for 300 "no namespace block device for $1" test -e "/sys/block/nvme${inst}n1"
	dev=/dev/nvme${inst}n1
	wait_for 100 "$dev missing" test -b "$dev"
	dd if=/dev/urandom of=/tmp/pattern bs=64k count=16 2>/dev/null
	dd if=/tmp/pattern of="$dev" bs=64k seek=512 oflag=direct 2>/dev/null || fail "write to $dev"
	dd if="$dev" of=/tmp/back bs=64k skip=512 count=16 iflag=direct 2>/dev/null || fail "read from $dev"
	cmp -s /tmp/pattern /tmp/back || fail "data read back from $dev differs"
}

run_case() { # NAME HOSTNQN KEY VERSION EXPECT
	CASE=$1
	local t0 serial r c
	t0=$(now)
	serial=$(tls_insert "$3" "$2" "$NQN" "$4")
	if r=$(connect "$2" "$serial"); then
		c=$(ctrl_dir "$r")
		[[ $5 = ok ]] || {
			drop "$c"
			fail "connected ($r), want a refusal"
		}
		[[ $(cat "$c/state") = live ]] || fail "controller $c is $(cat "$c/state")"
		[[ $(cat "$c/tls_key" 2>/dev/null) = "$serial" ]] || fail "controller $c uses tls_key '$(cat "$c/tls_key" 2>/dev/null)', not $serial"
		io_check "$c"
		drop "$c"
		wait_for 300 "$c not removed" test ! -e "$c"
	else
		[[ $5 = refused ]] || fail "connect refused: $(cat /tmp/connect.err)"
		no_controllers || fail "a controller remains after the refusal: $(ls /sys/class/nvme/)"
	fi
	keyctl unlink "0x$serial" %:.nvme >/dev/null 2>&1 || true
	echo "PASS: $1 ($(since "$t0") s)"
}

while read -r name host key version expect; do
	[[ -n ${name:-} ]] || continue
	(run_case "$name" "$host" "$key" "$version" "$expect") || FAILED=1
	(drop_all) || FAILED=1
done <<<"$TLS_CASES"

# Plaintext NVMe/TCP to the TLS-required listener.
(
	CASE=plaintext-refused
	t0=$(now)
	read -r host _ <<<"$ROTATE"
	if r=$(connect "$host" 0 plain); then
		drop "$(ctrl_dir "$r")"
		fail "a plaintext connect to the TLS listener succeeded ($r)"
	fi
	echo "PASS: $CASE ($(since "$t0") s)"
) || FAILED=1
(drop_all) || FAILED=1

# A key rotated through farflash's management while fio verify runs.
(
	CASE=rotate-during-io
	t0=$(now)
	read -r host old new <<<"$ROTATE"
	s_old0=$(tls_insert "$old" "$host" "$NQN" 0)
	s_old1=$(tls_insert "$old" "$host" "$NQN" 1)
	r=$(connect "$host" "$s_old0") || fail "connect with the old key: $(cat /tmp/connect.err)"
	a=$(ctrl_dir "$r")
	cntlid=$(cat "$a/cntlid")
	inst=${a##*/nvme}
	wait_for 300 "no namespace for $a" test -b "/dev/nvme${inst}n1"
	fio_loop_start "/dev/nvme${inst}n1" --size=1m
	progress "before the rotation"
	echo rotate >"$SHARE_DIR/.rotate" && mv "$SHARE_DIR/.rotate" "$SHARE_DIR/rotate"
	wait_for 300 "the host side did not rotate the key" test -f "$SHARE_DIR/rotate.done"
	[[ $(cat "$SHARE_DIR/rotate.done") = ok ]] || fail "rotation: $(cat "$SHARE_DIR/rotate.done")"
	progress "after the rotation"
	s_new1=$(tls_insert "$new" "$host" "$NQN" 1)
	r=$(connect "$host" "$s_new1") || fail "connect with the new key after the rotation: $(cat /tmp/connect.err)"
	b=$(ctrl_dir "$r")
	[[ $(cat "$b/tls_key") = "$s_new1" ]] || fail "the new controller does not use the new key"
	io_check "$b"
	drop "$b"
	if r=$(connect "$host" "$s_old1"); then
		drop "$(ctrl_dir "$r")"
		fail "a new connection with the old key succeeded after the rotation ($r)"
	fi
	progress "after the new connections"
	fio_loop_stop "the rotation"
	[[ $(cat "$a/state") = live && $(cat "$a/cntlid") = "$cntlid" ]] ||
		fail "the first controller is $(cat "$a/state") with cntlid $(cat "$a/cntlid"), was live with $cntlid"
	! dmesg | grep -E "nvme${inst}: (resetting|reconnect|starting error recovery)" ||
		fail "the first controller was reset or reconnected"
	drop "$a"
	echo "PASS: $CASE ($(since "$t0") s)"
) || FAILED=1

kill "$TLSHD_TAIL" "$TLSHD_PID" 2>/dev/null || true
sleep 0.3
echo "TLS-HOST RESULT: $([[ $FAILED = 0 ]] && echo PASS || echo FAIL)"
exit "$FAILED"
