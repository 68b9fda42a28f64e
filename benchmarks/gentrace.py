"""A generation trace of any size, built from the committed H200 recording by repeating decode steps.

    python benchmarks/gentrace.py OUT.json.gz MEGABYTES [JOBS]

The source is tests/fixtures/record_gpu_smoke/trace.json.gz: a real `tracekit record` of
tinyllama-1.1b (fp16, eager, record_shapes on) on an H200, trimmed to its first request's
prefill and two decode steps (22,426 events, 7.2 MB of JSON). The output keeps every event of
the prefill and of the first decode step as they are, then the last decode step (its CPU ops,
runtime and driver calls, kernels, memcpys, flows, annotations, NVML counter samples and
tracekit's own step slice) R times, each copy shifted by one step period in time and by the
trace's id span in its correlation / External id / Ev Idx / flow ids, with its step id and
kv_len counted up. The request annotation is stretched over every step and names the new
output length. R is chosen so the JSON is about MEGABYTES; the events are written step by
step, so memory does not grow with R.

Events per MB stay those of the real trace (~3,100 per MB), so time per event is comparable
across sizes. This is what a long answer looks like to tracekit (one request of many decode
steps), not a statement about how the GPU behaves at long KV lengths: every copy has the
kernels and durations of the step it copies.
"""

from __future__ import annotations

import gzip
import itertools
import re
import sys
from pathlib import Path
from typing import Any

import orjson

SOURCE = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "record_gpu_smoke" / "trace.json.gz"
GPU_CATS = {"kernel", "gpu_memcpy", "gpu_memset"}
CPU_CATS = {"cpu_op", "cuda_runtime", "cuda_driver", "user_annotation"}
_STEP = re.compile(r"^tracekit\.step id=(\d+) (.*) kv_len=(\d+)$")


def _ns(us: float) -> int:
    return round(us * 1000)


def _split(events: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[dict[str, Any]], int, int]:
    """(events kept once, the template step's events, its first CPU start ns, the step period ns)."""
    steps = sorted((e for e in events if e.get("cat") == "user_annotation" and _STEP.match(str(e.get("name")))),
                   key=lambda e: e["ts"])
    s_prev, s_last = _ns(steps[-2]["ts"]), _ns(steps[-1]["ts"])
    in_tpl: set[int] = set()
    corr_tpl: set[int] = set()
    ext_tpl: set[int] = set()
    for i, e in enumerate(events):
        if e.get("cat") in CPU_CATS and e.get("ph") == "X" and _ns(e["ts"]) >= s_last and not str(
                e.get("name", "")).startswith("tracekit.request"):
            in_tpl.add(i)
            a = e.get("args", {})
            if "correlation" in a:
                corr_tpl.add(a["correlation"])
            if e.get("cat") == "user_annotation":
                ext_tpl.add(a.get("External id"))
    for i, e in enumerate(events):
        cat, ph = e.get("cat"), e.get("ph")
        a = e.get("args", {})
        late = "ts" in e and _ns(e["ts"]) >= s_last
        if ((cat in GPU_CATS and a.get("correlation") in corr_tpl) or (cat == "ac2g" and e.get("id") in corr_tpl)
                or (cat == "gpu_user_annotation" and a.get("External id") in ext_tpl)
                or (late and (cat == "tracekit.step" or ph == "C"))):
            in_tpl.add(i)
    once = [e for i, e in enumerate(events) if i not in in_tpl]
    tpl = [e for i, e in enumerate(events) if i in in_tpl]
    return once, tpl, s_last, s_last - s_prev


def _shift(e: dict[str, Any], dt: int, dcorr: int, dext: int, k: int) -> dict[str, Any]:
    out = dict(e)
    if "ts" in out:
        out["ts"] = (_ns(out["ts"]) + dt) / 1000
    if "id" in out:
        out["id"] = out["id"] + dcorr
    a = out.get("args")
    if a:
        a = dict(a)
        if "correlation" in a:
            a["correlation"] += dcorr
        if "External id" in a:
            a["External id"] += dext
        if "Ev Idx" in a:
            a["Ev Idx"] += dext
        if out.get("cat") == "tracekit.step":
            a["step_id"] += k
            a["kv_len"] += k
            a["cpu_start_ns"] += dt
            a["cpu_end_ns"] += dt
        out["args"] = a
    name = out.get("name")
    if isinstance(name, str) and (m := _STEP.match(name)):
        out["name"] = f"tracekit.step id={int(m.group(1)) + k} {m.group(2)} kv_len={int(m.group(3)) + k}"
    return out


