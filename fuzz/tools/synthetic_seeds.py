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

# Issue 29, the relaxed checks, as raw streams of a host for target_connection
# mode 6 (two connections: admin, then I/O queue 1 of CNTLID 1): CapsuleCmds
# without data whose PDO is the header length (72), CC.EN with CC.CSS 110b,
# and an I/O queue Connect with a HOSTID other than the admin queue's; then a
# write in the capsule and a read of it. No digests, default limits, 512-byte
# blocks (params = limits = ns = 0).
SUBNQN = b"nqn.2026-11.io.farflash:default"
HOSTNQN = b"nqn.2014-08.org.nvmexpress:uuid:00000000-0000-4000-8000-0000000f0220"


def icreq():
    b = bytearray(128)
    b[0], b[2], b[4] = 0x00, 128, 128  # ICReq, HLEN, PLEN (PFV, HPDA, DGST 0)
    return bytes(b)


def capsule(sqe, icd=b"", pdo_no_data=72, flags=0):
    pdo = 72 if icd else pdo_no_data
    ch = struct.pack("<BBBBI", 0x04, flags, 72, pdo, 72 + len(icd))
    return ch + sqe + icd


def sqe(opcode, cid, nsid=0, sgl=b"", rest=b""):
    # CDW0 (PSDT 01b: SGL), NSID, CDW2-3, MPTR, SGL1 (16 bytes), CDW10-15.
    b = struct.pack("<BBHI", opcode, 0x40, cid, nsid) + bytes(16)
    b += sgl.ljust(16, b"\0") + rest.ljust(24, b"\0")
    assert len(b) == 64
    return b


def sgl_in_capsule(n):
    return struct.pack("<QI3xB", 0, n, 0x01)


def sgl_transport(n):
    return struct.pack("<QI3xB", 0, n, 0x5A)


def fabrics(fctype, cid, sgl=b"", specific=b""):
    # Fabrics commands: opcode 7Fh, FCTYPE in byte 4, bytes 40-63 specific.
    b = bytearray(sqe(0x7F, cid, sgl=sgl, rest=specific))
    b[4] = fctype
    b[5:8] = bytes(3)
    return bytes(b)


def connect(cid, qid, cntlid, hostid):
    data = bytearray(1024)
    data[0:16] = hostid
    data[16:18] = struct.pack("<H", cntlid)
    data[256:256 + len(SUBNQN)] = SUBNQN
    data[512:512 + len(HOSTNQN)] = HOSTNQN
    spec = struct.pack("<HHHBBI", 0, qid, 31, 0, 0, 30000 if qid == 0 else 0)
    return capsule(fabrics(0x01, cid, sgl_in_capsule(1024), spec), bytes(data))


def prop_get(cid, offset, size8):
    return capsule(fabrics(0x04, cid, specific=struct.pack("<B3xI", int(size8), offset)))


def prop_set(cid, offset, value):
    return capsule(fabrics(0x00, cid, specific=struct.pack("<B3xIQ", 0, offset, value)))


def relaxed_stream(css=0b110, io_hostid=b"another-hostid!!", qid=1, flags=0):
    cc = 1 | css << 4 | 6 << 16 | 4 << 20
    admin = [
        icreq(),
        connect(1, 0, 0xFFFF, b"farflash-fuzzing"),
        prop_get(2, 0x00, True),
        prop_get(3, 0x08, False),
        prop_set(4, 0x14, cc),
        prop_get(5, 0x1C, False),
        # Set Features Number of Queues (FID 07h), 2 I/O queues.
        capsule(sqe(0x09, 6, rest=struct.pack("<II", 0x07, 0x00010001))),
        capsule(sqe(0x18, 7), flags=flags),  # Keep Alive
    ]
    block = bytes((i * 31 ^ 0x5A) & 0xFF for i in range(512))
    io = [
        icreq(),
        connect(1, qid, 1, io_hostid),
        # Write 1 block at LBA 8 in the capsule, Read it back, Flush.
        capsule(
            sqe(0x01, 2, 1, sgl_in_capsule(512), struct.pack("<III", 8, 0, 0)), block, flags=flags
        ),
        capsule(sqe(0x02, 3, 1, sgl_transport(512), struct.pack("<III", 8, 0, 0))),
        capsule(sqe(0x00, 4, 1)),
    ]
    body = b""
    for q, pdus in ((0, admin), (1, io)):
        for p in pdus:
            body += bytes([q]) + struct.pack("<H", len(p)) + p
    return bytes([6, 0, 0, 0]) + body


write("target_connection", relaxed_stream())
write("target_connection", relaxed_stream(css=0, io_hostid=bytes(16)))
# HDGSTF and DDGSTF (03h) set with no digest negotiated; I/O queue 3 when the
# Number of Queues feature granted 2.
write("target_connection", relaxed_stream(qid=3, flags=0x03))
# pdu_framing: a data-less CapsuleCmd with PDO 72 and HDGSTF set without a
# header digest, parsed in every negotiated state ([sel][pda][max_data]).
ch = struct.pack("<BBBBI", 0x04, 0x01, 72, 72, 72)
write("pdu_framing", bytes([0x09, 0x80]) + struct.pack("<I", 8192) + ch + bytes(64))
