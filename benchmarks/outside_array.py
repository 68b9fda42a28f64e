"""Peak RSS and time of `tracekit ingest` on traces whose bulk is outside the events array.

Cases: N MB of whitespace before the traceEvents key, an N MB string value before the array (a
header bomb), an N MB value after it (a big trailer). Each runs in a fresh process (gzip input, so
the file on disk is small) after a warm-up ingest of a small trace (imports); the table gives the
child's peak RSS after the warm-up and at the end.

    python benchmarks/outside_array.py --mb 256 [--cases ws,header,trailer] [--tree PATH]

``--tree`` runs another checkout (its directory goes first on PYTHONPATH), e.g. the code before a change.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# VmHWM, not ru_maxrss: the latter keeps the parent's peak across fork and exec.
_CHILD = """
import sys, time
from tracekit.cli import main
def hwm():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
assert main(["ingest", sys.argv[1], "--out", sys.argv[2] + "-warm", "--jobs", "1"]) == 0
base = hwm()
t0 = time.perf_counter()
rc = main(["ingest", sys.argv[3], "--out", sys.argv[2], "--jobs", "1"])
print("RESULT", rc, base, hwm(), time.perf_counter() - t0)
"""


def _events(n: int) -> bytes:
    ev = [{"ph": "X", "cat": "kernel", "name": f"k{i}", "pid": 0, "tid": 7, "ts": 1000 + 10 * i, "dur": 5,
           "args": {"correlation": i, "device": 0, "stream": 7}} for i in range(n)]
    return json.dumps(ev)[1:-1].encode()


def _case(name: str, mb: int) -> bytes:
    body = _events(100)
    blob = b'"' + b"x" * (mb << 20) + b'"'
    if name == "ws":
        return b"{" + b" " * (mb << 20) + b'"traceEvents": [' + body + b"]}"
    if name == "header":
        return b'{"big": ' + blob + b', "traceEvents": [' + body + b"]}"
    return b'{"traceEvents": [' + body + b'], "big": ' + blob + b', "baseTimeNanoseconds": 5}'


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--cases", default="ws,header,trailer")
    ap.add_argument("--tree", default=None, help="a checkout to run instead of the installed tracekit")
    args = ap.parse_args()
    env = dict(os.environ)
    if args.tree:
        env["PYTHONPATH"] = args.tree + os.pathsep + env.get("PYTHONPATH", "")
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        warm = root / "warm.json"
        warm.write_bytes(b'{"traceEvents": [' + _events(10) + b"]}")
        print(f"{'case':8} {'MB':>5} {'exit':>4} {'warm RSS MB':>11} {'peak RSS MB':>11} {'seconds':>8}  last line")
        for name in args.cases.split(","):
            src = root / f"{name}.json.gz"
            src.write_bytes(gzip.compress(_case(name, args.mb), compresslevel=1))
            p = subprocess.run([sys.executable, "-c", _CHILD, str(warm), str(root / f"out-{name}"), str(src)],
                               capture_output=True, text=True, env=env, cwd=root)
            res = [ln for ln in p.stdout.splitlines() if ln.startswith("RESULT")]
            last = (p.stderr.strip().splitlines() or [""])[-1][:90]
            if res:
                _, rc, warm_mb, peak, sec = res[0].split()
                print(f"{name:8} {args.mb:5d} {rc:>4} {float(warm_mb):11.0f} {float(peak):11.0f} {float(sec):8.2f}  {last}")
            else:
                print(f"{name:8} {args.mb:5d} {p.returncode:>4} {'-':>11} {'-':>11} {'-':>8}  {last}")
            time.sleep(0.1)


if __name__ == "__main__":
    main()
