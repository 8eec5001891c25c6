#!/usr/bin/env bash
# tests/csi-sanity.sh -- kubernetes-csi's csi-sanity against farflash-csi's
# Identity and Controller services and a real `farflash serve` (issue #45).
#
# Builds csi-sanity (pinned below) with the machine's Go from the Go module
# proxy into a cache directory, makes a CA and certificates with the
# openssl CLI (scripts/mgmt-certs.sh), starts a target with its management
# endpoint on 127.0.0.1 and a local pool on a sparse file, starts the CSI
# controller on a Unix socket, and runs every csi-sanity spec but the Node
# Service's (this process serves no node; the node's run is in the VM).
# tests/csi-sanity-summary.sh then prints how many specs passed, failed and
# were skipped, each skip's reason, and fails the run if a spec was skipped
# for anything but a capability the driver does not advertise.
# A missing prerequisite (go, openssl, cargo) fails the run.
#
#   bash tests/csi-sanity.sh            # exit status: csi-sanity's
#   CSI_SANITY_POOL=rbd bash tests/csi-sanity.sh
#                                       # the pool an RBD pool on a
#                                       # throwaway single-node Ceph cluster
#                                       # (tests/ceph/cluster.sh; Debian's
#                                       # ceph-mon/-mgr/-osd/-common), not a
#                                       # local pool on a sparse file
#   CSI_SANITY_FOCUS='Controller' ...   # a ginkgo focus, for one's own runs
#   bash tests/csi-sanity.sh --build-only   # only build csi-sanity (for
#                                           # crates/csi/tests/node_vm.rs)
set -euo pipefail

CSI_TEST_VERSION=v5.6.0
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
CACHE=${FARFLASH_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/farflash}
SANITY=$CACHE/csi-sanity-$CSI_TEST_VERSION/csi-sanity

need() { command -v "$1" >/dev/null || { echo "csi-sanity.sh: $1 is needed ($2)" >&2; exit 1; }; }
need go "the Go toolchain builds csi-sanity"
need openssl "apt-get install openssl"
need cargo "rustup"
POOL_KIND=${CSI_SANITY_POOL:-local}
case $POOL_KIND in
local) ;;
rbd) for c in ceph-mon ceph-mgr ceph-osd ceph rbd; do need "$c" "apt-get install ceph-mon ceph-mgr ceph-osd ceph-common"; done ;;
*) echo "csi-sanity.sh: CSI_SANITY_POOL=$POOL_KIND: want local or rbd" >&2; exit 2 ;;
esac

if [[ ! -x $SANITY ]]; then
	echo "building csi-sanity $CSI_TEST_VERSION into $(dirname "$SANITY")"
	mkdir -p "$(dirname "$SANITY")"
	GOBIN=$(dirname "$SANITY") go install "github.com/kubernetes-csi/csi-test/v5/cmd/csi-sanity@$CSI_TEST_VERSION"
fi
if [[ ${1:-} = --build-only ]]; then
	echo "$SANITY"
	exit 0
fi

cd "$ROOT"
cargo build --bin farflash && cargo build -p farflash-csi --bin farflash-csi
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps | sed -n 's/.*"target_directory":"\([^"]*\)".*/\1/p')
BIN=$TARGET_DIR/debug

WORK=$(mktemp -d /tmp/ff-csi-sanity.XXXXXX)
PIDS=()
# shellcheck disable=SC2317  # (trap handler)
cleanup() {
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
	[[ $POOL_KIND != rbd ]] || bash tests/ceph/cluster.sh stop "$WORK/ceph" || true
	rm -rf "$WORK"
}
trap cleanup EXIT

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
NVME_PORT=$(free_port)
MGMT_PORT=$(free_port)

bash scripts/mgmt-certs.sh ca "$WORK/pki"
bash scripts/mgmt-certs.sh server "$WORK/pki" target-a IP:127.0.0.1,DNS:target-a
bash scripts/mgmt-certs.sh client "$WORK/pki" csi-controller

