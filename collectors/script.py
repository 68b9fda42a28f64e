"""``tracekit record -- python my_script.py ARGS``: a user's script run in-process (runpy) inside a Recording."""

from __future__ import annotations

import os
import runpy
import sys
import traceback
from pathlib import Path

from tracekit.collectors.options import RecordOptions
from tracekit.collectors.recording import Recording, create_run
from tracekit.errors import UsageError
from tracekit.store.rundir import RunDir


def parse_script_argv(argv: list[str]) -> tuple[str, str, list[str]]:
    """``python x.py A`` / ``python -m pkg A`` / ``x.py A`` -> (kind, target, args)."""
    if not argv:
        raise UsageError("nothing to run after --")
    rest = list(argv)
    if Path(rest[0]).name.startswith("python"):
        rest = rest[1:]
        while rest and rest[0].startswith("-") and rest[0] != "-m":
            rest = rest[1:]  # interpreter flags (-u, -O): meaningless in-process
        if not rest:
            raise UsageError("no script after python")
        if rest[0] == "-m":
            if len(rest) < 2:
                raise UsageError("python -m needs a module name")
            return "module", rest[1], rest[2:]
    if not rest[0].endswith(".py"):
        raise UsageError(
            f"can only wrap Python scripts: tracekit record -- python SCRIPT.py ARGS (got {argv[0]!r})"
        )
    if not Path(rest[0]).is_file():
        raise UsageError(f"script not found: {rest[0]}")
    return "script", rest[0], rest[1:]


def run_script(argv: list[str], opts: RecordOptions) -> tuple[RunDir, int]:
    """Run a Python script in-process under a Recording; (run, the script's exit code)."""
    kind, target, args = parse_script_argv(argv)
    run = create_run(opts, workload={"kind": "script", "argv": list(argv)})
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    code = 0
    rec = Recording(run, opts)
    rec.__enter__()
    exc: BaseException | None = None
    try:
        if kind == "script":
            sys.argv = [target, *args]
            sys.path.insert(0, str(Path(target).resolve().parent))
            runpy.run_path(target, run_name="__main__")
        else:
            sys.argv = [target, *args]
            sys.path.insert(0, os.getcwd())
            runpy.run_module(target, run_name="__main__", alter_sys=True)
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        if code != 0:
            exc = RuntimeError(f"script exited with status {code}")
    except KeyboardInterrupt as e:
        exc = e
    except Exception as e:
        traceback.print_exc()
        exc = e
        code = 1
    finally:
        sys.argv, sys.path[:] = saved_argv, saved_path
        rec.finish(exc)
    if isinstance(exc, KeyboardInterrupt):
        raise exc
    if exc is not None and code == 0:
        code = 1
    run.update_manifest(script_exit_code=code)
    return run, code
