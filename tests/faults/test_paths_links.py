"""Paths tracekit writes or deletes: links, foreign folders, datasets.

Invariant: tracekit deletes or replaces only what it can prove it made (a run's run.json, a sweep's
sweep.json, a dataset's marker, a staging folder of its own); it never writes through a link out of a
run (lock files opened without following links); a user's link to a run stays a link; every refusal is
one line.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from faultlib import cli, good_run, one_line, outside, outside_unchanged, snapshot, trace_doc, write_trace

from tracekit.store import dataset as _ds


@pytest.fixture()
def run(tmp_path: Path, good_template: Path) -> Path:
    dest = tmp_path / "runs" / "real"
    dest.parent.mkdir()
    shutil.copytree(good_template, dest)
    return dest


def test_lock_file_that_is_a_link_is_never_followed(tmp_path: Path, run: Path) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    (run / ".tracekit.lock").unlink(missing_ok=True)
    os.symlink("../../victim.txt", run / ".tracekit.lock")
    src = write_trace(tmp_path / "t.json", trace_doc())
    for argv in (["analyze", run], ["ingest", src, "--out", run, "--force"]):
        before = snapshot(run)
        r = cli(argv)
        one_line(r)
        assert r.rc == 2 and "symbolic link" in r.err
        assert victim.read_text() == "keep me\n"
        assert snapshot(run) == before


def test_a_link_to_a_run_stays_a_link(tmp_path: Path, run: Path) -> None:
    link = run.parent / "latest"
    link.symlink_to("real")
    src = write_trace(tmp_path / "t.json", trace_doc())
    for argv in (["analyze", link], ["ingest", src, "--out", link, "--force"], ["analyze", link]):
        r = cli(argv)
        one_line(r)
        assert r.rc == 0, r.err
        assert link.is_symlink() and os.readlink(link) == "real"
        assert sorted(p.name for p in run.parent.iterdir()) == ["latest", "real"]  # nothing left beside
        assert (run / "run.json").is_file()


def test_a_linked_folder_inside_a_run_is_refused_before_any_change(tmp_path: Path, run: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    shutil.copytree(run / "tables", elsewhere)
    shutil.rmtree(run / "tables")
    (run / "tables").symlink_to(elsewhere)
    before, there = snapshot(run), snapshot(elsewhere)
    r = cli(["analyze", run])
    one_line(r)
    assert r.rc == 2 and "symbolic link" in r.err
    assert snapshot(run) == before and snapshot(elsewhere) == there
    assert sorted(p.name for p in run.parent.iterdir()) == ["real"]


@pytest.mark.parametrize("flag", ["--force", "--resume"])
@pytest.mark.parametrize("kind", ["thesis", "run"])
def test_sweep_never_replaces_or_continues_a_folder_that_is_not_a_sweep(tmp_path: Path, good_template: Path,
                                                                       flag: str, kind: str) -> None:
    out = tmp_path / "out"
    if kind == "run":
        shutil.copytree(good_template, out)
    else:
        (out / "notes").mkdir(parents=True)
        (out / "thesis.tex").write_text("\\chapter{1}\n")
        (out / "notes" / "a.md").write_text("a\n")
    before, around = snapshot(out), outside(tmp_path, out)
    r = cli(["sweep", "--quick", "--out", out, flag])
    one_line(r)
    assert r.rc == 2 and ("not a sweep directory" in r.err or "a run directory" in r.err), r.err
    assert snapshot(out) == before
    outside_unchanged(around, tmp_path, out)


def test_staging_named_folder_that_is_not_ours_is_left_alone(tmp_path: Path, run: Path) -> None:
    from tracekit.store.rundir import _staging_tag

    theirs = run.parent / f".tracekit-{_staging_tag(run)}-mine"
    theirs.mkdir()
    (theirs / "paper.tex").write_text("x\n")
    r = cli(["analyze", run])
    one_line(r)
    assert (theirs / "paper.tex").read_text() == "x\n"


def _dataset(tmp_path: Path, name: str) -> tuple[Path, Path]:
    src = tmp_path / "src"
    src.mkdir(exist_ok=True)
    t = write_trace(src / f"{name}.json", trace_doc())
    return t, tmp_path / "ds"


@pytest.mark.parametrize("ids", [("exp/1", "exp=1"), ("exp=1", "exp-1"), ("a b", "a-b"), ("x.", "x")])
def test_dataset_run_ids_that_would_share_a_folder_are_refused(tmp_path: Path, ids: tuple[str, str]) -> None:
    t, ds = _dataset(tmp_path, "t")
    r = cli(["ingest", t, "--dataset", "--engine", "serial", "--out", ds, "--run-id", ids[0]])
    one_line(r)
    assert r.rc == 0, r.err
    before = snapshot(ds)
    r = cli(["ingest", t, "--dataset", "--engine", "serial", "--out", ds, "--run-id", ids[1]])
    one_line(r)
    assert r.rc == 2 and "run_id=" in r.err, r.err
    assert snapshot(ds) == before
    # the same id again replaces its own run, as before
    r = cli(["ingest", t, "--dataset", "--engine", "serial", "--out", ds, "--run-id", ids[0]])
    assert r.rc == 0, r.err


def test_dataset_file_names_that_would_share_a_run_id_are_refused(tmp_path: Path) -> None:
    src = tmp_path / "src"
    src.mkdir()
    for name in ("exp=1", "exp-1"):
        write_trace(src / f"{name}.json", trace_doc())
    doc = trace_doc()
    doc["traceEvents"][0]["name"] = "other"  # not the same bytes
    write_trace(src / "exp=1.json", doc)
    r = cli(["ingest", src, "--dataset", "--engine", "serial", "--out", tmp_path / "ds"])
    one_line(r)
    assert r.rc == 2 and "both stored as run_id=exp-1" in r.err, r.err
    assert not (tmp_path / "ds").exists()


@pytest.mark.parametrize("rid", ["__HIVE_DEFAULT_PARTITION__", "__hive_default_partition__"])
def test_reserved_partition_value_is_refused(tmp_path: Path, rid: str) -> None:
    t, ds = _dataset(tmp_path, "t")
    r = cli(["ingest", t, "--dataset", "--engine", "serial", "--out", ds, "--run-id", rid])
    one_line(r)
    assert r.rc == 2 and "reserved" in r.err


def test_outputs_never_replace_a_datasets_own_files(tmp_path: Path, good_template: Path) -> None:
    t, ds = _dataset(tmp_path, "t")
    assert cli(["ingest", t, "--dataset", "--engine", "serial", "--out", ds]).rc == 0
    part = next(ds.rglob("*.parquet"))
    targets = [ds / _ds.MARKER, part, ds / "steps" / "x.parquet"]
    before = snapshot(ds)
    for out in targets:
        for argv in (["query", "select 1", "--runs", good_template, "--out", out],
                     ["export", good_template, "--out", out],
                     ["report", good_template, "--html", out],
                     ["diff", good_template, good_template, "--out", out]):
            r = cli(argv)
            one_line(r)
            assert r.rc == 2, (argv, r.err)  # "inside the dataset", or refused earlier (diff's file types)
            assert "inside the dataset" in r.err or argv[0] == "diff", r.err
    assert snapshot(ds) == before


def test_one_trace_given_twice_is_refused(tmp_path: Path) -> None:
    t = write_trace(tmp_path / "t.json", trace_doc())
    (tmp_path / "link.json").symlink_to("t.json")
    shutil.copy(t, tmp_path / "copy.json")
    for other, why in ((t, "same file"), (tmp_path / "link.json", "same file"), (tmp_path / "copy.json", "same bytes")):
        for extra in ([], ["--dataset", "--engine", "serial"]):
            r = cli(["ingest", t, other, "--out", tmp_path / "out", *extra])
            one_line(r)
            assert r.rc == 2 and why in r.err, r.err
            assert not (tmp_path / "out").exists()


def test_good_run_helper_still_works(tmp_path: Path) -> None:
    # the harness the other classes use is unaffected by the checks above
    assert (good_run(tmp_path, "G") / "run.json").is_file()
