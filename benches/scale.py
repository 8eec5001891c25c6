#!/usr/bin/env python3
"""benches/scale.py -- helpers of benches/scale.sh (configurations, JSON-RPC).

  scale.py gen-null TOML SUBS NSPER PORT        N subsystems x M null namespaces
  scale.py gen-file TOML DIR COUNT PERSUB PORT   COUNT file namespaces (sparse files in DIR)
  scale.py rpc SOCK METHOD JSON                  one call: "MS ok|error MESSAGE"
  scale.py field SOCK METHOD KEY                 one field of a call's result
  scale.py adds SOCK NQN COUNT                   COUNT namespace_add (null) one after another
  scale.py build SOCK SUBS NSPER BUDGET_S        the gen-null configuration through the API
  scale.py wait SOCK TIMEOUT_S MARKER            until the socket answers rpc_methods
  scale.py burst-add SOCK NQN SECONDS MAX FILE   namespace_add (null) into NQN until SECONDS
                                                 passed or MAX added (their NSIDs to FILE):
                                                 "ADDED SECONDS SLOWEST_MS"
  scale.py burst-remove SOCK NQN FILE            namespace_remove of each NSID in FILE:
                                                 "REMOVED SECONDS SLOWEST_MS"
  scale.py dirty DIR BYTES                       writes BYTES into each file of DIR (no sync)

SPDK's nvmf_tgt (benches/scale-spdk.sh; SPDK_PY: SPDK's python/ directory):
  scale.py spdk-gen JSON SUBS NSPER PORT         its --json start configuration, the same shape
  scale.py spdk-rpc SOCK METHOD JSON [OUT]       one call (result to OUT): "MS ok|error MESSAGE";
                                                 save_config as rpc.py does it
  scale.py spdk-adds SOCK NQN COUNT              a subsystem, then COUNT x (bdev_null_create,
                                                 nvmf_subsystem_add_ns) one after another
  scale.py spdk-wait SOCK TIMEOUT_S MARKER       until framework_wait_init answers
"""

import json
import os
import socket
import sys
import time

NQN = "nqn.2026-11.io.farflash.scale:s{:05d}"


def header(port):
    return f'listen = ["127.0.0.1:{port}"]\n'


def gen_null(path, subs, nsper, port):
    with open(path, "w") as f:
        f.write(header(port))
        for s in range(subs):
            f.write(f'\n[[subsystem]]\nnqn = "{NQN.format(s)}"\n')
            for _ in range(nsper):
                f.write('  [[subsystem.namespace]]\n  backend = "null"\n  size = "1G"\n')


def gen_file(path, d, count, persub, port):
    os.makedirs(d, exist_ok=True)
    with open(path, "w") as f:
        f.write(header(port))
        for i in range(count):
            if i % persub == 0:
                f.write(f'\n[[subsystem]]\nnqn = "{NQN.format(i // persub)}"\n')
            p = os.path.join(d, f"ns{i:05d}.img")
            with open(p, "wb") as img:
                img.truncate(1 << 20)
            f.write(f'  [[subsystem.namespace]]\n  backend = "file"\n  path = "{p}"\n')


class Rpc:
    def __init__(self, path):
        self.s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.s.connect(path)
        self.buf = b""
        self.id = 0

    def call(self, method, params):
        self.id += 1
        req = {"jsonrpc": "2.0", "id": self.id, "method": method, "params": params}
        self.s.sendall(json.dumps(req).encode() + b"\n")
        while b"\n" not in self.buf:
            chunk = self.s.recv(1 << 20)
            if not chunk:
                raise RuntimeError("the target closed the management socket")
            self.buf += chunk
        line, self.buf = self.buf.split(b"\n", 1)
        return json.loads(line)


def timed(rpc, method, params):
    t = time.monotonic()
    r = rpc.call(method, params)
    return (time.monotonic() - t) * 1000, r


SPDK_NQN = "nqn.2016-06.io.spdk.scale:s{:05d}"
NULL_BLOCKS, NULL_BS = 262144, 4096  # 1 GiB, as farflash's null namespaces


