#!/bin/sh
# reservations.sh -- guest script for run-linux-host (tests/interop_ha.rs,
# docs/ha.md): NVMe reservations with nvme-cli from two host NQNs (two
# `nvme connect` with their own --hostnqn/--hostid) to one farflash target.
# Host A registers (with PTPL set) and takes a Write Exclusive
# reservation, host B registers: B's write gets Reservation Conflict, B
# still reads, A writes; the report lists both registrants. Then the host
# side SIGKILLs the target and restarts it ($SHARE_DIR "restart"): after the
# reconnect the reservation is still there (PTPL) and B still conflicts;
# A releases and B writes. Commands go through each host's controller
# character device (/dev/nvmeX -n 1), so each carries that host's identity.
# Prints "PASS: reservations (Ns)" or "FAIL: reservations: reason".
set -eu
NQN=${NQN:?}
T0=$(cut -d' ' -f1 /proc/uptime)
fail() {
	echo "FAIL: reservations: $*"
	dmesg | grep -i nvme | tail -20
	exit 1
}
# Two ports of the target: nvme-cli refuses a second connection to the
# same port and subsystem ("already connected") whatever the host NQN.
set -- $TARGET_PORTS
PORTA=$1 PORTB=$2
IDA=0000000a-0000-4000-8000-00000000000a
IDB=0000000b-0000-4000-8000-00000000000b
HA=nqn.2014-08.org.nvmexpress:uuid:$IDA
HB=nqn.2014-08.org.nvmexpress:uuid:$IDB
for h in A B; do
	eval "nqn=\$H$h id=\$ID$h port=\$PORT$h"
	nvme connect -t tcp -a "$TARGET_ADDR" -s "$port" -n "$NQN" --hostnqn="$nqn" --hostid="$id" \
		--reconnect-delay=1 --ctrl-loss-tmo=120 >/dev/null || fail "nvme connect as host $h"
done
# ctrl HOSTNQN: the controller character device of that host.
ctrl() {
	for c in /sys/class/nvme/nvme*; do
		[ "$(cat "$c/hostnqn" 2>/dev/null)" = "$1" ] && echo "/dev/${c##*/}"
	done
	return 0
}
both_live() {
	i=0
	until [ "$(cat /sys/class/nvme/nvme*/state 2>/dev/null | grep -c live)" = 2 ]; do
		i=$((i + 1))
		[ $i -le 600 ] || fail "not two live controllers after 60 s ($*)"
		sleep 0.1
	done
}
both_live "after connect"
A=$(ctrl "$HA")
B=$(ctrl "$HB")
[ -n "$A" ] && [ -n "$B" ] && [ "$A" != "$B" ] || fail "controllers of A ($A) and B ($B)"
# The controller-device commands need the namespace scanned on each
# controller (the kernel answers ENOTTY before).
scanned() {
	for d in "$A" "$B"; do
		i=0
		until ls "/sys/class/nvme/${d#/dev/}/" | grep -qE '^nvme[0-9]+(c[0-9]+)?n1$'; do
			i=$((i + 1))
			[ $i -le 300 ] || fail "no namespace 1 on $d after 30 s ($*)"
			sleep 0.1
		done
	done
}
scanned "after connect"
echo "  ok: host A on $A, host B on $B"
dd if=/dev/urandom of=/tmp/blk bs=512 count=1 2>/dev/null
# write DEV / read DEV: one 512-byte block at LBA 0 through that controller.
write() { nvme io-passthru "$1" --opcode=0x01 --namespace-id=1 --data-len=512 --write --input-file=/tmp/blk --cdw10=0 --cdw12=0 2>&1; }
rd() { nvme io-passthru "$1" --opcode=0x02 --namespace-id=1 --data-len=512 --read --cdw10=0 --cdw12=0 2>&1 >/dev/null; }
conflicts() {
	if out=$(write "$B"); then
		fail "host B wrote despite host A's Write Exclusive reservation ($*)"
	fi
	echo "$out" | grep -qiE "reservation.conflict" || fail "host B's write ($*): $out; want Reservation Conflict"
}
report() {
	out=$(nvme resv-report "$A" -n 1 --eds 2>&1) || fail "resv-report: $out"
	for want in 'rtype *: *1$' 'regctl *: *2$' 'rkey *: *(0x)?aa$' 'rkey *: *(0x)?bb$' "ptpls *: *1\$"; do
		echo "$out" | grep -qE "$want" || fail "resv-report ($*) lacks /$want/: $out"
	done
}
# 170 = 0xaa, 187 = 0xbb; CPTPL 3: persist through power loss.
nvme resv-register "$A" -n 1 --nrkey=170 --rrega=0 --cptpl=3 >/dev/null || fail "resv-register A"
nvme resv-register "$B" -n 1 --nrkey=187 --rrega=0 >/dev/null || fail "resv-register B"
if nvme resv-register "$B" -n 1 --nrkey=999 --rrega=0 >/dev/null 2>&1; then
	fail "B registered again with another key"
fi
nvme resv-acquire "$A" -n 1 --crkey=170 --rtype=1 --racqa=0 >/dev/null || fail "resv-acquire A (Write Exclusive)"
if nvme resv-acquire "$B" -n 1 --crkey=187 --rtype=1 --racqa=0 >/dev/null 2>&1; then
	fail "B acquired A's reservation"
fi
conflicts "before the restart"
rd "$B" || fail "host B cannot read (Write Exclusive allows it)"
write "$A" >/dev/null || fail "host A (the holder) cannot write"
report "before the restart"
echo "  ok: B's write gets Reservation Conflict, B reads, A writes; the report lists both registrants"
echo restart >"$SHARE_DIR/request"
i=0
until [ -f "$SHARE_DIR/restarted" ]; do
	i=$((i + 1))
	[ $i -le 600 ] || fail "the host side did not restart the target"
	sleep 0.1
done
sleep 1
both_live "after the target restarted"
scanned "after the target restarted"
report "after the restart"
conflicts "after the restart"
echo "  ok: target SIGKILLed and restarted: the reservation is still there (PTPL), B still conflicts"
nvme resv-release "$A" -n 1 --crkey=170 --rtype=1 --rrela=0 >/dev/null || fail "resv-release A"
write "$B" >/dev/null || fail "host B cannot write after the release"
nvme resv-register "$A" -n 1 --crkey=170 --rrega=1 --cptpl=2 >/dev/null || fail "unregister A"
nvme resv-register "$B" -n 1 --crkey=187 --rrega=1 >/dev/null || fail "unregister B"
echo "  ok: released, B writes, both unregistered"
nvme disconnect -n "$NQN" >/dev/null || fail "nvme disconnect"
echo "PASS: reservations ($(awk -v a="$T0" -v b="$(cut -d' ' -f1 /proc/uptime)" 'BEGIN { printf "%.1f", b - a }')s)"