def generate(dst: Path, target_mb: float, source: Path = SOURCE, jobs: int = 1) -> dict[str, Any]:
    """Write a generation trace of about ``target_mb`` MB of JSON to ``dst`` (gzip level 1; ``jobs``
    processes write its steps, each a gzip member); returns {"steps", "events", "mb"}."""
    with gzip.open(source) as fh:
        doc = orjson.loads(fh.read())
    events = doc.pop("traceEvents")
    once, tpl, s_last, period = _split(events)
    corr = [e["args"]["correlation"] for e in events if "correlation" in e.get("args", {})]
    ext = [e["args"][k] for e in events for k in ("External id", "Ev Idx") if k in e.get("args", {})]
    dcorr, dext = max(corr) + 1, max(ext) + 1
    tpl_bytes = len(orjson.dumps(tpl))
    once_bytes = len(orjson.dumps(once))
    reps = max(1, round((target_mb * 1e6 - once_bytes) / tpl_bytes))
    first_step = int(_STEP.match(next(e["name"] for e in tpl if e.get("cat") == "user_annotation"))  # type: ignore[union-attr]
                     .group(1))
    n_steps = first_step + reps
    for e in once:
        name = str(e.get("name", ""))
        if e.get("cat") == "user_annotation" and name.startswith("tracekit.request"):
            end = _ns(e["ts"]) + _ns(e["dur"])
            new_end = max(end, s_last + reps * period)
            e["dur"] = (new_end - _ns(e["ts"])) / 1000
            e["name"] = re.sub(r"output_tokens=\d+", f"output_tokens={n_steps}", name)
    n = len(once) + reps * len(tpl)
    head = b'{"traceEvents":[\n' + orjson.dumps(once, option=orjson.OPT_APPEND_NEWLINE)[1:-2]
    tail = b"\n],\n" + orjson.dumps({k: v for k, v in doc.items() if k != "tracekitTrim"})[1:]
    jobs = max(1, min(jobs, reps))
    with open(dst, "wb") as out:  # gzip members, one per range of steps: one gzip stream to a reader
        out.write(gzip.compress(head, compresslevel=1))
        if jobs == 1:
            out.write(_steps_member(tpl, period, dcorr, dext, 0, reps))
        else:
            from concurrent.futures import ProcessPoolExecutor

            bounds = [reps * j // jobs for j in range(jobs + 1)]
            with ProcessPoolExecutor(jobs) as pool:
                for member in pool.map(_steps_member, *zip(*[(tpl, period, dcorr, dext, a, b)
                                                             for a, b in itertools.pairwise(bounds)],
                                                           strict=True)):
                    out.write(member)
        out.write(gzip.compress(tail, compresslevel=1))
    return {"steps": n_steps, "events": n, "mb": (once_bytes + reps * tpl_bytes) / 1e6}


def _steps_member(tpl: list[dict[str, Any]], period: int, dcorr: int, dext: int, first: int, last: int) -> bytes:
    """Copies ``first`` .. ``last`` - 1 of the template step, as one gzip member."""
    import io

    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", compresslevel=1) as out:
        for k in range(first, last):
            out.write(b",\n" + orjson.dumps([_shift(e, k * period, k * dcorr, k * dext, k) for e in tpl])[1:-1])
    return buf.getvalue()


if __name__ == "__main__":
    info = generate(Path(sys.argv[1]), float(sys.argv[2]), jobs=int(sys.argv[3]) if len(sys.argv) > 3 else 1)
    print(f"{sys.argv[1]}: {info['steps']} steps, {info['events']} events, ~{info['mb']:.0f} MB of JSON")
