#!/bin/bash
# rdma-farflash-auth.sh -- guest script for run-linux-host with a kernel that
# has NVMe in-band authentication (--kernel 6.12): farflash's NVMe/RDMA
# target inside the guest over Soft-RoCE, with DH-HMAC-CHAP and RDMA
# listeners added and removed at run time (docs/rdma.md).
#
# $FARFLASH names the farflash binary; $GUEST_FILES/rdma-auth.toml is its
# configuration (one RDMA listener on $ADDR:4420, a subsystem $NQN that
# requires this guest's host NQN to authenticate with $KEY, group
# ffdhe2048); $WRONG is another secret. Needs the image of
# rdma-farflash-target.sh (RDMA modules, the rxe provider). Prints PASS:/FAIL:
# lines; exit status 0 when all passed.
set -uo pipefail

ADDR=${RDMA_ADDR:-10.0.2.15}
NQN=${NQN:?NQN names the subsystem}
FF=${FARFLASH:?FARFLASH names the farflash binary}
KEY=${KEY:?} WRONG=${WRONG:?}
CONF=${GUEST_FILES:-/guest/files}/rdma-auth.toml
LOG=/tmp/farflash.log
SOCK=/tmp/farflash.sock
. "${GUEST_FILES:-/guest/files}/rdma-lib.sh"
alive() { kill -0 "$PID" 2>/dev/null; }
ctl() { "$FF" ctl -s "$SOCK" "$@"; }
ctrls() { # controllers of $NQN
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) = "$NQN" ]] && echo "${c##*/}"
	done
	return 0
}
ns_dev() { # the block device of $NQN's namespace, waiting for it
	local b n
	for _ in $(seq 1 50); do
		for b in /sys/block/nvme*n*; do
			n=${b##*/}
			[[ $n = nvme*c*n* ]] && continue
			[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$NQN" ]] && echo "/dev/$n" && return 0
		done
		sleep 0.2
	done
	return 1
}
verify() { # fio verify of 4 KiB (in-capsule) and 128 KiB (RDMA READ) writes
	local bs
	for bs in 4k 128k; do
		fio --name=v --filename="$1" --direct=1 --ioengine=libaio --iodepth=4 \
			--rw=randwrite --bs=$bs --size=2M --verify=crc32c --do_verify=1 \
			--numjobs=1 --output-format=terse >/dev/null || return 1
	done
}
# connect PORT SECRET [more nvme connect options]
connect() {
	local port=$1 secret=$2
	shift 2
	nvme connect -t rdma -a "$ADDR" -s "$port" -n "$NQN" --dhchap-secret "$secret" "$@"
}

set_up rxe rxe_up nvme-rdma

"$FF" serve --config "$CONF" --rpc-socket "$SOCK" --threads 2 \
	--log-level "${FARFLASH_LOG:-info}" >"$LOG" 2>&1 &
PID=$!
listening() { grep -q "listening on rdma:$ADDR:4420" "$LOG" && [[ -S $SOCK ]]; }
if serve_ready listening; then
	pass serve-rdma-auth
else
	fail serve-rdma-auth "farflash serve did not come up"
	show_log
	exit 1
fi

# A wrong secret: the kernel's connect fails, no controller stays, the
# target counts the failure and goes on.
connect 4420 "$WRONG" >/tmp/wrong.out 2>&1 &
CPID=$!
for _ in $(seq 1 450); do
	kill -0 "$CPID" 2>/dev/null || break
	sleep 0.2
done
st=124
if kill -0 "$CPID" 2>/dev/null; then
	fail rdma-auth-wrong-key "nvme connect with a wrong secret still running after 90 s"
	cat /tmp/wrong.out
	dmesg | tail -n 40
	SHOW_LINES=80 show_log
else
	wait "$CPID"
	st=$?
	cat /tmp/wrong.out
fi
if ((st == 0)); then
	fail rdma-auth-wrong-key "nvme connect with a wrong secret succeeded"
	nvme disconnect -n "$NQN" >/dev/null
elif ((st != 124)) && [[ -z $(ctrls) ]] && alive; then
	pass rdma-auth-wrong-key
elif ((st != 124)); then
	fail rdma-auth-wrong-key "controllers left: $(ctrls)"
fi

# The right secret: the kernel logs the admin queue's authentication; the
# I/O queues authenticate too or no command of theirs would run (the
# subsystem requires it): fio verify.
dmesg -c >/dev/null
dev=""
if connect 4420 "$KEY" --nr-io-queues=2 && dev=$(ns_dev); then
	auth=$(dmesg | grep -o "qid 0: authenticated with hash .*" | head -n 1)
	queues=$(dmesg | grep -o "creating [0-9]* I/O queues" | tail -n 1)
	echo "kernel: $auth; $queues"
	if [[ $auth = *"dhgroup ffdhe2048"* && $queues = "creating 2 I/O queues" ]] && verify "$dev"; then
		pass "rdma-auth-right-key (fio verify on $dev)"
	else
		fail rdma-auth-right-key "'$auth', '$queues', fio on '$dev'"
		dmesg | tail -n 20
		show_log
	fi
else
	fail rdma-auth-right-key "nvme connect failed"
	dmesg | tail -n 20
	show_log
	dev=""
fi

# Re-authentication while fio runs: the same secret written to the
# controller's sysfs dhchap_secret makes the kernel re-authenticate every
# queue (the target computes on its helper thread while I/O goes on); the
# controller stays live, no reset, fio verifies.
c=$(ctrls | head -n 1)
if [[ -n $dev && -n $c ]]; then
	dmesg -c >/dev/null
	(verify "$dev"; echo $? >/tmp/fio.rc) &
	FPID=$!
	sleep 1
	printf '%s' "$KEY" >"/sys/class/nvme/$c/dhchap_secret"
	for _ in $(seq 1 300); do
		kill -0 "$FPID" 2>/dev/null || break
		sleep 0.2
	done
	if kill -0 "$FPID" 2>/dev/null; then
		echo 124 >/tmp/fio.rc
		echo "fio still running 60 s after the re-authentication began"
		dmesg | tail -n 30
		SHOW_LINES=150 show_log
	else
		wait "$FPID"
	fi
	log=$(dmesg)
	echo "$log" | grep -iE "auth" | head -n 5
	if [[ $(cat /tmp/fio.rc) = 0 ]] && grep -q "re-authenticating controller" <<<"$log" &&
		grep -q "qid 0: authenticated with hash" <<<"$log" &&
		! grep -qiE "authentication failed|reset|reconnect" <<<"$log" &&
		[[ $(cat "/sys/class/nvme/$c/state") = live ]]; then
		pass rdma-reauth-during-io
	else
		fail rdma-reauth-during-io "fio $(cat /tmp/fio.rc), state $(cat "/sys/class/nvme/$c/state")"
		show_log
	fi
else
	fail rdma-reauth-during-io "no controller"
fi

# An RDMA listener added at run time: discovery through it, and a second
# controller connects through it and authenticates.
if ctl listener add "rdma:$ADDR:4422"; then
	out=$(nvme discover -t rdma -a "$ADDR" -s 4422 2>&1)
	if grep -q "trsvcid: *4422" <<<"$out"; then
		pass rdma-listener-added
	else
		echo "$out"
		fail rdma-listener-added "discovery through 4422 does not list it"
	fi
else
	fail rdma-listener-added "ctl listener add failed"
	show_log
fi
via() { # the controller of $NQN whose address has port $1
	local c
	for c in $(ctrls); do
		[[ $(cat "/sys/class/nvme/$c/address") = *trsvcid=$1* ]] && echo "$c"
	done
	return 0
}
new=""
if connect 4422 "$KEY" --nr-io-queues=1; then
	sleep 1
	new=$(via 4422)
	echo "controllers: $(ctrls | tr '\n' ' '); through 4422: $new"
	if [[ -n $new ]]; then
		pass rdma-connect-added-listener
	else
		fail rdma-connect-added-listener "no controller through 4422"
	fi
else
	fail rdma-connect-added-listener "nvme connect through 4422 failed"
	show_log
fi

# Removing the 4420 listener closes its queues only: the controller
# through 4422 stays live and carries I/O (native multipath: the
# namespace's head sends it down the live path).
state() { cat "/sys/class/nvme/$1/state" 2>/dev/null; }
old=$(via 4420)
if [[ -n $new && -n $old ]] && ctl listener remove "rdma:$ADDR:4420"; then
	for _ in $(seq 1 50); do
		[[ $(state "$old") != live ]] && break
		sleep 0.2
	done
	echo "after removing 4420: $old $(state "$old"), $new $(state "$new")"
	if [[ $(state "$old") != live && $(state "$new") = live ]] && verify "$dev"; then
		pass rdma-listener-removed-closes-its-queues-only
	else
		fail rdma-listener-removed-closes-its-queues-only \
			"$old: $(state "$old"), $new: $(state "$new")"
		show_log
	fi
else
	fail rdma-listener-removed-closes-its-queues-only "no two controllers or ctl failed"
fi
nvme disconnect -n "$NQN" >/dev/null

if grep -qF -e "${KEY#DHHC-1:0?:}" -e "${WRONG#DHHC-1:0?:}" "$LOG"; then
	fail no-secret-in-log "a secret reached the target's log"
else
	pass no-secret-in-log
fi

serve_stop target-exit-clean
exit $FAILED
