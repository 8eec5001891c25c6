#!/bin/sh
# connect with header+data digests, a few reads/writes, disconnect
set -eu
nvme connect -t tcp -a "$TARGET_ADDR" -s "$TARGET_PORT" -n "$NQN" --hdr-digest --data-digest -i 1
sleep 1
DEV=
for b in /sys/block/nvme*n*; do DEV=/dev/${b##*/}; done
echo "dev $DEV"
dd if=/dev/urandom of=/tmp/x bs=4k count=8 2>/dev/null
dd if=/tmp/x of="$DEV" bs=4k count=8 oflag=direct 2>/dev/null
dd if=/tmp/x of="$DEV" bs=32k count=1 seek=3 oflag=direct 2>/dev/null
dd if="$DEV" of=/tmp/y bs=4k count=8 iflag=direct 2>/dev/null
dd if="$DEV" of=/tmp/z bs=64k count=1 skip=1 iflag=direct 2>/dev/null
cmp /tmp/x /tmp/y && echo SAME
nvme id-ctrl /dev/nvme0 >/dev/null
nvme smart-log /dev/nvme0 >/dev/null || true
nvme disconnect -n "$NQN"
echo DONE
