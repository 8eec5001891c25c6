#!/usr/bin/env python3
"""Turn a capture of real NVMe/TCP traffic into fuzz seed inputs.

    python3 fuzz/tools/pcap_to_corpus.py CAPTURE.pcap [CAPTURE.pcap...] \
        [--port 24420] [--out fuzz/corpus] [--max-stream 32768]

Reads classic pcap files (tcpdump -w; Ethernet or Linux "cooked" link
layer), reassembles each TCP connection to the target port in both
directions, and writes, in the input formats the harnesses document
(fuzz/src/*.rs):

  target_connection/  mode 0: each connection's host-to-target stream;
                      mode 6: the admin and first I/O connection interleaved
                      as captured (the I/O Connect's CNTLID rewritten to 1,
                      the CNTLID a fresh fuzz target hands out first)
  pdu_framing/        one file per distinct PDU shape, both directions
  command_decode/     each distinct command (SQE + in-capsule data) and each
                      controller data payload (Identify, log pages) with the
                      SQE that asked for it
  host_connection/    each connection replayed from the host's side: its
                      commands submitted (CIDs mapped into the harness's
                      range) and the target's bytes fed, as captured

Only the Python standard library is used. File names are content hashes,
so re-running on the same capture is idempotent.
"""

import argparse
import hashlib
import os
import struct
import sys
import zlib

# --- pcap reading -----------------------------------------------------------


def read_pcap(path):
    """Yields (timestamp, link-layer frame) from a classic pcap file."""
    with open(path, "rb") as f:
        data = f.read()
    magic = data[:4]
    if magic in (b"\xd4\xc3\xb2\xa1", b"\x4d\x3c\xb2\xa1"):
        end = "<"
    elif magic in (b"\xa1\xb2\xc3\xd4", b"\xa1\xb2\x3c\x4d"):
        end = ">"
    else:
        sys.exit(f"{path}: not a classic pcap file (pcapng is not supported)")
    nano = magic in (b"\x4d\x3c\xb2\xa1", b"\xa1\xb2\x3c\x4d")
    linktype = struct.unpack(end + "I", data[20:24])[0]
    off = 24
    while off + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(end + "IIII", data[off : off + 16])
        off += 16
        frame = data[off : off + incl]
        off += incl
        yield sec + frac / (1e9 if nano else 1e6), linktype, frame


def tcp_segments(path, port):
    """Yields (ts, conn_key, to_target, seq, flags, payload)."""
    for ts, linktype, frame in read_pcap(path):
        if linktype == 1:  # Ethernet
            etype, l3 = struct.unpack(">H", frame[12:14])[0], frame[14:]
        elif linktype == 113:  # Linux cooked
            etype, l3 = struct.unpack(">H", frame[14:16])[0], frame[16:]
        elif linktype == 0:  # BSD loopback
            etype, l3 = 0x0800, frame[4:]
        else:
            continue
        if etype == 0x0800:
            ihl = (l3[0] & 0xF) * 4
            total = struct.unpack(">H", l3[2:4])[0]
            if l3[9] != 6:
                continue
            src, dst, l4 = l3[12:16], l3[16:20], l3[ihl:total]
        elif etype == 0x86DD:
            if l3[6] != 6:
                continue
            plen = struct.unpack(">H", l3[4:6])[0]
            src, dst, l4 = l3[8:24], l3[24:40], l3[40 : 40 + plen]
        else:
            continue
        sport, dport, seq = struct.unpack(">HHI", l4[:8])
        doff = (l4[12] >> 4) * 4
        flags = l4[13]
        payload = l4[doff:]
        if dport == port:
            yield ts, (src, sport, dst, dport), True, seq, flags, payload
        elif sport == port:
            yield ts, (dst, dport, src, sport), False, seq, flags, payload


