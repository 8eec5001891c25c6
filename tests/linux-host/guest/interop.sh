#!/bin/bash
# shellcheck disable=SC2317  # scenarios are called indirectly (scn_$name)
# interop.sh -- guest script for run-linux-host: Linux kernel NVMe/TCP
# initiator (nvme-tcp + nvme-cli + fio) interop scenarios against a target.
#
# Each scenario prints "PASS: <name> (<secs>s)" or "FAIL: <name>: <reason>"
# on stdout.  A failed scenario does not stop the others; the script exits
# non-zero if any scenario failed, after "INTEROP RESULT: ..." .
#
# Target (environment):
#   INTEROP_TARGET   remote (default): the target at $NVME_ADDR:$NVME_PORT
#                    (default $TARGET_ADDR:$TARGET_PORT, i.e. host 127.0.0.1);
#                    kernel: first set up the guest kernel's nvmet target on
#                    127.0.0.1:4420 and :4421 with kernel-target-serve.sh
#                    (pass it with run-linux-host -f), ns 1 ram 64M, ns 2 file
#                    32M, ns 3 null 1G, allowing only this guest's host NQN,
#                    KERNEL_BLOCK_SIZE-byte blocks (512 or 4096, default 512).
#   NQN              the NVM subsystem (default nqn.2026-11.io.farflash:default)
#   LISTEN_PORTS     all ports the target listens on, as seen from here
#                    (default $TARGET_PORTS); discovery is checked on each
#   EXPECT_DISCOVERY_NQNS  subsystems the discovery log must list (default $NQN);
#                    it must list no other NVM subsystem
#   NAMESPACES       NSID:SIZE:LBA_BYTES ... every namespace the subsystem has
#                    (default "1:1G:512", the farflash serve default)
#   FIO_RAM_NSID, FIO_FILE_NSID   namespaces for fio-ram / fio-file (1, 2)
#   DATA_NSIDS       namespaces that keep data, for flush-zeroes-dsm and
#                    reconnect (default "$FIO_RAM_NSID $FIO_FILE_NSID")
#   DENIED_HOSTNQN   a host NQN the target does not allow (default: random)
#   ID_CTRL_MDTS     nonzero (default) or any: kernel nvmet reports 0 (no limit)
#   NVM_CMDS         all (default): the target must report and run Compare,
#                    Verify and Copy; none: it must report none and refuse
#                    Compare (kernel nvmet)
#   FIO_SIZE         bytes per fio job (default 16m); FIO_DIGEST_SIZE (8m)
#   SCENARIOS        which scenarios, in order (default: all, see ALL below)
set -euo pipefail
shopt -s nullglob

ALL="discover connect identify fio-ram fio-file flush-zeroes-dsm copy-compare-verify reconnect digests sqflow io-queues refused-host disconnect"
SCENARIOS=${SCENARIOS:-$ALL}
INTEROP_TARGET=${INTEROP_TARGET:-remote}
NQN=${NQN:-nqn.2026-11.io.farflash:default}
FIO_RAM_NSID=${FIO_RAM_NSID:-1}
FIO_FILE_NSID=${FIO_FILE_NSID:-2}
DATA_NSIDS=${DATA_NSIDS:-$FIO_RAM_NSID $FIO_FILE_NSID}
ID_CTRL_MDTS=${ID_CTRL_MDTS:-nonzero}
NVM_CMDS=${NVM_CMDS:-all}
FIO_SIZE=${FIO_SIZE:-16m}
FIO_DIGEST_SIZE=${FIO_DIGEST_SIZE:-8m}
HOSTNQN=${HOSTNQN:-$(cat /etc/nvme/hostnqn)}
WORK=/tmp/interop
mkdir -p "$WORK"

if [[ $INTEROP_TARGET = kernel ]]; then
	kts=${GUEST_FILES:-/guest/files}/kernel-target-serve.sh
	[[ -x $kts ]] || {
		echo "FAIL: setup: INTEROP_TARGET=kernel needs $kts (run-linux-host -f .../kernel-target-serve.sh)"
		exit 1
	}
	bs=${KERNEL_BLOCK_SIZE:-512}
	NAMESPACES="1:64M:$bs 2:32M:$bs 3:1G:$bs"
	ID_CTRL_MDTS=any
	NVM_CMDS=none
	ADDR=127.0.0.1 PORT=4420 LISTEN_PORTS="4420 4421"
	echo "=== setup: kernel nvmet target in this VM on $ADDR:{4420,4421}"
	NQN=$NQN SERVE_ADDR=$ADDR SERVE_PORTS=$LISTEN_PORTS SERVE_BLOCK_SIZE=$bs \
		SERVE_NAMESPACES="ram:64M file:32M null:1G" SERVE_ALLOW_HOSTS=$HOSTNQN \
		"$kts" --setup-only || {
		echo "FAIL: setup: kernel-target-serve.sh failed"
		exit 1
	}
elif [[ $INTEROP_TARGET = remote ]]; then
	ADDR=${NVME_ADDR:-${TARGET_ADDR:?}}
	PORT=${NVME_PORT:-${TARGET_PORT:?}}
	LISTEN_PORTS=${LISTEN_PORTS:-${TARGET_PORTS:-$PORT}}
