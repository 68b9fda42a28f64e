"""docs/notebooks/tracekit-tour.ipynb runs from top to bottom (nbclient, a real ipykernel), so it never rots."""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest
from helpers import FIXTURES, REPO

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")

NOTEBOOK = REPO / "docs" / "notebooks" / "tracekit-tour.ipynb"


def _digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.slow
def test_the_tour_notebook_executes(monkeypatch: pytest.MonkeyPatch) -> None:
    fixtures = {name: _digest(FIXTURES / name) for name in ("record_gpu_smoke", "gpu")}
    nb = nbformat.read(NOTEBOOK, as_version=4)
    # the kernel is this interpreter (ipykernel's native "python3" spec), with this tracekit
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(NOTEBOOK.parent)}})
    client.execute()  # raises CellExecutionError on the first failing cell
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    images = [o for o in outputs if "image/svg+xml" in o.get("data", {})]
    assert len(images) == 2  # the phase split and the roofline
    text = "\n".join(o.get("text", "") or o.get("data", {}).get("text/plain", "") for o in outputs)
    assert "outside every step: " in text
    assert "smoke-b1" in text and "plain-b2" in text  # the query across the two runs
    assert "report.html: " in text
    # the committed runs were copied, never written to
    assert {name: _digest(FIXTURES / name) for name in fixtures} == fixtures
    # the split table holds every class: each phase's shares sum to 100%
    assert "the classes of each phase add up to: prefill 100.0%, decode 100.0%" in text
