#!/usr/bin/env bash
# tls-userland.sh OUT.tgz -- the user-space half of NVMe/TCP over TLS for the
# harness's Debian 12 guest: Debian 13 (trixie)'s tlshd (ktls-utils 1.0),
# nvme-cli 2.13 (libnvme 1.13) and keyctl, with trixie's own loader, glibc and
# libraries, packed into one tarball. Debian 12 has no ktls-utils, and its
# nvme-cli 2.3 has no TLS commands.
#
# Only Debian's package registry is used: `apt-get download` against a private
# source list naming trixie on the mirror this machine's apt already uses; no
# package is installed and the machine's apt state is not touched. Called by
# run-linux-host --tls, which caches the result (see README.md).
#
# In the tarball's root T (run-linux-host unpacks it at /opt/tls in the image
# and puts wrappers in /usr/local/bin), a program runs through trixie's loader:
#   $T/usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2 \
#       --library-path $T/usr/lib/x86_64-linux-gnu:$T/lib/x86_64-linux-gnu PROGRAM ARGS
set -euo pipefail
OUT=${1:?usage: tls-userland.sh OUT.tgz}

# What tlshd, nvme and keyctl load (ldd of each in trixie), package by package.
PACKAGES="ktls-utils nvme-cli keyutils libnvme1t64 libc6 libglib2.0-0t64 libffi8 libpcre2-8-0
 libmount1 libselinux1 zlib1g libblkid1 libkeyutils1 libnl-3-200 libnl-genl-3-200 libjson-c5
 libuuid1 libssl3t64 liburing2 libzstd1 libdbus-1-3 libsystemd0 libcap2 liblzma5 liblz4-1
 libgcrypt20 libgpg-error0 libgcc-s1 libatomic1 libgnutls30t64 libnettle8t64 libhogweed6t64
 libunistring5 libidn2-0 libtasn1-6 libp11-kit0 libgmp10"

mirror() { # the first non-security Debian mirror in this machine's apt sources
	{ cat /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list /etc/apt/sources.list 2>/dev/null || true; } |
		sed -n -E 's/^URIs:[[:space:]]*([^ ]+).*/\1/p; s/^deb[[:space:]]+(\[[^]]*\][[:space:]]+)?([^ ]+).*/\2/p' |
		grep -v -e security -e snapshot | head -n 1 || true
}

W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
mkdir -p "$W/lists/partial" "$W/cache/archives/partial" "$W/debs" "$W/root"
URI=$(mirror)
[[ -n $URI ]] || {
	echo "tls-userland.sh: no Debian mirror in this machine's apt sources" >&2
	exit 1
}
echo "deb ${URI%/} trixie main" >"$W/sources.list"
APT=(-o "Dir::Etc::sourcelist=$W/sources.list" -o Dir::Etc::sourceparts=-
	-o "Dir::State::Lists=$W/lists" -o "Dir::Cache=$W/cache" -o Debug::NoLocking=1)
if ! apt-get "${APT[@]}" -q update >"$W/update.log" 2>&1; then
	cat "$W/update.log" >&2
	echo "tls-userland.sh: apt-get update of trixie ($URI) failed" >&2
	exit 1
fi
# shellcheck disable=SC2086  # (the package list)
if ! (cd "$W/debs" && apt-get "${APT[@]}" -q download $PACKAGES) >"$W/download.log" 2>&1; then
	cat "$W/download.log" >&2
	echo "tls-userland.sh: apt-get download from trixie failed" >&2
	exit 1
fi
for d in "$W"/debs/*.deb; do dpkg-deb -x "$d" "$W/root"; done
for p in usr/sbin/tlshd usr/sbin/nvme bin/keyctl usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2; do
	[[ -e $W/root/$p || -e $W/root/usr/$p ]] || {
		echo "tls-userland.sh: $p is missing from the trixie packages" >&2
		exit 1
	}
done
# versions, for the harness's log and the test's record
for d in "$W"/debs/ktls-utils_*.deb "$W"/debs/nvme-cli_*.deb "$W"/debs/libnvme1t64_*.deb "$W"/debs/libgnutls30t64_*.deb; do
	dpkg-deb -f "$d" Package Version | paste -sd' '
done >"$W/root/VERSIONS"
tar -C "$W/root" -czf "$OUT.tmp" .
mv "$OUT.tmp" "$OUT"
echo "tls-userland.sh: $OUT ($(du -h "$OUT" | cut -f1)): $(paste -sd';' "$W/root/VERSIONS")" >&2
