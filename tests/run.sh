#!/usr/bin/env bash
# tests/run.sh -- the test command of farflash:   bash tests/run.sh
#
# On a fresh Debian 12 machine (Rust toolchain from rustup already present)
# it installs what is missing, then runs, in order:
#   1. cargo fmt --all --check
#   2. cargo clippy --workspace --all-targets -- -D warnings
#   3. cargo test --workspace (with FARFLASH_REQUIRE_BINDINGS_CHECK=1: the
#      committed crates/*-sys bindings against the installed headers), the
#      backend's block-device test and the fused pair on a loop device
#      (tests/block-device.sh), a real Prometheus (Debian's package) scraping farflash serve
#      (tests/prometheus.rs), the fuzz corpus replay, RBD namespaces on a
#      single-node Ceph cluster (tests/rbd.rs), and tests/fresh-root.sh: a
#      release build in a minimal Debian 12 root (debootstrap; no libclang,
#      no -dev headers) that serves and answers discover/identify, and the
#      .deb of scripts/package-deb.sh installed into another such root;
#      tests/csi-image.sh: the CSI driver's container image (debootstrap
#      and crane, no container engine), validated and run in a chroot
#   4. cargo test --test interop_linux --test host_kernel_target -- --ignored
#      --test-threads=1 --nocapture
#      (the Linux kernel host in QEMU VMs against the kernel's nvmet target
#      and against farflash serve; see tests/linux-host/README.md). Debian
#      12's 6.1 kernel for most; the newest 6.12 kernel Debian 12 ships
#      (linux-image-6.12.N+deb12-amd64, downloaded by the harness with
#      apt-get download) for in-band authentication, which 6.1 lacks, and,
#      with Debian 13's tlshd and nvme-cli 2.13 added (run-linux-host
#      --tls), for NVMe/TCP over TLS both ways (tests/interop_tls.rs,
#      host_kernel_target's farflash_host_tls_to_linux_612_target); and
#      farflash-csi's Node service in the 6.1 guest, and in the 6.12 one with
#      DH-HMAC-CHAP and TLS keys from CSI secrets (crates/csi/tests/node_vm.rs)
# Every step runs even if an earlier one failed; the exit status is non-zero
# if any step failed.  A summary with timings is printed at the end.
#
# Environment: FARFLASH_TEST_FAIL_FAST=1 stops at the first failed step;
# FARFLASH_SKIP_INTEROP=1 skips step 4 (the VMs). FARFLASH_SKIP_TLS (the
# TLS tests' opt-out where OpenSSL 3 is missing) is refused.
set -euo pipefail

ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
export PATH="$HOME/.cargo/bin:$PATH:/usr/local/sbin:/usr/sbin:/sbin"
export CARGO_TERM_COLOR=${CARGO_TERM_COLOR:-never}
# Disk: a stop of this script once failed 162 s in, with "No space left on
# device", on a machine whose disk it shares. A clean clone gains nothing from
# incremental artefacts, and full debug info is most of what remains, so both
# are off unless the caller sets them (backtraces keep file and line).
export CARGO_INCREMENTAL=${CARGO_INCREMENTAL:-0}
export CARGO_PROFILE_DEV_DEBUG=${CARGO_PROFILE_DEV_DEBUG:-line-tables-only}

T_ALL=$(date +%s)
RESULTS=()
FAILED=0
STEP_PID=""

# shellcheck disable=SC2317  # (trap handler)
interrupted() {
	echo "tests/run.sh: interrupted" >&2
	if [[ -n $STEP_PID ]]; then
		kill -TERM -- "-$STEP_PID" 2>/dev/null || kill -TERM "$STEP_PID" 2>/dev/null || true
		wait "$STEP_PID" 2>/dev/null || true
	fi
	exit 130
}
trap interrupted INT TERM

section() {
	printf '\n======================================================================\n'
	printf '== %s\n' "$*"
	printf '======================================================================\n'
}

as_root() {
	if [[ $(id -u) = 0 ]]; then
		"$@"
	elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
		sudo "$@"
	else
		echo "tests/run.sh: need root (or passwordless sudo) to run: $*" >&2
		return 1
	fi
}

