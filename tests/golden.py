"""Digests of everything tracekit writes for a trace: the tables, run.json's analysis and warnings,
the Perfetto file (decoded), the Chrome JSON (inflated), and the report (analyze's lines, the
terminal report, the HTML).

    python tests/golden.py --write      # (re)compute tests/golden_outputs.json
    python tests/golden.py [CASE ...]   # print the digests that differ from the committed ones

The committed digests were computed from the code before the pipeline was made fast;
tests/test_golden_outputs.py recomputes them after every change, so a speed-up that changes a
single value, row order, slice or pixel fails there. The cases: every trace under
tests/data/hta, the committed H200 recordings (tests/fixtures/gpu, record_gpu_smoke as a run
directory tracekit recorded and as a bare trace, tp_h200 across ranks), the CPU recordings and the
compiled-graph trace of tests/fixtures/ncu.

Digests are of decoded content, never of file bytes: tables as their values (column names, each
column's kind and normalised values; see ``table_digest``), never the container's metadata; the
Perfetto trace as its canonical protobuf serialisation; the Chrome trace as its text; paths of the
temporary directory replaced by ``<tmp>``. The HTML report is two digests: ``report/html`` its text
and tables (each chart's data URI replaced by a placeholder: the same before and after the charts were drawn as SVG), ``report/charts`` the charts themselves
(tests/report/test_charts.py checks what they plot against the tables).
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import re
import shutil
import sys
import tempfile
import warnings
from collections.abc import Callable
from pathlib import Path

HERE = Path(__file__).resolve().parent
GOLDEN = HERE / "golden_outputs.json"  # not under data/: every JSON there is read as a corpus trace
FIXTURES = HERE / "fixtures"
HTA = HERE / "data" / "hta"

# Table-writing steps and what each yields: (name, kind, source)
#   kind "trace": a trace file, analysed with tracekit.app.analyze.analyze (ingest + passes)
#   kind "rundir": a run directory copied to the temporary directory, then analysed in place
#   kind "multirank": a multi-rank run directory, analysed rank by rank and across ranks


def cases() -> dict[str, tuple[str, Path]]:
    out: dict[str, tuple[str, Path]] = {}
    for p in sorted(HTA.glob("*.json.gz")):
        out[f"hta/{p.name.removesuffix('.json.gz')}"] = ("trace", p)
    for p in sorted((FIXTURES / "gpu").glob("*.json.gz")):
        out[f"gpu/{p.name.removesuffix('.json.gz')}"] = ("trace", p)
    out["record_gpu_smoke/run"] = ("rundir", FIXTURES / "record_gpu_smoke")
    out["record_gpu_smoke/trace"] = ("trace", FIXTURES / "record_gpu_smoke" / "trace.json.gz")
    out["tp_h200"] = ("multirank", FIXTURES / "tp_h200")
    for p in sorted((FIXTURES / "cpu").glob("*.json.gz")):
        out[f"cpu/{p.name.removesuffix('.json.gz')}"] = ("trace", p)
    out["ncu/compiled_qwen2.5-0.5b_b1"] = ("trace", FIXTURES / "ncu" / "compiled_qwen2.5-0.5b_b1.json.gz")
    return out


def _sha(data: bytes | str) -> str:
    return hashlib.sha256(data.encode() if isinstance(data, str) else data).hexdigest()[:16]


def table_digest(path: Path) -> str:
    """Every value of a Parquet table, not its container: column names in order, each column's kind
    (bool, number, text, bytes, time, list, struct, ...) and its values normalised, so that a table
    written from pandas and the same table written from Arrow digest alike (pandas' index columns and
    metadata dropped, dictionaries decoded, NaN read as null, an integral float read as its integer)."""
    import pyarrow.parquet as pq

    t = pq.ParquetFile(path).read()
    h = hashlib.sha256()
    names = [n for n in t.column_names if not n.startswith("__index_level_")]
    h.update(str(t.num_rows).encode())
    for name in names:
        col = t.column(name)
        values = [_value(v) for v in col.to_pylist()]
        kind = "null" if all(v is None for v in values) else _kind(col.type)
        h.update(f"{name}:{kind}".encode())
        h.update(repr(values).encode())
    return h.hexdigest()[:16]


def _kind(t: object) -> str:
    """An Arrow type's family: the same for int64 and float64, string and large_string, a dictionary and its values."""
    import pyarrow as pa
    import pyarrow.types as pt

    if isinstance(t, pa.DictionaryType):
        return _kind(t.value_type)
    checks = (("bool", pt.is_boolean), ("number", lambda x: pt.is_integer(x) or pt.is_floating(x) or pt.is_decimal(x)),
              ("text", lambda x: pt.is_string(x) or pt.is_large_string(x)),
              ("bytes", lambda x: pt.is_binary(x) or pt.is_large_binary(x) or pt.is_fixed_size_binary(x)),
              ("time", pt.is_temporal), ("struct", pt.is_struct), ("map", pt.is_map),
              ("list", lambda x: pt.is_list(x) or pt.is_large_list(x) or pt.is_fixed_size_list(x)))
    for kind, check in checks:
        if check(t):
            return kind
    return str(t)


