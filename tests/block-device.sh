#!/usr/bin/env bash
# tests/block-device.sh -- run the backend's block-device test, and the fused
# Compare and Write check of tests/fused.rs, on a real block device: a loop
# device over a 64 MiB temporary file (needs root or sudo).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
as_root() {
	if [[ $(id -u) = 0 ]]; then "$@"; else sudo -n "$@"; fi
}
img=$(mktemp /tmp/farflash-blockdev.XXXXXX)
dev=""
cleanup() {
	[[ -n $dev ]] && as_root losetup -d "$dev" 2>/dev/null || true
	rm -f "$img"
}
trap cleanup EXIT
truncate -s 64M "$img"
as_root modprobe loop 2>/dev/null || true
dev=$(as_root losetup --find --show "$img")
# The test process opens the device itself: give it to the caller if not root.
[[ $(id -u) = 0 ]] || as_root chown "$(id -u)" "$dev"
echo "block device: $dev"
FARFLASH_TEST_BLOCK_DEVICE=$dev cargo test -p farflash-backend --lib -- --ignored --exact file::tests::block_device
# Fused Compare and Write on a block device namespace (issue 43).
FARFLASH_TEST_BLOCK_DEVICE=$dev cargo test --test fused -- --ignored --exact on_a_block_device_fused_pairs_are_atomic