"$BIN/farflash" serve --ram 16M --listen "127.0.0.1:$NVME_PORT" --threads 1 \
	--rpc-socket "$WORK/rpc.sock" --rpc-listen "127.0.0.1:$MGMT_PORT" \
	--rpc-cert "$WORK/pki/target-a.crt" --rpc-key "$WORK/pki/target-a.key" \
	--rpc-client-ca "$WORK/pki/ca.crt" >"$WORK/serve.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [[ -S $WORK/rpc.sock ]] && break; sleep 0.1; done
[[ -S $WORK/rpc.sock ]] || { cat "$WORK/serve.log"; echo "csi-sanity.sh: farflash serve did not start" >&2; exit 1; }

# The pool the StorageClass parameters name: a local pool of 4 GiB,
# sparse; or the Ceph pool "rbd" of a single-node cluster (OSD 4 GiB,
# sparse), volumes as RBD images.
if [[ $POOL_KIND = rbd ]]; then
	bash tests/ceph/cluster.sh start "$WORK/ceph" >"$WORK/ceph.out"
	POOL_JSON="{\"name\": \"sanity\", \"backend\": \"rbd\", \"rbd\": {\"pool\": \"rbd\", \"conf\": \"$WORK/ceph/ceph.conf\"}}"
else
	truncate -s 4G "$WORK/pool.img"
	POOL_JSON="{\"name\": \"sanity\", \"backend\": \"local\", \"devices\": [\"$WORK/pool.img\"]}"
fi
if ! "$BIN/farflash" rpc -s "$WORK/rpc.sock" pool_create "$POOL_JSON" >"$WORK/pool.json"; then
	cat "$WORK/pool.json"
	echo "csi-sanity.sh: the target made no $POOL_KIND pool: the Controller specs that need volumes will fail" >&2
fi
echo "csi-sanity.sh: pool sanity: $POOL_KIND"

cat >"$WORK/controller.toml" <<EOF
[tls]
cert = "$WORK/pki/csi-controller.crt"
key = "$WORK/pki/csi-controller.key"
ca = "$WORK/pki/ca.crt"

[[target]]
name = "target-a"
management = "127.0.0.1:$MGMT_PORT"
nvme = ["127.0.0.1:$NVME_PORT"]
EOF
cat >"$WORK/params.yaml" <<EOF
targets: target-a
pool: sanity
EOF
# A VolumeAttributesClass's parameters: a QoS limit.
cat >"$WORK/mutable.yaml" <<EOF
qos.rw_ios_per_sec: "20000"
EOF

# The node service too, for NodeGetInfo (the controller's lifecycle specs
# ask it for the node ID); its staging specs need a kernel NVMe host and
# run in the VM, so the Node Service specs are skipped here.
echo "nqn.2014-08.org.nvmexpress:uuid:$(python3 -c 'import uuid; print(uuid.uuid4())')" >"$WORK/hostnqn"
"$BIN/farflash-csi" --endpoint "unix://$WORK/csi.sock" --controller-config "$WORK/controller.toml" \
	--node --hostnqn-file "$WORK/hostnqn" \
	>"$WORK/csi.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 300); do [[ -S $WORK/csi.sock ]] && break; sleep 0.1; done
[[ -S $WORK/csi.sock ]] || { cat "$WORK/csi.log"; echo "csi-sanity.sh: farflash-csi did not start" >&2; exit 1; }

rc=0
"$SANITY" --csi.endpoint "$WORK/csi.sock" \
	--csi.testvolumeparameters "$WORK/params.yaml" \
	--csi.testvolumemutableparameters "$WORK/mutable.yaml" \
	--csi.testvolumesize 67108864 --csi.testvolumeexpandsize 134217728 \
	--csi.testnodevolumeattachlimit \
	--ginkgo.skip 'Node Service' ${CSI_SANITY_FOCUS:+--ginkgo.focus "$CSI_SANITY_FOCUS"} \
	--ginkgo.v --ginkgo.no-color 2>&1 | tee "$WORK/sanity.log" || rc=$?
echo "---- the controller's log (last 60 lines) ----"
tail -n 60 "$WORK/csi.log"
bash "$ROOT/tests/csi-sanity-summary.sh" "$WORK/sanity.log" || { [[ $rc = 0 ]] && rc=1; }
exit "$rc"
