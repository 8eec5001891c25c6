#!/usr/bin/env bash
# benches/pool.sh -- issue 42's numbers for thin volumes (docs/volumes.md):
# farflash's local pool against a file namespace and against SPDK's lvol
# store, side by side on files of one file system.
#
#   bash benches/pool.sh
#   ROUNDS=1 RUNTIME=2 SIZE=256M OPEN_VOLUMES=100 MANY_VOLUMES=1000 bash benches/pool.sh
#
# Targets on core 0, the initiator on core 1, all on 127.0.0.1 over NVMe/TCP;
# the initiator is `farflash perf --cpus-allowed 1` (busy-poll). Every target
# runs alone, started for each measurement and stopped after it. Configurations:
#   file:    taskset -c 0 farflash serve --file F --block-size 4096 (F: SIZE bytes)
#   vol:     an allocated thin volume of SIZE bytes in a local pool (1 MiB
#            clusters, the default) on a file P of the same file system,
#            exported with `backend = "volume"` in a `[[pool]]` configuration
#   fresh:   a new thin volume of SIZE bytes in the same pool for every
#            measurement (created through JSON-RPC before it, deleted after):
#            randwrite only, measured from its first write (no warm-up), so
#            every first write of a cluster allocates one
#   lvol:    SPDK's nvmf_tgt -m 0x1 --no-huge -s 1024 with an AIO bdev (the
#            uring bdev when SPDK was built with it) of 4 KiB blocks on a file
#            L, an lvol store on it (bdev_lvol_create_lvstore, SPDK's default
#            4 MiB clusters; LVS_CLUSTER= to change) and a thin lvol of SIZE
#            bytes (bdev_lvol_create -t), exported over NVMe/TCP
#   lvfresh: a new thin lvol per measurement, as fresh
# F, the volume and the lvol are preconditioned once (one sequential 128 KiB
# write pass over the whole namespace) before the rounds; P and L are
# 2 * SIZE + 3 GiB (the volumes below fit without running out).
# Rows: 4 KiB randread QD 1 and 32 (file, vol, lvol), 4 KiB randwrite QD 1
# and 32 (all five). Each measurement runs WARMUP seconds before RUNTIME
# measured seconds (fresh and lvfresh: none). ROUNDS rounds; in a round each
# row runs its configurations back to back in an order that rotates from
# round to round; a ratio is the median of the per-round ratios. Bars
# (issue 42): vol / file >= 0.95, fresh / file >= 0.8.
#
# Then snapshot and clone creation time, farflash (JSON-RPC snapshot_create,
# volume_clone) against SPDK (bdev_lvol_snapshot, bdev_lvol_clone), of a
# 1 GiB volume written whole and of a LARGE (1 TiB) thin one with 1 GiB
# written: one call each per round and volume (the snapshot and clone are
# deleted after), timed from the request's first byte sent to the answer's
# last byte received on the target's Unix socket (one Python client for
# farflash; SPDK's own python/spdk/rpc/client.py, what scripts/rpc.py
# uses, for SPDK: the interpreters' start-up is not timed). Bar: < 10 ms.
#
# Then opening a pool (`farflash pool open --json`: LocalPool::open as serve
# does it, recovery included): a sparse file of each of OPEN_SIZES (1 TiB and
# 8 TiB: the time must not grow with the device) with OPEN_VOLUMES (1,000)
# volumes, opened right after `serve` was SIGKILLed at the end of 2 s of
# 4 KiB random writes (QD 32) to 256 MiB of one of them, a new 256 MiB each
# round (ROUNDS times; bar < 2 s), and a pool
# with MANY_VOLUMES (10,000) volumes opened after a clean stop (bar < 1 s;
# resident memory per volume = the open's RSS growth, less that of an empty
# pool's open, over the volume count).
#
# Environment: SPDK_DIR (../anchors/spdk), ROUNDS (5), RUNTIME seconds (5),
# WARMUP seconds (1), SIZE (4G), LARGE (1T), LVS_CLUSTER (SPDK's default),
# OPEN_VOLUMES (1000), OPEN_SIZES ("1T 8T"), MANY_VOLUMES (10000), SPDK (1; 0 leaves SPDK out),
# PARTS ("io snap open"), ROWS ("rr1 rr32 rw1 rw32": randread, randwrite QD 1, 32), BENCH_DIR (where the files go; a directory of its
# own is made in it and removed at the end; default /var/tmp; it needs about
# 5 * SIZE + 6 GiB free, checked), PORT (4530),
# SPDK_PORT (4531), BIN (a farflash binary to run instead of building this tree's), OUT (docs/benchmarks.md; empty: do not write).
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME=pool.sh
SPDK_DIR=${SPDK_DIR:-$ROOT/../anchors/spdk}
ROUNDS=${ROUNDS:-5} RUNTIME=${RUNTIME:-5} WARMUP=${WARMUP:-1}
SIZE=${SIZE:-4G} LARGE=${LARGE:-1T} LVS_CLUSTER=${LVS_CLUSTER:-}
OPEN_VOLUMES=${OPEN_VOLUMES:-1000} MANY_VOLUMES=${MANY_VOLUMES:-10000} OPEN_SIZES=${OPEN_SIZES:-1T 8T}
SPDK=${SPDK:-1} PARTS=${PARTS:-io snap open} ROWS=${ROWS:-rr1 rr32 rw1 rw32}
PORT=${PORT:-4530} SPDK_PORT=${SPDK_PORT:-4531}
OUT=${OUT-docs/benchmarks.md}
NQN=nqn.2026-11.io.farflash:poolbench
SPDK_NQN=nqn.2016-06.io.spdk:poolbench
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
for s in $OPEN_SIZES; do [[ $s =~ ^[1-9][0-9]*[GT]$ ]] || die "OPEN_SIZES: $s is not a size like 1T"; done

