#!/usr/bin/env bash
# tests/ceph/cluster.sh -- a throwaway single-node Ceph cluster for the RBD
# tests: one monitor, one manager, one BlueStore OSD on a sparse file, a pool
# "rbd" with an image "test", everything under DIR and on 127.0.0.1 only.
#
#   tests/ceph/cluster.sh start DIR    # prints DIR/ceph.conf when ready
#   tests/ceph/cluster.sh stop DIR     # stops the daemons it started, removes DIR
#   tests/ceph/cluster.sh stop-osd DIR # stops the OSD only (fault injection)
#
# Environment: CEPH_MON_PORT (msgr2 port, default: a free one),
# CEPH_IMAGE_SIZE (default 256M), CEPH_OSD_SIZE (default 4G, sparse).
# Needs Debian's ceph-mon, ceph-mgr, ceph-osd and ceph-common (tests/run.sh
# installs them). cephx is on: the admin keyring is DIR/client.admin.keyring
# (named in ceph.conf's [client] section).
set -euo pipefail

cmd=${1:?usage: cluster.sh start|stop|stop-osd DIR}
DIR=${2:?usage: cluster.sh start|stop|stop-osd DIR}
case "$DIR" in /*) ;; *) DIR=$PWD/$DIR ;; esac
DIR=${DIR%/}
CONF=$DIR/ceph.conf
RUN=$DIR/run
MARK=$DIR/.farflash-ceph-test
T0=$(date +%s%N)

log() { printf '[ceph %5dms] %s\n' $((($(date +%s%N) - T0) / 1000000)) "$*" >&2; }
die() {
	log "ERROR: $*"
	exit 1
}
C() { timeout 60 ceph -c "$CONF" --connect-timeout 10 "$@"; }

# A daemon's PID if it is alive and was started with our ceph.conf.
live_pid() {
	local f=$1 pid
	[[ -r $f ]] || return 1
	pid=$(<"$f")
	[[ $pid =~ ^[0-9]+$ && -r /proc/$pid/cmdline ]] || return 1
	tr '\0' ' ' <"/proc/$pid/cmdline" | grep -qF -- "$CONF" || return 1
	echo "$pid"
}

# Stops the daemons whose pid files are given: TERM, up to 10 s, then KILL.
stop_daemons() {
	local f pid pids=() i
	for f in "$@"; do
		pid=$(live_pid "$f") || continue
		kill -TERM "$pid" 2>/dev/null || true
		pids+=("$pid")
	done
	for i in $(seq 100); do
		local alive=0
		for pid in "${pids[@]}"; do [[ -d /proc/$pid ]] && alive=1; done
		[[ $alive = 0 ]] && return 0
		sleep 0.1
	done
	for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; done
}

wait_for() { # SECONDS WHAT COMMAND...
	local end=$(($(date +%s) + $1)) what=$2
	shift 2
	until "$@" >/dev/null 2>&1; do
		[[ $(date +%s) -lt $end ]] || die "timed out waiting for $what (logs: $DIR/log)"
		sleep 0.2
	done
}

free_port() {
	python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
}

osd_up() {
	C osd dump -f json | python3 -c '
import json, sys
o = [x for x in json.load(sys.stdin)["osds"] if x["osd"] == 0]
sys.exit(0 if o and o[0]["up"] == 1 and o[0]["in"] == 1 else 1)'
}

pgs_active() {
	C pg stat -f json | python3 -c '
import json, sys
d = json.load(sys.stdin)
d = d.get("pg_summary", d)
states = d.get("num_pg_by_state", [])
total = d.get("num_pgs", 0)
active = sum(s["num"] for s in states if "active" in s["name"].split("+"))
sys.exit(0 if total > 0 and active == total else 1)'
}

start() {
	[[ -e $DIR ]] && die "$DIR exists already"
	local b
	for b in ceph-mon ceph-mgr ceph-osd ceph ceph-authtool monmaptool rbd uuidgen; do
		command -v "$b" >/dev/null || die "$b is not installed (apt-get install ceph-mon ceph-mgr ceph-osd ceph-common uuid-runtime)"
	done
	local port=${CEPH_MON_PORT:-$(free_port)} fsid osd_uuid secret
	fsid=$(uuidgen)
	mkdir -p "$RUN" "$DIR/log" "$DIR/mon/ceph-a" "$DIR/mgr/ceph-x" "$DIR/osd/ceph-0"
	: >"$MARK"
	cat >"$CONF" <<CONF
[global]
fsid = $fsid
mon_host = v2:127.0.0.1:$port
public_addr = 127.0.0.1
cluster_addr = 127.0.0.1
ms_bind_ipv6 = false
ms_bind_msgr1 = false
auth_cluster_required = cephx
auth_service_required = cephx
auth_client_required = cephx
auth_allow_insecure_global_id_reclaim = false
run_dir = $RUN
pid_file = $RUN/\$name.pid
admin_socket = $RUN/\$name.asok
log_file = $DIR/log/\$name.log
crash_dir = $DIR/crash
osd_pool_default_size = 1
osd_pool_default_min_size = 1
osd_pool_default_pg_num = 8
osd_pool_default_pgp_num = 8
osd_pool_default_pg_autoscale_mode = off
osd_crush_chooseleaf_type = 0
mon_allow_pool_size_one = true
mon_warn_on_pool_no_redundancy = false
mon_data_avail_warn = 1
mon_data_avail_crit = 0
# Map changes commit after paxos_propose_interval (1 s by default).
paxos_propose_interval = 0.01
paxos_min_wait = 0.001

[client]
keyring = $DIR/client.admin.keyring
log_file = /dev/null
admin_socket =

[mon]
mon_data = $DIR/mon/\$cluster-\$id
mon_initial_members = a
mgr_initial_modules =

[mgr]
mgr_data = $DIR/mgr/\$cluster-\$id

[osd]
osd_data = $DIR/osd/\$cluster-\$id
osd_objectstore = bluestore
bluestore_block_create = true
bluestore_block_size = $(numfmt --from=iec "${CEPH_OSD_SIZE:-4G}")
bluestore_fsck_on_mkfs = false
osd_memory_target = 939524096
CONF

	ceph-authtool --create-keyring "$DIR/mon.keyring" --gen-key -n mon. --cap mon 'allow *' >/dev/null
	ceph-authtool --create-keyring "$DIR/client.admin.keyring" --gen-key -n client.admin \
		--cap mon 'allow *' --cap osd 'allow *' --cap mgr 'allow *' >/dev/null
	ceph-authtool "$DIR/mon.keyring" --import-keyring "$DIR/client.admin.keyring" >/dev/null
	monmaptool --create --fsid "$fsid" --addv a "[v2:127.0.0.1:$port]" "$DIR/monmap" >/dev/null
	ceph-mon -c "$CONF" --mkfs -i a --monmap "$DIR/monmap" --keyring "$DIR/mon.keyring"
	ceph-mon -c "$CONF" -i a
	wait_for 30 "the monitor" C mon stat
	log "mon.a up on 127.0.0.1:$port"

	C auth get-or-create mgr.x mon 'allow profile mgr' osd 'allow *' -o "$DIR/mgr/ceph-x/keyring"
	ceph-mgr -c "$CONF" -i x
	log "mgr.x started"

	osd_uuid=$(uuidgen)
	secret=$(ceph-authtool --gen-print-key)
	printf '{"cephx_secret": "%s"}\n' "$secret" >"$DIR/osd-new.json"
	[[ $(C osd new "$osd_uuid" -i "$DIR/osd-new.json") = 0 ]] || die "osd new did not give id 0"
	rm -f "$DIR/osd-new.json"
	ceph-authtool --create-keyring "$DIR/osd/ceph-0/keyring" -n osd.0 --add-key "$secret" >/dev/null
	ceph-osd -c "$CONF" -i 0 --mkfs --osd-uuid "$osd_uuid" >"$DIR/log/osd-mkfs.out" 2>&1 ||
		die "ceph-osd --mkfs failed: $(cat "$DIR/log/osd-mkfs.out")"
	ceph-osd -c "$CONF" -i 0
	wait_for 60 "osd.0 up and in" osd_up
	log "osd.0 up"

	C osd pool create rbd 8 8 replicated >/dev/null 2>&1
	timeout 60 rbd -c "$CONF" pool init rbd
	timeout 60 rbd -c "$CONF" create --size "${CEPH_IMAGE_SIZE:-256M}" rbd/test
	wait_for 60 "every PG active" pgs_active
	log "pool rbd, image rbd/test ready"
	echo "$CONF"
}

stop() {
	[[ -d $DIR ]] || return 0
	[[ -e $MARK ]] || die "$DIR was not made by this script; not touching it"
	# The OSD first, while the monitor can still mark it down.
	stop_daemons "$RUN"/osd.*.pid
	stop_daemons "$RUN"/mgr.*.pid "$RUN"/mon.*.pid
	rm -rf -- "$DIR"
	log "stopped, $DIR removed"
}

case "$cmd" in
start) start ;;
stop) stop ;;
stop-osd) stop_daemons "$RUN"/osd.*.pid ;;
*) die "unknown command $cmd" ;;
esac
