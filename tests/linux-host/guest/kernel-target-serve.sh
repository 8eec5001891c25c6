#!/bin/bash
# kernel-target-serve.sh -- guest script for run-linux-host: configure the
# guest kernel's own NVMe/TCP target (nvmet + nvmet-tcp, through configfs),
# print "TARGET-READY ...", then serve until the VM is stopped.
#
# A reference target for host-side tests, reachable from this machine at
# 127.0.0.1:HOSTPORT:
#   run-linux-host --hostfwd HOSTPORT:4420 tests/linux-host/guest/kernel-target-serve.sh
# (use SERVE_PORTS=HOSTPORT with --hostfwd HOSTPORT:HOSTPORT if the discovery
# log's trsvcid must match the port the host connects to).
#
# Also used by interop.sh (INTEROP_TARGET=kernel) with --setup-only, to run
# the scenarios against an in-VM target.
#
# usage: kernel-target-serve.sh [--setup-only | --teardown]
# environment:
#   NQN                subsystem NQN (default nqn.2014-08.io.farflash:kernel-target)
#   SERVE_ADDR         listen address (default 0.0.0.0)
#   SERVE_PORTS        listen ports, space separated (default 4420)
#   SERVE_NAMESPACES   KIND:SIZE ..., NSIDs 1, 2, ... in order (default ram:64M)
#                      ram  = null_blk, memory backed, supports deallocate
#                      brd  = brd ramdisk (at most one; no deallocate in 6.1)
#                      file = a sparse file on tmpfs behind a loop device
#                      null = null_blk without memory (writes are dropped)
#   SERVE_BLOCK_SIZE   logical block size, 512 or 4096 (default 512; not brd)
#   SERVE_ALLOW_HOSTS  host NQNs allowed to connect, space separated
#                      (default empty = any host)
#   SERVE_SECONDS      stop (and tear down) after this long; 0 = never (default)
#   SERVE_DHCHAP_KEY   DH-HMAC-CHAP secret (DHHC-1:0X:...:) every allowed host
#                      must authenticate with (configfs hosts/NQN/dhchap_key;
#                      needs a kernel with NVME_TARGET_AUTH, e.g. 6.12, and
#                      SERVE_ALLOW_HOSTS)
#   SERVE_DHCHAP_CTRL_KEY  the controller's secret (dhchap_ctrl_key), for
#                      bidirectional authentication when the host asks
#   SERVE_DHCHAP_HASH  hmac(sha256) (default), hmac(sha384) or hmac(sha512)
#   SERVE_DHCHAP_DHGROUP  null (default), ffdhe2048 ... ffdhe8192
#   SERVE_TLS          1: every port requires TLS 1.3 (addr_tsas tls1.3,
#                      addr_treq required; an image made with run-linux-host
#                      --tls, a 6.12 kernel, and -f .../guest/tls-lib.sh);
#                      tlshd is started, its log copied to stderr
#   SERVE_TLS_KEYS     configured PSKs (NVMeTLSkey-1:HH:...:), space separated:
#                      each is inserted into the .nvme keyring with nvme-cli
#                      2.13's check-tls-key --insert (its derivation) for every
#                      host of SERVE_TLS_HOSTS, for NQN and the discovery NQN,
#                      with identities of versions 0 and 1
#   SERVE_TLS_HOSTS    host NQNs of those keys (default SERVE_ALLOW_HOSTS)
set -euo pipefail

NQN=${NQN:-nqn.2014-08.io.farflash:kernel-target}
SERVE_ADDR=${SERVE_ADDR:-0.0.0.0}
SERVE_PORTS=${SERVE_PORTS:-${SERVE_PORT:-4420}}
SERVE_NAMESPACES=${SERVE_NAMESPACES:-ram:64M}
SERVE_BLOCK_SIZE=${SERVE_BLOCK_SIZE:-512}
SERVE_ALLOW_HOSTS=${SERVE_ALLOW_HOSTS:-}
SERVE_SECONDS=${SERVE_SECONDS:-0}
SERVE_DHCHAP_KEY=${SERVE_DHCHAP_KEY:-}
SERVE_DHCHAP_CTRL_KEY=${SERVE_DHCHAP_CTRL_KEY:-}
SERVE_DHCHAP_HASH=${SERVE_DHCHAP_HASH:-}
SERVE_DHCHAP_DHGROUP=${SERVE_DHCHAP_DHGROUP:-}
SERVE_TLS=${SERVE_TLS:-0}
SERVE_TLS_KEYS=${SERVE_TLS_KEYS:-}
SERVE_TLS_HOSTS=${SERVE_TLS_HOSTS:-$SERVE_ALLOW_HOSTS}
DISCOVERY_NQN=nqn.2014-08.org.nvmexpress.discovery

CFG=/sys/kernel/config/nvmet
SUB=$CFG/subsystems/$NQN
STATE=/run/kernel-target # what we created, for --teardown
PORT_BASE=100            # configfs port ids: PORT_BASE + index

