#!/usr/bin/env bash
# scripts/build-csi-image.sh -- the container image of the CSI driver
# (farflash-csi:VERSION, the image deploy/kubernetes names), built without a
# container engine (docs/kubernetes.md, "The image"). Needs root (debootstrap,
# chroot), debootstrap, cargo, go (it builds crane once), python3, tar, gzip,
# objcopy (binutils).
#
#   bash scripts/build-csi-image.sh [--out DIR] [--refresh]
#
# 1. A Debian 12 (bookworm) root: debootstrap --variant=minbase with
#    nvme-cli, keyutils (keyctl: TLS PSKs), e2fsprogs, xfsprogs, util-linux, mount, kmod and
#    ca-certificates from the mirror apt uses here, then upgraded from
#    bookworm-updates and bookworm-security. It is cached in
#    $FARFLASH_CACHE_DIR (default ~/.cache/farflash)/csi-image/base and made
#    anew when the package list or mirror changed, when it is older than
#    FARFLASH_CSI_IMAGE_MAX_AGE_DAYS (default 7: security updates), or with
#    --refresh.
# 2. `cargo build --release -p farflash-csi` from this tree, debug
#    information stripped (objcopy --strip-debug --strip-unneeded, as
#    scripts/package-deb.sh does).
# 3. A copy of the root with /usr/bin/farflash-csi, without what ties it to the
#    build machine or a moment (apt lists and caches, logs, /dev nodes,
#    backup files, nvme-cli's generated /etc/nvme/hostnqn and hostid: a
#    node's identity comes from its host; manuals, translations and
#    documentation but the copyright files, as debian:bookworm-slim), packed into one layer: tar
#    sorted by name, numeric owners, mtimes clamped to SOURCE_DATE_EPOCH
#    (default: the commit's time), no atime/ctime.
# 4. crane (go-containerregistry, pinned below, built with `go install` from
#    the Go module proxy into the cache) puts the layer on an empty OCI base
#    in a registry of its own on 127.0.0.1 (in memory, gone afterwards), sets
#    the platform linux/amd64, Entrypoint /usr/bin/farflash-csi, PATH and the
#    OCI labels (version, revision = the commit, -dirty with local changes,
#    source, licenses, the binary's sha256), and writes:
#      DIR/farflash-csi-VERSION.tar   docker-archive tarball tagged
#                                     farflash-csi:VERSION (docker load,
#                                     ctr images import, kind load
#                                     image-archive, minikube image load,
#                                     crane push)
#      DIR/farflash-csi-VERSION.oci/  the same image as an OCI image layout
#      DIR/farflash-csi-VERSION.packages  the image's Debian packages
#      DIR/farflash-csi-VERSION.digest    the manifest digest
#    DIR defaults to target/csi-image. The same tree, base root and
#    SOURCE_DATE_EPOCH give the same digest (tests/csi-image.sh checks it);
#    a new base root (security updates) gives a new one.
#
# Environment: FARFLASH_DEBIAN_MIRROR overrides the mirror read from apt's
# configuration (FARFLASH_DEBIAN_SECURITY_MIRROR the security one).
set -euo pipefail

CRANE_VERSION=v0.22.1
SUITE=bookworm
PACKAGES=ca-certificates,e2fsprogs,keyutils,kmod,mount,nvme-cli,util-linux,xfsprogs
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
export PATH="$HOME/.cargo/bin:$PATH:/usr/local/sbin:/usr/sbin:/sbin"
CACHE=${FARFLASH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/farflash}
MAX_AGE_DAYS=${FARFLASH_CSI_IMAGE_MAX_AGE_DAYS:-7}
T0=$(date +%s)

say() { printf '[csi-image %4ss] %s\n' "$(($(date +%s) - T0))" "$*" >&2; }
die() {
	echo "build-csi-image: FAIL: $*" >&2
	exit 1
}

OUT=$ROOT/target/csi-image
REFRESH=0
while [[ $# -gt 0 ]]; do
	case $1 in
	--out) OUT=${2:?--out DIR} && shift 2 ;;
	--refresh) REFRESH=1 && shift ;;
	*) die "usage: $0 [--out DIR] [--refresh]" ;;
	esac
done

