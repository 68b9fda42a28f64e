"""The house's rules that import-linter cannot see: no private names across modules."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from helpers import REPO, need

ROOTS = {"tracekit": REPO / "tracekit", "tracekit.analysis": REPO / "analysis",
         "tracekit.collectors": REPO / "collectors"}


def _modules() -> dict[str, Path]:
    out: dict[str, Path] = {}
    for pkg, root in ROOTS.items():
        for f in root.rglob("*.py"):
            rel = f.relative_to(root).with_suffix("")
            if rel.parts and rel.parts[0] in ("analysis", "collectors") and pkg == "tracekit":
                continue  # setup.sh's links to the top-level folders
            parts = [p for p in rel.parts if p != "__init__"]
            out[".".join([pkg, *parts])] = f
    return out


@pytest.mark.slow
def test_no_private_name_is_imported_from_another_module() -> None:
    mods = _modules()
    bad = []
    for name, path in mods.items():
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracekit"):
                if node.module == name or (node.module + ".").startswith(name + "."):
                    continue
                for alias in node.names:
                    target = f"{node.module}.{alias.name}"
                    is_module = target in mods
                    private = alias.name.startswith("_") and not alias.name.startswith("__")
                    if private and not (is_module and name.startswith(node.module + ".")) and not (
                            is_module and name == node.module):
                        bad.append(f"{name}: from {node.module} import {alias.name}")
            if isinstance(node, ast.Attribute) and not node.attr.startswith("__") and node.attr.startswith("_"):
                base = node.value
                if isinstance(base, ast.Name) and base.id in _imported_modules(tree) and base.id not in ("self", "cls"):
                    bad.append(f"{name}: {base.id}.{node.attr}")
    assert bad == [], "\n".join(bad)


def _imported_modules(tree: ast.Module) -> set[str]:
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("tracekit"):
            names.update(a.asname or a.name for a in node.names)
        elif isinstance(node, ast.Import):
            names.update(a.asname or a.name.split(".")[0] for a in node.names if a.name.startswith("tracekit"))
    return names


def test_a_wrong_way_import_breaks_the_contracts(tmp_path: Path) -> None:
    """lint-imports (as CI runs it) fails when a lower room imports a higher one."""
    import shutil
    import subprocess
    import sys

    lint = Path(sys.executable).parent / "lint-imports"
    need("lint-imports", lint.exists())
    farm = tmp_path / "repo"
    shutil.copytree(REPO / "tracekit", farm / "tracekit", symlinks=False,
                    ignore=shutil.ignore_patterns("analysis", "collectors", "__pycache__", "*.so"))
    shutil.copytree(REPO / "analysis", farm / "tracekit" / "analysis", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(REPO / "collectors", farm / "tracekit" / "collectors",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "pyproject.toml", farm / "pyproject.toml")
    env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": str(farm)}
    ok = subprocess.run([str(lint), "--no-cache"], cwd=farm, env=env, capture_output=True, text=True)
    assert ok.returncode == 0, ok.stdout[-2000:]
    (farm / "tracekit" / "model" / "schema.py").write_text(
        (farm / "tracekit" / "model" / "schema.py").read_text() + "\nfrom tracekit.store import rundir  # noqa\n")
    broken = subprocess.run([str(lint), "--no-cache"], cwd=farm, env=env, capture_output=True, text=True)
    assert broken.returncode != 0 and "tracekit.model.schema -> tracekit.store.rundir" in broken.stdout