class Conn:
    def __init__(self, key, ts):
        self.key, self.start = key, ts
        self.next = {True: None, False: None}
        self.data = {True: bytearray(), False: bytearray()}
        self.segs = []  # (ts, to_target, bytes) in capture order

    def add(self, ts, to_target, seq, flags, payload):
        if flags & 0x02:  # SYN
            self.next[to_target] = (seq + 1) & 0xFFFFFFFF
            return
        if not payload:
            return
        nxt = self.next[to_target]
        if nxt is None:
            nxt = seq
        skip = (nxt - seq) & 0xFFFFFFFF
        if skip >= len(payload) or skip > 1 << 30:
            return  # retransmission, or a gap we cannot fill
        payload = payload[skip:]
        self.data[to_target] += payload
        self.next[to_target] = (nxt + len(payload)) & 0xFFFFFFFF
        self.segs.append((ts, to_target, bytes(payload)))


def connections(paths, port):
    conns = {}
    order = []
    for path in paths:
        for ts, key, to_target, seq, flags, payload in tcp_segments(path, port):
            if flags & 0x02 and not flags & 0x10 and key in conns:
                del conns[key]  # port reuse: a new connection
            if key not in conns:
                conns[key] = Conn(key, ts)
                order.append(conns[key])
            conns[key].add(ts, to_target, seq, flags, payload)
    return [c for c in order if c.data[True]]


# --- NVMe/TCP PDUs ----------------------------------------------------------

ICREQ, ICRESP, H2CTERM, C2HTERM, CMD, RESP, H2CDATA, C2HDATA, R2T = 0, 1, 2, 3, 4, 5, 6, 7, 9


def pdus(stream):
    """Cuts a byte stream into (offset, type, bytes); stops at a bad length."""
    off = 0
    while off + 8 <= len(stream):
        plen = struct.unpack("<I", stream[off + 4 : off + 8])[0]
        if plen < 8 or off + plen > len(stream):
            break
        yield off, stream[off], stream[off : off + plen]
        off += plen


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def digests(stream):
    """(hdgst, ddgst) from the ICReq at the start of a host stream."""
    if len(stream) >= 12 and stream[0] == ICREQ:
        return bool(stream[11] & 1), bool(stream[11] & 2)
    return False, False


def reseal(p, hd, dd):
    """Recomputes the digests of a PDU whose fields were rewritten."""
    p = bytearray(p)
    hlen, pdo = p[2], p[3]
    if hd and p[0] not in (ICREQ, ICRESP, H2CTERM, C2HTERM):
        p[hlen : hlen + 4] = struct.pack("<I", crc32c(p[:hlen]))
    if dd and pdo and p[1] & 2:
        data = p[pdo : len(p) - 4]
        p[len(p) - 4 :] = struct.pack("<I", crc32c(data))
    return bytes(p)


def connect_info(stream):
    """(qid, subnqn, cntlid, pdu offset) of the first Connect capsule."""
    for off, t, p in pdus(stream):
        if t == CMD and len(p) >= 72 and p[8] == 0x7F and p[12] == 0x01:
            qid = struct.unpack("<H", p[50:52])[0]
            pdo = p[3]
            data = p[pdo : pdo + 1024]
            subnqn = data[256:512].split(b"\0")[0].decode("ascii", "replace")
            cntlid = struct.unpack("<H", data[16:18])[0] if len(data) >= 18 else 0
            return qid, subnqn, cntlid, off
    return None


def truncate(stream, limit):
    """The longest prefix of whole PDUs within `limit` bytes."""
    end = 0
    for off, _t, p in pdus(stream):
        if off + len(p) > limit:
            break
        end = off + len(p)
    return bytes(stream[: end if end else limit])


# --- writers ----------------------------------------------------------------


class Out:
    def __init__(self, root):
        self.root, self.count, self.bytes = root, {}, 0

    def write(self, target, data):
        d = os.path.join(self.root, target)
        os.makedirs(d, exist_ok=True)
        name = "kernel-" + hashlib.sha1(data).hexdigest()[:16]
        with open(os.path.join(d, name), "wb") as f:
            f.write(data)
        self.count[target] = self.count.get(target, 0) + 1
        self.bytes += len(data)