def spdk_gen(path, subs, nsper, port):
    """SPDK's own save_config order: bdevs, then the transport and each
    subsystem with its listener and namespaces; the discovery subsystem gets
    a listener of its own (SPDK answers discovery only where it listens)."""
    bdevs, nvmf = [], [{"method": "nvmf_create_transport", "params": {"trtype": "TCP"}}]
    listen = {"trtype": "TCP", "adrfam": "IPv4", "traddr": "127.0.0.1", "trsvcid": str(port)}
    nvmf.append({"method": "nvmf_subsystem_add_listener", "params": {
        "nqn": "nqn.2014-08.org.nvmexpress.discovery", "listen_address": listen}})
    for s in range(subs):
        nqn = SPDK_NQN.format(s)
        # max_namespaces: SPDK's default is 32 per subsystem.
        nvmf.append({"method": "nvmf_create_subsystem", "params": {
            "nqn": nqn, "allow_any_host": True, "serial_number": f"SPDK{s:08d}",
            "max_namespaces": max(nsper, 32)}})
        nvmf.append({"method": "nvmf_subsystem_add_listener",
                     "params": {"nqn": nqn, "listen_address": listen}})
        for n in range(nsper):
            name = f"N{s}_{n}"
            bdevs.append({"method": "bdev_null_create", "params": {
                "name": name, "num_blocks": NULL_BLOCKS, "block_size": NULL_BS}})
            nvmf.append({"method": "nvmf_subsystem_add_ns",
                         "params": {"nqn": nqn, "namespace": {"bdev_name": name}}})
    with open(path, "w") as f:
        json.dump({"subsystems": [{"subsystem": "bdev", "config": bdevs},
                                  {"subsystem": "nvmf", "config": nvmf}]}, f)


def spdk_client(sock):
    sys.path.insert(0, os.environ["SPDK_PY"])
    from spdk.rpc.client import JSONRPCClient  # noqa: E402 (SPDK's own client)
    return JSONRPCClient(sock, timeout=600.0)


def spdk_save_config(c, out):
    """What `rpc.py save_config` does: framework_get_config of every
    subsystem, written as one JSON document (SPDK's own function)."""
    import spdk.rpc  # noqa: E402
    with open(out or os.devnull, "w") as f:
        spdk.rpc.save_config(c, f, indent=2)
    return True


def spdk_timed(c, method, params, out=None):
    t = time.monotonic()
    try:
        if method == "save_config":
            r = spdk_save_config(c, out)
        else:
            r = c.call(method, params or None)
        return (time.monotonic() - t) * 1000, r, None
    except Exception as e:  # JSONRPCException: the target's error
        return (time.monotonic() - t) * 1000, None, str(e).replace("\n", " ")[:300]


