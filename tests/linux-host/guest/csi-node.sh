#!/bin/bash
# csi-node.sh -- guest script for run-linux-host: farflash-csi's Node
# service inside the Linux guest, driven from the host side
# (crates/csi/tests/node_vm.rs). Needs an image with --bin FARFLASH_CSI,
# socat, mke2fs, resize2fs, blkid, mount, umount (and --bin CSI_SANITY
# when it is to run), --module ext4 and -f csi-cmd.sh.
#
# Environment:
#   FARFLASH_CSI   the farflash-csi binary (its host path, in the image)
#   NODE_PORT      guest port: TCP -> the node's CSI socket (socat), for
#                  the host's gRPC client (--hostfwd H:NODE_PORT)
#   CMD_PORT       guest port: csi-cmd.sh runs one shell script per
#                  connection (--hostfwd H:CMD_PORT)
#   MULTIPATH      Y or N: what nvme_core.multipath must be (the host side
#                  sets it on the kernel command line)
#   TLS            1: tlshd serves the .nvme keyring first (tls-lib.sh,
#                  passed with -f; the --kernel 6.12 --tls image)
# Prints "CSI-NODE-READY multipath=Y|N", serves until the host side runs
# `touch /tmp/csi-node-done` through CMD_PORT, then stops farflash-csi
# with SIGTERM and exits with its status (0 expected).
set -u
fail() {
	echo "FAIL: csi-node: $*"
	exit 1
}
: "${FARFLASH_CSI:?}" "${NODE_PORT:?}" "${CMD_PORT:?}" "${MULTIPATH:?}"
mp=$(cat /sys/module/nvme_core/parameters/multipath 2>/dev/null) || fail "no nvme_core module"
[ "$mp" = "$MULTIPATH" ] || fail "nvme_core.multipath is $mp, want $MULTIPATH"
# mkfs.ext4 is mke2fs by another name (the image holds the resolved
# program); the node service runs mkfs.ext4.
mke2fs=$(command -v mke2fs) || fail "mke2fs is not in the image"
ln -sf "$mke2fs" "$(dirname "$mke2fs")/mkfs.ext4"
for p in socat blkid resize2fs mount umount nvme; do
	command -v "$p" >/dev/null || fail "$p is not in the image"
done
modprobe ext4 || fail "no ext4 module (--module ext4)"
if [ "${TLS:-0}" = 1 ]; then
	# shellcheck source-path=SCRIPTDIR source=tls-lib.sh
	. "$GUEST_FILES/tls-lib.sh"
	tls_start
	command -v keyctl >/dev/null || fail "keyctl is not in the image"
fi
mkdir -p /run/csi
"$FARFLASH_CSI" --node --endpoint unix:///run/csi/csi.sock --log-level info &
csi_pid=$!
i=0
while [ ! -S /run/csi/csi.sock ] && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
[ -S /run/csi/csi.sock ] || fail "farflash-csi made no socket in 30 s"
socat TCP-LISTEN:"$NODE_PORT",fork,reuseaddr UNIX-CONNECT:/run/csi/csi.sock &
node_pid=$!
socat TCP-LISTEN:"$CMD_PORT",fork,reuseaddr EXEC:"$GUEST_FILES/csi-cmd.sh" &
cmd_pid=$!
listening() { netstat -ltn 2>/dev/null | grep -q ":$1 "; }
i=0
while ! { listening "$NODE_PORT" && listening "$CMD_PORT"; } && [ $i -lt 300 ]; do sleep 0.1; i=$((i + 1)); done
{ listening "$NODE_PORT" && listening "$CMD_PORT"; } || fail "socat does not listen on $NODE_PORT and $CMD_PORT"
echo "CSI-NODE-READY multipath=$mp"
while [ ! -e /tmp/csi-node-done ]; do
	kill -0 "$csi_pid" 2>/dev/null || fail "farflash-csi exited while serving"
	sleep 0.2
done
kill "$node_pid" "$cmd_pid"
kill -TERM "$csi_pid"
i=0
while kill -0 "$csi_pid" 2>/dev/null && [ $i -lt 200 ]; do sleep 0.1; i=$((i + 1)); done
kill -0 "$csi_pid" 2>/dev/null && fail "farflash-csi still runs 20 s after SIGTERM"
wait "$csi_pid" || fail "farflash-csi exited with status $? after SIGTERM"
echo "CSI-NODE-STOPPED"
