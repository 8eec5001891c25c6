#!/bin/bash
# rdma-lib.sh -- sourced by the RDMA guest scripts (bash; tests/interop_rdma.rs
# passes it with `run-linux-host -f`): PASS:/FAIL: lines, Soft-RoCE on the
# guest's NIC, the kernel's nvmet-rdma target on a null_blk namespace, and
# waiting for and stopping a `farflash serve` started by the script.

FAILED=0
pass() { echo "PASS: $1 (${SECONDS}s)"; }
fail() {
	echo "FAIL: $1: $2"
	FAILED=1
}

# rxe_up [MODULE...]: loads the RDMA core modules (crc32_generic first: the
# rxe ICRC needs it) and MODULE..., and adds rxe0 on eth0.
rxe_up() {
	local m
	for m in crc32_generic rdma_rxe ib_uverbs rdma_ucm "$@"; do
		modprobe "$m" || return 1
	done
	rdma link add rxe0 type rxe netdev eth0 || return 1
	[[ -d /sys/class/infiniband/rxe0 ]]
}

# nvmet_rdma_nullb NQN ADDR PORT: the kernel's nvmet-rdma serving NQN (any
# host) on ADDR:PORT with one namespace, a 64 MiB RAM-backed null_blk.
nvmet_rdma_nullb() {
	local nqn=$1 addr=$2 port=$3 cfg=/sys/kernel/config/nvmet d=/sys/kernel/config/nullb/nullb0
	modprobe null_blk nr_devices=0 && modprobe nvmet && modprobe nvmet-rdma || return 1
	mkdir "$d" && echo 64 >"$d/size" && echo 1 >"$d/memory_backed" &&
		echo 1 >"$d/power" || return 1
	mkdir "$cfg/subsystems/$nqn" || return 1
	echo 1 >"$cfg/subsystems/$nqn/attr_allow_any_host"
	mkdir "$cfg/subsystems/$nqn/namespaces/1"
	echo /dev/nullb0 >"$cfg/subsystems/$nqn/namespaces/1/device_path"
	echo 1 >"$cfg/subsystems/$nqn/namespaces/1/enable" || return 1
	mkdir "$cfg/ports/1"
	echo rdma >"$cfg/ports/1/addr_trtype"
	echo ipv4 >"$cfg/ports/1/addr_adrfam"
	echo "$addr" >"$cfg/ports/1/addr_traddr"
	echo "$port" >"$cfg/ports/1/addr_trsvcid"
	ln -s "$cfg/subsystems/$nqn" "$cfg/ports/1/subsystems/$nqn"
}

# set_up NAME COMMAND...: COMMAND prepares the guest; PASS NAME, or FAIL NAME
# with the kernel's last messages and exit 1.
set_up() {
	local name=$1
	shift
	if "$@"; then
		pass "$name"
	else
		fail "$name" "set-up failed: $*"
		dmesg | tail -n 30
		exit 1
	fi
}

# For scripts that run `farflash serve` in the guest, logging to $LOG with
# its pid in $PID:
# show_log: the end of the target's log.
show_log() {
	echo "--- farflash log"
	tail -n "${SHOW_LINES:-40}" "$LOG"
	echo "---"
}
# serve_ready COMMAND...: waits up to 60 s, while the target lives, for
# COMMAND to succeed; true when it did and the target still runs.
serve_ready() {
	for _ in $(seq 1 300); do
		"$@" && break
		kill -0 "$PID" 2>/dev/null || break
		sleep 0.2
	done
	"$@" && kill -0 "$PID" 2>/dev/null
}
# serve_stop NAME: SIGTERM; PASS NAME when the target exits with status 0
# and no panic in its log.
serve_stop() {
	local st
	kill -TERM "$PID"
	wait "$PID"
	st=$?
	if ((st == 0)) && ! grep -q panicked "$LOG"; then
		pass "$1"
	else
		fail "$1" "farflash serve exited with $st"
		show_log
	fi
}