die() {
	echo "kernel-target-serve: error: $*" >&2
	exit 1
}

to_mib() { # SIZE (K/M/G/T suffix, optional iB/B) -> MiB (integer, >= 1)
	local v=${1%[iI][bB]} n
	v=${v%[bB]}
	case $v in
	*[kK]) n=$((${v%?} / 1024)) ;;
	*[mM]) n=${v%?} ;;
	*[gG]) n=$((${v%?} * 1024)) ;;
	*[tT]) n=$((${v%?} * 1024 * 1024)) ;;
	*) n=$((v / 1048576)) ;;
	esac
	[[ $n =~ ^[0-9]+$ && $n -ge 1 ]] || die "bad size '$1' (at least 1 MiB)"
	echo "$n"
}

null_blk_dev() { # INDEX MIB MEMORY_BACKED -> prints /dev/nullbINDEX
	local d=/sys/kernel/config/nullb/nullb$1
	[[ -d /sys/kernel/config/nullb ]] || modprobe null_blk nr_devices=0
	mkdir "$d"
	echo "$2" >"$d/size"
	echo "$SERVE_BLOCK_SIZE" >"$d/blocksize"
	echo "$3" >"$d/memory_backed"
	echo "$3" >"$d/discard"
	echo 1 >"$d/power"
	echo "nullb $d" >>"$STATE"
	echo "/dev/nullb$1"
}

loop_dev() { # INDEX MIB -> prints the loop device over a sparse tmpfs file
	local img=/run/kernel-target-ns$1.img dev
	truncate -s "$2M" "$img"
	modprobe loop
	if losetup --help 2>&1 | grep -q -- --sector-size; then
		dev=$(losetup --sector-size "$SERVE_BLOCK_SIZE" --show -f "$img")
	else
		[[ $SERVE_BLOCK_SIZE = 512 ]] || die "this losetup cannot set a $SERVE_BLOCK_SIZE-byte sector size"
		dev=$(losetup -f)
		losetup "$dev" "$img"
	fi
	echo "loop $dev $img" >>"$STATE"
	echo "$dev"
}

# tlshd with the .nvme keyring (tls-lib.sh, passed with -f), and the keys.
tls_setup() {
	local key host sub v
	# shellcheck source-path=SCRIPTDIR source=tls-lib.sh
	. "${GUEST_FILES:-/guest/files}/tls-lib.sh" || die "SERVE_TLS needs -f tests/linux-host/guest/tls-lib.sh"
	tls_start
	echo "pid $TLSHD_PID" >>"$STATE"
	echo "pid $TLSHD_TAIL" >>"$STATE"
	[[ -z $SERVE_TLS_KEYS || -n $SERVE_TLS_HOSTS ]] || die "SERVE_TLS_KEYS needs SERVE_TLS_HOSTS or SERVE_ALLOW_HOSTS"
	for key in $SERVE_TLS_KEYS; do
		for host in $SERVE_TLS_HOSTS; do
			for sub in "$NQN" "$DISCOVERY_NQN"; do
				for v in 0 1; do
					tls_insert "$key" "$host" "$sub" "$v" >/dev/null
				done
			done
		done
	done
	echo "TLS-KEYS $(grep -c ' psk .*NVMe[01]R0' /proc/keys || true) in .nvme"
}

