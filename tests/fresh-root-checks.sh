#!/bin/bash
# tests/fresh-root-checks.sh PHASE -- what tests/fresh-root.sh runs inside
# its two minimal Debian 12 roots (see there). Phases:
#   build            (in the build root, source in /src/farflash)
#   install DEB      (in the install root)
set -euo pipefail

# This runs as PID 1 of its namespace, which ignores signals it has no
# handler for: stop on SIGTERM/SIGINT (tests/run.sh's timeout or ^C).
trap 'exit 143' TERM
trap 'exit 130' INT

phase=${1:?phase}
NQN=nqn.2026-11.io.farflash:default
T0=$(date +%s)
say() { printf '[%s %4ss] %s\n' "$phase" "$(($(date +%s) - T0))" "$*"; }
fail() {
	echo "fresh-root-checks $phase: FAIL: $*" >&2
	exit 1
}

# wait_port PORT PID: until 127.0.0.1:PORT accepts (60 s at most), while PID lives.
wait_port() {
	local port=$1 pid=$2 deadline=$(($(date +%s) + 60))
	until (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; do
		kill -0 "$pid" 2>/dev/null || fail "the target (pid $pid) exited before listening on $port"
		(($(date +%s) < deadline)) || fail "nothing accepted on 127.0.0.1:$port within 60 s"
		sleep 0.05
	done
}

# stop PID: SIGTERM, and the target must exit 0 (drained) within 30 s.
stop() {
	local pid=$1 rc=0 deadline=$(($(date +%s) + 30))
	kill -TERM "$pid"
	while kill -0 "$pid" 2>/dev/null && (($(date +%s) < deadline)); do sleep 0.05; done
	wait "$pid" || rc=$?
	[[ $rc = 0 ]] || fail "the target exited with status $rc after SIGTERM"
}

# ldd_clean BIN: only libc-level libraries, none of the optional ones.
ldd_clean() {
	local bin=$1 lib
	ldd "$bin" | sed 's/^/  ldd: /'
	for lib in librbd librados libceph-common libibverbs librdmacm libiscsi; do
		! ldd "$bin" | grep -q "$lib" || fail "ldd $bin lists $lib"
	done
	while read -r lib _; do
		case $lib in
		linux-vdso.so.* | libc.so.* | libm.so.* | libgcc_s.so.* | libpthread.so.* | libdl.so.* | librt.so.* | /lib64/ld-linux-x86-64.so.* | ld-linux-x86-64.so.*) ;;
		*) fail "ldd $bin lists $lib, not a libc-level library" ;;
		esac
	done < <(ldd "$bin")
	say "ldd $bin: libc-level libraries only"
}

# host_checks BIN: discover and identify against 127.0.0.1:4420.
host_checks() {
	local bin=$1 out
	out=$("$bin" discover -t tcp -a 127.0.0.1 -s 4420) || fail "farflash discover failed: $out"
	echo "$out" | sed 's/^/  discover: /'
	grep -qF "$NQN" <<<"$out" || fail "discover does not list $NQN"
	out=$("$bin" identify -t tcp -a 127.0.0.1 -s 4420 -n "$NQN" --nsid 1) || fail "farflash identify failed: $out"
	grep -E '^(mn|fr|subnqn|NVME|nsze|ncap) ' <<<"$out" | sed 's/^/  identify: /'
	grep -qE '^mn +: farflash' <<<"$out" || fail "identify does not name the model farflash"
	grep -qE "^subnqn +: $NQN" <<<"$out" || fail "identify does not show $NQN"
	# the default namespace: 1 GiB of 512-byte blocks
	grep -qE '^nsze +: 0x200000$' <<<"$out" || fail "identify does not show the 1 GiB namespace (nsze 0x200000)"
	say "discover and identify against 127.0.0.1:4420: OK"
}

# rss_kib PID
rss_kib() { awk '/^VmRSS:/ {print $2}' "/proc/$1/status"; }

# optional_feature_errors BIN: the errors that name the Debian packages.
optional_feature_errors() {
	local bin=$1 out rc
	rc=0
	out=$("$bin" serve --rbd rbd/disk1 --listen 127.0.0.1:4430 --rpc-socket none 2>&1) || rc=$?
	echo "$out" | sed 's/^/  --rbd: /'
	[[ $rc != 0 ]] || fail "serve --rbd without librbd exited 0"
	grep -qF -- "--rbd needs librbd1: apt install librbd1" <<<"$out" ||
		fail "serve --rbd without librbd does not say: --rbd needs librbd1: apt install librbd1"
	rc=0
	out=$("$bin" serve --ram 16M --listen rdma:127.0.0.1:4431 --rpc-socket none 2>&1) || rc=$?
	echo "$out" | sed 's/^/  rdma: /'
	[[ $rc != 0 ]] || fail "serve --listen rdma: without libibverbs exited 0"
	grep -qF "needs libibverbs1 librdmacm1 ibverbs-providers: apt install libibverbs1 librdmacm1 ibverbs-providers" <<<"$out" ||
		fail "an RDMA listener without libibverbs does not name the packages"
	say "--rbd and rdma: fail naming the Debian packages"
}