def main():
    cmd, a = sys.argv[1], sys.argv[2:]
    if cmd == "gen-null":
        gen_null(a[0], int(a[1]), int(a[2]), a[3])
    elif cmd == "gen-file":
        gen_file(a[0], a[1], int(a[2]), int(a[3]), a[4])
    elif cmd == "rpc":
        ms, r = timed(Rpc(a[0]), a[1], json.loads(a[2]))
        if "error" in r:
            print(f"{ms:.1f} error {r['error'].get('code')} {r['error'].get('message')}")
        else:
            print(f"{ms:.1f} ok")
    elif cmd == "field":
        r = Rpc(a[0]).call(a[1], {})
        print(r["result"][a[2]])
    elif cmd == "adds":
        rpc, count = Rpc(a[0]), int(a[2])
        r = rpc.call("subsystem_create", {"nqn": a[1]})
        if "error" in r:
            sys.exit(f"subsystem_create: {r['error']}")
        times = []
        for _ in range(count):
            ms, r = timed(rpc, "namespace_add", {"nqn": a[1], "backend": "null", "size": "1G"})
            if "error" in r:
                sys.exit(f"namespace_add {len(times) + 1}: {r['error']}")
            times.append(ms)
        k = min(100, len(times))
        print("%.3f %.2f %.2f" % (sum(times) / 1000, sum(times[:k]) / k, sum(times[-k:]) / k))
    elif cmd == "build":
        rpc, subs, nsper, budget = Rpc(a[0]), int(a[1]), int(a[2]), float(a[3])
        t0, done, last = time.monotonic(), 0, 0.0
        try:
            for s in range(subs):
                r = rpc.call("subsystem_create", {"nqn": NQN.format(s)})
                if "error" in r:
                    sys.exit(f"subsystem_create: {r['error']}")
                for _ in range(nsper):
                    ms, r = timed(rpc, "namespace_add",
                                  {"nqn": NQN.format(s), "backend": "null", "size": "1G"})
                    if "error" in r:
                        sys.exit(f"namespace_add: {r['error']}")
                    done, last = done + 1, ms
                    if time.monotonic() - t0 > budget:
                        raise TimeoutError
        except TimeoutError:
            pass
        print("%d %d %.3f %.2f" % (done, subs * nsper, time.monotonic() - t0, last))
    elif cmd == "burst-add":
        rpc, nqn, secs, most = Rpc(a[0]), a[1], float(a[2]), int(a[3])
        t0, nsids, worst = time.monotonic(), [], 0.0
        while time.monotonic() - t0 < secs and len(nsids) < most:
            ms, r = timed(rpc, "namespace_add", {"nqn": nqn, "backend": "null", "size": "1G"})
            if "error" in r:
                sys.exit(f"namespace_add {len(nsids) + 1}: {r['error']}")
            nsids.append(r["result"]["nsid"])
            worst = max(worst, ms)
        with open(a[4], "w") as f:
            f.write(" ".join(map(str, nsids)))
        print("%d %.3f %.2f" % (len(nsids), time.monotonic() - t0, worst))
    elif cmd == "burst-remove":
        rpc, nqn, t0, worst = Rpc(a[0]), a[1], time.monotonic(), 0.0
        nsids = [int(x) for x in open(a[2]).read().split()]
        for n in nsids:
            ms, r = timed(rpc, "namespace_remove", {"nqn": nqn, "nsid": n})
            if "error" in r:
                sys.exit(f"namespace_remove {n}: {r['error']}")
            worst = max(worst, ms)
        print("%d %.3f %.2f" % (len(nsids), time.monotonic() - t0, worst))
    elif cmd == "dirty":
        data = os.urandom(int(a[1]))
        for name in sorted(os.listdir(a[0])):
            with open(os.path.join(a[0], name), "r+b") as f:
                f.write(data)
    elif cmd == "wait":
        # Started before the target: touches MARKER when polling, prints
        # the wall clock (ns) at the first answer.
        open(a[2], "w").close()
        deadline = time.monotonic() + float(a[1])
        while True:
            try:
                Rpc(a[0]).call("rpc_methods", {})
                print(time.time_ns())
                return
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit(f"{a[0]} did not answer within {a[1]} s")
                time.sleep(0.002)
    elif cmd == "spdk-gen":
        spdk_gen(a[0], int(a[1]), int(a[2]), a[3])
    elif cmd == "spdk-rpc":
        out = a[3] if len(a) > 3 and a[3] else None
        ms, r, err = spdk_timed(spdk_client(a[0]), a[1], json.loads(a[2]), out)
        if err:
            print(f"{ms:.1f} error {err}")
        else:
            if out and a[1] != "save_config":
                with open(out, "w") as f:
                    json.dump(r, f)
            print(f"{ms:.1f} ok")
    elif cmd == "spdk-adds":
        c, nqn, count = spdk_client(a[0]), a[1], int(a[2])
        ms, r, err = spdk_timed(c, "nvmf_create_subsystem", {
            "nqn": nqn, "allow_any_host": True, "max_namespaces": count})
        if err:
            sys.exit(f"nvmf_create_subsystem: {err}")
        times = []
        for i in range(count):
            t = time.monotonic()
            for m, p in (("bdev_null_create", {"name": f"A{i}", "num_blocks": NULL_BLOCKS,
                                               "block_size": NULL_BS}),
                         ("nvmf_subsystem_add_ns", {"nqn": nqn, "namespace": {"bdev_name": f"A{i}"}})):
                _, _, err = spdk_timed(c, m, p)
                if err:
                    sys.exit(f"{m} {i + 1}: {err}")
            times.append((time.monotonic() - t) * 1000)
        k = min(100, len(times))
        print("%.3f %.2f %.2f" % (sum(times) / 1000, sum(times[:k]) / k, sum(times[-k:]) / k))
    elif cmd == "spdk-wait":
        open(a[2], "w").close()
        deadline = time.monotonic() + float(a[1])
        while True:
            try:
                spdk_client(a[0]).call("framework_wait_init")
                print(time.time_ns())
                return
            except Exception:
                if time.monotonic() > deadline:
                    sys.exit(f"{a[0]} did not answer within {a[1]} s")
                time.sleep(0.002)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