setup() {
	local nsid=0 spec kind mib dev i=0 port host brd_used=0 nullb=0
	[[ $SERVE_BLOCK_SIZE = 512 || $SERVE_BLOCK_SIZE = 4096 ]] || die "SERVE_BLOCK_SIZE must be 512 or 4096"
	[[ ! -e $SUB ]] || die "subsystem $NQN already exists"
	modprobe nvmet
	modprobe nvmet-tcp
	: >"$STATE"
	[[ $SERVE_TLS = 0 ]] || tls_setup
	mkdir "$SUB"
	echo "subsystem $SUB" >>"$STATE"
	for spec in $SERVE_NAMESPACES; do
		nsid=$((nsid + 1))
		kind=${spec%%:*}
		[[ $spec = *:* ]] || die "bad namespace '$spec' (KIND:SIZE)"
		mib=$(to_mib "${spec#*:}")
		case $kind in
		ram)
			dev=$(null_blk_dev "$nullb" "$mib" 1)
			nullb=$((nullb + 1))
			;;
		null)
			dev=$(null_blk_dev "$nullb" "$mib" 0)
			nullb=$((nullb + 1))
			;;
		brd)
			[[ $brd_used = 0 ]] || die "only one brd namespace is supported"
			[[ $SERVE_BLOCK_SIZE = 512 ]] || die "brd namespaces have 512-byte blocks only"
			modprobe brd rd_nr=1 rd_size=$((mib * 1024))
			brd_used=1
			dev=/dev/ram0
			;;
		file) dev=$(loop_dev "$nsid" "$mib") ;;
		*) die "unknown namespace kind '$kind' (ram, brd, file, null)" ;;
		esac
		mkdir "$SUB/namespaces/$nsid"
		echo "$dev" >"$SUB/namespaces/$nsid/device_path"
		echo 1 >"$SUB/namespaces/$nsid/enable"
		echo "namespace $SUB/namespaces/$nsid" >>"$STATE"
	done
	[[ $nsid -ge 1 ]] || die "SERVE_NAMESPACES is empty"
	[[ -z $SERVE_DHCHAP_KEY || -n $SERVE_ALLOW_HOSTS ]] || die "SERVE_DHCHAP_KEY needs SERVE_ALLOW_HOSTS"
	if [[ -z $SERVE_ALLOW_HOSTS ]]; then
		echo 1 >"$SUB/attr_allow_any_host"
	else
		echo 0 >"$SUB/attr_allow_any_host"
		for host in $SERVE_ALLOW_HOSTS; do
			[[ -d $CFG/hosts/$host ]] || {
				mkdir "$CFG/hosts/$host"
				echo "host $CFG/hosts/$host" >>"$STATE"
			}
			if [[ -n $SERVE_DHCHAP_KEY ]]; then
				[[ -e $CFG/hosts/$host/dhchap_key ]] || die "this kernel has no NVMe target authentication"
				printf '%s' "$SERVE_DHCHAP_KEY" >"$CFG/hosts/$host/dhchap_key"
				[[ -z $SERVE_DHCHAP_CTRL_KEY ]] ||
					printf '%s' "$SERVE_DHCHAP_CTRL_KEY" >"$CFG/hosts/$host/dhchap_ctrl_key"
				[[ -z $SERVE_DHCHAP_HASH ]] || echo "$SERVE_DHCHAP_HASH" >"$CFG/hosts/$host/dhchap_hash"
				[[ -z $SERVE_DHCHAP_DHGROUP ]] || echo "$SERVE_DHCHAP_DHGROUP" >"$CFG/hosts/$host/dhchap_dhgroup"
			fi
			ln -s "$CFG/hosts/$host" "$SUB/allowed_hosts/$host"
			echo "link $SUB/allowed_hosts/$host" >>"$STATE"
		done
	fi
	for port in $SERVE_PORTS; do
		i=$((i + 1))
		local p=$CFG/ports/$((PORT_BASE + i))
		mkdir "$p"
		echo ipv4 >"$p/addr_adrfam"
		echo tcp >"$p/addr_trtype"
		echo "$SERVE_ADDR" >"$p/addr_traddr"
		echo "$port" >"$p/addr_trsvcid"
		if [[ $SERVE_TLS = 1 ]]; then
			[[ -e $p/addr_tsas ]] || die "this kernel's nvmet has no TLS (addr_tsas)"
			echo tls1.3 >"$p/addr_tsas"
			echo required >"$p/addr_treq"
		fi
		echo "port $p" >>"$STATE"
		ln -s "$SUB" "$p/subsystems/$NQN"
		echo "link $p/subsystems/$NQN" >>"$STATE"
	done
	echo "TARGET-READY nqn=$NQN addr=$SERVE_ADDR ports=${SERVE_PORTS// /,}" \
		"namespaces=${SERVE_NAMESPACES// /,} block_size=$SERVE_BLOCK_SIZE" \
		"allow_hosts=${SERVE_ALLOW_HOSTS:-any}" \
		"dhchap=${SERVE_DHCHAP_KEY:+${SERVE_DHCHAP_HASH:-hmac(sha256)}/${SERVE_DHCHAP_DHGROUP:-null}${SERVE_DHCHAP_CTRL_KEY:+/bidirectional}}" \
		"tls=$([[ $SERVE_TLS = 1 ]] && echo "tls1.3/required" || echo none)"
}

teardown() { # undo what setup recorded, newest first
	local kind path extra
	[[ -f $STATE ]] || return 0
	tac "$STATE" 2>/dev/null >"$STATE.rev" || sed '1!G;h;$!d' "$STATE" >"$STATE.rev"
	while read -r kind path extra; do
		case $kind in
		link) rm -f "$path" ;;
		pid) kill "$path" 2>/dev/null || true ;;
		port | host | subsystem) rmdir "$path" ;;
		namespace)
			echo 0 >"$path/enable"
			rmdir "$path"
			;;
		nullb)
			echo 0 >"$path/power"
			rmdir "$path"
			;;
		loop)
			losetup -d "$path"
			rm -f "$extra"
			;;
		esac
	done <"$STATE.rev"
	rm -f "$STATE" "$STATE.rev"
}

case ${1:-} in
--teardown)
	teardown
	exit 0
	;;
--setup-only)
	setup
	exit 0
	;;
"") setup ;;
*) die "usage: kernel-target-serve.sh [--setup-only | --teardown]" ;;
esac

if [[ $SERVE_SECONDS -gt 0 ]]; then
	sleep "$SERVE_SECONDS"
	teardown
	echo "TARGET-STOPPED"
else
	while :; do sleep 3600; done
fi
