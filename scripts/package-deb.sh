#!/usr/bin/env bash
# scripts/package-deb.sh -- build farflash's Debian package:
#   target/debian/farflash_VERSION-1_ARCH.deb
# with the release binary (/usr/bin/farflash), the systemd unit
# (/lib/systemd/system/farflash.service, from contrib/farflash.service), the
# default configuration (/etc/farflash/farflash.toml, a conffile), man pages
# (farflash(1), farflash-serve(1) ...) and bash/zsh/fish completions
# generated from the CLI definition (farflash gen-package-files), Depends
# computed by dpkg-shlibdeps (libc-level only) and Recommends for the
# libraries of the optional features (Ceph RBD, RDMA, iSCSI).
#
# Needs the Rust toolchain, a C linker and dpkg-dev (build-essential);
# install with: apt install ./target/debian/farflash_*.deb
# Environment: CARGO_FLAGS (e.g. --offline), passed to cargo build.
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH"

# shellcheck disable=SC2086  # CARGO_FLAGS is a list of flags
cargo build --release ${CARGO_FLAGS:-}
BIN=target/release/farflash
VERSION=$("$BIN" --version | awk '{print $2}')
[[ $VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+ ]] || {
	echo "package-deb.sh: cannot read the version from '$BIN --version'" >&2
	exit 1
}
DEBVERSION="$VERSION-1"
ARCH=$(dpkg --print-architecture)
OUT=target/debian
STAGE=$OUT/stage
rm -rf "$STAGE" "$OUT/gen" "$OUT"/farflash_*.deb
mkdir -p "$STAGE/DEBIAN"

# the binary, without its debug information (the release profile keeps line tables)
install -D -m 0755 "$BIN" "$STAGE/usr/bin/farflash"
objcopy --strip-debug --strip-unneeded "$STAGE/usr/bin/farflash"

# man pages and completions from the clap definition
"$BIN" gen-package-files --out "$OUT/gen" >/dev/null
install -d "$STAGE/usr/share/man/man1"
for page in "$OUT"/gen/man/*.1; do
	gzip -9n <"$page" >"$STAGE/usr/share/man/man1/$(basename "$page").gz"
done
install -D -m 0644 "$OUT/gen/completions/farflash.bash" "$STAGE/usr/share/bash-completion/completions/farflash"
install -D -m 0644 "$OUT/gen/completions/_farflash" "$STAGE/usr/share/zsh/vendor-completions/_farflash"
install -D -m 0644 "$OUT/gen/completions/farflash.fish" "$STAGE/usr/share/fish/vendor_completions.d/farflash.fish"

# the service and its configuration
install -d "$STAGE/lib/systemd/system"
sed 's|/usr/local/bin/farflash|/usr/bin/farflash|g; s|^#   install -m 644 contrib/farflash.service.*|#   (installed by the farflash package)|' \
	contrib/farflash.service >"$STAGE/lib/systemd/system/farflash.service"
chmod 0644 "$STAGE/lib/systemd/system/farflash.service"
grep -q '^ExecStart=/usr/bin/farflash serve ' "$STAGE/lib/systemd/system/farflash.service"
install -D -m 0644 contrib/farflash.toml "$STAGE/etc/farflash/farflash.toml"
echo /etc/farflash/farflash.toml >"$STAGE/DEBIAN/conffiles"

# documentation
DOC=$STAGE/usr/share/doc/farflash
install -d "$DOC"
install -m 0644 README.md docs/install.md docs/farflash.example.toml "$DOC/"
{
	echo "Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/"
	echo "Upstream-Name: farflash"
	echo
	echo "Files: *"
	echo "License: MIT or Apache-2.0"
	echo " The texts are in LICENSE-MIT and LICENSE-APACHE below."
	echo
	echo "License: MIT"
	sed 's/^$/./; s/^/ /' LICENSE-MIT
	echo
	echo "License: Apache-2.0"
	echo " On Debian systems, the full text of the Apache License 2.0 is in"
	echo " /usr/share/common-licenses/Apache-2.0."
} >"$DOC/copyright"

# systemd picks up the new or removed unit; the service is not enabled:
# the operator edits /etc/farflash/farflash.toml first
for script in postinst postrm; do
	cat >"$STAGE/DEBIAN/$script" <<'SH'
#!/bin/sh
set -e
if [ -d /run/systemd/system ] && command -v systemctl >/dev/null; then
	systemctl daemon-reload >/dev/null || true
fi
SH
	chmod 0755 "$STAGE/DEBIAN/$script"
done

# Depends: what the binary links (dpkg-shlibdeps wants a debian/control)
SHLIB=$(mktemp -d)
trap 'rm -rf "$SHLIB"' EXIT
mkdir -p "$SHLIB/debian"
printf 'Source: farflash\n\nPackage: farflash\nArchitecture: any\n' >"$SHLIB/debian/control"
DEPENDS=$(cd "$SHLIB" && dpkg-shlibdeps -O "$ROOT/$STAGE/usr/bin/farflash" | sed -n 's/^shlibs:Depends=//p')
[[ -n $DEPENDS ]] || {
	echo "package-deb.sh: dpkg-shlibdeps found no dependencies" >&2
	exit 1
}
SIZE=$(du -sk --exclude=DEBIAN "$STAGE" | cut -f1)
cat >"$STAGE/DEBIAN/control" <<CONTROL
Package: farflash
Version: $DEBVERSION
Architecture: $ARCH
Maintainer: farflash developers <farflash@example.invalid>
Installed-Size: $SIZE
Depends: $DEPENDS
Recommends: librbd1, librados2, libibverbs1, librdmacm1, ibverbs-providers, libiscsi7
Section: net
Priority: optional
Homepage: https://example.invalid/farflash
Description: user-space NVMe over Fabrics target, host and benchmark
 farflash serve exports RAM, file, block-device and Ceph RBD namespaces over
 NVMe/TCP and NVMe/RDMA to standard hosts (Linux nvme-tcp/nvme-rdma, SPDK),
 with discovery, host access control, DH-HMAC-CHAP authentication, ANA,
 reservations, QoS, a JSON-RPC management socket and Prometheus metrics.
 farflash discover, identify and perf are a user-space host and benchmark.
 .
 The optional libraries are loaded when a feature is used: librbd1 and
 librados2 for Ceph RBD namespaces, libibverbs1, librdmacm1 and
 ibverbs-providers for NVMe/RDMA, libiscsi7 for perf --iscsi.
CONTROL

DEB="$OUT/farflash_${DEBVERSION}_${ARCH}.deb"
dpkg-deb --root-owner-group -Zxz --build "$STAGE" "$DEB" >/dev/null
echo "$DEB"
dpkg-deb --field "$DEB" Package Version Depends Recommends