def _value(v: object) -> object:
    """One value as its meaning: NaN is null, 3.0 is 3, -0.0 is 0, containers normalised element by element."""
    if isinstance(v, float):
        if v != v:
            return None
        return int(v) if v.is_integer() and abs(v) < 2**63 else v
    if isinstance(v, dict):
        return {k: _value(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_value(x) for x in v]
    return v


def _run_dir_digests(run_path: Path, tmp: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    tables = run_path / "tables"
    for p in sorted(tables.glob("*.parquet")) if tables.is_dir() else []:
        out[f"table/{p.stem}"] = table_digest(p)
    m = json.loads((run_path / "run.json").read_text())
    out["run.json/analysis+warnings"] = _sha(_norm(json.dumps(
        {"analysis": m.get("analysis"), "warnings": m.get("warnings"), "rank_analysis": m.get("rank_analysis")},
        sort_keys=True, default=str), tmp))
    return out


# A chart embedded in the HTML: its data URI. The page's text and tables are digested without them.
_CHART = re.compile(r'src="data:image/[^"]*"')
_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?([+-]\d\d:\d\d|Z)?")


def _norm(text: str, tmp: Path) -> str:
    """Without what differs between two runs of the same code: the temporary directory, wall-clock times."""
    return _TIME.sub("<time>", text.replace(str(tmp.resolve()), "<tmp>").replace(str(tmp), "<tmp>"))


def _proto_digest(path: Path) -> str:
    from tracekit.trace.perfetto import read_proto

    return _sha(read_proto(path).SerializeToString(deterministic=True))


def _guard(fn: Callable[[], str]) -> str:
    try:
        return fn()
    except Exception as exc:  # an error is an output too: it must stay the same error
        return f"error {type(exc).__name__}: {str(exc)[:200]}"


def compute(name: str, tmp: Path) -> dict[str, str]:
    """Every digest of one case, computed in ``tmp``."""
    from tracekit.app.analyze import MultirankResult, analyze
    from tracekit.app.export import export_from_trace, export_run, load_tables, resolve_window
    from tracekit.report.html import build_html
    from tracekit.report.terminal import analyze_lines, multirank_lines, render_terminal
    from tracekit.report.view import load_view
    from tracekit.store.rundir import RunDir

    kind, src = cases()[name]
    if kind == "trace":
        target, out = src, tmp / "run"
    else:
        target, out = tmp / "run", None
        shutil.copytree(src, target)
    digests: dict[str, str] = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        run, result = analyze(target, out)
        lines = multirank_lines(result) if isinstance(result, MultirankResult) else analyze_lines(result)
        digests["analyze/lines"] = _sha(_norm("\n".join(lines), tmp))
        digests.update(_run_dir_digests(run.path, tmp))
        run = RunDir.open(run.path)
        tables = load_tables(run)
        steps = tables.get("steps")
        exports: list[tuple[str, str, str | None, str | None]] = [("proto", "proto", None, None), ("json", "json", None, None)]
        if steps is not None and steps.num_rows >= 2:
            exports.append(("proto/window-0-1", "proto", "0:1", None))
            exports.append(("json/window-ms", "json", None, "1:40"))
        for label, fmt, window, window_ms in exports:
            def one(fmt: str = fmt, window: str | None = window, window_ms: str | None = window_ms, label: str = label) -> str:
                win = resolve_window(tables, window, window_ms)
                path = tmp / f"export-{label.replace('/', '-')}.{'pftrace' if fmt == 'proto' else 'json.gz'}"
                ts, counts = export_run(run, fmt, path, win, tables)
                body = _proto_digest(path) if fmt == "proto" else _sha(gzip.decompress(path.read_bytes()))
                return f"{body} {json.dumps(counts, sort_keys=True)} notes={_sha(json.dumps(ts.notes))}"
            digests[f"export/{label}"] = _guard(one)
        if run.trace_path.is_file():
            def from_trace() -> str:
                path = tmp / "from-trace.json.gz"
                _ts, counts = export_from_trace(run, path, tables)
                return f"{_sha(gzip.decompress(path.read_bytes()))} {json.dumps(counts, sort_keys=True)}"
            digests["export/from-trace"] = _guard(from_trace)
        views = [load_view(run)]
        buf = io.StringIO()
        render_terminal(views, buf)
        digests["report/terminal"] = _sha(_norm(buf.getvalue(), tmp))
        page = _norm(build_html(views, title="tracekit report: " + views[0].run_id), tmp)
        digests["report/html"] = _sha(_CHART.sub('src="<chart>"', page))
        digests["report/charts"] = _sha("\n".join(_CHART.findall(page)))
        if isinstance(result, MultirankResult):
            for rank in result.ranks:
                rd = run.path / "ranks" / str(rank)
                for k, v in _run_dir_digests(rd, tmp).items():
                    digests[f"rank{rank}/{k}"] = v
    return digests


def compute_all(names: list[str] | None = None) -> dict[str, dict[str, str]]:
    out = {}
    for name in names or list(cases()):
        with tempfile.TemporaryDirectory() as tmp:
            out[name] = compute(name, Path(tmp))
    return out


def load() -> dict[str, dict[str, str]]:
    data: dict[str, dict[str, str]] = json.loads(GOLDEN.read_text())["cases"]
    return data


def main(argv: list[str]) -> int:
    if argv[:1] == ["--write"]:
        import platform

        import pandas
        import pyarrow

        data = {
            "about": "tests/golden.py: digests of tracekit's outputs per case; see its docstring. Computed with "
                     f"python {platform.python_version()}, pandas {pandas.__version__}, pyarrow {pyarrow.__version__}.",
            "cases": compute_all(argv[1:] or None),
        }
        GOLDEN.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
        print(f"wrote {GOLDEN}: {len(data['cases'])} cases")
        return 0
    want = load()
    bad = 0
    for name, got in compute_all(argv or None).items():
        for k in sorted(set(got) | set(want.get(name, {}))):
            if got.get(k) != want.get(name, {}).get(k):
                bad += 1
                print(f"{name} {k}: {want.get(name, {}).get(k)} -> {got.get(k)}")
    print("all equal" if not bad else f"{bad} differ")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
