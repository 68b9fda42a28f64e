"""docs/api.md's worked example runs as written, on copies of the committed fixtures, and prints what the
page shows: each ```python block's output is compared with the ```text block after it."""

from __future__ import annotations

import contextlib
import io
import re
import shutil
from pathlib import Path

import pytest
from helpers import FIXTURES, REPO

import tracekit


def test_the_api_doc_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shutil.copytree(FIXTURES / "record_gpu_smoke", tmp_path / "smoke")
    shutil.copy(FIXTURES / "gpu" / "b_two_requests.json.gz", tmp_path)
    monkeypatch.chdir(tmp_path)
    pairs = re.findall(r"```python\n(.*?)```\s*```text\n(.*?)```", (REPO / "docs" / "api.md").read_text(), re.S)
    assert len(pairs) == 3
    env: dict[str, object] = {}
    for block, shown in pairs:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block, "docs/api.md", "exec"), env)
        assert out.getvalue() == shown, f"docs/api.md shows:\n{shown}\nthe code prints:\n{out.getvalue()}"
    run = env["run"]
    assert isinstance(run, tracekit.Run) and (tmp_path / "smoke" / "report.html").is_file()
    assert (tmp_path / "smoke" / "trace.tracekit.pftrace").stat().st_size > 0
    assert set(run.phases["phase"]) >= {"prefill", "decode"}


def test_the_public_api_is_exactly_what_all_lists() -> None:
    assert sorted(tracekit.__all__) == ["Dataset", "Run", "__version__", "diff", "ingest_traces", "open", "record",
                                       "warmup", "whatif"]
    for name in tracekit.__all__:
        assert getattr(tracekit, name) is not None
    assert callable(tracekit.ingest_traces)


def test_ingest_traces_makes_a_run(tmp_path: Path) -> None:
    # GIVEN a plain torch.profiler trace; WHEN the API ingests it; THEN a Run with the trace's kernels
    run = tracekit.ingest_traces(FIXTURES / "gpu" / "b_two_requests.json.gz", tmp_path / "run")
    assert isinstance(run, tracekit.Run) and run.path == tmp_path / "run"
    assert len(run.table("gpu_activity")) > 0


def test_the_ingest_package_is_a_plain_package() -> None:
    # every module of tracekit.ingest imports by its full name in a fresh interpreter, the C scanner included
    import subprocess
    import sys

    code = ("import importlib.util, tracekit.ingest.native, tracekit.ingest\n"
            "if importlib.util.find_spec('tracekit.ingest._kscan'): import tracekit.ingest._kscan")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