# step NAME TIMEOUT_SECS COMMAND...
step() {
	local name=$1 limit=$2 t rc=0
	shift 2
	section "$name"
	echo "\$ $*"
	t=$(date +%s)
	# timeout(1) puts the step in its own process group; run it in the
	# background so that an interrupt of this script can stop that group.
	timeout -k 30 "$limit" "$@" &
	STEP_PID=$!
	wait "$STEP_PID" || rc=$?
	STEP_PID=""
	t=$(($(date +%s) - t))
	if [[ $rc = 0 ]]; then
		RESULTS+=("PASS  ${t}s  $name")
		echo "-- $name: PASS (${t}s)"
	else
		[[ $rc = 124 ]] && echo "-- $name: timed out after ${limit}s"
		RESULTS+=("FAIL  ${t}s  $name (exit $rc)")
		echo "-- $name: FAIL (exit $rc, ${t}s)"
		FAILED=1
		if [[ ${FARFLASH_TEST_FAIL_FAST:-0} = 1 ]]; then
			summary
			exit 1
		fi
	fi
}

summary() {
	section "summary ($(($(date +%s) - T_ALL))s)"
	printf '%s\n' "${RESULTS[@]}"
}

# ------------------------------------------------------------ prerequisites
section "prerequisites"
# The TLS tests fail where OpenSSL 3 is missing unless FARFLASH_SKIP_TLS=1
# asks them to skip; a run of the suite never skips them.
if [[ -n ${FARFLASH_SKIP_TLS:-} ]]; then
	echo "tests/run.sh: FARFLASH_SKIP_TLS is set: the TLS tests would be skipped; unset it" >&2
	exit 1
fi
missing=()
for pair in qemu-system-x86_64=qemu-system-x86 busybox=busybox-static cpio=cpio \
	nvme=nvme-cli fio=fio socat=socat xz=xz-utils prometheus=prometheus promtool=prometheus; do
	command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
done
command -v cc >/dev/null || missing+=(gcc libc6-dev) # the linker cargo uses (all a build needs)
# The optional libraries, opened at run time by the features the tests use:
# Ceph RBD (tests/rbd.rs), RDMA (tests/interop_rdma.rs copies them into the
# VM image), iSCSI (tests/iscsi.rs).
for pkg in librbd1 librados2 libibverbs1 librdmacm1 ibverbs-providers libiscsi7; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# farflash-sys-gen's tests check the committed crates/*-sys bindings against
# the headers with bindgen, which needs them and libclang (a build does not)
[[ -e /usr/include/rbd/librbd.h ]] || missing+=(librbd-dev)
[[ -e /usr/include/rados/librados.h ]] || missing+=(librados-dev)
compgen -G '/usr/lib/llvm-*/lib/libclang.so' >/dev/null || missing+=(libclang-dev)
# tests/fresh-root.sh: minimal Debian 12 roots in namespaces of their own
for pair in debootstrap=debootstrap unshare=util-linux ip=iproute2; do
	command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
done
# tests/ceph/cluster.sh: a single-node Ceph cluster for tests/rbd.rs
for pair in ceph-mon=ceph-mon ceph-mgr=ceph-mgr ceph-osd=ceph-osd ceph=ceph-common rbd=ceph-common \
	uuidgen=uuid-runtime; do
	command -v "${pair%%=*}" >/dev/null || missing+=("${pair#*=}")
done
# the bindings check of crates/rdma-sys (rdma-core's headers);
# tests/interop_rdma.rs puts the rxe verbs provider (ibverbs-providers) in
# the VM image
for pkg in libibverbs-dev librdmacm-dev libclang-dev ibverbs-providers; do
	dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
