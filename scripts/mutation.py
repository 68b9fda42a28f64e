"""Mutation testing of the analysis passes and ingest linkage: how many planted bugs the tests catch.

    python scripts/mutation.py [--mutants N] [--seed S] [--out FILE] [--resume] [--report SMALL.json]
    python scripts/mutation.py --recheck FILE     # re-run the survivors of an earlier run (FILE: an --out
                                                  # record keeps its killed mutants in the new score)

Targets: every module of analysis/ and tracekit/ingest/linkage.py. A mutant changes one operator or
constant there: a comparison (<, <=, ==, is, in ... to its neighbour or negation), an arithmetic or
augmented-assignment operator, `and`/`or`, `&`/`|`, a `not` or `~` dropped, an int or float constant
(n -> n + 1), True/False. Never mutated: docstrings, type annotations and `stacklevel=` of a warning
(a change there cannot alter a result), and f-string contents (warning and error text, the advice
sentence's numbers: they do reach the output, but Python 3.11's positions inside f-strings are not
reliable enough to splice a mutant there; 47 sites, 1.5% of them). Mutants are a seeded random sample
of all sites; the source is patched in place (only the mutated expression's text changes, so line
numbers hold) and restored after each one, also on Ctrl-C or SIGTERM.

Which tests run: a coverage map (built once with `coverage`, cached under .mutation/, rebuilt for the
test files or targets that changed) says which tests execute each line. A mutant runs the tests that
execute its lines, fastest test file first, with `pytest -x`; a line run at import time (module
constants, defaults) runs every test that touches the module, and a line run by a module-scoped fixture
runs that test file whole. A mutant runs at most --budget seconds of those tests (as the map timed
them; default 40), so a survivor may be one a slower test would kill: the score is a lower bound. A
mutant no in-process test executes runs the module's TESTS files (they may reach it through a
subprocess). Killed: pytest fails or times out. Survived: it passes. The map is built from a passing
run only (a failing test would kill every mutant).

The score is reported twice: over all sampled mutants, and without those in EQUIVALENT (mutants shown by
hand to compute the same results; each has a one-line reason).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import hashlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections import defaultdict
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parent.parent
CACHE = REPO / ".mutation"
TARGETS = sorted(str(p.relative_to(REPO)) for p in (REPO / "analysis").glob("*.py") if p.name != "__init__.py")
TARGETS.append("tracekit/ingest/linkage.py")
# Test folders the coverage map is built from (tests/record drives torch workloads: minutes, and every
# analysis pass it reaches is reached faster by these).
SCOPE = ["tests/analysis", "tests/app", "tests/ingest", "tests/report", "tests/trace", "tests/model",
         "tests/store", "tests/test_core.py", "tests/test_api_doc.py"]
A, P, IN, R = "tests/analysis/", "tests/app/", "tests/ingest/", "tests/report/"
# Each target's tests by hand: run for mutants that no in-process test executes, and without `coverage`.
TESTS: dict[str, list[str]] = {
    "analysis/advice.py": [A + "test_advice.py", R + "test_report.py"],
    "analysis/bound.py": [A + "test_bound.py", A + "test_wrong_numbers.py", A + "test_kernel_classes.py",
                          A + "test_bound_h200.py", A + "test_bound_vs_ncu_fixture.py", A + "test_diff_bound.py"],
    "analysis/cost.py": [A + "test_cost.py", A + "test_serving_models.py", R + "test_report_serving.py"],
    "analysis/counters.py": [A + "test_counters_join.py", A + "test_analysis_recorded.py"],
    "analysis/diff.py": [A + "test_diff_bound.py", P + "test_diff.py"],
    "analysis/energy.py": [A + "test_bound.py", A + "test_cost.py", A + "test_analysis_recorded.py"],
    "analysis/idle.py": [A + "test_idle.py", A + "test_analysis.py"],
    "analysis/intervals.py": [A + "test_ranks.py", A + "test_analysis.py", A + "test_bound.py"],
    "analysis/kernels.py": [A + "test_kernel_classes.py", A + "test_bound.py", A + "test_opmodels.py",
                            P + "test_diff.py"],
    "analysis/modelcheck.py": [A + "test_modelcheck.py"],
    "analysis/opmodels.py": [A + "test_opmodels.py", A + "test_wrong_numbers.py", A + "test_bound.py"],
    "analysis/phases.py": [A + "test_analysis.py", A + "test_analysis_cpu.py", A + "test_analysis_gpu.py"],
    "analysis/pipeline.py": [A + "test_analysis.py", A + "test_analysis_recorded.py", A + "test_bound.py"],
    "analysis/ranks.py": [A + "test_ranks.py", P + "test_multirank.py"],
    "analysis/requests.py": [A + "test_latency.py", A + "test_analysis.py", A + "test_analysis_cpu.py",
                             A + "test_analysis_gpu.py", A + "test_engines.py"],
    "analysis/steps.py": [A + "test_analysis.py", A + "test_analysis_cpu.py", A + "test_analysis_gpu.py",
                          A + "test_engines.py", A + "test_wrong_numbers.py"],
    "analysis/sweep.py": ["tests/model/test_sweep_spec.py", R + "test_report.py"],
    "analysis/timeline.py": [A + "test_analysis.py", A + "test_analysis_gpu.py"],
    "analysis/warmup.py": [A + "test_warmup.py"],
    "tracekit/ingest/linkage.py": [IN + "test_linkage_order.py", IN + "test_ingest.py", IN + "test_kineto.py"],
}
# Mutants shown by hand to compute the same results as the original: (module, function, the line with
# the mutated expression marked ⟨so⟩, mutation) -> why. Keyed by text, not line number, so an entry
# survives edits elsewhere in the module.
EQUIVALENT: dict[tuple[str, str, str, str], str] = {
    ("analysis/ranks.py", "_segments", "keep = ⟨seg_end > seg_start⟩", "Gt -> GtE"):
        "zero-length segments add 0 to every length sum and to _covered_in's running totals",
    ("analysis/opmodels.py", "serving_attention_ops", "strict=⟨True⟩):", "True -> False"):
        "zip(strict=) over four columns of one DataFrame: always equal lengths",
    ("analysis/kernels.py", "graph_replay",
     'graph = gpu["launch_name"].astype(str).str.contains("GraphLaunch", case=False, regex=⟨False⟩).to_numpy()',
     "False -> True"):
        "'GraphLaunch' holds no regex metacharacter: as a regex it matches exactly what the literal does",
    ("analysis/bound.py", "_outside_row", "if ⟨not mask.any() or b.empty⟩:", "or -> and"):
        "the bound pass keeps the phases pass's rows: an outside row after it means one before, and with "
        "none after every write below is to an empty selection",
    ("analysis/sweep.py", "summarize_point",
     "chat = (CHAT_REFERENCE[⟨0⟩] * input_price + CHAT_REFERENCE[1] * output_price) / 1e6", "0 -> 1"):
        "CHAT_REFERENCE is (128, 128): either index reads 128",
    ("analysis/opmodels.py", "_Tensor", "@dataclass(frozen=⟨True⟩)", "True -> False"):
        "a private value of the module: nothing assigns to a _Tensor's fields or hashes one",
    ("analysis/ranks.py", "_Coverage", "@dataclass(frozen=⟨True⟩)", "True -> False"):
        "a private value of the module: nothing assigns to a _Coverage's fields or hashes one",
    ("analysis/energy.py", "_change_points", "return ts[:⟨0⟩], v[:0]", "0 -> 1"):
        "under two samples the result only meets window_energy_j's len(ets) >= 2 test, false for 0 or 1",
    ("analysis/energy.py", "_change_points", "return ts[:0], v[:⟨0⟩]", "0 -> 1"):
        "under two samples the values are never read (window_energy_j needs two change points)",
    ("analysis/energy.py", "phase_energy", "if ⟨tokens and tokens > 0⟩:", "and -> or"):
        "tokens is a sum of token counts (>= 0) or NaN: 'or' differs only for NaN, where it stores e / NaN = NaN, "
        "the value the column already holds",
    ("tracekit/ingest/linkage.py", "link", "thread_key = _thread_codes(pid, tid, pid[:⟨0⟩], tid[:0])[0]", "0 -> 1"):
        "the query arrays only shape _thread_codes' second result, which [0] discards",
    ("tracekit/ingest/linkage.py", "link", "thread_key = _thread_codes(pid, tid, pid[:0], tid[:⟨0⟩])[0]", "0 -> 1"):
        "the query arrays only shape _thread_codes' second result, which [0] discards",
    ("analysis/ranks.py", "comm_split_per_phase",
     'out["wait_share"] = out["wait_ns"] / out["nccl_kernel_ns"].where(⟨out["nccl_kernel_ns"] > 0⟩)', "Gt -> GtE"):
        "wait_ns sums non-negative parts of the NCCL kernels' durations: where nccl_kernel_ns is 0 so is "
        "wait_ns, and 0 / 0 is the NaN where() gives",
    ("analysis/timeline.py", "categorise",
     'cat = np.where(name.str.contains("nccl", regex=⟨False⟩), "comm", cat)', "False -> True"):
        "'nccl' holds no regex metacharacter: as a regex it matches exactly what the literal does",
    ("analysis/opmodels.py", "_index",
     "row = math.prod(x.shape[1:]) if ⟨len(x.shape) > 1⟩ else 1", "Gt -> GtE"):
        "a 1-D shape's trailing product is math.prod(()) == 1, the else value",
    ("analysis/idle.py", "_overlap.covered",
     "inside = np.where(⟨i > 0⟩, np.clip(t - syncs[prev, 0], 0, syncs[prev, 1] - syncs[prev, 0]), 0)", "Gt -> GtE"):
        "i == 0 means t < syncs[0, 0]: clipping the negative t - syncs[0, 0] to [0, len] gives the else value 0",
    ("analysis/idle.py", "wait_ns",
     "b = busy[(⟨busy[:, 1] > lo⟩) & (busy[:, 0] < hi)] if busy.size else busy", "Gt -> GtE"):
        "a busy interval ending exactly at lo adds only the empty gap [lo, lo), which keep drops",
    ("analysis/modelcheck.py", "shape_from_config",
     'head_dim = int(c.get("head_dim") or ⟨hidden // heads⟩)', "// -> /"):
        "hidden and heads are positive ints far under 2**53: int(hidden / heads) == hidden // heads",
    ("analysis/intervals.py", "clip",
     "if ⟨intervals.size == 0 or hi <= lo⟩:", "or -> and"):
        "with hi <= lo no interval keeps e > s, and an empty (0, 2) input stacks to the same empty (0, 2) "
        "int64 array: both paths return EMPTY's value",
    ("analysis/diff.py", "kernel_time",
     'allp.insert(⟨0⟩, "phase", "all")', "0 -> 1"):
        "the result is selected by cols, which puts phase first wherever insert placed it",
    ("analysis/intervals.py", "length",
     "if intervals.size == ⟨0⟩:", "0 -> 1"):
        "intervals are (n, 2): size is never 1, and an empty (0, 2) array sums to 0 as well",
    ("analysis/idle.py", "wait_ns",
     "keep = ⟨edges_e > edges_s⟩", "Gt -> GtE"):
        "a zero-length gap [x, x) adds gb - split = 0 and a sync overlap of [x, x) = 0",
    ("analysis/ranks.py", "comm_instances",
     "same = (counts.nunique(axis=1) == 1) & (⟨counts.min(axis=1) > 0⟩) & (len(all_ranks) > 1)", "Gt -> GtE"):
        "a step is in counts only if some rank issued an NCCL kernel in it: with one count for every "
        "rank, that count is > 0",
    ("analysis/bound.py", "attribute_windows",
     'devices = kern["device"].fillna(-⟨1⟩).to_numpy() if "device" in kern and len(kern) else np.zeros(len(kern))', "1 -> 2"):
        "the fill only groups activities without a device: -1 and -2 are both no device's id",
    ("analysis/bound.py", "_modelled_op_for", "if ⟨p is None or p in covered⟩:", "or -> and"):
        "the break only saves work: a covered op's ancestors are covered already, and the None it may add "
        "to covered is never looked up",
}

SWAP_CMP: dict[type, type] = {
    ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot, ast.IsNot: ast.Is, ast.In: ast.NotIn, ast.NotIn: ast.In,
}
SWAP_BIN: dict[type, type] = {
    ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv, ast.Pow: ast.Mult, ast.BitAnd: ast.BitOr, ast.BitOr: ast.BitAnd,
}
OP_TEXT = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.FloorDiv: "//", ast.Mod: "%",
           ast.Pow: "**", ast.BitAnd: "&", ast.BitOr: "|"}


@dataclass(frozen=True)
class Site:
    path: str
    index: int  # the index-th mutable node of the module, in ast.walk order
    line: int
    function: str  # innermost enclosing def/class ("" at module level)
    text: str  # the mutated expression's (first) line, the expression marked ⟨so⟩
    what: str


def _parents(tree: ast.AST) -> dict[int, tuple[ast.AST, str]]:
    out: dict[int, tuple[ast.AST, str]] = {}
    for node in ast.walk(tree):
        for field, value in ast.iter_fields(node):
            for child in value if isinstance(value, list) else [value]:
                if isinstance(child, ast.AST):
                    out[id(child)] = (node, field)
    return out


def _never(tree: ast.AST) -> set[int]:
    """Nodes whose mutation cannot change a result: docstrings, annotations, f-strings, stacklevel=."""
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
        for ann in [getattr(node, "annotation", None), getattr(node, "returns", None)]:
            if isinstance(ann, ast.AST):
                out.update(id(n) for n in ast.walk(ann))
        if isinstance(node, ast.JoinedStr) or (isinstance(node, ast.keyword) and node.arg == "stacklevel"):
            out.update(id(n) for n in ast.walk(node))
    return out


def _mutable(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    skip = _never(tree)
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            found.append((node, f"{type(node.ops[0]).__name__} -> {SWAP_CMP[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BinOp | ast.AugAssign) and type(node.op) in SWAP_BIN:
            found.append((node, f"{OP_TEXT[type(node.op)]} -> {OP_TEXT[SWAP_BIN[type(node.op)]]}"))
        elif isinstance(node, ast.BoolOp):
            found.append((node, "and -> or" if isinstance(node.op, ast.And) else "or -> and"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not | ast.Invert):
            found.append((node, "drop not" if isinstance(node.op, ast.Not) else "drop ~"))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            found.append((node, f"{node.value} -> {not node.value}"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float):
            found.append((node, f"{node.value!r} -> {node.value + 1!r}"))
    return found


def _replacement(node: ast.AST) -> tuple[ast.AST, str]:
    """(the node whose text is replaced, the new text) for one mutation."""
    if isinstance(node, ast.AugAssign):
        new = ast.AugAssign(target=node.target, op=SWAP_BIN[type(node.op)](), value=node.value)
        return node, ast.unparse(new)
    if isinstance(node, ast.UnaryOp):
        return node, f"({ast.unparse(node.operand)})"
    if isinstance(node, ast.Compare):
        new: ast.AST = ast.Compare(left=node.left, ops=[SWAP_CMP[type(node.ops[0])](), *node.ops[1:]],
                                   comparators=node.comparators)
    elif isinstance(node, ast.BinOp):
        new = ast.BinOp(left=node.left, op=SWAP_BIN[type(node.op)](), right=node.right)
    elif isinstance(node, ast.BoolOp):
        new = ast.BoolOp(op=ast.Or() if isinstance(node.op, ast.And) else ast.And(), values=node.values)
    else:
        assert isinstance(node, ast.Constant)
        new = ast.Constant(value=(not node.value) if type(node.value) is bool else node.value + 1)
    return node, f"({ast.unparse(new)})"


def _splice(source: str, node: ast.AST, text: str) -> str:
    """The source with node's text replaced (ast offsets are UTF-8 byte columns)."""
    lines = source.encode().splitlines(keepends=True)
    start = sum(len(x) for x in lines[: node.lineno - 1]) + node.col_offset  # type: ignore[attr-defined]
    end = sum(len(x) for x in lines[: node.end_lineno - 1]) + node.end_col_offset  # type: ignore[attr-defined]
    raw = source.encode()
    return (raw[:start] + text.encode() + raw[end:]).decode()


