"""Mutation testing of the analysis passes and ingest linkage: how many planted bugs the tests catch.

    python scripts/mutation.py [--mutants N] [--seed S] [--out docs/measurements/mutation.json]

Each mutant changes one operator or constant of one target module (a comparison, an arithmetic or
boolean operator, a `not`, an integer constant, True/False), chosen at random (seeded) among every
such site; the module's own tests (TESTS below) then run with `pytest -x`. A mutant is killed when
they fail (or time out), survived when they pass. Equivalent mutants count as survived, so the score
is a lower bound. The source is restored after every mutant, also on Ctrl-C.
"""

from __future__ import annotations

import argparse
import ast
import json
import random
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
A = "tests/analysis/"
TESTS: dict[str, list[str]] = {
    "analysis/bound.py": [A + "test_bound.py", A + "test_bound_h200.py", A + "test_wrong_numbers.py"],
    "analysis/steps.py": [A + "test_analysis.py", A + "test_analysis_cpu.py", A + "test_analysis_gpu.py",
                          A + "test_wrong_numbers.py"],
    "analysis/requests.py": [A + "test_analysis.py", A + "test_analysis_cpu.py", A + "test_analysis_gpu.py",
                             A + "test_analysis_recorded.py"],
    "analysis/phases.py": [A + "test_analysis.py", A + "test_analysis_gpu.py", A + "test_bound.py"],
    "analysis/pipeline.py": [A + "test_analysis_recorded.py", A + "test_bound.py", A + "test_bound_h200.py"],
    "analysis/timeline.py": [A + "test_analysis.py", A + "test_analysis_gpu.py"],
    "analysis/intervals.py": [A + "test_analysis.py", A + "test_bound.py", A + "test_bound_h200.py"],
    "analysis/opmodels.py": [A + "test_opmodels.py", A + "test_wrong_numbers.py", A + "test_bound.py"],
    "analysis/kernels.py": [A + "test_bound.py", A + "test_opmodels.py", "tests/app/test_diff.py"],
    "analysis/energy.py": [A + "test_bound.py", A + "test_analysis_recorded.py"],
    "analysis/modelcheck.py": [A + "test_modelcheck.py"],
    "analysis/ranks.py": [A + "test_ranks.py", "tests/app/test_multirank.py"],
    "analysis/diff.py": ["tests/app/test_diff.py"],
    "analysis/sweep.py": ["tests/model/test_sweep_spec.py"],
    "tracekit/ingest/linkage.py": ["tests/ingest/test_ingest.py", "tests/ingest/test_linkage_order.py"],
}
SWAP_CMP = {ast.Lt: ast.LtE, ast.LtE: ast.Lt, ast.Gt: ast.GtE, ast.GtE: ast.Gt, ast.Eq: ast.NotEq, ast.NotEq: ast.Eq}
SWAP_BIN = {ast.Add: ast.Sub, ast.Sub: ast.Add, ast.Mult: ast.Div, ast.Div: ast.Mult, ast.FloorDiv: ast.Mult}


@dataclass(frozen=True)
class Site:
    path: str
    index: int  # the index-th mutable node in ast.walk order
    line: int
    what: str


def _docstrings(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.FunctionDef | ast.ClassDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _annotations(tree: ast.AST) -> set[int]:
    out = set()
    for node in ast.walk(tree):
        for ann in [getattr(node, "annotation", None), getattr(node, "returns", None)]:
            if ann is not None:
                out.update(id(n) for n in ast.walk(ann))
    return out


def _mutable(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    skip = _docstrings(tree) | _annotations(tree)
    found: list[tuple[ast.AST, str]] = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in SWAP_CMP:
            found.append((node, f"{type(node.ops[0]).__name__} -> {SWAP_CMP[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in SWAP_BIN:
            found.append((node, f"{type(node.op).__name__} -> {SWAP_BIN[type(node.op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            found.append((node, "and <-> or"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            found.append((node, "drop not"))
        elif isinstance(node, ast.Constant) and type(node.value) is bool:
            found.append((node, f"{node.value} -> {not node.value}"))
        elif isinstance(node, ast.Constant) and type(node.value) is int and node.value not in (0,) and abs(node.value) < 1 << 30:
            found.append((node, f"{node.value} -> {node.value + 1}"))
    return found


def sites(paths: list[str]) -> list[Site]:
    out = []
    for p in paths:
        tree = ast.parse((REPO / p).read_text())
        for i, (node, what) in enumerate(_mutable(tree)):
            out.append(Site(p, i, getattr(node, "lineno", 0), what))
    return out


def mutate(source: str, index: int) -> str:
    tree = ast.parse(source)
    node, _ = _mutable(tree)[index]
    if isinstance(node, ast.Compare):
        node.ops[0] = SWAP_CMP[type(node.ops[0])]()
    elif isinstance(node, ast.BinOp):
        node.op = SWAP_BIN[type(node.op)]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.UnaryOp):
        node.__class__ = ast.UnaryOp
        node.op = ast.UAdd()  # `+x` keeps the expression, drops the `not`
    elif isinstance(node, ast.Constant):
        node.value = (not node.value) if type(node.value) is bool else node.value + 1
    return ast.unparse(tree)


def run_one(site: Site, timeout: float) -> tuple[str, float]:
    path = REPO / site.path
    original = path.read_text()
    t0 = time.perf_counter()
    try:
        path.write_text(mutate(original, site.index))
        cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *TESTS[site.path]]
        try:
            rc = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=timeout).returncode
        except subprocess.TimeoutExpired:
            return "killed (timeout)", time.perf_counter() - t0
    finally:
        path.write_text(original)
    return ("killed" if rc != 0 else "survived"), time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=int, default=150)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument("--only", default=None, help="mutate this target only (a key of TESTS)")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "measurements" / "mutation.json")
    args = ap.parse_args()
    targets = [args.only] if args.only else list(TESTS)
    every = sites(targets)
    chosen = random.Random(args.seed).sample(every, min(args.mutants, len(every)))
    results = []
    for k, site in enumerate(chosen, 1):
        outcome, secs = run_one(site, args.timeout)
        results.append({**asdict(site), "outcome": outcome, "seconds": round(secs, 1)})
        killed = sum(r["outcome"].startswith("killed") for r in results)
        print(f"[{k}/{len(chosen)}] {site.path}:{site.line} {site.what}: {outcome} ({secs:.0f} s); "
              f"score so far {killed}/{k} = {killed / k:.1%}", flush=True)
    killed = sum(r["outcome"].startswith("killed") for r in results)
    summary = {"sites": len(every), "mutants": len(results), "killed": killed,
               "score": killed / len(results) if results else None, "seed": args.seed, "results": results}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=1) + "\n")
    print(f"mutation score: {killed}/{len(results)} = {summary['score']:.1%} of sampled mutants killed "
          f"({len(every)} sites in {len(targets)} modules)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