def target_raw(out, conn, limit):
    body = truncate(conn.data[True], limit)
    out.write("target_connection", bytes([0, 0x10, 0, 0]) + body)


def target_pair(out, admin, io, limit):
    """Mode 6 records [queue][len u16][bytes], in capture order."""
    hd, dd = digests(io.data[True])
    info = connect_info(io.data[True])
    io_stream = bytearray(io.data[True])
    if info:
        off = info[3]
        p = bytearray(next(p for o, _t, p in pdus(io_stream) if o == off))
        pdo = p[3]
        p[pdo + 16 : pdo + 18] = struct.pack("<H", 1)
        io_stream[off : off + len(p)] = reseal(p, hd, dd)
    streams = {0: bytes(admin.data[True]), 1: bytes(io_stream)}
    pos = {0: 0, 1: 0}
    segs = [(ts, 0, len(b)) for ts, t, b in admin.segs if t]
    segs += [(ts, 1, len(b)) for ts, t, b in io.segs if t]
    segs.sort()
    body = bytearray()
    for _ts, q, n in segs:
        chunk = streams[q][pos[q] : pos[q] + n]
        pos[q] += n
        while chunk:
            piece, chunk = chunk[:0xFFFF], chunk[0xFFFF:]
            body += bytes([q]) + struct.pack("<H", len(piece)) + piece
        if len(body) > limit:
            break
    out.write("target_connection", bytes([6, 0x10, 0, 0]) + bytes(body))