for t in taskset python3 cargo numfmt; do command -v "$t" >/dev/null || die "$t is required"; done
[[ $(nproc) -ge 2 ]] || die "needs at least 2 CPUs (targets on core 0, the initiator on core 1)"
for p in $PARTS; do [[ $p =~ ^(io|snap|open)$ ]] || die "unknown part $p in PARTS (have: io snap open)"; done
has_part() { [[ " $PARTS " = *" $1 "* ]]; }
bytes() { numfmt --from=iec "$1" 2>/dev/null || die "$2=$1 is not a size (4G, 256M, 1T)"; }
SIZE_B=$(bytes "$SIZE" SIZE) LARGE_B=$(bytes "$LARGE" LARGE)
((SIZE_B >= 64 << 20 && SIZE_B % (4 << 20) == 0)) || die "SIZE=$SIZE: at least 64M, a multiple of 4M"
GIB=$((1 << 30))

# ---- SPDK ------------------------------------------------------------------------
TGT=$SPDK_DIR/build/bin/nvmf_tgt
SPDK_VERSION="" BDEV=""
if [[ $SPDK = 1 ]]; then
	[[ -x $TGT ]] || die "no SPDK target in SPDK_DIR=$SPDK_DIR: build/bin/nvmf_tgt is missing (../shared/tools/build-spdk.sh builds SPDK; SPDK=0 leaves it out)"
	[[ -f $SPDK_DIR/python/spdk/rpc/client.py ]] || die "SPDK_DIR=$SPDK_DIR has no python/spdk/rpc/client.py"
	export LD_LIBRARY_PATH=$SPDK_DIR/build/lib:$SPDK_DIR/isa-l/.libs:$SPDK_DIR/isa-l-crypto/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
	SPDK_VERSION=$(awk '$1 == "#define" && $2 == "SPDK_VERSION_MAJOR" {ma = $3}
		$1 == "#define" && $2 == "SPDK_VERSION_MINOR" {mi = $3}
		END {if (ma != "") printf "v%d.%02d", ma, mi}' "$SPDK_DIR/include/spdk/version.h" 2>/dev/null || true)
	[[ -n $SPDK_VERSION ]] || SPDK_VERSION=$(git -C "$SPDK_DIR" describe --tags 2>/dev/null || echo "unknown version")
	# The uring bdev when this build has it (--with-uring), else AIO.
	BDEV=aio
	compgen -G "$SPDK_DIR/build/lib/libspdk_bdev_uring.*" >/dev/null && BDEV=uring
fi

if [[ -n ${BIN:-} ]]; then
	[[ -x $BIN ]] || die "BIN=$BIN is not an executable"
	FF=$BIN
else
	echo "== building (release)"
	cargo build -q --release --bin farflash
	FF=$ROOT/target/release/farflash
fi

# ---- files -----------------------------------------------------------------------
BENCH_DIR=${BENCH_DIR:-/var/tmp}
[[ -d $BENCH_DIR ]] || die "BENCH_DIR=$BENCH_DIR is not a directory"
DIR=$(mktemp -d "$BENCH_DIR/farflash-poolbench.XXXXXX")
remove_dir() {
	cleanup
	rm -rf "$DIR"
}
trap remove_dir EXIT
# What the files can take at most: F, and the pool's and the lvol store's
# data (the allocated and a fresh volume of SIZE, 2 GiB of snapshot
# volumes) each, plus the open rows' 256 MiB a round and metadata.
NEED=$((5 * SIZE_B + (6 << 30) + ROUNDS * (256 << 20)))
AVAIL=$(df --output=avail -B1 "$DIR" | tail -1)
((AVAIL >= NEED)) || die "BENCH_DIR=$BENCH_DIR has $((AVAIL >> 30)) GiB free; this run may need $((NEED >> 30)) GiB (SIZE=$SIZE)"
FSTYPE=$(findmnt -no FSTYPE -T "$DIR" 2>/dev/null || stat -f -c %T "$DIR")
# Whether the file system takes O_DIRECT (both targets use it where it does).
DIRECT=no
dd if=/dev/zero of="$DIR/direct.probe" bs=4096 count=1 oflag=direct 2>/dev/null && DIRECT=yes
rm -f "$DIR/direct.probe"
FILE_A=$DIR/ns.img POOL_DEV=$DIR/pool.img LVS_DEV=$DIR/lvs.img
BACKING=$((2 * SIZE_B + 3 * GIB))

py() { python3 -c "$1"; }
# jrpc.py SOCKET METHOD [--spdk DIR] KEY=VALUE...: one JSON-RPC call (params
# from the pairs: a VALUE that parses as JSON -- a number, true -- is taken
# as such, others as strings; KEY a.b makes a nested object); prints the
# milliseconds from the request's first byte sent to the answer's last byte
# read, then a tab, then the result (JSON). --spdk: through SPDK's own client.
cat >"$TMP/jrpc.py" <<'PY'
import json, socket, sys, time
path, method, args = sys.argv[1], sys.argv[2], sys.argv[3:]
spdk = None
if args[:1] == ["--spdk"]:
    spdk, args = args[1], args[2:]
params = {}
for kv in args:
    k, v = kv.split("=", 1)
    try:
        v = json.loads(v)
    except ValueError:
        pass
    *outer, last = k.split(".")
    d = params
    for o in outer:
        d = d.setdefault(o, {})
    d[last] = v
if spdk:
    # SPDK's own client, as scripts/rpc.py uses it.
    sys.path.insert(0, spdk)
    from spdk.rpc.client import JSONRPCClient
    c = JSONRPCClient(path, timeout=600.0)
    t0 = time.perf_counter()
    try:
        r = c.call(method, params)
    except Exception as e:
        sys.exit(f"{method}: {e}")
    ms = (time.perf_counter() - t0) * 1e3
else:
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rb")
    req = json.dumps({"jsonrpc": "2.0", "id": 1, "method": method, "params": params}).encode() + b"\n"
    t0 = time.perf_counter()
    s.sendall(req)
    line = f.readline()
    ms = (time.perf_counter() - t0) * 1e3
    a = json.loads(line)
    if "error" in a:
        sys.exit(f"{method}: {a['error']}")
    r = a.get("result")
print(f"{ms:.3f}\t{json.dumps(r)}")
PY
ff_rpc() { python3 "$TMP/jrpc.py" "$TMP/ff.sock" "$@" || die "farflash $1 failed: $(tail -5 "$TMP/ff.log")"; }
spdk_rpc() {
	python3 "$TMP/jrpc.py" "$TMP/spdk.sock" "$1" --spdk "$SPDK_DIR/python" "${@:2}" ||
		die "SPDK $1 failed: $(tail -5 "$TMP/spdk-tgt.log")"
}
ms_of() { cut -f1; }

# ---- targets ---------------------------------------------------------------------
TARGET_PID=""
# pool_config NAME DEVICE [NAMESPACE-VOLUME]: a serve configuration (stdout)
# with pool NAME on DEVICE and, if given, that volume as NSID 1 of $NQN.
pool_config() {
	echo "listen = [\"127.0.0.1:$PORT\"]"
	echo "[[subsystem]]"
	echo "nqn = \"$NQN\""
	if [[ -n ${3:-} ]]; then
		printf '[[subsystem.namespace]]\nnsid = 1\nbackend = "volume"\nvolume = "%s/%s"\n' "$1" "$3"
	fi
	printf '[[pool]]\nname = "%s"\ndevices = ["%s"]\n' "$1" "$2"
}
# start_ff ARGS...: taskset -c 0 farflash serve ARGS (with the RPC socket).
start_ff() {
	rm -f "$TMP/ff.sock"
	taskset -c 0 "$FF" serve --log-level warn --rpc-socket "$TMP/ff.sock" "$@" >"$TMP/ff.log" 2>&1 &
	T_PORT=$PORT T_NQN=$NQN
	target_started "$TMP/ff.log"
	for _ in $(seq 100); do [[ -S $TMP/ff.sock ]] && return 0; sleep 0.05; done
	die "farflash serve made no RPC socket: $(tail -5 "$TMP/ff.log")"
}
# spdk_config: nvmf_tgt's JSON configuration: the bdev on LVS_DEV (its lvol
# store found by examine), the TCP transport at its defaults, $SPDK_NQN open
# to any host on 127.0.0.1:SPDK_PORT with lvs/warm as NSID 1 once it exists.
spdk_config() {
	local ns=""
	[[ ${1:-} = with-ns ]] && ns='{"method": "nvmf_subsystem_add_ns", "params": {"nqn": "'$SPDK_NQN'", "namespace": {"nsid": 1, "bdev_name": "lvs/warm"}}},'
	local bdev='{"method": "bdev_aio_create", "params": {"name": "base", "filename": "'$LVS_DEV'", "block_size": 4096}}'
	[[ $BDEV = uring ]] && bdev='{"method": "bdev_uring_create", "params": {"name": "base", "filename": "'$LVS_DEV'", "block_size": 4096}}'
	cat <<EOF
{"subsystems": [
 {"subsystem": "bdev", "config": [$bdev, {"method": "bdev_wait_for_examine"}]},
 {"subsystem": "nvmf", "config": [
  {"method": "nvmf_create_transport", "params": {"trtype": "TCP"}},
  {"method": "nvmf_create_subsystem", "params": {"nqn": "$SPDK_NQN", "allow_any_host": true, "serial_number": "SPDK0001"}},
  $ns
  {"method": "nvmf_subsystem_add_listener", "params": {"nqn": "$SPDK_NQN",
    "listen_address": {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": "$SPDK_PORT"}}}]}]}
EOF
}
start_spdk() {
	spdk_config "${1:-}" >"$TMP/spdk.json"
	rm -f "$TMP/spdk.sock"
	"$TGT" -m 0x1 --no-huge -s 1024 -r "$TMP/spdk.sock" --json "$TMP/spdk.json" >"$TMP/spdk-tgt.log" 2>&1 &
	T_PORT=$SPDK_PORT T_NQN=$SPDK_NQN
	target_started "$TMP/spdk-tgt.log"
}
# start_target file|vol|fresh|lvol|lvfresh -> TARGET_PID, T_PORT, T_NQN
start_target() {
	case $1 in
	file) start_ff --listen "127.0.0.1:$PORT" --nqn "$NQN" --file "$FILE_A" --block-size 4096 ;;
	vol | fresh) start_ff --config "$TMP/tank.toml" ;;
	lvol | lvfresh) start_spdk with-ns ;;
	esac
}

# perf NSID RW BS QD RUNTIME WARMUP -> IOPS (read + write) of farflash perf on core 1
perf() {
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --nsid "$1" --rw "$2" --bs "$3" --iodepth "$4" \
		--runtime "$5" --ramp_time "$6" --cpus-allowed 1 --output-format=json >"$TMP/fperf.json" ||
		die "farflash perf $2 $3 QD $4 on $T_NQN NSID $1 failed"
	py "import json; a = json.load(open('$TMP/fperf.json'))['aggregate']; print(a['read']['iops'] + a['write']['iops'])"
}
# prefill NSID: one sequential 128 KiB write pass over the namespace.
prefill() {
	"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --nsid "$1" --rw write --bs 128k --iodepth 16 \
		--cpus-allowed 1 --output-format=json >"$TMP/prefill.json" || die "prefill of $T_NQN NSID $1 failed"
}

# measure CONFIG RW QD -> "IOPS" (in a subshell: its exit stops the target)
measure() {
	trap stop_target EXIT
	start_target "$1"
	local nsid=1 warm=$WARMUP iops fresh=fresh-$BASHPID
	case $1 in
	fresh)
		ff_rpc volume_create pool=tank name="$fresh" size="$SIZE_B" >/dev/null
		ff_rpc namespace_add nqn="$NQN" nsid=2 backend=volume volume="tank/$fresh" >/dev/null
		nsid=2 warm=0
		;;
	lvfresh)
		spdk_rpc bdev_lvol_create lvs_name=lvs lvol_name="$fresh" size_in_mib=$((SIZE_B >> 20)) thin_provision=true >/dev/null
		spdk_rpc nvmf_subsystem_add_ns nqn="$SPDK_NQN" namespace.nsid=2 namespace.bdev_name="lvs/$fresh" >/dev/null
		nsid=2 warm=0
		;;
	esac
	iops=$(perf "$nsid" "$2" 4k "$3" "$RUNTIME" "$warm")
	# A fresh volume's allocated clusters against the writes done: the
	# share of the writes that allocated, at most (in $TMP/note).
	local alloc=""
	case $1 in
	fresh)
		alloc=$(ff_rpc volume_get pool=tank name="$fresh" | cut -f2 | py "import json,sys; print(json.load(sys.stdin)['allocated'] // 1048576)")
		ff_rpc namespace_remove nqn="$NQN" nsid=2 >/dev/null
		ff_rpc volume_delete pool=tank name="$fresh" >/dev/null
		;;
	lvfresh)
		alloc=$(spdk_rpc bdev_get_bdevs name="lvs/$fresh" | cut -f2 |
			py "import json,sys; print(json.load(sys.stdin)[0]['driver_specific']['lvol']['num_allocated_clusters'])")
		spdk_rpc nvmf_subsystem_remove_ns nqn="$SPDK_NQN" nsid=2 >/dev/null
		spdk_rpc bdev_lvol_delete name="lvs/$fresh" >/dev/null
		;;
	esac
	[[ -z $alloc ]] || echo " ($alloc clusters allocated by $(py "print(round($iops * $RUNTIME))") writes)" >"$TMP/note"
	stop_target
	echo "$iops"
}

f2() { py "print('%.3f' % $1)"; }
met() { py "print('yes' if $1 else 'no')"; }

# ---- set-up ----------------------------------------------------------------------
setup_files() {
	echo "== set-up in $DIR ($FSTYPE, O_DIRECT: $DIRECT): file namespace, pool, lvol store"
	truncate -s "$SIZE_B" "$FILE_A"
	truncate -s "$BACKING" "$POOL_DEV"
	"$FF" pool create tank "$POOL_DEV" >/dev/null
	pool_config tank "$POOL_DEV" >"$TMP/tank-bare.toml"
	pool_config tank "$POOL_DEV" warm >"$TMP/tank.toml"
	(
		trap stop_target EXIT
		start_ff --config "$TMP/tank-bare.toml"
		ff_rpc volume_create pool=tank name=warm size="$SIZE_B" >/dev/null
		ff_rpc volume_create pool=tank name=small size="$GIB" >/dev/null
		ff_rpc volume_create pool=tank name=large size="$LARGE_B" >/dev/null
		stop_target
	)
	if [[ $SPDK = 1 ]]; then
		truncate -s "$BACKING" "$LVS_DEV"
		(
			trap stop_target EXIT
			start_spdk
			local cl=()
			[[ -n $LVS_CLUSTER ]] && cl=("cluster_sz=$(bytes "$LVS_CLUSTER" LVS_CLUSTER)")
			spdk_rpc bdev_lvol_create_lvstore bdev_name=base lvs_name=lvs "${cl[@]}" >/dev/null
			for v in "warm $SIZE_B" "small $GIB" "large $LARGE_B"; do
				read -r n b <<<"$v"
				spdk_rpc bdev_lvol_create lvs_name=lvs lvol_name="$n" size_in_mib=$((b >> 20)) thin_provision=true >/dev/null
			done
			LVS_CLUSTER_B=$(spdk_rpc bdev_lvol_get_lvstores lvs_name=lvs | cut -f2 | py "import json,sys; print(json.load(sys.stdin)[0]['cluster_size'])")
			echo "$LVS_CLUSTER_B" >"$TMP/lvs-cluster"
			stop_target
		)
	fi
}

# Preconditioning: F, the volume and the lvol written whole once.
precondition() {
	echo "== preconditioning: one sequential 128 KiB write pass over each namespace"
	local c
	for c in file vol $([[ $SPDK = 1 ]] && echo lvol); do
		(
			trap stop_target EXIT
			start_target "$c"
			prefill 1
			stop_target
		)
	done
}

# ---- I/O rows --------------------------------------------------------------------
declare -A ROW_NAME=([rr1]="4 KiB randread QD 1" [rr32]="4 KiB randread QD 32"
	[rw1]="4 KiB randwrite QD 1" [rw32]="4 KiB randwrite QD 32")
declare -A ROW_ARGS=([rr1]="randread 1" [rr32]="randread 32" [rw1]="randwrite 1" [rw32]="randwrite 32")
for row in $ROWS; do [[ -n ${ROW_ARGS[$row]:-} ]] || die "unknown row $row in ROWS (have: ${!ROW_ARGS[*]})"; done
declare -A MED RATIO
io_rows() {
	local row rw qd r c configs
	RUNLOG=()
	for row in $ROWS; do
		read -r rw qd <<<"${ROW_ARGS[$row]}"
		configs=(file vol)
		[[ $rw = randwrite ]] && configs+=(fresh)
		[[ $SPDK = 1 ]] && configs+=(lvol) && [[ $rw = randwrite ]] && configs+=(lvfresh)
		echo "== ${ROW_NAME[$row]}"
		declare -A V=()
		for r in $(seq "$ROUNDS"); do
			local line="${ROW_NAME[$row]} round $r:"
			mapfile -t ordered < <(rotated "$r" "${configs[@]}")
			for c in "${ordered[@]}"; do
				rm -f "$TMP/note"
				V[$c,$r]=$(measure "$c" "$rw" "$qd")
				line+=" $c ${V[$c,$r]%.*} IOPS$(cat "$TMP/note" 2>/dev/null || true);"
			done
			echo "  $line"
			RUNLOG+=("- ${line%;}")
		done
		for c in "${configs[@]}"; do
			local vals=()
			for r in $(seq "$ROUNDS"); do vals+=("${V[$c,$r]}"); done
			MED[$row,$c]=$(median "${vals[@]}")
		done
		# ratio NUM DEN -> the median of the per-round ratios
		ratio() {
			local rs=() k
			for k in $(seq "$ROUNDS"); do rs+=("$(py "print(${V[$1,$k]} / ${V[$2,$k]})")"); done
			median "${rs[@]}"
		}
		RATIO[$row,vol]=$(ratio vol file)
		[[ $rw = randwrite ]] && RATIO[$row,fresh]=$(ratio fresh file)
		if [[ $SPDK = 1 ]]; then
			RATIO[$row,lvol]=$(ratio lvol file)
			RATIO[$row,vs]=$(ratio vol lvol)
			if [[ $rw = randwrite ]]; then
				RATIO[$row,lvfresh]=$(ratio lvfresh file)
				RATIO[$row,fvs]=$(ratio fresh lvfresh)
			fi
		fi
		unset V
	done
}
io_report() {
	local row iops dash="–"
	echo "| row | file namespace, IOPS | allocated volume, IOPS | volume / file (≥ 0.95) | fresh volume, IOPS | fresh / file (≥ 0.8) | SPDK thin lvol, IOPS | lvol / file | farflash volume / SPDK lvol | SPDK fresh lvol, IOPS | fresh lvol / file | farflash fresh / SPDK fresh |"
	echo "|---|---|---|---|---|---|---|---|---|---|---|---|"
	for row in $ROWS; do
		iops() { [[ -n ${MED[$row,$1]:-} ]] && py "print('%.0f' % ${MED[$row,$1]})" || echo "$dash"; }
		rat() { [[ -n ${RATIO[$row,$1]:-} ]] && echo "$(f2 "${RATIO[$row,$1]}")${2:+ $(met "${RATIO[$row,$1]} >= $2")}" || echo "$dash"; }
		echo "| ${ROW_NAME[$row]} | $(iops file) | $(iops vol) | $(rat vol 0.95) | $(iops fresh) | $(rat fresh 0.8) | $(iops lvol) | $(rat lvol) | $(rat vs) | $(iops lvfresh) | $(rat lvfresh) | $(rat fvs) |"
	done
}

# ---- snapshots and clones --------------------------------------------------------
declare -A SNAP
snap_rows() {
	echo "== snapshot and clone creation"
	# Write the 1 GiB volumes whole and the large ones' first GiB, once.
	(
		trap stop_target EXIT
		start_ff --config "$TMP/tank-bare.toml"
		ff_rpc namespace_add nqn="$NQN" nsid=1 backend=volume volume=tank/small >/dev/null
		ff_rpc namespace_add nqn="$NQN" nsid=2 backend=volume volume=tank/large >/dev/null
		prefill 1
		"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --nsid 2 --rw write --bs 128k --iodepth 16 --size 1G \
			--cpus-allowed 1 --output-format=json >/dev/null || die "writing the large volume failed"
		stop_target
	)
	if [[ $SPDK = 1 ]]; then
		(
			trap stop_target EXIT
			start_spdk
			spdk_rpc nvmf_subsystem_add_ns nqn="$SPDK_NQN" namespace.nsid=1 namespace.bdev_name=lvs/small >/dev/null
			spdk_rpc nvmf_subsystem_add_ns nqn="$SPDK_NQN" namespace.nsid=2 namespace.bdev_name=lvs/large >/dev/null
			prefill 1
			"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --nsid 2 --rw write --bs 128k --iodepth 16 --size 1G \
				--cpus-allowed 1 --output-format=json >/dev/null || die "writing the large lvol failed"
			stop_target
		)
	fi
	local sides=(ff) r s v line out a b c d
	[[ $SPDK = 1 ]] && sides+=(spdk)
	declare -A T=()
	for r in $(seq "$ROUNDS"); do
		line="snapshot/clone round $r:"
		mapfile -t ordered < <(rotated "$r" "${sides[@]}")
		for s in "${ordered[@]}"; do
			out=$(snap_round "$s" "$r")
			read -r a b c d <<<"$out"
			T[$s,small,snap,$r]=$a T[$s,small,clone,$r]=$b T[$s,large,snap,$r]=$c T[$s,large,clone,$r]=$d
			line+=" $s $(for v in small large; do echo -n "$v ${T[$s,$v,snap,$r]}/${T[$s,$v,clone,$r]} ms "; done);"
		done
		echo "  $line"
		RUNLOG+=("- ${line%;}")
	done
	local k vals
	for s in "${sides[@]}"; do
		for k in "small,snap" "small,clone" "large,snap" "large,clone"; do
			vals=()
			for r in $(seq "$ROUNDS"); do vals+=("${T[$s,$k,$r]}"); done
			SNAP[$s,$k]=$(median "${vals[@]}")
			SNAP[$s,$k,max]=$(py "print(max(float(x) for x in '${vals[*]}'.split()))")
		done
	done
}
# snap_round ff|spdk ROUND -> "small-snapshot small-clone large-snapshot large-clone" (ms)
snap_round() {
	trap stop_target EXIT
	local out=() v
	if [[ $1 = ff ]]; then
		start_ff --config "$TMP/tank-bare.toml"
		for v in small large; do
			out+=("$(ff_rpc snapshot_create pool=tank volume="$v" name="$v-s$2" | ms_of)")
			out+=("$(ff_rpc volume_clone pool=tank snapshot="$v-s$2" name="$v-c$2" | ms_of)")
			ff_rpc volume_delete pool=tank name="$v-c$2" >/dev/null
			ff_rpc volume_delete pool=tank name="$v-s$2" >/dev/null
		done
	else
		start_spdk
		for v in small large; do
			out+=("$(spdk_rpc bdev_lvol_snapshot lvol_name="lvs/$v" snapshot_name="$v-s$2" | ms_of)")
			out+=("$(spdk_rpc bdev_lvol_clone snapshot_name="lvs/$v-s$2" clone_name="$v-c$2" | ms_of)")
			spdk_rpc bdev_lvol_delete name="lvs/$v-c$2" >/dev/null
			spdk_rpc bdev_lvol_delete name="lvs/$v-s$2" >/dev/null
		done
	fi
	stop_target
	echo "${out[*]}"
}
snap_report() {
	local v k
	echo "| volume | farflash snapshot_create, ms | farflash volume_clone, ms | < 10 ms | SPDK bdev_lvol_snapshot, ms | SPDK bdev_lvol_clone, ms |"
	echo "|---|---|---|---|---|---|"
	for v in small large; do
		local spdk="– | –"
		[[ $SPDK = 1 ]] && spdk="$(f2 "${SNAP[spdk,$v,snap]}") (max $(f2 "${SNAP[spdk,$v,snap,max]}")) | $(f2 "${SNAP[spdk,$v,clone]}") (max $(f2 "${SNAP[spdk,$v,clone,max]}"))"
		k=$([[ $v = small ]] && echo "1 GiB, written whole" || echo "$LARGE thin, 1 GiB written")
		echo "| $k | $(f2 "${SNAP[ff,$v,snap]}") (max $(f2 "${SNAP[ff,$v,snap,max]}")) | $(f2 "${SNAP[ff,$v,clone]}") (max $(f2 "${SNAP[ff,$v,clone,max]}")) | $(met "${SNAP[ff,$v,snap,max]} < 10 and ${SNAP[ff,$v,clone,max]} < 10") | $spdk |"
	done
}

# ---- opening pools ---------------------------------------------------------------
# create_volumes COUNT SIZE: COUNT volumes v0.. in pool "big" through one
# connection to farflash's socket.
create_volumes() {
	python3 - "$TMP/ff.sock" "$1" "$2" <<'PY' || die "creating $1 volumes failed"
import json, socket, sys
path, count, size = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
for i in range(count):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    req = {"jsonrpc": "2.0", "id": i, "method": "volume_create", "params": {"pool": "big", "name": f"v{i}", "size": size}}
    s.sendall(json.dumps(req).encode() + b"\n")
    a = json.loads(s.makefile("rb").readline())
    s.close()
    if "error" in a:
        sys.exit(f"volume_create v{i}: {a['error']}")
PY
}
declare -A OPEN
open_rows() {
	local size
	for size in $OPEN_SIZES; do open_after_kill "$size"; done
	open_many
}
# open_after_kill SIZE: a pool on a sparse file of SIZE with OPEN_VOLUMES
# volumes, opened after SIGKILL during writes, ROUNDS times.
open_after_kill() {
	local size=$1 dev=$DIR/tib.img r t0 t1 vals=() json
	echo "== opening a $size pool of $OPEN_VOLUMES volumes after SIGKILL"
	truncate -s "$size" "$dev"
	"$FF" pool create big "$dev" >/dev/null
	pool_config big "$dev" >"$TMP/big-bare.toml"
	pool_config big "$dev" v0 >"$TMP/big.toml"
	t0=$(date +%s.%N)
	(
		trap stop_target EXIT
		start_ff --config "$TMP/big-bare.toml"
		create_volumes "$OPEN_VOLUMES" $((100 * GIB))
		stop_target
	)
	t1=$(date +%s.%N)
	echo "  $OPEN_VOLUMES volumes created in $(py "print('%.1f' % ($t1 - $t0))") s"
	for r in $(seq "$ROUNDS"); do
		start_ff --config "$TMP/big.toml"
		# 256 MiB of v0 of its own per round: at most 256 clusters allocated
		# (and zeroed on the file) per round.
		"$FF" perf -t tcp -a 127.0.0.1 -s "$T_PORT" -n "$T_NQN" --rw randwrite --bs 4k --iodepth 32 \
			--offset $(((r - 1) * 256))M --size 256M --runtime 2 --cpus-allowed 1 --output-format=json >/dev/null ||
			die "writing to v0 of the $size pool failed"
		kill -KILL "$TARGET_PID"
		wait "$TARGET_PID" 2>/dev/null || true
		TARGET_PID=""
		json=$("$FF" pool open "$dev" --json) || die "farflash pool open after SIGKILL failed"
		vals+=("$(py "import json; print(json.loads('$json')['open_ms'])")")
		echo "  round $r: $json"
	done
	OPEN[$size]=$(median "${vals[@]}") OPEN[$size,max]=$(py "print(max(float(x) for x in '${vals[*]}'.split()))")
	rm -f "$dev"
}
open_many() {
	local dev r t0 t1 vals=() json

	echo "== opening a pool of $MANY_VOLUMES volumes"
	dev=$DIR/many.img
	truncate -s 64G "$dev"
	"$FF" pool create big "$dev" >/dev/null
	json=$("$FF" pool open "$dev" --json) || die "farflash pool open (empty) failed"
	local empty_rss
	empty_rss=$(py "import json; print(json.loads('$json')['rss_growth'])")
	pool_config big "$dev" >"$TMP/big-bare.toml"
	t0=$(date +%s.%N)
	(
		trap stop_target EXIT
		start_ff --config "$TMP/big-bare.toml"
		create_volumes "$MANY_VOLUMES" "$GIB"
		stop_target
	)
	t1=$(date +%s.%N)
	echo "  $MANY_VOLUMES volumes created in $(py "print('%.1f' % ($t1 - $t0))") s"
	vals=()
	local rss=()
	for r in $(seq "$ROUNDS"); do
		json=$("$FF" pool open "$dev" --json) || die "farflash pool open failed"
		vals+=("$(py "import json; print(json.loads('$json')['open_ms'])")")
		rss+=("$(py "import json; print(json.loads('$json')['rss_growth'])")")
		echo "  round $r: $json"
	done
	OPEN[many]=$(median "${vals[@]}") OPEN[many,max]=$(py "print(max(float(x) for x in '${vals[*]}'.split()))")
	OPEN[many,per]=$(py "print('%.0f' % (($(median "${rss[@]}") - $empty_rss) / $MANY_VOLUMES))")
	rm -f "$dev"
}
open_report() {
	echo "| pool | open, ms (median of $ROUNDS) | max, ms | bar | met | resident memory per volume |"
	echo "|---|---|---|---|---|---|"
	local size
	for size in $OPEN_SIZES; do
		echo "| ${size%[GT]} ${size: -1}iB sparse file, $OPEN_VOLUMES volumes, after SIGKILL during writes | $(f2 "${OPEN[$size]}") | $(f2 "${OPEN[$size,max]}") | < 2 s | $(met "${OPEN[$size,max]} < 2000") | – |"
	done
	echo "| 64 GiB sparse file, $MANY_VOLUMES volumes, clean | $(f2 "${OPEN[many]}") | $(f2 "${OPEN[many,max]}") | < 1 s | $(met "${OPEN[many,max]} < 1000") | ${OPEN[many,per]} bytes |"
}

# ---- run -------------------------------------------------------------------------
RUNLOG=()
if has_part io || has_part snap; then setup_files; fi
LVS_CLUSTER_B=""
[[ -f $TMP/lvs-cluster ]] && LVS_CLUSTER_B=$(cat "$TMP/lvs-cluster")
IO_TABLE="" SNAP_TABLE="" OPEN_TABLE="" IO_LOG=()
if has_part io; then
	precondition
	io_rows
	IO_LOG=("${RUNLOG[@]}")
	IO_TABLE=$(io_report)
fi
RUNLOG=()
if has_part snap; then
	snap_rows
	SNAP_TABLE=$(snap_report)
fi
SNAP_LOG=("${RUNLOG[@]}")
if has_part open; then
	open_rows
	OPEN_TABLE=$(open_report)
fi

for t in "$IO_TABLE" "$SNAP_TABLE" "$OPEN_TABLE"; do [[ -z $t ]] || printf '\n%s\n' "$t"; done

[[ -n $OUT ]] || exit 0
{
	echo "## Thin volumes: farflash's pool against a file namespace and SPDK's lvol store"
	echo
	echo "Written by \`benches/pool.sh\`; do not edit by hand. Re-run it to refresh."
	echo
	run_facts "${SPDK_VERSION:+; SPDK $SPDK_VERSION}"
	if [[ $DIRECT = yes ]]; then
		echo "- files: $FSTYPE (\`$BENCH_DIR\`), which accepts O_DIRECT: farflash (file namespace and pool alike, io_uring)"
		echo "  opens its files with O_DIRECT$([[ $SPDK = 1 ]] && echo ", and so does SPDK's $BDEV bdev")"
	else
		echo "- files: $FSTYPE (\`$BENCH_DIR\`), which refuses O_DIRECT: farflash$([[ $SPDK = 1 ]] && echo " and SPDK's $BDEV bdev") go through the page cache"
	fi
	echo "- farflash: \`taskset -c 0 farflash serve\`, defaults otherwise; pool clusters 1 MiB (default), volumes of 4 KiB blocks;"
	echo "  the file namespace with \`--block-size 4096\`"
	[[ $SPDK = 1 ]] && echo "- SPDK: \`nvmf_tgt -m 0x1 --no-huge -s 1024\`, $BDEV bdev (4 KiB blocks) on the file, lvol store with ${LVS_CLUSTER_B:-its default} byte clusters, thin lvols"
	echo "- initiator: \`farflash perf --cpus-allowed 1\` on core 1 (busy-poll), ${RUNTIME} s measured after ${WARMUP} s (fresh volumes: no warm-up,"
	echo "  from the first write); every target runs alone, started for each measurement"
	echo "- namespaces of SIZE = $SIZE; the file namespace, the allocated volume and lvol preconditioned once by one sequential"
	echo "  128 KiB write pass; a fresh volume / lvol is created before each measurement and deleted after it (\"Per round\""
	echo "  says how many clusters it had allocated by the end, against the writes done)"
	echo "- $ROUNDS rounds; each row runs its configurations back to back in an order that rotates from round to round;"
	echo "  ratios are medians of the per-round ratios, IOPS medians over rounds"
	if [[ -n $IO_TABLE ]]; then
		echo
		echo "### 4 KiB random I/O"
		echo
		echo "$IO_TABLE"
	fi
	if [[ -n $SNAP_TABLE ]]; then
		echo
		echo "### Snapshot and clone creation"
		echo
		echo "Median of $ROUNDS rounds (max in brackets): the JSON-RPC call on the target's Unix socket, from the"
		echo "request's first byte sent to the answer's last byte read (farflash: one Python client; SPDK: its"
		echo "python/spdk/rpc/client.py, which scripts/rpc.py uses); the snapshot and the clone are deleted after each round."
		echo
		echo "$SNAP_TABLE"
	fi
	if [[ -n $OPEN_TABLE ]]; then
		echo
		echo "### Opening a pool"
		echo
		echo "\`farflash pool open --json\` (LocalPool::open as \`serve\` does it, crash recovery included). The 1 TiB pool is opened"
		echo "right after \`serve\` was SIGKILLed at the end of 2 s of 4 KiB random writes (QD 32) to 256 MiB of one of its volumes"
		echo "(another 256 MiB each round), once per round; resident memory per volume = the open's RSS growth less an empty"
		echo "pool's, over the volume count."
		echo
		echo "$OPEN_TABLE"
	fi
	if ((${#IO_LOG[@]} + ${#SNAP_LOG[@]})); then
		echo
		echo "### Per round"
		echo
		printf '%s\n' "${IO_LOG[@]}" "${SNAP_LOG[@]}"
	fi
} | write_section "$OUT" pool.sh
echo
echo "wrote the pool.sh section of $OUT"
