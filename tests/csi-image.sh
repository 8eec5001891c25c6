#!/usr/bin/env bash
# tests/csi-image.sh -- the CSI driver's container image (issue #45), a step
# of tests/run.sh. Needs root; scripts/build-csi-image.sh's prerequisites
# (debootstrap, cargo, go, python3) and unshare, chroot, gzip. A missing one
# fails the run.
#
# 1. Builds the image with scripts/build-csi-image.sh.
# 2. Checks it as a registry or runtime would: `crane validate` of the
#    docker-archive tarball; in the OCI layout every blob's sha256 is its
#    name, the index's manifest, the manifest's config and layer digests
#    and sizes match their blobs, the config's diff_ids are the sha256 of
#    the uncompressed layers; the tarball holds the same config, tagged with
#    the name deploy/kubernetes's manifests use (farflash-csi:VERSION, the
#    crate's version); `crane push` of the layout to a registry on
#    127.0.0.1 keeps that digest and the pushed image validates.
# 3. The config: linux/amd64, Entrypoint /usr/bin/farflash-csi, PATH, no
#    other environment, the labels (version, revision = this tree's commit,
#    the binary's sha256); the layer's farflash-csi is byte for byte the
#    tree's release build with its debug information stripped; no host
#    identity (/etc/nvme/hostnqn, hostid, machine-id content), no private
#    key, no device node in the layer.
# 4. Unpacks the root file system and runs in it (chroot in mount and PID
#    namespaces of its own, /dev and /proc mounted there): farflash-csi
#    --version and --help, its libraries all found; nvme version; mkfs.ext4,
#    mkfs.xfs, blkid (version, and a real file system of each made on a file
#    and recognised), resize2fs, xfs_growfs, mount, umount, modprobe present;
#    the CA bundle.
# 5. Builds again: the same manifest digest (same tree, base root and
#    SOURCE_DATE_EPOCH).
# The first run debootstraps the base root (cached afterwards) and builds the
# release binary: about 18 minutes on a loaded 2-core machine; with both
# cached, 2-7 minutes.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH:/usr/local/sbin:/usr/sbin:/sbin"
CACHE=${FARFLASH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/farflash}
T0=$(date +%s)

say() { printf '[csi-image-test %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() {
	echo "csi-image.sh: FAIL: $*" >&2
	exit 1
}

[[ $(id -u) = 0 ]] || die "needs root (the build's debootstrap and chroot; unpacking with owners)"
for tool in unshare chroot python3 gzip tar sha256sum git cargo objcopy; do
	command -v "$tool" >/dev/null || die "$tool not found"
done

WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/farflash-csi-image-test.XXXXXX")
REG_PID=""
cleanup() {
	local rc=$?
	[[ -z $REG_PID ]] || { kill "$REG_PID" 2>/dev/null && wait "$REG_PID" 2>/dev/null; } || true
	if grep -qF " $WORK/" /proc/self/mountinfo; then
		echo "csi-image.sh: mounts left under $WORK; not deleting it" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

cd "$ROOT"
VERSION=$(cargo metadata --format-version 1 --no-deps |
	python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "farflash-csi"))')