[[ $(id -u) = 0 ]] || die "needs root (debootstrap and chroot)"
for tool in debootstrap chroot unshare cargo go python3 tar gzip sha256sum flock git objcopy; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
[[ $(uname -m) = x86_64 ]] || die "builds the linux/amd64 image on x86_64 only (this is $(uname -m))"

# ------------------------------------------------------- version, commit
VERSION=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
	python3 -c 'import json,sys; print(next(p["version"] for p in json.load(sys.stdin)["packages"] if p["name"] == "farflash-csi"))')
IMAGE=farflash-csi:$VERSION
if git -C "$ROOT" rev-parse --git-dir >/dev/null 2>&1; then
	REVISION=$(git -C "$ROOT" rev-parse HEAD)
	[[ -z $(git -C "$ROOT" status --porcelain) ]] || REVISION=$REVISION-dirty
	: "${SOURCE_DATE_EPOCH:=$(git -C "$ROOT" log -1 --format=%ct HEAD)}"
else
	REVISION=unknown
	: "${SOURCE_DATE_EPOCH:=0}"
fi
export SOURCE_DATE_EPOCH
say "$IMAGE, revision $REVISION, SOURCE_DATE_EPOCH $SOURCE_DATE_EPOCH"

# -------------------------------------------------------------- mirrors
# The URI apt uses here for CODENAME main (apt-get indextargets reads the
# one-line and the deb822 sources alike).
apt_uri() {
	# shellcheck disable=SC2016  # (apt's format, not the shell's)
	apt-get indextargets --format '$(REPO_URI)' 'Identifier: Packages' "Codename: $1" 'Component: main' |
		head -n 1
}
MIRROR=${FARFLASH_DEBIAN_MIRROR:-$(apt_uri "$SUITE")}
SECURITY=${FARFLASH_DEBIAN_SECURITY_MIRROR:-$(apt_uri "$SUITE-security")}
[[ -n $MIRROR ]] || die "no deb source for $SUITE main in apt's sources (set FARFLASH_DEBIAN_MIRROR)"
SECURITY=${SECURITY:-http://deb.debian.org/debian-security/}

# --------------------------------------------------------------- crane
CRANE=$CACHE/crane-$CRANE_VERSION/crane
if [[ ! -x $CRANE ]]; then
	say "go install github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION"
	mkdir -p "$(dirname "$CRANE")"
	GOBIN=$(dirname "$CRANE") go install "github.com/google/go-containerregistry/cmd/crane@$CRANE_VERSION" >&2 ||
		die "go install crane@$CRANE_VERSION failed"
fi
[[ $("$CRANE" version) = "$CRANE_VERSION" ]] || die "$CRANE is not $CRANE_VERSION"

# ---------------------------------------------------- the cached base root
BASE=$CACHE/csi-image/base
mkdir -p "$CACHE/csi-image"
exec 9>"$CACHE/csi-image/lock"
flock 9 # one build at a time uses (and may remake) the base root
STAMP="debootstrap --variant=minbase --include=$PACKAGES $SUITE $MIRROR; upgrade from $SUITE-updates, $SECURITY $SUITE-security"
fresh_base() {
	[[ $REFRESH = 0 && -f $BASE/.farflash-stamp && $(cat "$BASE/.farflash-stamp") == "$STAMP" ]] &&
		[[ -z $(find "$BASE/.farflash-stamp" -mtime "+$((MAX_AGE_DAYS - 1))") ]]
}
# in_root DIR COMMAND...: COMMAND in chroot DIR with /proc, in a mount
# namespace of its own (its mounts vanish with it), with the host's DNS.
in_root() {
	local dir=$1
	shift
	cp -L /etc/resolv.conf "$dir/etc/resolv.conf"
	# shellcheck disable=SC2016  # (expanded by the inner sh)
	unshare --mount --fork -- sh -c 'mount -t proc proc "$1/proc" && shift && exec chroot "$@"' \
		sh "$dir" "$dir" env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin DEBIAN_FRONTEND=noninteractive "$@"
}
if fresh_base; then
	say "cached base root $BASE"
else
	say "base root: $STAMP"
	rm -rf "$BASE" "$BASE.tmp"
	log=$CACHE/csi-image/base.log
	debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$BASE.tmp" "$MIRROR" >"$log" 2>&1 || {
		tail -n 20 "$log" >&2
		die "debootstrap failed (log: $log)"
	}
	cat >"$BASE.tmp/etc/apt/sources.list" <<EOF
