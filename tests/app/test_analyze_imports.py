"""Importing analyze's use case loads no pandas: the passes, and what they run on, load when they run."""

from __future__ import annotations

import subprocess
import sys


def test_importing_the_analyze_use_case_loads_no_pandas() -> None:
    code = "import sys, tracekit.app.analyze; print(sorted(m for m in sys.modules if m.split('.')[0] == 'pandas'))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr
