"""Rewrite docs/api.md's ```text blocks with what each ```python block before it prints (on copies of the
committed fixtures, as tests/test_api_doc.py runs them). Run it when tracekit's output changes on purpose."""

from __future__ import annotations

import contextlib
import io
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"


def main() -> int:
    page = REPO / "docs" / "api.md"
    text = page.read_text()
    pattern = re.compile(r"(```python\n)(.*?)(```\s*```text\n)(.*?)(```)", re.S)
    with tempfile.TemporaryDirectory() as tmp:
        shutil.copytree(FIXTURES / "record_gpu_smoke", Path(tmp) / "smoke")
        shutil.copy(FIXTURES / "gpu" / "b_two_requests.json.gz", tmp)
        here = os.getcwd()
        os.chdir(tmp)
        env: dict[str, object] = {}
        try:
            def run(m: re.Match[str]) -> str:
                out = io.StringIO()
                with contextlib.redirect_stdout(out):
                    exec(compile(m.group(2), "docs/api.md", "exec"), env)
                return m.group(1) + m.group(2) + m.group(3) + out.getvalue() + m.group(5)

            new = pattern.sub(run, text)
        finally:
            os.chdir(here)
    page.write_text(new)
    print("docs/api.md: " + ("rewritten" if new != text else "unchanged"), file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