def pdu_shapes(out, conns, seen):
    for c in conns:
        hd, dd = digests(c.data[True])
        for to_target in (True, False):
            for _off, t, p in pdus(c.data[to_target]):
                opcode = p[8] if t == CMD and len(p) > 8 else -1
                key = (t, p[1], to_target, opcode, min(len(p), 8192) // 512)
                if key in seen:
                    continue
                seen.add(key)
                init = 0 if t in (ICREQ, ICRESP) else 1
                sel = init | hd << 1 | dd << 2 | (8 if to_target else 0)
                hdr = bytes([sel, 0x80]) + struct.pack("<I", 0x20000)
                out.write("pdu_framing", hdr + bytes(p[:1024]))


def commands(out, conns, seen):
    for c in conns:
        info = connect_info(c.data[True])
        io = bool(info and info[0] > 0)
        sqes = {}
        for _off, t, p in pdus(c.data[True]):
            if t != CMD or len(p) < 72:
                continue
            sqe = bytes(p[8:72])
            cid = struct.unpack("<H", sqe[2:4])[0]
            sqes[cid] = sqe
            sub = sqe[4] if sqe[0] == 0x7F else (0 if io else sqe[40])
            key = ("cmd", io, sqe[0], sub)
            if key in seen:
                continue
            seen.add(key)
            pdo = p[3]
            icd = bytes(p[pdo : pdo + 2048]) if pdo else b""
            out.write("command_decode", b"\0" + sqe + icd)
        for _off, t, p in pdus(c.data[False]):
            if t != C2HDATA or len(p) < 24:
                continue
            cid = struct.unpack("<H", p[8:10])[0]
            sqe = sqes.get(cid)
            if sqe is None:
                continue
            key = ("data", io, sqe[0], sqe[40] if not io else 0)
            if key in seen:
                continue
            seen.add(key)
            pdo = p[3]
            out.write("command_decode", b"\0" + sqe + bytes(p[pdo : pdo + 2048]))


def host_replay(out, conn, limit):
    """host_connection ops: submit the host's commands, feed the target's bytes."""
    hd, dd = digests(conn.data[True])
    cfg = (1 if hd else 0) | (2 if dd else 0)
    # depth 64, max data 128 KiB, in-capsule 8 KiB
    prog = bytearray([cfg, 63, 3 | 2 << 2])
    cmap, free = {}, list(range(64))
    h2t, t2h = list(pdus(conn.data[True])), list(pdus(conn.data[False]))
    # Both directions in capture order, by the time each PDU's last byte came.
    events = []
    for to_target, plist in ((True, h2t), (False, t2h)):
        ends, acc = [], 0
        for ts, t, b in conn.segs:
            if t == to_target:
                acc += len(b)
                ends.append((acc, ts))
        i = 0
        for off, t, p in plist:
            while i < len(ends) and ends[i][0] < off + len(p):
                i += 1
            ts = ends[i][1] if i < len(ends) else float("inf")
            events.append((ts, 0 if to_target else 1, off, t, p))
    events.sort(key=lambda e: (e[0], e[1], e[2]))
    for _ts, side, _off, t, p in events:
        if len(prog) > limit:
            break
        if side == 0:
            if t != CMD or len(p) < 72 or not free:
                continue
            sqe = p[8:72]
            kcid = struct.unpack("<H", sqe[2:4])[0]
            cid = free.pop(0)
            cmap[kcid] = cid
            pdo = p[3]
            icd = len(p) - pdo - (4 if dd and pdo else 0) if pdo else 0
            sgl_len = struct.unpack("<I", sqe[32:36])[0]
            dirbits = sqe[0] & 3
            if icd:
                d, n = 1, icd
            elif sgl_len == 0:
                d, n = 0, 0
            else:
                d, n = {1: 1, 2: 2}.get(dirbits, 2), sgl_len
            prog += bytes([1, 1, cid, d]) + struct.pack("<I", n) + bytes([sqe[0]])
            prog += bytes([2, 0xFF, 0xFF])  # send everything queued
            continue
        p = bytearray(p)
        if t == RESP:
            kcid = struct.unpack("<H", p[20:22])[0]
            cid = cmap.pop(kcid, kcid & 0x3F)
            p[20:22] = struct.pack("<H", cid)
            free.append(cid)
            free.sort()
        elif t in (C2HDATA, R2T):
            kcid = struct.unpack("<H", p[8:10])[0]
            cid = cmap.get(kcid, kcid & 0x3F)
            p[8:10] = struct.pack("<H", cid)
            if t == C2HDATA and p[1] & 0x08:  # SUCCESS: no response follows
                cmap.pop(kcid, None)
                free.append(cid)
                free.sort()
        p = reseal(p, hd, dd)
        while p:
            piece, p = p[:0xFFFF], p[0xFFFF:]
            prog += bytes([0]) + struct.pack("<H", len(piece)) + piece
        prog += bytes([2, 0xFF, 0xFF])
    out.write("host_connection", bytes(prog))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("pcaps", nargs="+")
    ap.add_argument("--port", type=int, default=24420)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "corpus"))
    ap.add_argument("--max-stream", type=int, default=32768)
    a = ap.parse_args()
    conns = connections(a.pcaps, a.port)
    out = Out(a.out)
    seen_pdu, seen_cmd = set(), set()
    admins, ios = [], []
    for c in conns:
        info = connect_info(c.data[True])
        if info and info[0] == 0 and "discovery" not in info[1]:
            admins.append(c)
        elif info and info[0] > 0:
            ios.append(c)
        target_raw(out, c, a.max_stream)
        host_replay(out, c, a.max_stream)
    for admin in admins:
        later = [io for io in ios if io.start >= admin.start]
        if later:
            target_pair(out, admin, later[0], a.max_stream * 2)
    pdu_shapes(out, conns, seen_pdu)
    commands(out, conns, seen_cmd)
    print(f"{len(conns)} connections ({len(admins)} admin, {len(ios)} I/O)")
    for t, n in sorted(out.count.items()):
        print(f"  {t}: {n} files")
    print(f"  {out.bytes} bytes in total")


if __name__ == "__main__":
    main()