deb $MIRROR $SUITE main
deb $MIRROR $SUITE-updates main
deb $SECURITY $SUITE-security main
EOF
	in_root "$BASE.tmp" sh -c 'apt-get -qq update && apt-get -y -qq -o Dpkg::Use-Pty=0 upgrade && apt-get clean' >>"$log" 2>&1 || {
		tail -n 20 "$log" >&2
		die "apt-get upgrade in the base root failed (log: $log)"
	}
	echo "$STAMP" >"$BASE.tmp/.farflash-stamp"
	mv "$BASE.tmp" "$BASE"
fi

# ------------------------------------------------------------ the binary
say "cargo build --release -p farflash-csi"
(cd "$ROOT" && cargo build --release -p farflash-csi --bin farflash-csi) >&2 ||
	die "cargo build --release -p farflash-csi failed"
TARGET_DIR=$(cd "$ROOT" && cargo metadata --format-version 1 --no-deps |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')
BIN=$TARGET_DIR/release/farflash-csi
[[ -x $BIN ]] || die "$BIN missing after the build"
# debug information stripped, as the .deb does (scripts/package-deb.sh):
# 67 MB to 6 MB
mkdir -p "$TARGET_DIR/csi-image"
objcopy --strip-debug --strip-unneeded "$BIN" "$TARGET_DIR/csi-image/farflash-csi.stripped"
BIN=$TARGET_DIR/csi-image/farflash-csi.stripped
BIN_SHA=$(sha256sum "$BIN" | cut -d' ' -f1)

# ------------------------------------------------------------ the root
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/farflash-csi-image.XXXXXX")
REG_PID=""
cleanup() {
	local rc=$?
	[[ -z $REG_PID ]] || { kill "$REG_PID" 2>/dev/null && wait "$REG_PID" 2>/dev/null; } || true
	if grep -qF " $WORK/" /proc/self/mountinfo; then
		echo "build-csi-image: mounts left under $WORK; not deleting it" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

R=$WORK/rootfs
cp -a "$BASE" "$R"
rm -f "$R/.farflash-stamp"
install -m 0755 "$BIN" "$R/usr/bin/farflash-csi"
# shellcheck disable=SC2016  # (dpkg-query's format)
chroot "$R" dpkg-query -W -f '${Package} ${Version} ${Architecture}\n' | sort >"$WORK/packages"
# What belongs to the build machine or to the moment of the build:
rm -rf "$R"/var/lib/apt/lists/* "$R"/var/cache/apt/*.bin "$R"/var/cache/apt/archives/*.deb \
	"$R"/var/cache/ldconfig/aux-cache "$R"/var/cache/debconf/*-old "$R"/var/lib/dpkg/*-old \
	"$R"/etc/{passwd,group,shadow,gshadow,subuid,subgid}- "$R"/etc/resolv.conf "$R"/etc/hostname \
	"$R"/etc/nvme/hostnqn "$R"/etc/nvme/hostid "$R"/var/log/*.log "$R"/var/log/apt/* \
	"$R"/var/lib/dpkg/available "$R"/var/cache/debconf/templates.dat-old
find "$R/var/log" -type f -exec truncate -s 0 {} +
: >"$R/etc/machine-id"
# /etc/shadow's "last changed" field counts days since 1970 at the build
days=$((SOURCE_DATE_EPOCH / 86400))
sed -i -E "s/^([^:]*:[^:]*:)[0-9]*:/\1$days:/" "$R/etc/shadow"
# What debian:bookworm-slim leaves out too: manuals, info, translations,
# documentation but the copyright files (about 50 MB)
rm -rf "$R"/usr/share/man/* "$R"/usr/share/info/* "$R"/usr/share/locale/* \
	"$R"/usr/share/lintian "$R"/usr/share/linda
find "$R/usr/share/doc" -mindepth 1 -not -type d -not -name copyright -delete
find "$R/usr/share/doc" -mindepth 1 -type d -empty -delete
# the runtime mounts /dev; no device nodes in the layer
find "$R/dev" -mindepth 1 -delete

say "packing the layer"
tar -C "$R" --sort=name --numeric-owner --mtime="@$SOURCE_DATE_EPOCH" --clamp-mtime \
	--format=posix --pax-option=exthdr.name=%d/PaxHeaders/%f,delete=atime,delete=ctime \
	-cf "$WORK/layer.tar" .

# --------------------------------------------------------- the image
# The log exists before the registry starts (its redirection happens in the
# child, after the fork), and a registry that exits before it says its port
# is started again, three times at most.
port=""
for _attempt in 1 2 3; do
	: >"$WORK/registry.log"
	"$CRANE" registry serve --address 127.0.0.1:0 >>"$WORK/registry.log" 2>&1 &
	REG_PID=$!
	for _ in $(seq 200); do
		port=$(sed -n 's/.*serving on port \([0-9]*\).*/\1/p' "$WORK/registry.log")
		[[ -n $port ]] && break
		kill -0 "$REG_PID" 2>/dev/null || break
		sleep 0.1
	done
	[[ -n $port ]] && break
	cat "$WORK/registry.log" >&2
	kill "$REG_PID" 2>/dev/null || true
	wait "$REG_PID" 2>/dev/null || true
	REG_PID=""
done
[[ -n $port ]] || die "crane registry serve did not start (its log is above)"
REF=localhost:$port/farflash-csi:$VERSION
created=$(date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ)
"$CRANE" append --oci-empty-base -f "$WORK/layer.tar" -t "$REF" >/dev/null 2>"$WORK/crane.log" ||
	{ cat "$WORK/crane.log" >&2; die "crane append failed"; }
labels=(
	-l "org.opencontainers.image.title=farflash-csi"
	-l "org.opencontainers.image.description=farflash's CSI driver (Identity, Controller and Node services); Debian $SUITE with nvme-cli, e2fsprogs, xfsprogs"
	-l "org.opencontainers.image.version=$VERSION"
	-l "org.opencontainers.image.revision=$REVISION"
	-l "org.opencontainers.image.created=$created"
	-l "org.opencontainers.image.source=$(cd "$ROOT" && sed -n 's/^repository = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
	-l "org.opencontainers.image.licenses=$(cd "$ROOT" && sed -n 's/^license = "\(.*\)"/\1/p' Cargo.toml | head -n 1)"
	-l "org.opencontainers.image.base.name=debian:$SUITE (debootstrap --variant=minbase)"
	-l "io.farflash.csi.binary-sha256=$BIN_SHA"
)
"$CRANE" mutate "$REF" --set-platform linux/amd64 --entrypoint /usr/bin/farflash-csi \
	-e PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin "${labels[@]}" \
	-a "org.opencontainers.image.version=$VERSION" -a "org.opencontainers.image.revision=$REVISION" \
	-t "$REF" >/dev/null 2>"$WORK/crane.log" || { cat "$WORK/crane.log" >&2; die "crane mutate failed"; }
DIGEST=$("$CRANE" digest "$REF")

say "writing $OUT"
mkdir -p "$OUT"
base=$OUT/farflash-csi-$VERSION
rm -rf "$base.oci" "$base.tar"
# the docker-archive tarball, tagged with the manifests' name (no push)
"$CRANE" mutate "$REF" -t "$IMAGE" -o "$base.tar" >/dev/null 2>"$WORK/crane.log" ||
	{ cat "$WORK/crane.log" >&2; die "crane mutate -o failed"; }
"$CRANE" pull --format oci "$REF@$DIGEST" "$base.oci" 2>"$WORK/crane.log" ||
	{ cat "$WORK/crane.log" >&2; die "crane pull --format oci failed"; }
# the layout's name for the image: the tag (OCI image-layout's ref.name) and
# containerd's full reference (ctr images import of the layout)
python3 - "$base.oci/index.json" "$VERSION" "docker.io/library/$IMAGE" <<'EOF'
import json, sys
path, tag, full = sys.argv[1:]
with open(path) as f:
    index = json.load(f)
(m,) = index["manifests"]
m.setdefault("annotations", {}).update({
    "org.opencontainers.image.ref.name": tag,
    "io.containerd.image.name": full,
})
with open(path, "w") as f:
    json.dump(index, f, indent=2)
EOF
cp "$WORK/packages" "$base.packages"
echo "$DIGEST" >"$base.digest"
say "$IMAGE $DIGEST ($(du -h "$base.tar" | cut -f1)): $base.tar, $base.oci"
