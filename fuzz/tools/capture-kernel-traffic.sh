#!/bin/bash
# One-off capture of real Linux kernel host (nvme-tcp) traffic against
# `farflash serve`, for the fuzz seed corpus. Not used by any test.
#
#   fuzz/tools/capture-kernel-traffic.sh OUT.pcap [HOSTPORT] [GUEST_SCRIPT]
#
# Starts `target/debug/farflash serve` on 127.0.0.1:HOSTPORT (default
# 24420; the guest still sees port 4420), captures loopback traffic on that
# port with tcpdump, and runs the reference harness from shared/linux-host
# (a QEMU TCG VM with the kernel's nvme-tcp). Needs root for tcpdump; build
# the binary first with `cargo build`. Then:
#   python3 fuzz/tools/pcap_to_corpus.py OUT.pcap fuzz/corpus
set -euo pipefail
out=${1:?usage: $0 OUT.pcap [HOSTPORT] [GUEST_SCRIPT]}
port=${2:-24420}
root=$(cd "$(dirname "$0")/../.." && pwd)
harness=${LINUX_HOST_DIR:-$root/../shared/linux-host}
[ -d "$harness" ] || harness=/work/shared/linux-host
script=${3:-$harness/examples/kernel-target-selftest.sh}
nqn=nqn.2026-11.io.farflash:default

"$root/target/debug/farflash" serve --listen "127.0.0.1:$port" --ram 64M --log-level warn &
serve=$!
tcpdump -i lo -s 0 -U -w "$out" "tcp port $port" 2>/dev/null &
dump=$!
trap 'kill $dump $serve 2>/dev/null || true; wait 2>/dev/null || true' EXIT
sleep 2
"$harness/run-linux-host" -p "4420:$port" -e SELFTEST_TARGET=remote -e "NQN=$nqn" \
    -e FIO_SIZE=2m "$script"
sleep 1
