#!/usr/bin/env python3
"""Writes hand-made seeds for the structured modes of the fuzz targets
(fuzz/src/target_connection.rs modes 4 and 5, fuzz/src/host_connection.rs):
every known-good admin and I/O command, R2T writes answered, time passing,
with and without digests. The kernel-host captures (pcap_to_corpus.py) seed
the raw modes.

    python3 fuzz/tools/synthetic_seeds.py [OUT_DIR]   (default fuzz/corpus)
"""

import hashlib
import os
import struct
import sys

out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "corpus")


def write(target, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "synthetic-" + hashlib.sha1(data).hexdigest()[:16]), "wb") as f:
        f.write(data)


H2C = bytes([2, 0, 0x00, 0x10]) + bytes([0xA5] * 64)  # answer the oldest R2T

for params, limits, ns in [(0, 0, 0), (3, 0, 7), (0x0C, 0x55, 1), (0x07, 0xFF, 2)]:
    admin = bytes([4, params, limits, ns])
    for k in range(11):
        for a in (0, 0x13, 0x81):
            admin += bytes([1, k, a])
    write("target_connection", admin + bytes([4, 255, 7, 0]))
    io = bytes([5, params, limits, ns])
    for k in range(9):
        for a in (0, 0x21, 0x47):
            io += bytes([1, k, a]) + H2C
    io += bytes([5, 0, 1, 5, 0]) + bytes([6, 0, 1, 2, 0x41]) + bytes([6, 0, 4, 200])
    write("target_connection", io)
    # fuzzed SQEs with every fix-up on: opcode table, SGL, DPTR, small LBA range
    fz = bytes([5, params, limits, ns])
    for op in range(8):
        sqe = bytes([op * 3]) + bytes(63)
        fz += bytes([0, 0x1F]) + sqe + bytes(64) + H2C
    write("target_connection", fz)

# host: valid ICResp, a read, a write by R2T, a no-data command; then the
# target's answers for them, whole and in pieces.
for cfg in (4, 5, 7, 0x0C):
    prog = bytes([cfg, 7, 0x1B])
    for cid, d, n, opc in [(0, 2, 4096, 2), (1, 1, 16384, 1), (2, 0, 0, 0)]:
        prog += bytes([1, 1, cid, d]) + struct.pack("<I", n) + bytes([opc])
    prog += bytes([2, 0xFF, 0xFF, 3])
    write("host_connection", prog)