# the bindings check of crates/iscsi-sys (libiscsi's headers); tests/iscsi.rs and the
# sweep's --baseline iscsi start tgt's user-space target (tgtd, tgtadm)
[[ -e /usr/include/iscsi/iscsi.h ]] || missing+=(libiscsi-dev)
command -v tgtd >/dev/null || missing+=(tgt)
# the bindings check of crates/ssl-sys (OpenSSL 3's headers); crates/tls's
# tests run its sessions against the openssl command line (s_server, s_client)
[[ -e /usr/include/openssl/ssl.h ]] || missing+=(libssl-dev)
command -v openssl >/dev/null || missing+=(openssl)
if [[ ${#missing[@]} -gt 0 ]]; then
	echo "installing: ${missing[*]}"
	log=$(mktemp)
	if ! {
		as_root apt-get -qq -o DPkg::Lock::Timeout=600 update &&
			as_root env DEBIAN_FRONTEND=noninteractive apt-get -y -qq --no-install-recommends \
				-o DPkg::Lock::Timeout=600 -o Dpkg::Use-Pty=0 install "${missing[@]}"
	} >"$log" 2>&1; then
		cat "$log"
		rm -f "$log"
		echo "tests/run.sh: could not install ${missing[*]}" >&2
		exit 1
	fi
	rm -f "$log"
fi
# Go builds the Kubernetes test tools (csi-sanity, the snapshot CRDs' module)
# from the Go module proxy; the project's machines carry it beside Rust
command -v go >/dev/null || {
	echo "tests/run.sh: go not found (the Kubernetes test tools are built with it)" >&2
	exit 1
}
command -v cargo >/dev/null || {
	echo "tests/run.sh: cargo not found (install Rust with rustup)" >&2
	exit 1
}
# rust-toolchain.toml asks for rustfmt and clippy; older rustups may not add them
if ! cargo fmt --version >/dev/null 2>&1 || ! cargo clippy --version >/dev/null 2>&1; then
	rustup component add rustfmt clippy
fi
echo "rustc: $(rustc --version)"
echo "cargo: $(cargo --version)"
echo "qemu:  $(qemu-system-x86_64 --version | head -n 1)"
echo "nvme:  $(nvme version | head -n 1), fio: $(fio --version)"
echo "cpus:  $(nproc)"
echo "disk:  $(df -h --output=avail . | tail -n 1 | tr -d ' ') free under $ROOT"

# -------------------------------------------------------------------- steps
step "cargo fmt --all --check" 600 cargo fmt --all --check
step "cargo clippy --workspace --all-targets -- -D warnings" 2400 \
	cargo clippy --workspace --all-targets -- -D warnings
# the committed bindings must be checked here, where the headers are installed
export FARFLASH_REQUIRE_BINDINGS_CHECK=1
step "cargo test --workspace" 2400 cargo test --workspace
step "backend and fused Compare and Write on a real block device (tests/block-device.sh)" 900 bash tests/block-device.sh
step "Prometheus scrapes farflash serve (cargo test --test prometheus -- --ignored)" 600 \
	cargo test --test prometheus -- --ignored --nocapture
step "fuzz corpus and regression replay (cargo test --manifest-path fuzz/Cargo.toml)" 1200 \
	cargo test --manifest-path fuzz/Cargo.toml
step "RBD namespaces on a single-node Ceph cluster (cargo test --test rbd -- --ignored)" 1500 \
	cargo test --test rbd -- --ignored --test-threads=1 --nocapture
step "RBD pools: the volume API on a single-node Ceph cluster (cargo test --test rbd_pool -- --ignored)" 600 \
	cargo test --test rbd_pool -- --ignored --test-threads=1 --nocapture
# csi-sanity (every spec but the Node Service's) against the CSI controller
# with its volumes in an RBD pool of a single-node Ceph cluster (snapshots
# are named VOLUME@s-HASH, RBD's notation, for both kinds of pool).
step "csi-sanity with an RBD pool (CSI_SANITY_POOL=rbd bash tests/csi-sanity.sh)" 900 \
	env CSI_SANITY_POOL=rbd bash tests/csi-sanity.sh
step "CSI node: file systems on a loop device (cargo test -p farflash-csi --test node_fs -- --ignored)" 600 \
	cargo test -p farflash-csi --test node_fs -- --ignored --test-threads=1 --nocapture
step "Kubernetes manifests against their schemas (tests/manifests.sh)" 600 bash tests/manifests.sh
step "csi-sanity against farflash-csi (tests/csi-sanity.sh)" 1800 bash tests/csi-sanity.sh
# The CSI driver's container image, built without a container engine
# (debootstrap + crane), validated, and its tools run in its root: about
# 18 min the first time on 2 loaded cores (debootstrap, the release build),
# 2-7 min with the base root (~/.cache/farflash/csi-image) and build cached
step "CSI driver's container image: build, validate, run in its root (tests/csi-image.sh)" 2400 \
	bash tests/csi-image.sh
step "fresh Debian 12 root: release build without libclang or headers, serve, .deb install (tests/fresh-root.sh)" 2400 \
	bash tests/fresh-root.sh
if [[ ${FARFLASH_SKIP_INTEROP:-0} = 1 ]]; then
	section "interop (skipped: FARFLASH_SKIP_INTEROP=1)"
	RESULTS+=("SKIP  0s  interop")
else
	# build (or verify the cache of) the VM image first, in its own section
	step "Linux host VM image (tests/linux-host/run-linux-host --build-only)" 900 \
		tests/linux-host/run-linux-host --build-only
	step "Linux 6.12 host VM image (tests/linux-host/run-linux-host --kernel 6.12 --build-only)" 900 \
		tests/linux-host/run-linux-host --kernel 6.12 --build-only
	# NVMe/TCP over TLS (issue 32): Debian 13's tlshd and nvme-cli 2.13 in the
	# 6.12 image (tests/linux-host/tls-userland.sh, from Debian's registry)
	step "Linux 6.12 host VM image with TLS (tests/linux-host/run-linux-host --kernel 6.12 --tls --build-only)" 900 \
		tests/linux-host/run-linux-host --kernel 6.12 --tls --build-only
	step "cargo test --test interop_linux --test host_kernel_target --test interop_tls -- --ignored --test-threads=1 --nocapture" 2400 \
		cargo test --test interop_linux --test host_kernel_target --test interop_tls -- --ignored --test-threads=1 --nocapture
	step "differential conformance against Linux nvmet (cargo test --test differential -- --ignored)" 900 \
		cargo test --test differential -- --ignored --test-threads=1 --nocapture
	step "Linux multipath over two farflash targets (cargo test --test interop_ha -- --ignored)" 900 \
		cargo test --test interop_ha -- --ignored --test-threads=1 --nocapture
	# The CSI driver's Node service inside the 6.1 guest (issue 45):
	# csi-sanity's Node specs there, end to end through the gRPC API
	# against farflash serve and the controller on this machine, a target
	# restart, nvme_core.multipath on and off, a node reboot (stale mounts,
	# clean, half connected: 3.5 min with multipath off); and in the 6.12
	# guest (--tls) DH-HMAC-CHAP and TLS keys from the CSI secrets; one
	# boot each (plus about 1 min per guest when farflash-csi changed: a
	# new VM image)
	step "CSI node in the Linux 6.1 and 6.12 guests: csi-sanity Node specs, end to end, target restart, multipath on/off, node reboot, DH-HMAC-CHAP and TLS from secrets (cargo test -p farflash-csi --test node_vm -- --ignored)" 1500 \
		bash -c 'bash tests/csi-sanity.sh --build-only && cargo build -p farflash --bin farflash &&
			cargo test -p farflash-csi --test node_vm -- --ignored --test-threads=1 --nocapture'
	step "Linux host fio verify on an RBD namespace (cargo test --test interop_rbd -- --ignored)" 900 \
		cargo test --test interop_rbd -- --ignored --test-threads=1 --nocapture
	step "NVMe/RDMA over Soft-RoCE in the VM: kernel loop, farflash's RDMA target in the guest (cargo test --test interop_rdma -- --ignored)" 1500 \
		cargo test --test interop_rdma -- --ignored --test-threads=1 --nocapture --skip farflash_rdma_auth_and_run_time_listeners_612
	step "NVMe/RDMA DH-HMAC-CHAP and run-time RDMA listeners, Linux 6.12 guest (cargo test --test interop_rdma -- --ignored --exact farflash_rdma_auth_and_run_time_listeners_612)" 600 \
		cargo test --test interop_rdma -- --ignored --nocapture --exact farflash_rdma_auth_and_run_time_listeners_612
fi

summary
echo "disk:  $(du -sh target 2>/dev/null | cut -f 1) in target/, $(du -sh fuzz/target 2>/dev/null | cut -f 1) in fuzz/target/, $(df -h --output=avail . | tail -n 1 | tr -d ' ') left"
if [[ $FAILED != 0 ]]; then
	echo "RESULT: FAIL"
	exit 1
fi
echo "RESULT: PASS"