else
	echo "FAIL: setup: INTEROP_TARGET must be remote or kernel"
	exit 1
fi
NAMESPACES=${NAMESPACES:-1:1G:512}
EXPECT_DISCOVERY_NQNS=${EXPECT_DISCOVERY_NQNS:-$NQN}
DENIED_ID=$(cat /proc/sys/kernel/random/uuid)
DENIED_HOSTNQN=${DENIED_HOSTNQN:-nqn.2014-08.org.nvmexpress:uuid:$DENIED_ID}

# ------------------------------------------------------------------ helpers
SCN=setup
now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
fail() { # print the FAIL line and end the scenario (exit code 99 = reported)
	echo "FAIL: $SCN: $*"
	exit 99
}
ok() { echo "  ok: $*"; }
note() { echo "  $*"; }
indent() { sed 's/^/  | /'; }

to_bytes() { # SIZE with optional K/M/G/T (binary) suffix and iB/B
	local v=${1%[iI][bB]}
	v=${v%[bB]}
	case $v in
	*[kK]) echo $((${v%?} << 10)) ;;
	*[mM]) echo $((${v%?} << 20)) ;;
	*[gG]) echo $((${v%?} << 30)) ;;
	*[tT]) echo $((${v%?} << 40)) ;;
	*) echo $((v)) ;;
	esac
}
ns_field() { # NSID FIELD(2=size,3=lba bytes) from $NAMESPACES
	local e
	for e in $NAMESPACES; do
		IFS=: read -r -a f <<<"$e"
		[[ ${f[0]} = "$1" ]] || continue
		case $2 in
		2) to_bytes "${f[1]}" ;;
		3) echo "${f[2]:-512}" ;;
		esac
		return 0
	done
	return 1
}
ns_ids() { local e; for e in $NAMESPACES; do echo "${e%%:*}"; done; }
ns_count() { ns_ids | wc -l; }

# kernel log marks: mark "text" then kmsg_since_mark.  The counter lives in
# a file because scenarios run in subshells.
MARK=""
echo 0 >"$WORK/mark"
mark() {
	local n
	n=$(($(cat "$WORK/mark") + 1))
	echo "$n" >"$WORK/mark"
	MARK="interop-mark-$n"
	echo "$MARK $*" >/dev/kmsg
}
kmsg_since_mark() { dmesg | sed -n "/ $MARK /,\$p" | sed 1d; }

