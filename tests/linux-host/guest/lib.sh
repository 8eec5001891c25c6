#!/bin/sh
# lib.sh -- helpers shared by guest scripts: waiting, namespaces' block
# devices, fio verify looping in the background (aen.sh, rbd.sh,
# multipath.sh, rbd-failover.sh), and the Linux
# host's native multipath over two targets A and B (multipath.sh,
# rbd-failover.sh; A's controllers have CNTLIDs below 1000, B's above,
# docs/ha.md). Sourced after the script has defined fail(); the test passes
# it with `run-linux-host -f`.

now() { cut -d' ' -f1 /proc/uptime; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# wait_for TENTHS WHAT COMMAND...: COMMAND succeeds within TENTHS/10 s, or fail "WHAT".
wait_for() {
	n=$1 what=$2
	shift 2
	i=0
	until "$@"; do
		i=$((i + 1))
		[ $i -le "$n" ] || fail "$what"
		sleep 0.1
	done
}

# wait_ok WHAT COMMAND...: COMMAND succeeds within 30 s (says how long it
# took), or fail "WHAT: not after 30 s".
wait_ok() {
	ok_what=$1 ok_t0=$(now)
	shift
	wait_for 300 "$ok_what: not after 30 s" "$@"
	echo "  ok: $ok_what after $(since "$ok_t0") s"
}

# ns_dev NSID: the block device (nvmeXnNSID) of that namespace, if present.
ns_dev() { ls /sys/block | grep "^nvme[0-9]*n$1\$" | head -1; }
# sectors_are NSID SECTORS: that namespace's block device has SECTORS sectors of 512 bytes.
sectors_are() {
	d=$(ns_dev "$1")
	[ -n "$d" ] && [ "$(cat /sys/block/"$d"/size)" = "$2" ]
}

# connect_paths: nvme connect to $NQN on every port of $TARGET_PORTS; one
# subsystem with two controllers and one namespace head appear; sets $dev.
two_controllers() {
	[ "$(ls /sys/class/nvme-subsystem/ 2>/dev/null | grep -c '^nvme-subsys')" = 1 ] &&
		[ "$(ls /sys/class/nvme-subsystem/nvme-subsys*/ | grep -c '^nvme[0-9]*$')" = 2 ]
}
connect_paths() {
	[ "$(cat /sys/module/nvme_core/parameters/multipath)" = Y ] || fail "nvme_core.multipath is off"
	for p in $TARGET_PORTS; do
		nvme connect -t tcp -a "$TARGET_ADDR" -s "$p" -n "$NQN" --reconnect-delay=1 --ctrl-loss-tmo=120 >/dev/null ||
			fail "nvme connect to port $p"
	done
	wait_for 300 "not one subsystem with two controllers after 30 s" two_controllers
	heads=$(ls /sys/block | grep -c '^nvme[0-9]*n[0-9]*$' || true)
	[ "$heads" = 1 ] || fail "$heads namespace block devices, want one multipath head"
	dev=/dev/$(ls /sys/block | grep '^nvme[0-9]*n[0-9]*$')
	echo "  ok: one subsystem, two controllers, head $dev"
}

# ctrl_of a|b: the sysfs directory of target A's or B's controller.
ctrl_of() {
	for c in /sys/class/nvme-subsystem/nvme-subsys*/nvme[0-9]*; do
		[ -f "$c/cntlid" ] || continue
		id=$(cat "$c/cntlid")
		case "$1:$((id < 1000))" in
		a:1 | b:0) echo "$c" ;;
		esac
	done
}
# path a|b: the sysfs block directory of that controller's path to namespace 1.
path() {
	c=$(ctrl_of "$1")
	[ -n "$c" ] || return 0
	ls -d /sys/block/nvme*c"${c##*/nvme}"n1 2>/dev/null || true
}
ctrl_state() { c=$(ctrl_of "$1") && [ -n "$c" ] && cat "$c/state"; }
ana_is() { [ "$(cat "$(path "$1")/ana_state" 2>/dev/null)" = "$2" ]; }
state_is() { [ "$(ctrl_state "$1" 2>/dev/null)" = "$2" ]; }
state_is_not() { ! state_is "$@"; }
# wait_ana a|b STATE: the kernel shows that path in STATE within 30 s.
wait_ana() {
	i=0
	until ana_is "$1" "$2"; do
		i=$((i + 1))
		[ $i -le 300 ] || fail "path $1 ($(path "$1")) is $(cat "$(path "$1")/ana_state" 2>/dev/null), not $2, after 30 s"
		sleep 0.1
	done
}
writes() { awk '{ print $5 }' "$(path "$1")/stat"; }

# fio_loop_start DEV [FIO OPTIONS]: fio verify of 2 MiB of random writes
# (4 KiB unless the options say otherwise) on DEV, run after run, in the
# background; /tmp/fio-runs counts the runs.
fio_loop_start() {
	fio_dev=$1
	shift
	rm -f /tmp/fio-stop /tmp/fio-failed /tmp/fio-runs
	(
		n=0
		while [ ! -f /tmp/fio-stop ]; do
			n=$((n + 1))
			fio --name=verify --filename="$fio_dev" --ioengine=libaio --direct=1 \
				--rw=randwrite --bs=4k --size=2m --iodepth=4 "$@" \
				--verify=crc32c --verify_fatal=1 --do_verify=1 --verify_state_save=0 \
				--eta=never >>/tmp/fio.log 2>&1 || { echo "fio run $n failed" >/tmp/fio-failed; break; }
			echo "$n" >/tmp/fio-runs
		done
	) &
	fio_loop=$!
}
# progress WHAT: one more fio verify run completes within 60 s, none failed.
progress() {
	runs=$(cat /tmp/fio-runs 2>/dev/null || echo 0)
	i=0
	until [ "$(cat /tmp/fio-runs 2>/dev/null || echo 0)" -gt "$runs" ]; do
		[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed) ($1)"
		i=$((i + 1))
		[ $i -le 600 ] || fail "fio made no progress in 60 s ($1)"
		sleep 0.1
	done
}
# only_on a|b: over one fio run, writes went down that path only.
only_on() {
	other=b
	[ "$1" = a ] || other=a
	w1=$(writes "$1") o1=$(writes $other)
	progress "only on $1"
	w2=$(writes "$1") o2=$(writes $other)
	[ "$o2" = "$o1" ] || fail "path $other got $((o2 - o1)) writes; want all on $1"
	[ "$w2" -gt "$w1" ] || fail "path $1 got no writes"
}
# fio_loop_stop WHAT: stop the loop; no run failed and fio logged no error.
fio_loop_stop() {
	touch /tmp/fio-stop
	wait "$fio_loop" || true
	[ ! -f /tmp/fio-failed ] || fail "$(cat /tmp/fio-failed)"
	! grep -qiE 'verify failed|bad magic|bad header|crc32c: |io_u error|err= *[1-9]' /tmp/fio.log ||
		fail "fio reported verify/I/O errors"
	echo "  ok: fio verify across $1: $(cat /tmp/fio-runs) runs, no error"
}
