#!/usr/bin/env bash
# scripts/regen-bindings.sh -- regenerate the committed C bindings
#   crates/rbd-sys/src/bindings.rs    (librados, librbd)
#   crates/iscsi-sys/src/bindings.rs  (libiscsi)
#   crates/rdma-sys/src/bindings.rs   (libibverbs, librdmacm)
#   crates/ssl-sys/src/bindings.rs    (libssl, libcrypto: OpenSSL 3)
# from the installed headers, with bindgen (crates/sys-gen). Needs the
# headers and libclang, which a build of farflash does not:
#   apt install librbd-dev librados-dev libiscsi-dev libibverbs-dev librdmacm-dev libssl-dev libclang-dev
# Usage: bash scripts/regen-bindings.sh [rbd-sys|iscsi-sys|rdma-sys|ssl-sys]...
# `cargo test -p farflash-sys-gen` checks the committed files against the
# headers (tests/run.sh runs it with the headers installed).
set -euo pipefail
cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.."
cargo run --quiet -p farflash-sys-gen -- "$@"
cargo fmt --all -- --check >/dev/null 2>&1 || echo "note: cargo fmt --all --check reports differences" >&2