ctrls() { # controllers (nvmeN) of $NQN, optionally only those of host NQN $1
	local c
	for c in /sys/class/nvme/nvme*; do
		[[ $(cat "$c/subsysnqn" 2>/dev/null) = "$NQN" ]] || continue
		[[ -z ${1:-} || $(cat "$c/hostnqn" 2>/dev/null) = "$1" ]] || continue
		echo "${c##*/}"
	done
}
ns_dev() { # NSID -> /dev/nvmeXnY (the namespace's block device)
	local b n
	for b in /sys/block/nvme*n*; do
		n=${b##*/}
		[[ $n = nvme*c*n* ]] && continue # per-path nodes of native multipath
		[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$NQN" ]] || continue
		[[ $(cat "$b/nsid" 2>/dev/null) = "$1" ]] || continue
		echo "/dev/$n"
		return 0
	done
	return 1
}
ns_devs_present() {
	local id
	for id in $(ns_ids); do ns_dev "$id" >/dev/null || return 1; done
}

CTRL="" # the controller we are connected with (nvmeN)
connect() { # [nvme-connect options...]: connect to $NQN and wait for namespaces
	local out rc
	[[ -z $(ctrls) ]] || fail "internal: already connected before connect $*"
	mark "connect $*"
	note "nvme connect -t tcp -a $ADDR -s $PORT -n $NQN $*"
	rc=0
	out=$(timeout 120 nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$NQN" "$@" 2>&1) || rc=$?
	[[ -z $out ]] || echo "$out" | indent
	[[ $rc = 0 ]] || fail "nvme connect $* failed (exit $rc); kernel log: $(kmsg_since_mark | tail -n 5 | tr '\n' ' ')"
	for _ in $(seq 100); do
		CTRL=$(ctrls "$HOSTNQN" | head -n 1)
		[[ -n $CTRL && $(cat "/sys/class/nvme/$CTRL/state" 2>/dev/null) = live ]] && break
		sleep 0.1
	done
	[[ -n $CTRL ]] || fail "connect reported success but no controller for $NQN appeared"
	[[ $(cat "/sys/class/nvme/$CTRL/state") = live ]] ||
		fail "$CTRL state is '$(cat "/sys/class/nvme/$CTRL/state")', not live"
	for _ in $(seq 300); do
		ns_devs_present && break
		sleep 0.1
	done
	ns_devs_present || fail "namespaces missing after connect: expected NSIDs $(ns_ids | tr '\n' ' ')"
	ok "connected: $CTRL ($(cat "/sys/class/nvme/$CTRL/address")), cntlid $(cat "/sys/class/nvme/$CTRL/cntlid")"
}
disconnect() { # disconnect every controller of $NQN; assert they are gone
	local out rc n
	n=$(ctrls | wc -l)
	[[ $n -gt 0 ]] || return 0
	mark "disconnect"
	rc=0
	out=$(timeout 60 nvme disconnect -n "$NQN" 2>&1) || rc=$?
	echo "$out" | indent
	[[ $rc = 0 ]] || fail "nvme disconnect -n $NQN failed (exit $rc)"
	grep -q "disconnected $n controller" <<<"$out" || fail "nvme disconnect did not report $n controller(s)"
	for _ in $(seq 200); do
		[[ -z $(ctrls) ]] && break
		sleep 0.1
	done
	[[ -z $(ctrls) ]] || fail "controller(s) $(ctrls | tr '\n' ' ')still present after disconnect"
	CTRL=""
}
ensure_connected() {
	if [[ -z $(ctrls "$HOSTNQN") ]]; then
		connect
	else
		CTRL=$(ctrls "$HOSTNQN" | head -n 1)
	fi
}

# Region tests, in 64 KiB units at byte offset $2 of device $1.
write_region() { # DEV OFFSET FILE
	dd if="$3" of="$1" bs=64k seek=$(($2 >> 16)) oflag=direct conv=notrunc 2>"$WORK/dd.err" ||
		fail "dd write to $1 at $2 failed: $(cat "$WORK/dd.err")"
}
check_region() { # DEV OFFSET MODEL WHAT: read back and compare with MODEL
	local size first
	size=$(stat -c %s "$3")
	dd if="$1" of="$WORK/back" bs=64k skip=$(($2 >> 16)) count=$((size >> 16)) iflag=direct 2>"$WORK/dd.err" ||
		fail "dd read from $1 at $2 failed: $(cat "$WORK/dd.err")"
	if ! cmp -s "$3" "$WORK/back"; then
		first=$(cmp "$3" "$WORK/back" 2>&1 | head -n 1 || true)
		fail "$4: data read back differs from what is expected ($first; region at byte $2 of $1)"
	fi
	ok "$4: $((size >> 10)) KiB read back at byte $2 match"
}
zero_model() { # MODEL OFFSET LENGTH (bytes, 4 KiB multiples)
	dd if=/dev/zero of="$1" bs=4k seek=$(($2 >> 12)) count=$(($3 >> 12)) conv=notrunc 2>/dev/null
}
quick_io() { # NSID: 1 MiB write + read-back smoke test
	local dev
	dev=$(ns_dev "$1") || fail "no block device for nsid $1"
	head -c 1048576 /dev/urandom >"$WORK/smoke"
	write_region "$dev" 0 "$WORK/smoke"
	check_region "$dev" 0 "$WORK/smoke" "I/O on $dev (nsid $1)"
}

run_fio() { # JOBNAME NSID SIZE
	local dev out rc reads writes
	dev=$(ns_dev "$2") || fail "no block device for nsid $2"
	note "fio $1 on $dev (nsid $2): randwrite bsrange 4k-256k, $3, libaio, direct, iodepth 8, verify crc32c"
	rc=0
	out=$(timeout 600 fio --name="$1" --filename="$dev" --ioengine=libaio --direct=1 \
		--rw=randwrite --bsrange=4k-256k --size="$3" --iodepth=8 \
		--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
		--eta=never 2>&1) || rc=$?
	echo "$out" | grep -E 'err=|IOPS=|issued rwts|verify|crc|bad|error' | indent || true
	[[ $rc = 0 ]] || {
		echo "$out" | tail -n 30 | indent
		fail "fio $1 on nsid $2 exited with $rc"
	}
	! grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error' <<<"$out" ||
		fail "fio $1 reported verify/I/O errors"
	reads=$(sed -n 's/.*issued rwts: total=\([0-9]*\),.*/\1/p' <<<"$out" | head -n 1)
	writes=$(sed -n 's/.*issued rwts: total=[0-9]*,\([0-9]*\),.*/\1/p' <<<"$out" | head -n 1)
	[[ ${writes:-0} -gt 0 && ${reads:-0} -gt 0 ]] || fail "fio $1 did no writes or no verify reads (reads=${reads:-?} writes=${writes:-?})"
	[[ $reads = "$writes" ]] || fail "fio $1 verified $reads blocks but wrote $writes"
	ok "fio $1: $writes writes, all $reads verified (crc32c)"
}

# ---------------------------------------------------------------- scenarios
scn_discover() {
	local p out rc entries nrec want found line
	for p in $LISTEN_PORTS; do
		note "nvme discover -t tcp -a $ADDR -s $p"
		rc=0
		out=$(timeout 60 nvme discover -t tcp -a "$ADDR" -s "$p" 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme discover on port $p failed (exit $rc)"
		nrec=$(sed -n 's/^Discovery Log Number of Records \([0-9]*\),.*/\1/p' <<<"$out")
		[[ -n $nrec ]] || fail "no discovery log header in the output for port $p"
		# one line per entry: subtype|trtype|adrfam|trsvcid|subnqn
		entries=$(awk '
			function flush() { if (n) print st "|" tt "|" af "|" sv "|" nq; n = 0 }
			/^=+Discovery Log Entry/ { flush(); n = 1; st = tt = af = sv = nq = "" }
			n && /^subtype:/ { sub(/^subtype: */, ""); st = $0 }
			n && /^trtype:/  { tt = $2 }
			n && /^adrfam:/  { af = $2 }
			n && /^trsvcid:/ { sv = $2 }
			n && /^subnqn:/  { nq = $2 }
			END { flush() }' <<<"$out")
		[[ $(grep -c . <<<"$entries") = "$nrec" ]] ||
			fail "port $p: the log says $nrec records but $(grep -c . <<<"$entries") entries were printed"
		for want in $EXPECT_DISCOVERY_NQNS; do
			found=0
			while IFS='|' read -r st tt af sv nq; do
				[[ $nq = "$want" ]] || continue
				[[ $st = "nvme subsystem" ]] || fail "port $p: $want has subtype '$st'"
				[[ $tt = tcp ]] || fail "port $p: $want has trtype '$tt', not tcp"
				[[ $af = ipv4 ]] || fail "port $p: $want has adrfam '$af', not ipv4"
				[[ " $LISTEN_PORTS " = *" $sv "* ]] || fail "port $p: $want has trsvcid '$sv', not one of the listeners ($LISTEN_PORTS)"
				found=1
			done <<<"$entries"
			[[ $found = 1 ]] || fail "port $p: $want is not in the discovery log"
			ok "port $p: discovery log lists $want (tcp, ipv4, nvme subsystem)"
		done
		while IFS='|' read -r st tt af sv nq; do
			[[ $st = "nvme subsystem" ]] || continue
			[[ " $EXPECT_DISCOVERY_NQNS " = *" $nq "* ]] || fail "port $p: unexpected subsystem $nq in the discovery log"
		done <<<"$entries"
	done
	for line in /sys/class/nvme/nvme*; do
		[[ $(cat "$line/subsysnqn" 2>/dev/null) != nqn.2014-08.org.nvmexpress.discovery ]] ||
			fail "nvme discover left a discovery controller (${line##*/}) behind"
	done
}

scn_connect() {
	local c addr id dev bytes want all b n
	disconnect
	connect # default options
	c=/sys/class/nvme/$CTRL
	[[ $(cat "$c/transport") = tcp ]] || fail "$CTRL transport is '$(cat "$c/transport")'"
	addr=$(cat "$c/address")
	[[ $addr = *"traddr=$ADDR,"* && $addr = *"trsvcid=$PORT"* ]] || fail "$CTRL address '$addr' is not $ADDR:$PORT"
	[[ $(cat "$c/hostnqn") = "$HOSTNQN" ]] || fail "$CTRL hostnqn is '$(cat "$c/hostnqn")', not $HOSTNQN"
	ok "$CTRL: transport tcp, $addr, hostnqn $HOSTNQN"
	kmsg_since_mark | grep -qF "$CTRL: new ctrl: NQN \"$NQN\"" ||
		fail "no 'new ctrl: NQN \"$NQN\"' kernel message for $CTRL"
	kmsg_since_mark | grep -F "$CTRL:" | indent || true
	[[ $(ctrls "$HOSTNQN" | wc -l) = 1 ]] || fail "expected exactly one controller, found: $(ctrls | tr '\n' ' ')"
	for id in $(ns_ids); do
		dev=$(ns_dev "$id")
		bytes=$(($(cat "/sys/block/${dev#/dev/}/size") * 512))
		want=$(ns_field "$id" 2)
		[[ $bytes = "$want" ]] || fail "nsid $id ($dev) has $bytes bytes, expected $want"
		ok "nsid $id is $dev, $bytes bytes"
	done
	all=$(for b in /sys/block/nvme*n*; do
		n=${b##*/}
		[[ $n = nvme*c*n* ]] && continue
		[[ $(cat "$b/device/subsysnqn" 2>/dev/null) = "$NQN" ]] || continue
		cat "$b/nsid"
	done | sort -n | tr '\n' ' ')
	[[ $all = "$(ns_ids | sort -n | tr '\n' ' ')" ]] || fail "the subsystem has namespaces [$all], expected [$(ns_ids | sort -n | tr '\n' ' ')]"
	quick_io "$(ns_ids | head -n 1)"
}

scn_identify() {
	local out rc line k v id dev inuse lbads ms flbas want_bytes want_bs nsze ncap nuse max_nsid=0
	ensure_connected
	declare -A ic=()
	# nvme list
	rc=0
	out=$(nvme list 2>&1) || rc=$?
	echo "$out" | indent
	[[ $rc = 0 ]] || fail "nvme list failed (exit $rc)"
	for id in $(ns_ids); do
		dev=$(ns_dev "$id")
		grep -qE "^${dev}[[:space:]]" <<<"$out" || fail "nvme list does not show $dev (nsid $id)"
	done
	ok "nvme list shows every namespace: $(for id in $(ns_ids); do ns_dev "$id"; done | tr '\n' ' ')"

	# nvme id-ctrl
	rc=0
	out=$(nvme id-ctrl "/dev/$CTRL" 2>&1) || rc=$?
	[[ $rc = 0 ]] || fail "nvme id-ctrl /dev/$CTRL failed (exit $rc): $out"
	while IFS= read -r line; do
		[[ $line =~ ^([a-z0-9]+)[[:space:]]*:[[:space:]]*(.*)$ ]] || continue
		k=${BASH_REMATCH[1]} v=${BASH_REMATCH[2]}
		v=${v%"${v##*[![:space:]]}"}
		[[ -n ${ic[$k]+x} ]] || ic[$k]=$v
	done <<<"$out"
	for k in vid sn mn fr cntlid ver mdts kas maxcmd nn oncs vwc sgls subnqn ioccsz iorcsz icdoff msdbd cntrltype; do
		note "id-ctrl $k = ${ic[$k]:-<missing>}"
	done
	for k in subnqn cntlid mdts sgls ioccsz iorcsz kas nn maxcmd; do
		[[ -n ${ic[$k]:-} ]] || fail "id-ctrl has no '$k' field"
	done
	[[ ${ic[subnqn]} = "$NQN" ]] || fail "id-ctrl subnqn '${ic[subnqn]}' != $NQN"
	[[ $((ic[cntlid])) = "$(cat "/sys/class/nvme/$CTRL/cntlid")" ]] ||
		fail "id-ctrl cntlid ${ic[cntlid]} != the cntlid of the connection ($(cat "/sys/class/nvme/$CTRL/cntlid"))"
	[[ $((ic[cntlid])) -le $((0xffef)) ]] || fail "cntlid ${ic[cntlid]} is above 0xffef"
	if [[ $ID_CTRL_MDTS = nonzero ]]; then
		[[ $((ic[mdts])) -gt 0 ]] || fail "id-ctrl mdts is 0"
	fi
	[[ $((ic[sgls])) -ne 0 && $((ic[sgls] & 3)) -ne 0 ]] || fail "id-ctrl sgls ${ic[sgls]} does not report SGL support"
	[[ $((ic[ioccsz])) -ge 4 ]] || fail "id-ctrl ioccsz ${ic[ioccsz]} < 4"
	[[ $((ic[iorcsz])) -ge 1 ]] || fail "id-ctrl iorcsz ${ic[iorcsz]} < 1"
	[[ $((ic[kas])) -gt 0 ]] || fail "id-ctrl kas is 0"
	[[ $((ic[maxcmd])) -gt 0 ]] || fail "id-ctrl maxcmd is 0"
	for id in $(ns_ids); do [[ $id -gt $max_nsid ]] && max_nsid=$id; done
	[[ $((ic[nn])) -ge $max_nsid ]] || fail "id-ctrl nn ${ic[nn]} < highest NSID $max_nsid"
	ok "id-ctrl: subnqn, cntlid ${ic[cntlid]}, mdts ${ic[mdts]}, sgls ${ic[sgls]}, ioccsz ${ic[ioccsz]}, iorcsz ${ic[iorcsz]}, kas ${ic[kas]}, maxcmd ${ic[maxcmd]}, nn ${ic[nn]}"

	# nvme id-ns for every namespace
	for id in $(ns_ids); do
		rc=0
		out=$(nvme id-ns "/dev/$CTRL" -n "$id" 2>&1) || rc=$?
		[[ $rc = 0 ]] || fail "nvme id-ns /dev/$CTRL -n $id failed (exit $rc): $out"
		nsze=$(awk '$1 == "nsze" { print $3 }' <<<"$out")
		ncap=$(awk '$1 == "ncap" { print $3 }' <<<"$out")
		nuse=$(awk '$1 == "nuse" { print $3 }' <<<"$out")
		flbas=$(awk '$1 == "flbas" { print $3 }' <<<"$out")
		inuse=$(grep -E '^lbaf +[0-9]+ *:.*\(in use\)' <<<"$out" | head -n 1 || true)
		[[ -n $nsze && -n $ncap && -n $flbas && -n $inuse ]] || fail "nvme id-ns -n $id output not understood: $out"
		lbads=$(sed -n 's/.*lbads:\([0-9]*\).*/\1/p' <<<"$inuse")
		ms=$(sed -n 's/.*ms:\([0-9]*\).*/\1/p' <<<"$inuse")
		[[ $(sed -n 's/^lbaf *\([0-9]*\).*/\1/p' <<<"$inuse") = $((flbas & 0xf)) ]] ||
			fail "nsid $id: the in-use LBA format is not flbas ($flbas)"
		want_bytes=$(ns_field "$id" 2)
		want_bs=$(ns_field "$id" 3)
		[[ $((1 << lbads)) = "$want_bs" ]] || fail "nsid $id: LBA data size 2^$lbads, expected $want_bs"
		[[ $ms = 0 ]] || fail "nsid $id: in-use LBA format has metadata ($ms bytes)"
		[[ $((nsze * want_bs)) = "$want_bytes" ]] || fail "nsid $id: nsze $nsze x $want_bs bytes != $want_bytes"
		[[ $((ncap)) -ge 1 && $((ncap)) -le $((nsze)) ]] || fail "nsid $id: ncap $ncap not in 1..nsze"
		[[ -z $nuse || $((nuse)) -le $((ncap)) ]] || fail "nsid $id: nuse $nuse > ncap $ncap"
		dev=$(ns_dev "$id")
		[[ $(cat "/sys/block/${dev#/dev/}/queue/logical_block_size") = "$want_bs" ]] ||
			fail "nsid $id: the kernel uses $(cat "/sys/block/${dev#/dev/}/queue/logical_block_size")-byte blocks"
		ok "id-ns $id: nsze $nsze ($((nsze)) x $want_bs = $want_bytes bytes), ncap $ncap, lbaf $((flbas & 0xf)) lbads $lbads ms 0"
	done
}

scn_fio_ram() {
	ns_field "${FIO_RAM_NSID:-none}" 2 >/dev/null || fail "FIO_RAM_NSID '$FIO_RAM_NSID' is not in NAMESPACES"
	ensure_connected
	run_fio ram "$FIO_RAM_NSID" "$FIO_SIZE"
}

scn_fio_file() {
	ns_field "${FIO_FILE_NSID:-none}" 2 >/dev/null || fail "FIO_FILE_NSID '$FIO_FILE_NSID' is not in NAMESPACES"
	ensure_connected
	run_fio file "$FIO_FILE_NSID" "$FIO_SIZE"
}

scn_flush_zeroes_dsm() {
	local id dev bs off=$((4 << 20)) rc out slba nlb
	ensure_connected
	for id in $DATA_NSIDS; do
		dev=$(ns_dev "$id") || fail "no block device for nsid $id"
		bs=$(cat "/sys/block/${dev#/dev/}/queue/logical_block_size")
		note "nsid $id ($dev, $bs-byte blocks): 1 MiB pattern at byte $off"
		head -c 1048576 /dev/urandom >"$WORK/pattern"
		cp "$WORK/pattern" "$WORK/model"
		write_region "$dev" "$off" "$WORK/pattern"

		rc=0
		out=$(nvme flush "$dev" -n "$id" 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme flush nsid $id failed (exit $rc)"
		check_region "$dev" "$off" "$WORK/model" "nsid $id after flush"

		# write zeroes: 128 KiB at +64 KiB (block count is 0-based)
		slba=$(((off + 65536) / bs)) nlb=$((131072 / bs))
		rc=0
		out=$(nvme write-zeroes "$dev" -n "$id" -s "$slba" -c $((nlb - 1)) 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme write-zeroes nsid $id slba $slba nlb $nlb failed (exit $rc)"
		zero_model "$WORK/model" 65536 131072
		check_region "$dev" "$off" "$WORK/model" "nsid $id after write-zeroes (slba $slba, $nlb blocks)"

		# deallocate: 256 KiB at +512 KiB (range length is 1-based)
		slba=$(((off + 524288) / bs)) nlb=$((262144 / bs))
		rc=0
		out=$(nvme dsm "$dev" -n "$id" --ad -s "$slba" -b "$nlb" 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme dsm --ad nsid $id slba $slba nlb $nlb failed (exit $rc)"
		zero_model "$WORK/model" 524288 262144
		check_region "$dev" "$off" "$WORK/model" "nsid $id after dsm --ad (slba $slba, $nlb blocks)"
	done
}

oncs_of() { # the controller's ONCS (Identify Controller)
	local out
	out=$(nvme id-ctrl "/dev/$CTRL" 2>&1) || fail "nvme id-ctrl failed: $out"
	awk '$1 == "oncs" { print $3; exit }' <<<"$out"
}

# nvme-cli's Compare, Verify and Copy (issue 43). farflash reports ONCS
# bits 0 (Compare), 7 (Verify) and 8 (Copy) and must run them; Linux
# nvmet reports none of them and must refuse each (NVM_CMDS=none: the
# kernel target's self-tests run this too).
scn_copy_compare_verify() {
	local id dev bs oncs off=$((12 << 20)) rc out slba dst want
	ensure_connected
	oncs=$(oncs_of)
	[[ -n $oncs ]] || fail "id-ctrl has no oncs"
	note "id-ctrl oncs = $oncs"
	for id in $DATA_NSIDS; do
		dev=$(ns_dev "$id") || fail "no block device for nsid $id"
		bs=$(cat "/sys/block/${dev#/dev/}/queue/logical_block_size")
		slba=$((off / bs))
		head -c 262144 /dev/urandom >"$WORK/cv"
		write_region "$dev" "$off" "$WORK/cv"
		if [[ $NVM_CMDS = none ]]; then
			[[ $((oncs & 0x181)) = 0 ]] || fail "nvmet reports ONCS $oncs with Compare, Verify or Copy"
			! nvme compare "$dev" -s "$slba" -c 7 -z $((8 * bs)) -d "$WORK/cv" >/dev/null 2>&1 ||
				fail "nvmet ran a Compare it does not report"
			ok "nsid $id: Compare refused by a target that does not report it"
			continue
		fi
		[[ $((oncs & 0x181)) = $((0x181)) ]] || fail "ONCS $oncs lacks Compare (bit 0), Verify (bit 7) or Copy (bit 8)"
		# compare: the first 64 KiB as written, then with one byte changed
		head -c 65536 "$WORK/cv" >"$WORK/cv-head"
		rc=0
		out=$(nvme compare "$dev" -s "$slba" -c $((65536 / bs - 1)) -z 65536 -d "$WORK/cv-head" 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme compare of the data just written failed (exit $rc)"
		if [[ $(($(od -An -tu1 -j 4000 -N1 "$WORK/cv-head"))) = 0 ]]; then printf '\001'; else printf '\000'; fi |
			dd of="$WORK/cv-head" bs=1 seek=4000 conv=notrunc 2>/dev/null
		cmp -s "$WORK/cv-head" <(head -c 65536 "$WORK/cv") && fail "the changed copy is the same"
		rc=0
		out=$(nvme compare "$dev" -s "$slba" -c $((65536 / bs - 1)) -z 65536 -d "$WORK/cv-head" 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc != 0 ]] || fail "nvme compare of different data succeeded"
		grep -qiE 'compare_failed|compare failure|miscompare|0x285|0x4285' <<<"$out" || fail "nvme compare failed for another reason: $out"
		ok "nsid $id: compare matches the data written and fails on one changed byte"
		# verify: the 256 KiB
		rc=0
		out=$(nvme verify "$dev" -n "$id" -s "$slba" -c $((262144 / bs - 1)) 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme verify failed (exit $rc)"
		ok "nsid $id: verify of 256 KiB"
		# copy: the second 64 KiB, then the first, to +1 MiB (nvme-cli's
		# --blocks are the 0's based NLB fields)
		dst=$(((off + 1048576) / bs))
		rc=0
		out=$(nvme copy "$dev" --sdlba="$dst" --slbs=$((slba + 65536 / bs)),"$slba" \
			--blocks=$((65536 / bs - 1)),$((65536 / bs - 1)) --format=0 2>&1) || rc=$?
		echo "$out" | indent
		[[ $rc = 0 ]] || fail "nvme copy failed (exit $rc)"
		{
			dd if="$WORK/cv" bs=64k skip=1 count=1 2>/dev/null
			dd if="$WORK/cv" bs=64k count=1 2>/dev/null
		} >"$WORK/cv-want"
		check_region "$dev" $((off + 1048576)) "$WORK/cv-want" "nsid $id after nvme copy (2 ranges of 64 KiB)"
		want=$(nvme id-ns "$dev" -n "$id" 2>&1 | awk '$1 == "mssrl" || $1 == "mcl" || $1 == "msrc" { printf "%s=%s ", $1, $3 }')
		note "nsid $id: copy limits $want"
	done
}

scn_reconnect() {
	local id dev off=$((8 << 20)) cntlid1 cntlid2
	ensure_connected
	cntlid1=$(cat "/sys/class/nvme/$CTRL/cntlid")
	for id in $DATA_NSIDS; do
		dev=$(ns_dev "$id") || fail "no block device for nsid $id"
		head -c $((2 << 20)) /dev/urandom >"$WORK/keep-$id"
		write_region "$dev" "$off" "$WORK/keep-$id"
		ok "nsid $id: wrote 2 MiB at byte $off"
	done
	disconnect
	kmsg_since_mark | grep -qF "Removing ctrl: NQN \"$NQN\"" || fail "no 'Removing ctrl' kernel message"
	for id in $DATA_NSIDS; do
		! ns_dev "$id" >/dev/null || fail "nsid $id block device still present after disconnect"
	done
	ok "disconnected; namespaces gone"
	connect
	cntlid2=$(cat "/sys/class/nvme/$CTRL/cntlid")
	note "cntlid before $cntlid1, after $cntlid2"
	for id in $DATA_NSIDS; do
		check_region "$(ns_dev "$id")" "$off" "$WORK/keep-$id" "nsid $id after reconnect"
	done
}

scn_digests() {
	local k
	disconnect
	connect --hdr-digest --data-digest
	# nvme-tcp fails the connect if the target's ICResp does not enable both
	# digests ("digest mismatch"); a wrong digest on any PDU is logged and
	# fails the I/O.
	run_fio digests "$FIO_RAM_NSID" "$FIO_DIGEST_SIZE"
	k=$(kmsg_since_mark | grep -iE 'digest|error recovery|reconnect' || true)
	[[ -z $k ]] || {
		echo "$k" | indent
		fail "the kernel logged digest errors or recovery"
	}
	ok "header + data digests (crc32c) negotiated; I/O clean"
	disconnect
}

scn_sqflow() {
	local k
	disconnect
	# CATTR bit 2 in every Connect: the target then sends SQHD FFFFh and ends
	# successful reads with a C2HData carrying SUCCESS instead of a
	# CapsuleResp; with the data digest on too, that C2HData also carries the
	# digest. fio's verify reads go through exactly that path.
	connect --disable-sqflow
	run_fio sqflow "$FIO_RAM_NSID" "$FIO_DIGEST_SIZE"
	disconnect
	connect --disable-sqflow --data-digest
	run_fio sqflow-ddgst "$FIO_RAM_NSID" "$FIO_DIGEST_SIZE"
	k=$(kmsg_since_mark | grep -iE 'digest|error recovery|reconnect|unexpected|invalid' || true)
	[[ -z $k ]] || {
		echo "$k" | indent
		fail "the kernel logged errors with SQ flow control disabled"
	}
	ok "--disable-sqflow (with and without data digest): I/O clean, reads verified"
	disconnect
}

scn_io_queues() {
	local n dirs qc
	[[ $(nproc) -ge 2 ]] || fail "the guest needs at least 2 CPUs to test 2 I/O queues"
	for n in 2 1; do
		disconnect
		connect --nr-io-queues="$n"
		kmsg_since_mark | grep -F "$CTRL:" | indent || true
		kmsg_since_mark | grep -qE "$CTRL: mapped $n/0/0 default/read/poll queues" ||
			fail "no '$CTRL: mapped $n/0/0 default/read/poll queues' kernel message"
		qc=$(cat "/sys/class/nvme/$CTRL/queue_count")
		[[ $qc = $((n + 1)) ]] || fail "$CTRL queue_count is $qc, expected $((n + 1)) (admin + $n I/O)"
		dirs=$(for d in /sys/class/nvme/"$CTRL"/nvme*c*n*/mq/*; do echo "$d"; done | sed 's|/mq/.*||' | sort | uniq -c | awk '{ print $1 }' | sort -u)
		[[ $dirs = "$n" ]] || fail "blk-mq hardware queues per namespace: '$dirs', expected $n"
		ok "--nr-io-queues=$n: kernel mapped $n I/O queues (queue_count $qc, $n blk-mq hw queues)"
		quick_io "$(ns_ids | head -n 1)"
	done
	disconnect
}

scn_refused_host() {
	local out rc k
	disconnect
	mark "refused-host"
	note "nvme connect as $DENIED_HOSTNQN (not allowed)"
	rc=0
	out=$(timeout 120 nvme connect -t tcp -a "$ADDR" -s "$PORT" -n "$NQN" \
		--hostnqn="$DENIED_HOSTNQN" --hostid="$DENIED_ID" 2>&1) || rc=$?
	echo "$out" | indent
	k=$(kmsg_since_mark)
	echo "$k" | indent
	if [[ $rc = 0 ]]; then
		timeout 60 nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
		fail "nvme connect from a host NQN that is not allowed succeeded"
	fi
	[[ -z $(ctrls "$DENIED_HOSTNQN") ]] || fail "a controller exists for the refused host"
	ok "nvme connect refused (exit $rc)"
	grep -qE "Connect for subsystem .* is not allowed|Connect Invalid Host|ret=16772|0x4184" <<<"$k" ||
		fail "the kernel did not log a Connect Invalid Host rejection (status 0x4184)"
	ok "kernel: $(grep -E 'nvme nvme[0-9]+: .*(is not allowed|Invalid Host|ret=16772)' <<<"$k" | head -n 1 | sed 's/^\[[^]]*\] //' || true)"
	# the allowed host still gets in afterwards
	connect
	quick_io "$(ns_ids | head -n 1)"
	disconnect
}

scn_disconnect() {
	local c
	ensure_connected
	c=$CTRL
	disconnect
	kmsg_since_mark | grep -qF "$c: Removing ctrl: NQN \"$NQN\"" || fail "no '$c: Removing ctrl' kernel message"
	[[ ! -e /dev/$c ]] || fail "/dev/$c still exists"
	ok "$c removed"
}

# ------------------------------------------------------------------- runner
echo "=== interop: kernel $(uname -r), $(nvme version | head -n 1), $(fio --version)"
echo "=== target $ADDR:$PORT (listeners: $LISTEN_PORTS), subsystem $NQN, namespaces $NAMESPACES"
echo "=== host NQN $HOSTNQN, refused host NQN $DENIED_HOSTNQN"
T_ALL=$(now)
failed=() passed=0
for s in $SCENARIOS; do
	[[ " $ALL " = *" $s "* ]] || {
		echo "FAIL: $s: unknown scenario (known: $ALL)"
		failed+=("$s")
		continue
	}
	echo
	echo "=== scenario $s"
	t=$(now)
	set +e
	(
		SCN=$s
		set -eE
		trap 'rc=$?; fail "command failed (exit $rc) at line $LINENO: $BASH_COMMAND"' ERR
		"scn_${s//-/_}"
	)
	rc=$?
	set -e
	if [[ $rc = 0 ]]; then
		echo "PASS: $s ($(since "$t")s)"
		passed=$((passed + 1))
	else
		[[ $rc = 99 ]] || echo "FAIL: $s: exited with status $rc"
		failed+=("$s")
		echo "  (cleaning up after the failure)"
		timeout 60 nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
	fi
done
timeout 60 nvme disconnect -n "$NQN" >/dev/null 2>&1 || true
if [[ $INTEROP_TARGET = kernel ]]; then
	"$kts" --teardown || echo "warning: kernel target teardown failed"
fi
echo
if [[ ${#failed[@]} = 0 ]]; then
	echo "INTEROP RESULT: all $passed scenarios passed ($(since "$T_ALL")s)"
	exit 0
fi
echo "INTEROP RESULT: ${#failed[@]} failed (${failed[*]}), $passed passed ($(since "$T_ALL")s)"
exit 1
