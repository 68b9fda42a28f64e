"""Exporting holds one trace table at a time and never imports pandas: what keeps the export's peak
memory a fraction of a trace loader's (docs/performance.md)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES

from tracekit.app.analyze import analyse_run, open_or_ingest
from tracekit.app.export import load_tables
from tracekit.trace.blocks import COLUMNS

EXPORT = """
import sys
from pathlib import Path
from tracekit.app.export import export_run, load_tables
from tracekit.store.rundir import RunDir
run = RunDir.open(Path(sys.argv[1]))
for fmt, name in (("proto", "t.pftrace"), ("json", "t.json.gz")):
    export_run(run, fmt, Path(sys.argv[2]) / name, None, load_tables(run))
print("pandas imported" if "pandas" in sys.modules else "no pandas")
"""


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    # a real trace with kernels, CPU ops, runtime calls, annotations and the bound pass's tables
    run = open_or_ingest(FIXTURES / "gpu" / "bound_h200.json.gz", tmp_path_factory.mktemp("lean") / "run", False)
    analyse_run(run)
    return run.path


def test_export_never_imports_pandas(run_dir: Path, tmp_path: Path) -> None:
    # GIVEN an analysed run WHEN a fresh process exports it as protobuf and as JSON
    out = subprocess.run([sys.executable, "-c", EXPORT, str(run_dir), str(tmp_path)], capture_output=True, text=True,
                         check=True)
    # THEN both files are written and pandas (pyarrow's first pa.array / to_numpy would import it) never was
    assert (tmp_path / "t.pftrace").stat().st_size > 0 and (tmp_path / "t.json.gz").stat().st_size > 0
    assert out.stdout.strip().splitlines()[-1] == "no pandas"


def test_trace_tables_are_read_on_lookup_with_the_blocks_columns(run_dir: Path) -> None:
    from tracekit.store.rundir import RunDir

    run = RunDir.open(run_dir)
    tables = load_tables(run)
    assert "cpu_ops" in tables and "steps" in tables and "nope" not in tables
    # the big tables: only what the blocks read, a fresh read every lookup (nothing kept)
    for name in ("gpu_activity", "cpu_ops", "runtime", "kernel_bound"):
        t = tables[name]
        assert set(t.column_names) == set(COLUMNS[name]) & set(run.read_table(name).column_names)
        assert tables[name] is not t
        assert t.num_rows == run.read_table(name).num_rows
    # the small ones: whole, as read_table reads them, kept
    assert tables["steps"].equals(run.read_table("steps")) and tables["steps"] is tables["steps"]
