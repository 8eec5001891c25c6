#!/usr/bin/env bash
# benches/read-path.sh -- which of farflash's source files one 4 KiB NVMe/TCP
# read executes, measured rather than read off the code.
#
#   bash benches/read-path.sh            # prints the table
#   OUT=docs/architecture.md bash benches/read-path.sh   # also writes its section
#
# `farflash serve --ram 64M --poll never` runs under valgrind's callgrind
# (built with line tables, so inlined code is charged to the file it was
# written in); `farflash perf` reads 4 KiB at QD 1 against it. Instrumentation
# is switched on only after the I/O queue is connected and reads are flowing,
# for MEASURE seconds, so connect, teardown and start-up are not counted.
# A file is on the read path when the reads executed at least one of its
# instructions per read on average (periodic work, such as ticks and
# keep-alives, falls far below that). Reads are counted as calls of the
# command layer's `execute`.
# Caveat: the linker folds identical functions, so a trivial function
# (an empty `commit`) may be charged to another file than the one that ran;
# such rows are marked "(folded)" when the function's own file is not the
# caller's type (see FOLDED below).
#
# Needs valgrind (apt install valgrind). Environment: MEASURE seconds (3),
# PORT (4533), OUT (empty: print only).
set -euo pipefail
ROOT=$(cd "$(dirname "$(readlink -f "${BASH_SOURCE[0]}")")/.." && pwd)
cd "$ROOT"
NAME=read-path.sh
MEASURE=${MEASURE:-3} PORT=${PORT:-4533} OUT=${OUT-}
# shellcheck source=benches/lib.sh
source "$ROOT/benches/lib.sh"
for t in valgrind callgrind_control python3 cargo; do command -v "$t" >/dev/null || die "$t is required (apt install valgrind)"; done

TD=$ROOT/target/read-path
CARGO_PROFILE_RELEASE_DEBUG=line-tables-only cargo build --release --quiet --bin farflash --target-dir "$TD"
B=$TD/release/farflash
W=$TMP/rp
mkdir -p "$W"
NQN=nqn.2026-11.io.farflash:default

valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$W/cg.%p" \
    "$B" serve --ram 64M --listen 127.0.0.1:"$PORT" --poll never >"$W/serve.log" 2>&1 &
VG=$!
PIDS+=("$VG")
# valgrind starts slowly: wait up to a minute for the listener.
for _ in $(seq 600); do (exec 3<>"/dev/tcp/127.0.0.1/$PORT") 2>/dev/null && break; sleep 0.1; done
wait_listen "$PORT"
# Touch the region once so reads find committed memory.
"$B" perf -a 127.0.0.1 -s "$PORT" -n "$NQN" --rw write --bs 4k --size 64k >/dev/null
"$B" perf -a 127.0.0.1 -s "$PORT" -n "$NQN" --rw randread --bs 4k --size 64k --iodepth 1 \
    --ramp_time 2 --runtime $((MEASURE + 6)) >"$W/perf.log" 2>&1 &
PERF=$!
# Reads flow once the admin and the I/O queue are connected and perf's
# ramp (2 s) has passed.
for _ in $(seq 600); do
    [[ $(ss -Htn state established "( sport = :$PORT )" | wc -l) -ge 2 ]] && break
    sleep 0.1
done
sleep 2
callgrind_control -i on "$VG" >/dev/null
sleep "$MEASURE"
callgrind_control -i off "$VG" >/dev/null
callgrind_control -d "$VG" >/dev/null
wait "$PERF"
kill "$VG"; wait "$VG" 2>/dev/null || true

python3 - "$W" "$ROOT" >"$W/table.md" <<'PY'
import collections, glob, os, re, sys
w, root = sys.argv[1:]
# The dump taken while reads ran is the largest file.
f = max(glob.glob(w + "/cg.*"), key=os.path.getsize)
names, cost, calls = {}, collections.Counter(), collections.Counter()
fl = fi = cfn = None
skip = False
def name(kind, v):
    m = re.match(r"\((\d+)\)(?:\s+(.*))?", v)
    if not m:
        return v
    if m.group(2):
        names[(kind, m.group(1))] = m.group(2)
    return names.get((kind, m.group(1)), "?")
for line in open(f):
    line = line.rstrip("\n")
    if not line:
        continue
    head = line[:4]
    if line.startswith("fl="):
        fl, fi = name("f", line[3:]), None
    elif line.startswith(("fi=", "fe=")):
        fi = name("f", line[3:])
    elif line.startswith("fn="):
        fi = None
        name("n", line[3:])
    elif head in ("cfi=", "cfl="):
        name("f", line[4:])
    elif head == "cfn=":
        cfn = name("n", line[4:])
    elif line.startswith("calls="):
        calls[cfn] += int(line[6:].split()[0])
        skip = True
    elif line[0].isdigit() or line[0] in "+-*":
        if skip:
            skip = False
            continue
        parts = line.split()
        if len(parts) >= 2:
            cost[fi or fl] += int(parts[1])
reads = max((n for fn, n in calls.items() if re.search(r"NvmeQueue>::execute$", fn)), default=0)
if reads == 0:
    sys.exit("read-path.sh: no read was measured")
rows = []
for path, c in cost.items():
    m = re.search(r"/crates/(.*)$", path)
    if m and path.startswith(root) and c >= reads:
        rows.append((m.group(1), c / reads))
rows.sort(key=lambda r: (r[0].split("/")[0], -r[1]))
per_crate = collections.Counter(p.split("/")[0] for p, _ in rows)
print(f"{len(rows)} files run for every read ({reads} reads measured; instructions per read):\n")
print("| crate | file | instructions per read |")
print("|---|---|---:|")
for p, c in rows:
    crate, _, rest = p.partition("/src/")
    print(f"| {crate} | `{rest}` | {c:.0f} |")
print("\nPer crate: " + ", ".join(f"{k} {v}" for k, v in sorted(per_crate.items())) + ".")
PY
cat "$W/table.md"
if [[ -n $OUT ]]; then
    { echo "Measured by \`benches/read-path.sh\` at $(git rev-parse --short HEAD) (callgrind; a file counts when it runs at least one instruction per read)."; echo; cat "$W/table.md"; } | write_section "$OUT" read-path.sh
fi