def mutate(source: str, index: int) -> str:
    tree = ast.parse(source)
    node, _ = _mutable(tree)[index]
    target, text = _replacement(node)
    out = _splice(source, target, text)
    ast.parse(out)  # a mutant is always valid Python
    return out


def _function_of(node: ast.AST, parents: dict[int, tuple[ast.AST, str]]) -> str:
    names = []
    cur = node
    while id(cur) in parents:
        cur, _ = parents[id(cur)]
        if isinstance(cur, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.append(cur.name)
    return ".".join(reversed(names))


def _runs_at_import(node: ast.AST, parents: dict[int, tuple[ast.AST, str]]) -> bool:
    """True when the node is evaluated while the module is imported (not inside a function body)."""
    cur = node
    while id(cur) in parents:
        parent, field = parents[id(cur)]
        if isinstance(parent, ast.FunctionDef | ast.AsyncFunctionDef) and field == "body":
            return False
        if isinstance(parent, ast.Lambda) and field == "body":
            return False
        cur = parent
    return True


def _line_span(node: ast.AST, parents: dict[int, tuple[ast.AST, str]]) -> list[int]:
    """Lines whose execution means the node may run: its own, and its statement's first line."""
    lines = set(range(node.lineno, node.end_lineno + 1))  # type: ignore[attr-defined]
    cur = node
    while not isinstance(cur, ast.stmt) and id(cur) in parents:
        cur = parents[id(cur)][0]
    lines.add(getattr(cur, "lineno", node.lineno))  # type: ignore[attr-defined]
    return sorted(lines)


def sites(paths: list[str]) -> list[Site]:
    out = []
    for p in paths:
        source = (REPO / p).read_text()
        tree = ast.parse(source)
        parents = _parents(tree)
        lines = source.encode().splitlines()
        for i, (node, what) in enumerate(_mutable(tree)):
            line = lines[node.lineno - 1]  # type: ignore[attr-defined]
            a = node.col_offset  # type: ignore[attr-defined]
            b = node.end_col_offset if node.end_lineno == node.lineno else len(line)  # type: ignore[attr-defined]
            text = (line[:a] + "⟨".encode() + line[a:b] + "⟩".encode() + line[b:]).decode().strip()
            out.append(Site(p, i, node.lineno, _function_of(node, parents), text, what))  # type: ignore[attr-defined]
    return out


def equivalent_reason(site: Site) -> str | None:
    return EQUIVALENT.get((site.path, site.function, site.text, site.what))


# ---- the coverage map: which test executes which line --------------------------------------------------


def _digest(paths: list[Path]) -> str:
    h = hashlib.sha256()
    for p in paths:
        h.update(str(p).encode())
        h.update(p.read_bytes())
    return h.hexdigest()[:16]


def _test_files() -> list[Path]:
    out: list[Path] = []
    for s in SCOPE:
        p = REPO / s
        out.extend(sorted(p.rglob("test_*.py")) if p.is_dir() else [p])
    return out


class _MapPlugin:
    """Switches the coverage context per test and phase; records every test's duration and file."""

    def __init__(self, cov: Any) -> None:
        self.cov = cov
        self.seconds: dict[str, float] = defaultdict(float)

    def pytest_runtest_logreport(self, report: Any) -> None:
        self.seconds[report.nodeid] += report.duration

    def _phase(self, item: Any, phase: str) -> Any:
        self.cov.switch_context(f"{item.nodeid}|{phase}")
        try:
            return (yield)
        finally:
            self.cov.switch_context("")

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_setup(self, item: Any) -> Any:
        return (yield from self._phase(item, "setup"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: Any) -> Any:
        return (yield from self._phase(item, "call"))

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: Any) -> Any:
        return (yield from self._phase(item, "teardown"))


def _build(files: list[Path]) -> dict[str, Any]:
    """Per test file: its tests' durations, and for each target line the (test, phase) pairs that ran it."""
    import coverage

    real = {os.path.realpath(REPO / t): t for t in TARGETS}
    cov = coverage.Coverage(data_file=None, branch=False)
    plugin = _MapPlugin(cov)
    cov.start()
    try:
        os.chdir(REPO)
        rc = pytest.main(["-q", "-p", "no:cacheprovider", "-m", "not gpu", *map(str, files)], plugins=[plugin])
    finally:
        cov.stop()
    if rc != 0:  # a mutant is killed when its tests fail: they must pass on the original first
        raise SystemExit(f"coverage map: pytest exited {rc} on the unmutated code; fix that first")
    data = cov.get_data()
    out: dict[str, Any] = {str(f.relative_to(REPO)): {"seconds": {}, "lines": {}} for f in files}
    for nodeid, secs in plugin.seconds.items():
        out.setdefault(nodeid.split("::")[0], {"seconds": {}, "lines": {}})["seconds"][nodeid] = round(secs, 3)
    for measured in data.measured_files():
        target = real.get(os.path.realpath(measured))
        if target is None:
            continue
        for line, contexts in data.contexts_by_lineno(measured).items():
            for ctx in contexts:
                nodeid, _, phase = ctx.rpartition("|")
                file = nodeid.split("::")[0] if nodeid else ""
                if file not in out:
                    continue  # "" : collection/import time, recorded separately below
                out[file]["lines"].setdefault(target, {}).setdefault(str(line), []).append([nodeid, phase])
            if any(not c for c in contexts):
                out.setdefault("", {"seconds": {}, "lines": {}})["lines"].setdefault(target, {})[str(line)] = [["", ""]]
    return out


def coverage_map(rebuild: bool = False) -> dict[str, Any]:
    """The map, cached per test file under .mutation/map.json; stale files (or all, if a target changed)
    are re-measured."""
    CACHE.mkdir(exist_ok=True)
    cache = CACHE / "map.json"
    targets = _digest([REPO / t for t in TARGETS])
    old = json.loads(cache.read_text()) if cache.exists() and not rebuild else {}
    if old.get("targets") != targets:
        old = {"targets": targets, "files": {}}
    files = _test_files()
    stale = [f for f in files if old["files"].get(str(f.relative_to(REPO)), {}).get("digest") != _digest([f])]
    if stale:
        print(f"coverage map: measuring {len(stale)} test files ...", flush=True)
        built = _build(stale)
        for f in stale:
            key = str(f.relative_to(REPO))
            old["files"][key] = {**built.get(key, {"seconds": {}, "lines": {}}), "digest": _digest([f])}
        if "" in built:
            merged = old["files"].setdefault("", {"seconds": {}, "lines": {}, "digest": ""})
            for target, lines in built[""]["lines"].items():
                merged["lines"].setdefault(target, {}).update(lines)
    known = {str(f.relative_to(REPO)) for f in files} | {""}
    old["files"] = {k: v for k, v in old["files"].items() if k in known}
    cache.write_text(json.dumps(old))
    return old


def select_tests(site: Site, cmap: dict[str, Any], budget: float | None = None) -> tuple[list[str], float, str]:
    """The test node ids to run for a mutant (fastest file first), their measured seconds, and why."""
    source = (REPO / site.path).read_text()
    tree = ast.parse(source)
    parents = _parents(tree)
    node, _ = _mutable(tree)[site.index]
    files = {k: v for k, v in cmap["files"].items() if k}
    toucher = {f for f, v in files.items() if site.path in v["lines"]}
    chosen: set[str] = set()
    how = "lines"
    if _runs_at_import(node, parents):
        how = "import"
        for f in toucher:
            chosen.update(files[f]["seconds"])
    else:
        for f in toucher:
            by_line = files[f]["lines"][site.path]
            for line in _line_span(node, parents):
                for nodeid, phase in by_line.get(str(line), []):
                    if phase == "call":
                        chosen.add(nodeid)
                    else:  # a fixture may be shared by the file's tests
                        chosen.update(files[f]["seconds"])
        at_import = cmap["files"].get("", {}).get("lines", {}).get(site.path, {})
        if any(str(line) in at_import for line in _line_span(node, parents)):
            how = "import"
            for f in toucher:
                chosen.update(files[f]["seconds"])
    if not chosen:
        return [], 0.0, "none"
    seconds = {n: files[n.split("::")[0]]["seconds"].get(n, 1.0) for n in chosen}
    per_file: dict[str, float] = defaultdict(float)
    for n, s in seconds.items():
        per_file[n.split("::")[0]] += s
    order = sorted(chosen, key=lambda n: (per_file[n.split("::")[0]], n.split("::")[0], list(files[n.split("::")[0]]["seconds"]).index(n)))
    if budget is not None:  # the fastest tests up to the budget (always at least one)
        spent, kept = 0.0, []
        for n in order:
            if kept and spent + seconds[n] > budget:
                continue
            kept.append(n)
            spent += seconds[n]
        order = kept
    return order, sum(seconds[n] for n in order), how


# ---- running mutants -----------------------------------------------------------------------------------


PYTEST_ARGS = ["-x", "-q", "-p", "no:cacheprovider", "-p", "no:randomly", "-m", "not gpu"]
ENV = {"PYTHONDONTWRITEBYTECODE": "1", "TRACEKIT_TESTS_NO_CUDA": "1"}


def preload() -> None:
    """Import, in this process, the third-party modules the targets and tests import (never tracekit):
    each forked mutant run then starts with them loaded (seconds saved per mutant on a busy machine)."""
    probe = ("import sys, tracekit, tracekit.analysis.pipeline, tracekit.ingest.linkage, tracekit.app; "
             "import pytest, hypothesis; "
             "print(' '.join(sorted({m.split('.')[0] for m in sys.modules} - {'tracekit', '__main__'})))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, **ENV})
    for name in out.stdout.split():
        if not name.startswith("_") or name in ("_pytest",):
            with contextlib.suppress(Exception):  # one that imports only in context: the child imports it
                __import__(name)


def _pytest(args: list[str], timeout: float, fork: bool = False) -> int | None:
    """pytest's exit code on ``args``; None on a timeout. fork: run in a forked child of this process
    (with preload()'s modules already imported) instead of a new interpreter."""
    if not fork:
        cmd = [sys.executable, "-m", "pytest", *PYTEST_ARGS, *args]
        try:
            return subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=timeout,
                                  env={**os.environ, **ENV}).returncode
        except subprocess.TimeoutExpired:
            return None
    pid = os.fork()
    if pid == 0:  # the child: quiet, its own process group, pytest in-process, then exit without cleanup
        rc = 3
        try:
            os.setpgid(0, 0)
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.environ.update(ENV)
            # a coverage map built in this process imported the targets and tests: import them afresh
            for name in [n for n, m in sys.modules.items() if str(getattr(m, "__file__", "") or "").startswith(
                    str(REPO)) and n != "__main__"]:
                del sys.modules[name]
            sys.dont_write_bytecode = True
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.chdir(REPO)
            rc = int(pytest.main([*PYTEST_ARGS, *args]))
        finally:
            os._exit(rc)
    deadline = time.monotonic() + timeout
    try:
        while True:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                return os.waitstatus_to_exitcode(status) if os.WIFEXITED(status) else 3
            if time.monotonic() > deadline:
                os.killpg(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                return None
            time.sleep(0.05)
    except BaseException:
        try:
            os.killpg(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        except (ProcessLookupError, ChildProcessError):
            pass
        raise


def run_one(site: Site, cmap: dict[str, Any] | None, budget: float | None = None,
            fork: bool = False) -> dict[str, Any]:
    path = REPO / site.path
    original = path.read_bytes()
    stat = path.stat()
    tests, expected, how = select_tests(site, cmap, budget) if cmap else ([], 0.0, "none")
    fallback = not tests
    args = TESTS[site.path] if fallback else tests
    timeout = 60.0 + 3 * (expected if not fallback else 120.0)
    t0 = time.perf_counter()
    try:
        path.write_text(mutate(original.decode(), site.index))
        rc = _pytest(args, timeout, fork)
    finally:
        path.write_bytes(original)
        os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # the cached bytecode stays valid
    if rc == 4:
        raise RuntimeError(f"pytest rejected its arguments: {args[:3]} ...")
    if rc is None:
        outcome = "killed (timeout)"
    elif rc in (0, 5):
        outcome = "survived (no test runs it)" if fallback and cmap else "survived"
    else:
        outcome = "killed"
    return {**asdict(site), "outcome": outcome, "tests": len(args), "how": "files" if fallback else how,
            "seconds": round(time.perf_counter() - t0, 1)}


def _score(results: list[dict[str, Any]]) -> dict[str, Any]:
    killed = sum(r["outcome"].startswith("killed") for r in results)
    eq = [r for r in results if r.get("equivalent") and not r["outcome"].startswith("killed")]
    n = len(results)
    return {"mutants": n, "killed": killed, "score": round(killed / n, 4) if n else None,
            "equivalent": len(eq), "score_without_equivalent": round(killed / (n - len(eq)), 4) if n > len(eq) else None}


def summary(results: list[dict[str, Any]], every: int, seed: int | None) -> dict[str, Any]:
    per_module = {p: _score([r for r in results if r["path"] == p]) for p in sorted({r["path"] for r in results})}
    return {"seed": seed, "sites": every, **_score(results), "per_module": per_module,
            "survivors": [r for r in results if not r["outcome"].startswith("killed")],
            "results": [[r["path"], r["line"], r["what"], r["outcome"], r["seconds"]] for r in results]}


def _find(old: dict[str, Any], current: list[Site]) -> Site | None:
    """The current site of a recorded mutant: the same index where the module has not changed there (same
    line, mutation and marked text), else the same function, mutation and text, nearest line."""
    same_index = [s for s in current if (s.path, s.index, s.line, s.what) ==
                  (old["path"], old["index"], old["line"], old["what"])]
    if same_index and ("⟨" not in old["text"] or same_index[0].text == old["text"]):
        return same_index[0]
    same = [s for s in current if (s.path, s.function, s.what, s.text) ==
            (old["path"], old["function"], old["what"], old["text"])]
    return min(same, key=lambda s: abs(s.line - old["line"])) if same else None


def _interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt  # unwinds through run_one's finally: the source is restored


def main() -> int:
    # A job started in the background (nohup ... &) ignores SIGINT: stop it with SIGTERM or SIGINT alike.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--mutants", type=int, default=300)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--only", default=None, help="mutate this target only (a key of TESTS)")
    ap.add_argument("--out", type=Path, default=REPO / ".mutation" / "results.json")
    ap.add_argument("--resume", action="store_true", help="keep the mutants already in --out, run the rest")
    ap.add_argument("--stop-after", type=int, default=None, help="run at most this many mutants now (a batch)")
    ap.add_argument("--recheck", type=Path, default=None, help="re-run the survivors recorded in this file")
    ap.add_argument("--no-map", action="store_true", help="run each target's TESTS files (no coverage map)")
    ap.add_argument("--rebuild-map", action="store_true")
    ap.add_argument("--report", type=Path, default=None,
                    help="also write the summary without the per-mutant records (small, to commit)")
    ap.add_argument("--budget", type=float, default=40.0,
                    help="seconds of tests (as the map timed them) a mutant runs at most, fastest first; 0: no limit")
    ap.add_argument("--no-fork", action="store_true",
                    help="run each mutant's pytest in a new interpreter (default: a forked child, imports preloaded)")
    args = ap.parse_args()
    args.budget = args.budget or None
    fork = hasattr(os, "fork") and not args.no_fork
    assert set(TESTS) == set(TARGETS), f"TESTS and TARGETS differ: {set(TESTS) ^ set(TARGETS)}"
    targets = [args.only] if args.only else TARGETS
    every = sites(targets)
    cmap = None if args.no_map else coverage_map(args.rebuild_map)
    if fork:
        preload()
    if args.recheck:
        old = json.loads(args.recheck.read_text())
        chosen = []
        for r in old["survivors"]:
            site = _find(r, every)
            if site is None:
                print(f"gone: {r['path']}:{r['line']} {r['text']} {r['what']}")
            else:
                chosen.append(site)
    else:
        chosen = random.Random(args.seed).sample(every, min(args.mutants, len(every)))
    done: list[dict[str, Any]] = []
    if args.recheck and "all" in old:  # a full record: the killed mutants stay, so the score covers the sample
        done = [r for r in old["all"] if r["outcome"].startswith("killed")]
    if args.resume and args.out.exists():
        prev = json.loads(args.out.read_text())
        done = prev.get("all", [])
        ran = {(r["path"], r["index"]) for r in done}
        chosen = [s for s in chosen if (s.path, s.index) not in ran]
    if args.stop_after is not None:
        chosen = chosen[: args.stop_after]
    results = list(done)
    seed = (old.get("seed") if done else None) if args.recheck else args.seed
    for k, site in enumerate(chosen, 1):
        r = run_one(site, cmap, args.budget, fork)
        reason = equivalent_reason(site)
        if reason:
            r["equivalent"] = reason
        results.append(r)
        s = _score(results)
        print(f"[{k}/{len(chosen)}] {site.path}:{site.line} `{site.text}` {site.what}: {r['outcome']} "
              f"({r['tests']} tests, {r['seconds']:.0f} s); so far {s['killed']}/{s['mutants']} = {s['score']:.1%}",
              flush=True)
        out = {**summary(results, len(every), seed), "all": results}
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(out, indent=1) + "\n")
    s = _score(results)
    if args.report and results:
        small = summary(results, len(every), seed)
        args.report.write_text(json.dumps(small, indent=None, separators=(",", ":")).replace("],[", "],\n[") + "\n")
    if results:
        print(f"mutation score: {s['killed']}/{s['mutants']} = {s['score']:.1%} killed; without the "
              f"{s['equivalent']} equivalent: {s['score_without_equivalent']:.1%} "
              f"({len(every)} sites in {len(targets)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
