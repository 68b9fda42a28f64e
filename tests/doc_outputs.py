"""Every example output in docs/ and the README, produced from the committed fixtures and compared.

An output block in a page is the fenced block right after a ``<!-- output: KEY -->`` line; KEY names a
producer below, which runs the commands the block shows (on copies of the fixtures, in a temporary
directory whose runs sit under ``runs/``) and returns their text. tests/test_doc_outputs.py compares
every block with its producer's text, and fails on a block that shows tracekit's output without a
marker.

    python tests/doc_outputs.py --write    # rewrite the blocks when tracekit's output changes on purpose
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import re
import shutil
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
FIXTURES = REPO / "tests" / "fixtures"
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
MARKER = re.compile(r"<!-- output: ([\w-]+) -->\n```[a-z]*\n(.*?)```", re.S)
# A fenced block that shows what tracekit printed (a command's output or a summary) needs a marker.
SHOWS_OUTPUT = re.compile(r"^(\$ tracekit |tracekit record: |run \S+ \()", re.M)
WIDTH = "200"  # the terminal width the rich tables are drawn at
# Pages whose example outputs come from runs not committed here (no producer yet): left out of the
# unmarked-output check, by name, so that a new page is covered by default.
NOT_YET: set[str] = set()


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A temporary directory with runs/smoke (the H200 recording) and runs/plain.json.gz (a trace
    recorded without tracekit), as the current directory, COLUMNS fixed."""
    here, cols = os.getcwd(), os.environ.get("COLUMNS")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        (root / "runs").mkdir()
        shutil.copytree(FIXTURES / "record_gpu_smoke", root / "runs" / "smoke")
        shutil.copy(FIXTURES / "gpu" / "b_two_requests.json.gz", root / "runs" / "plain.json.gz")
        os.chdir(root)
        os.environ["COLUMNS"] = WIDTH
        try:
            yield root
        finally:
            os.chdir(here)
            if cols is None:
                os.environ.pop("COLUMNS", None)
            else:
                os.environ["COLUMNS"] = cols


def tk(*args: str) -> str:
    """``$ tracekit ARGS`` and what it printed on stdout."""
    from tracekit.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        code = main(list(args))
    assert code in (0, None), (args, code)
    shown = " ".join(f'"{a}"' if " " in a else a for a in args)
    return f"$ tracekit {shown}\n" + "\n".join(line.rstrip() for line in out.getvalue().splitlines()) + "\n"


def record_summary() -> str:
    from tracekit.report.record_summary import render

    m = json.loads((Path("runs") / "smoke" / "run.json").read_text())
    return render(m, "runs/smoke") + "\n"


def analyze() -> str:
    return tk("analyze", "runs/smoke")


def report() -> str:
    tk("analyze", "runs/smoke")
    return tk("report", "runs/smoke", "--html", "report.html")


def query() -> str:
    tk("analyze", "runs/smoke")
    return tk("query", "select kind, count(*) as steps, round(avg(cpu_end_ns - cpu_start_ns) / 1e6, 2) as ms "
              "from steps group by kind order by kind", "--runs", "runs")


def diff() -> str:
    tk("analyze", "runs/smoke")
    tk("analyze", "runs/plain.json.gz")
    return tk("diff", "runs/smoke", "runs/plain.tracekit")


def whatif_graphs() -> str:
    """The smoke run under CUDA graphs without the profiler; lines past 150 characters cut, as the page says."""
    text = tk("whatif", "runs/smoke", "--graphs", "--no-profiler")
    return "".join((ln if len(ln) <= 150 else ln[:147] + "...") + "\n" for ln in text.splitlines())


PRODUCERS: dict[str, Callable[[], str]] = {
    "record-summary-smoke": record_summary,
    "analyze-smoke": analyze,
    "report-smoke": report,
    "query-smoke": query,
    "diff-smoke": diff,
    "whatif-graphs-smoke": whatif_graphs,
}


def produce(key: str) -> str:
    with workspace():
        return PRODUCERS[key]()


def blocks(page: Path) -> list[tuple[str, str]]:
    """(key, shown text) of every marked output block of a page."""
    return MARKER.findall(page.read_text())


def unmarked(page: Path) -> list[str]:
    """The first line of each fenced block that shows tracekit's output without a marker."""
    if page.name in NOT_YET:
        return []
    text = page.read_text()
    out = []
    for m in re.finditer(r"(?:^|\n)(<!-- output: [\w-]+ -->\n)?```[a-z]*\n(.*?)```", text, re.S):
        if m.group(1) is None and SHOWS_OUTPUT.search(m.group(2)):
            out.append(f"{page.name}: {m.group(2).splitlines()[0]}")
    return out


def write() -> None:
    cache: dict[str, str] = {}
    for page in PAGES:
        text = page.read_text()

        def fill(m: re.Match[str]) -> str:
            key = m.group(1)
            if key not in cache:
                cache[key] = produce(key)
            fence = m.group(0).split("\n", 2)[1]
            return f"<!-- output: {key} -->\n{fence}\n{cache[key]}```"

        new = MARKER.sub(fill, text)
        if new != text:
            page.write_text(new)
            print(f"rewrote {page.relative_to(REPO)}", file=sys.stderr)


if __name__ == "__main__":
    if sys.argv[1:] != ["--write"]:
        raise SystemExit("usage: python tests/doc_outputs.py --write")
    write()