case $phase in
build)
	cd /src/farflash
	command -v clang >/dev/null && fail "clang is installed"
	say "cargo build --release --offline (rustc $(rustc --version | awk '{print $2}'))"
	cargo build --release --offline
	BIN=target/release/farflash
	ldd_clean "$BIN"
	v=$("$BIN" --version)
	say "--version: $v"
	grep -qE '^farflash [0-9]+\.[0-9]+\.[0-9]+ \(unknown commit\)$' <<<"$v" ||
		fail "--version of a tree without .git should say 'unknown commit': $v"

	# The README's first command (offline here), which execs the binary
	# without arguments: the embedded default.
	t=$(date +%s%N)
	cargo run --release --offline >/tmp/serve.log 2>&1 &
	pid=$!
	wait_port 4420 "$pid"
	say "cargo run --release: the embedded default listens after $((($(date +%s%N) - t) / 1000000)) ms, VmRSS $(rss_kib "$pid") KiB"
	[[ $(readlink "/proc/$pid/exe") = */target/release/farflash ]] ||
		fail "pid $pid is not target/release/farflash (cargo run execs it on Unix)"
	sed 's/^/  serve: /' /tmp/serve.log
	grep -qF "$NQN" /tmp/serve.log || fail "the banner does not name $NQN"
	host_checks "$BIN"
	stop "$pid"
	optional_feature_errors "$BIN"

	say "bash scripts/package-deb.sh"
	CARGO_FLAGS=--offline bash scripts/package-deb.sh
	;;
install)
	deb=${2:?the .deb}
	export DEBIAN_FRONTEND=noninteractive
	apt-get install -y -q --no-install-recommends -o Dpkg::Use-Pty=0 "$deb" 2>&1 | sed 's/^/  apt-get: /'
	dpkg -s farflash | grep -q '^Status: install ok installed' || fail "farflash is not installed"
	for pkg in librbd1 librados2 libibverbs1 librdmacm1 ibverbs-providers libiscsi7; do
		dpkg -s "$pkg" >/dev/null 2>&1 && fail "$pkg was installed: it is only Recommended"
		dpkg -s farflash | grep '^Recommends:' | grep -qw "$pkg" || fail "Recommends lacks $pkg"
	done
	grep -qx /etc/farflash/farflash.toml /var/lib/dpkg/info/farflash.conffiles ||
		fail "/etc/farflash/farflash.toml is not a conffile"
	for f in /usr/bin/farflash /usr/share/bash-completion/completions/farflash \
		/usr/share/zsh/vendor-completions/_farflash /usr/share/fish/vendor_completions.d/farflash.fish \
		/usr/share/man/man1/farflash.1.gz /usr/share/man/man1/farflash-serve.1.gz; do
		[[ -f $f ]] || fail "$f not installed"
	done
	say "installed: $(farflash --version); Recommends not pulled in"
	ldd_clean /usr/bin/farflash

	unit=/lib/systemd/system/farflash.service
	[[ -f $unit ]] || fail "$unit not installed"
	exec_start=$(sed -n 's/^ExecStart=//p' "$unit")
	[[ -n $exec_start ]] || fail "no ExecStart in $unit"
	say "ExecStart: $exec_start"
	# What systemd does first: RuntimeDirectory=farflash (mode 0700).
	dir=$(sed -n 's/^RuntimeDirectory=//p' "$unit")
	[[ -n $dir ]] && install -d -m 0700 "/run/$dir"
	read -r -a argv <<<"$exec_start"
	[[ ${argv[0]} = /usr/bin/farflash ]] || fail "ExecStart runs ${argv[0]}, not /usr/bin/farflash"
	"${argv[@]}" >/tmp/serve.log 2>&1 &
	pid=$!
	wait_port 4420 "$pid"
	sed 's/^/  serve: /' /tmp/serve.log
	host_checks /usr/bin/farflash
	sock=/run/farflash/farflash.sock
	out=$(farflash ctl --rpc-socket "$sock" subsystem list) || fail "farflash ctl on $sock failed: $out"
	echo "$out" | sed 's/^/  ctl: /'
	grep -qF "$NQN" <<<"$out" || fail "ctl subsystem list does not list $NQN"
	stop "$pid"
	optional_feature_errors /usr/bin/farflash

	out=$(MANPAGER=cat MANWIDTH=80 man farflash-serve 2>&1) || fail "man farflash-serve failed: $out"
	echo "$out" | head -n 12 | sed 's/^/  man: /'
	grep -q '^NAME' <<<"$out" && grep -q '^SYNOPSIS' <<<"$out" && grep -q -- '--ram-commit' <<<"$out" ||
		fail "man farflash-serve did not render (NAME, SYNOPSIS, --ram-commit)"
	grep -q '^\.TH' <<<"$out" && fail "man farflash-serve printed raw roff"
	say "man farflash-serve renders"
	;;
*) fail "unknown phase $phase" ;;
esac
say "OK"
