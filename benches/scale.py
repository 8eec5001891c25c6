#!/usr/bin/env python3
"""benches/scale.py -- helpers of benches/scale.sh (configurations, JSON-RPC).

  scale.py gen-null TOML SUBS NSPER PORT        N subsystems x M null namespaces
  scale.py gen-file TOML DIR COUNT PERSUB PORT   COUNT file namespaces (sparse files in DIR)
  scale.py rpc SOCK METHOD JSON                  one call: "MS ok|error MESSAGE"
  scale.py field SOCK METHOD KEY                 one field of a call's result
  scale.py adds SOCK NQN COUNT                   COUNT namespace_add (null) one after another
  scale.py build SOCK SUBS NSPER BUDGET_S        the gen-null configuration through the API
  scale.py wait SOCK TIMEOUT_S MARKER            until the socket answers rpc_methods
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
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