IMAGE=farflash-csi:$VERSION
TARGET_DIR=$(cargo metadata --format-version 1 --no-deps |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')

# ------------------------------------------------- the manifests' image
mapfile -t named < <(grep -rhoE 'image: *farflash-csi[^ ]*' deploy/kubernetes | sed 's/image: *//' | sort -u)
[[ ${#named[@]} -gt 0 ]] || die "deploy/kubernetes names no farflash-csi image"
[[ ${named[*]} = "$IMAGE" ]] || die "deploy/kubernetes names ${named[*]}; the crate's version makes $IMAGE"

# ------------------------------------------------------------- build
say "bash scripts/build-csi-image.sh --out $WORK/a"
bash scripts/build-csi-image.sh --out "$WORK/a" || die "scripts/build-csi-image.sh failed"
TAR=$WORK/a/farflash-csi-$VERSION.tar
LAYOUT=$WORK/a/farflash-csi-$VERSION.oci
DIGEST=$(cat "$WORK/a/farflash-csi-$VERSION.digest")
CRANE=$CACHE/crane-$(sed -n 's/^CRANE_VERSION=//p' scripts/build-csi-image.sh)/crane
[[ -x $CRANE ]] || die "$CRANE missing after the build"
say "image $IMAGE $DIGEST"

REVISION=$(git rev-parse HEAD)
[[ -z $(git status --porcelain) ]] || REVISION=$REVISION-dirty
# the tree's release build, stripped as the build strips it
objcopy --strip-debug --strip-unneeded "$TARGET_DIR/release/farflash-csi" "$WORK/farflash-csi.stripped"
BIN_SHA=$(sha256sum "$WORK/farflash-csi.stripped" | cut -d' ' -f1)

# --------------------------------------------------------- validate
say "crane validate --tarball"
"$CRANE" validate --tarball "$TAR" || die "crane validate --tarball $TAR"

say "layout, tarball and config"
mkdir "$WORK/rootfs"
python3 - "$LAYOUT" "$TAR" "$DIGEST" "$IMAGE" "$VERSION" "$REVISION" "$BIN_SHA" "$WORK/rootfs" <<'EOF' || die "image checks"
import gzip, hashlib, json, os, sys, tarfile

layout, archive, digest, image, version, revision, bin_sha, rootfs = sys.argv[1:]
fails = []
def check(ok, what):
    if not ok:
        fails.append(what)

def sha(data):
    return "sha256:" + hashlib.sha256(data).hexdigest()

blobs = os.path.join(layout, "blobs", "sha256")
def blob(desc):
    with open(os.path.join(blobs, desc["digest"].split(":", 1)[1]), "rb") as f:
        data = f.read()
    check(sha(data) == desc["digest"], f"blob {desc['digest']}: content's digest is {sha(data)}")
    check(len(data) == desc["size"], f"blob {desc['digest']}: size {len(data)}, descriptor says {desc['size']}")
    return data

for name in os.listdir(blobs):
    with open(os.path.join(blobs, name), "rb") as f:
        check(sha(f.read()) == "sha256:" + name, f"blob {name} does not hash to its name")
with open(os.path.join(layout, "oci-layout")) as f:
    check(json.load(f).get("imageLayoutVersion") == "1.0.0", "oci-layout: imageLayoutVersion")
with open(os.path.join(layout, "index.json")) as f:
    index = json.load(f)
check(len(index["manifests"]) == 1, "index.json: one manifest")
mdesc = index["manifests"][0]
check(mdesc["digest"] == digest, f"index.json: manifest {mdesc['digest']}, the build printed {digest}")
check(mdesc.get("annotations", {}).get("org.opencontainers.image.ref.name") == version, "index.json: ref.name")
manifest = json.loads(blob(mdesc))
check(manifest["mediaType"] == "application/vnd.oci.image.manifest.v1+json", "manifest mediaType")
config_bytes = blob(manifest["config"])
config = json.loads(config_bytes)
layers = [blob(l) for l in manifest["layers"]]
check(len(layers) == 1, f"{len(layers)} layers, want 1")
diff_ids = [sha(gzip.decompress(l)) for l in layers]
check(config["rootfs"]["diff_ids"] == diff_ids, "config's diff_ids are not the layers' uncompressed digests")

# the docker-archive tarball: the same config, the manifests' tag
with tarfile.open(archive) as t:
    (entry,) = json.load(t.extractfile("manifest.json"))
    check(entry["RepoTags"] == [image], f"tarball RepoTags {entry['RepoTags']}, want [{image}]")
    check(entry["Config"] == manifest["config"]["digest"], "tarball's config is not the layout's")
    check(sha(t.extractfile(entry["Config"]).read()) == manifest["config"]["digest"], "tarball's config digest")
    check([sha(gzip.decompress(t.extractfile(l).read())) for l in entry["Layers"]] == diff_ids,
          "tarball's layers are not the layout's")

# the config
check(config["architecture"] == "amd64" and config["os"] == "linux",
      f"platform {config['os']}/{config['architecture']}, want linux/amd64")
c = config["config"]
check(c.get("Entrypoint") == ["/usr/bin/farflash-csi"], f"Entrypoint {c.get('Entrypoint')}")
check(c.get("Env") == ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"], f"Env {c.get('Env')}")
labels = c.get("Labels", {})
for k, v in {"org.opencontainers.image.version": version, "org.opencontainers.image.revision": revision,
             "org.opencontainers.image.title": "farflash-csi", "io.farflash.csi.binary-sha256": bin_sha}.items():
    check(labels.get(k) == v, f"label {k}={labels.get(k)!r}, want {v!r}")
check(all("secret" not in k.lower() and "key" not in k.lower() for k in labels), "a label names a secret or key")

# the layer: the tree's binary, no host identity, keys or devices
with tarfile.open(fileobj=__import__("io").BytesIO(gzip.decompress(layers[0]))) as t:
    members = {m.name.removeprefix("./"): m for m in t.getmembers()}
    b = members.get("usr/bin/farflash-csi")
    check(b is not None and b.isfile() and b.mode & 0o111, "usr/bin/farflash-csi: an executable file")
    if b is not None:
        check(hashlib.sha256(t.extractfile(b).read()).hexdigest() == bin_sha,
              "usr/bin/farflash-csi is not the tree's target/release/farflash-csi (stripped)")
    for p in ("etc/nvme/hostnqn", "etc/nvme/hostid", "etc/resolv.conf", "etc/hostname"):
        check(p not in members, f"{p} in the layer (the host's, not the image's)")
    mid = members.get("etc/machine-id")
    check(mid is None or mid.size == 0, "etc/machine-id has content")
    for name, m in members.items():
        check(not (m.ischr() or m.isblk() or m.isfifo()), f"device node {name} in the layer")
        if m.isfile() and m.size < 1 << 20 and (name.startswith("etc/") or name.startswith("root/")):
            data = t.extractfile(m).read()
            check(b"PRIVATE KEY-----" not in data, f"{name} holds a private key")
    check(not any(n.startswith("var/lib/apt/lists/") and members[n].isfile() for n in members), "apt lists in the layer")
    check("usr/share/doc/nvme-cli/copyright" in members, "usr/share/doc/nvme-cli/copyright missing (licences stay)")
    t.extractall(rootfs, numeric_owner=True, filter="fully_trusted") if sys.version_info >= (3, 12) else t.extractall(rootfs, numeric_owner=True)
print(f"{len(members)} entries, {len(layers[0]) >> 20} MiB compressed; config {manifest['config']['digest']}")
for f in fails:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if fails else 0)
EOF

# ------------------------------------------- push (docs/kubernetes.md)
# `crane push` of the layout to a registry (crane's own, on 127.0.0.1 for
# this check) keeps the manifest digest the build printed, and the pushed
# image validates with its layers fetched back.
say "crane push of the layout to a registry on 127.0.0.1"
"$CRANE" registry serve --address 127.0.0.1:0 >"$WORK/registry.log" 2>&1 &
REG_PID=$!
port=""
for _ in $(seq 100); do
	port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$WORK/registry.log")
	[[ -n $port ]] && break
	kill -0 "$REG_PID" 2>/dev/null || break
	sleep 0.1
done
[[ -n $port ]] || die "crane registry serve did not start: $(cat "$WORK/registry.log")"
"$CRANE" push "$LAYOUT" "localhost:$port/farflash/$IMAGE" >"$WORK/push.out" 2>&1 ||
	die "crane push: $(cat "$WORK/push.out")"
pushed=$("$CRANE" digest "localhost:$port/farflash/$IMAGE")
[[ $pushed = "$DIGEST" ]] || die "the pushed image's digest is $pushed, the build's $DIGEST"
"$CRANE" validate --remote "localhost:$port/farflash/$IMAGE" || die "crane validate --remote"
kill "$REG_PID"
wait "$REG_PID" 2>/dev/null || true
REG_PID=""

# ------------------------------------------------------- run inside
say "running in the image's root file system"
R=$WORK/rootfs
cat >"$R/tmp/checks.sh" <<EOF
set -eu
v=\$(farflash-csi --version)
[ "\$v" = "farflash-csi $VERSION" ] || { echo "farflash-csi --version: \$v" >&2; exit 1; }
echo "\$v"
farflash-csi --help | grep -q -- '--node' || { echo "farflash-csi --help lacks --node" >&2; exit 1; }
if ldd /usr/bin/farflash-csi | grep 'not found'; then echo "farflash-csi: libraries missing" >&2; exit 1; fi
nvme version
mkfs.ext4 -V 2>&1 | head -n 1
mkfs.xfs -V
blkid -V
mount --version
modprobe --version
for t in resize2fs xfs_growfs umount wipefs keyctl; do command -v \$t >/dev/null || { echo "\$t missing" >&2; exit 1; }; done
test -s /etc/ssl/certs/ca-certificates.crt || { echo "no CA bundle" >&2; exit 1; }
truncate -s 64M /tmp/e.img && mkfs.ext4 -q -F /tmp/e.img
[ "\$(blkid -o value -s TYPE /tmp/e.img)" = ext4 ] || { echo "blkid does not see the ext4 file system" >&2; exit 1; }
truncate -s 320M /tmp/x.img && mkfs.xfs -q /tmp/x.img
[ "\$(blkid -o value -s TYPE /tmp/x.img)" = xfs ] || { echo "blkid does not see the xfs file system" >&2; exit 1; }
echo "ext4 and xfs made and recognised"
EOF
# shellcheck disable=SC2016  # (expanded by the inner sh)
unshare --mount --pid --fork --kill-child -- sh -c '
	set -e
	mount --bind /dev "$1/dev"
	mount -t proc proc "$1/proc"
	exec chroot "$1" env -i PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin HOME=/root sh /tmp/checks.sh
' sh "$R" || die "the commands in the image's root"

# ------------------------------------------------------- reproducible
say "building again: the same digest"
bash scripts/build-csi-image.sh --out "$WORK/b" || die "the second build failed"
again=$(cat "$WORK/b/farflash-csi-$VERSION.digest")
[[ $again = "$DIGEST" ]] || die "a second build from the same tree and base root gave $again, the first $DIGEST"
say "PASS: $IMAGE $DIGEST"
