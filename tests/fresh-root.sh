#!/usr/bin/env bash
# tests/fresh-root.sh -- the "install anywhere" check (issue 30), a step of
# tests/run.sh. Needs root, debootstrap, unshare (util-linux) and ip (iproute2).
#
# 1. Build: a minimal Debian 12 root (debootstrap --variant=minbase
#    --include=build-essential bookworm, from the Debian mirror this machine's
#    apt uses) with the host's Rust toolchain (~/.rustup, ~/.cargo/bin) and
#    cargo registry (~/.cargo/registry) bind-mounted read-only, and a copy of
#    the source tree without target/ and .git. Checked absent first: libclang,
#    the -dev headers and the libraries of librbd, librados, libibverbs,
#    librdmacm and libiscsi. Then, in it: `cargo build --release --offline`;
#    `ldd` of the binary lists only libc-level libraries; `cargo run
#    --release --offline` (the README's first command) serves the default
#    namespace, and `farflash discover` and `farflash identify` work against
#    it on 127.0.0.1; `--rbd` fails with the error naming librbd1 (and an
#    RDMA listener with the one naming libibverbs1); `bash
#    scripts/package-deb.sh` (the README's packaging command) builds the .deb.
# 2. Install: another such root (minbase plus man-db, no build tools):
#    `apt-get install --no-install-recommends ./farflash_*.deb`, no optional
#    library pulled in; the ExecStart line of the installed
#    /lib/systemd/system/farflash.service, run as systemd would (there is no
#    systemd in a chroot: its RuntimeDirectory is created first), starts the
#    target, which `farflash discover`, `identify` and `farflash ctl` on the
#    unit's management socket reach; `man farflash-serve` renders.
#
# Each root runs in its own mount, PID and network namespaces (unshare
# --kill-child), so its mounts and processes vanish with it (also when
# tests/run.sh's timeout stops the step) and its 127.0.0.1:4420 is its own
# loopback.
# The two debootstrap roots are cached in $FARFLASH_CACHE_DIR (default
# ~/.cache/farflash)/fresh-root and copied per run.
#
# Environment: FARFLASH_DEBIAN_MIRROR overrides the mirror read from
# /etc/apt/sources.list*; FARFLASH_KEEP_FRESH_ROOT=1 keeps the work
# directory.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"
SUITE=bookworm
CACHE=${FARFLASH_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/farflash}/fresh-root
T0=$(date +%s)

say() { printf '[fresh-root %4ss] %s\n' "$(($(date +%s) - T0))" "$*"; }
die() {
	echo "fresh-root: FAIL: $*" >&2
	exit 1
}

[[ $(id -u) = 0 ]] || die "needs root (debootstrap, chroot, mounts)"
for tool in debootstrap unshare chroot ip tar; do
	command -v "$tool" >/dev/null || die "$tool not found"
done
for d in "$HOME/.rustup" "$HOME/.cargo/bin" "$HOME/.cargo/registry"; do
	[[ -d $d ]] || die "$d missing: the host's Rust toolchain and cargo registry are mounted into the root"
done

# ------------------------------------------------------------- the mirror
# The first deb source of $SUITE's main component in apt's configuration
# (one-line .list or deb822 .sources).
apt_mirror() {
	local f
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[[ -r $f ]] || continue
		awk -v s="$SUITE" '$1 == "deb" {
			i = 2; if ($2 ~ /^\[/) { while (i <= NF && $i !~ /\]$/) i++; i++ }
			if ($(i + 1) == s) { for (j = i + 2; j <= NF; j++) if ($j == "main") { print $i; exit } }
		}' "$f"
	done
	for f in /etc/apt/sources.list.d/*.sources; do
		[[ -r $f ]] || continue
		awk -v s="$SUITE" '
			function flush() { if (types ~ /(^| )deb( |$)/ && (" " suites " ") ~ (" " s " ") && (" " comps " ") ~ / main /) { print uri; found = 1 } types = suites = comps = uri = "" }
			/^[ \t]*#/ { next }
			/^[ \t]*$/ { flush(); if (found) exit; next }
			/^Types:/ { sub(/^Types:[ \t]*/, ""); types = $0 }
			/^URIs:/ { sub(/^URIs:[ \t]*/, ""); split($0, u, " "); uri = u[1] }
			/^Suites:/ { sub(/^Suites:[ \t]*/, ""); suites = $0 }
			/^Components:/ { sub(/^Components:[ \t]*/, ""); comps = $0 }
			END { if (!found) flush() }' "$f"
	done
}
MIRROR=${FARFLASH_DEBIAN_MIRROR:-$(apt_mirror | head -n 1)}
[[ -n $MIRROR ]] || die "no deb source for $SUITE main in /etc/apt/sources.list* (set FARFLASH_DEBIAN_MIRROR)"

# ------------------------------------------------------- the cached roots
# cached_root NAME INCLUDE: $CACHE/NAME, debootstrapped once per mirror and
# package list (a stamp file records them).
cached_root() {
	local name=$1 include=$2 dir=$CACHE/$1 stamp
	stamp="debootstrap --variant=minbase --include=$include $SUITE $MIRROR"
	if [[ -f $dir/.farflash-stamp && $(cat "$dir/.farflash-stamp") == "$stamp" ]]; then
		say "cached root $name ($dir)" >&2
		echo "$dir"
		return
	fi
	say "debootstrap $name: $stamp" >&2
	rm -rf "$dir" "$dir.tmp"
	mkdir -p "$CACHE"
	if ! debootstrap --variant=minbase --include="$include" "$SUITE" "$dir.tmp" "$MIRROR" >"$CACHE/$name.log" 2>&1; then
		tail -n 20 "$CACHE/$name.log" >&2
		rm -rf "$dir.tmp"
		die "debootstrap of $name failed (log: $CACHE/$name.log)"
	fi
	apt_clean "$dir.tmp"
	echo "$stamp" >"$dir.tmp/.farflash-stamp"
	mv "$dir.tmp" "$dir"
	echo "$dir"
}
apt_clean() { rm -rf "$1"/var/cache/apt/archives/*.deb; }

BUILD_BASE=$(cached_root build-essential build-essential)
INSTALL_BASE=$(cached_root man-db man-db)

# ------------------------------------------------------------ work roots
WORK=$(mktemp -d "${TMPDIR:-/var/tmp}/farflash-fresh-root.XXXXXX")
cleanup() {
	local rc=$?
	# The namespaces' mounts died with them; never delete through a mount.
	if grep -qF " $WORK/" /proc/self/mountinfo; then
		echo "fresh-root: mounts left under $WORK; not deleting it" >&2
	elif [[ ${FARFLASH_KEEP_FRESH_ROOT:-0} = 1 ]]; then
		echo "fresh-root: kept $WORK" >&2
	else
		rm -rf "$WORK"
	fi
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

say "copying the roots into $WORK"
cp -a "$BUILD_BASE" "$WORK/build"
cp -a "$INSTALL_BASE" "$WORK/install"
mkdir -p "$WORK/build/src/farflash"
tar -C "$ROOT" --exclude=./target --exclude=./.git --exclude=./fuzz/target \
	--exclude=./sweep-results -cf - . | tar -C "$WORK/build/src/farflash" -xf -
[[ ! -e $WORK/build/src/farflash/target && ! -e $WORK/build/src/farflash/.git ]] ||
	die "the copy has target/ or .git"

# The fresh machine: no libclang, no -dev headers, none of the optional libraries.
absent() { # ROOT WHAT GLOB...
	local r=$1 what=$2 g hit
	shift 2
	for g in "$@"; do
		for hit in "$r"$g; do
			[[ -e $hit ]] && die "$what present in the fresh root: ${hit#"$r"}"
		done
	done
	return 0
}
for r in "$WORK/build" "$WORK/install"; do
	absent "$r" libclang '/usr/lib/llvm-*' '/usr/lib/x86_64-linux-gnu/libclang*'
	# (/usr/include/rdma itself is linux-libc-dev's kernel UAPI; rdma_cma.h is librdmacm-dev's)
	absent "$r" "a -dev header" /usr/include/rbd/librbd.h /usr/include/rados/librados.h \
		/usr/include/infiniband/verbs.h /usr/include/rdma/rdma_cma.h /usr/include/iscsi/iscsi.h
	absent "$r" "an optional library" '/usr/lib/x86_64-linux-gnu/librbd.so*' \
		'/usr/lib/x86_64-linux-gnu/librados.so*' '/usr/lib/x86_64-linux-gnu/libceph-common*' \
		'/usr/lib/x86_64-linux-gnu/libibverbs.so*' '/usr/lib/x86_64-linux-gnu/librdmacm.so*' \
		'/usr/lib/x86_64-linux-gnu/libiscsi.so*'
done
[[ -x $WORK/build/usr/bin/cc ]] || die "no C compiler in the build root (build-essential)"
[[ ! -e $WORK/install/usr/bin/cc ]] || die "the install root has a C compiler"
say "fresh roots: no libclang, no -dev headers, no optional libraries"

# in_root ROOT [--toolchain] CMD...: CMD in a chroot of ROOT, in new mount,
# PID and network namespaces (loopback up), with /proc, /dev and, with
# --toolchain, the host's Rust toolchain and registry (read-only).
in_root() {
	local r=$1 toolchain=0
	shift
	[[ $1 = --toolchain ]] && toolchain=1 && shift
	unshare --mount --pid --net --fork --kill-child --propagation private -- bash -euc '
		r=$1 toolchain=$2 home=$3
		shift 3
		ip link set lo up
		mount -t proc proc "$r/proc"
		mount --rbind /dev "$r/dev"
		mount -t tmpfs tmpfs "$r/run"
		if [[ $toolchain = 1 ]]; then
			for d in .rustup .cargo/bin .cargo/registry; do
				mkdir -p "$r/root/$d"
				mount --bind "$home/$d" "$r/root/$d"
				mount -o remount,bind,ro "$r/root/$d"
			done
		fi
		exec chroot "$r" /usr/bin/env -i HOME=/root TERM=dumb LANG=C.UTF-8 \
			PATH=/root/.cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
			CARGO_TERM_COLOR=never "$@"
	' in_root "$r" "$toolchain" "$HOME" "$@"
}

install -m 0755 "$ROOT/tests/fresh-root-checks.sh" "$WORK/build/fresh-root-checks.sh"
install -m 0755 "$ROOT/tests/fresh-root-checks.sh" "$WORK/install/fresh-root-checks.sh"

say "build root: cargo build --release --offline, run, package"
in_root "$WORK/build" --toolchain /fresh-root-checks.sh build ||
	die "the build root's checks failed"
debs=("$WORK"/build/src/farflash/target/debian/farflash_*.deb)
[[ ${#debs[@]} = 1 && -f ${debs[0]} ]] || die "scripts/package-deb.sh left no single .deb in target/debian/"
cp "${debs[0]}" "$WORK/install/tmp/"

say "install root: apt-get install ./$(basename "${debs[0]}"), the unit's ExecStart, man"
in_root "$WORK/install" /fresh-root-checks.sh install "/tmp/$(basename "${debs[0]}")" ||
	die "the install root's checks failed"

say "PASS"
