"""Fault class: hostile Nsight Compute CSVs for ``tracekit counters --csv`` (tracekit.ingest.ncu.read_csv).

Invariant: a file ncu could have written (a BOM, UTF-16, exports appended to one file, kernel names
past the csv module's field limit) reads as the plain file does; anything else in a column tracekit
reads (an ID or stream that is no kernel's, a decimal comma, inf, a negative count, a launch size
past int32) is a CountersFormatError (one line, exit 1), never a traceback or a number off by 1000x.
"""

from __future__ import annotations

import csv
import io
from pathlib import Path

import pytest
from helpers import FIXTURES

from tracekit.ingest import ncu

SRC = FIXTURES / "ncu" / "tiny_forward_mangled.csv"
DUR = "gpu__time_duration.sum"


def _rows() -> list[list[str]]:
    return list(csv.reader(io.StringIO(SRC.read_text())))


def _write(path: Path, rows: list[list[str]]) -> Path:
    buf = io.StringIO()
    csv.writer(buf, quoting=csv.QUOTE_ALL, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue())
    return path


def _set(rows: list[list[str]], col: str, value: str, row: int = 3) -> list[list[str]]:
    rows[2 + row][rows[0].index(col)] = value
    return rows


@pytest.mark.parametrize("encode", [
    lambda t: b"\xef\xbb\xbf" + t.encode(),  # UTF-8 BOM (a spreadsheet's save)
    lambda t: t.encode("utf-16"),  # UTF-16 with its BOM (Windows)
])
def test_a_byte_order_mark_is_read_not_refused(tmp_path: Path, encode: object) -> None:
    # It was "not an Nsight Compute CSV": the BOM stuck to the "ID" header.
    f = tmp_path / "bom.csv"
    f.write_bytes(encode(SRC.read_text()))  # type: ignore[operator]
    assert ncu.read_csv(f).equals(ncu.read_csv(SRC))


def test_exports_appended_to_one_file_repeat_headers_that_are_no_kernels(tmp_path: Path) -> None:
    # The repeated header's "ID" cell was parsed as a kernel ID (ValueError: NaN to integer).
    rows = _rows()
    f = _write(tmp_path / "two.csv", rows + rows[:2] + rows[2:])
    got = ncu.read_csv(f).to_pandas()
    assert len(got) == 2 * (len(rows) - 2)
    assert got["ncu_dur_ns"].notna().all()


def test_a_kernel_name_past_the_csv_field_limit_is_read(tmp_path: Path) -> None:
    f = _write(tmp_path / "long.csv", _set(_rows(), "Kernel Name", "k" * 200_000))  # _csv.Error before
    assert ncu.read_csv(f).to_pandas()["name"].iloc[3] == "k" * 200_000


@pytest.mark.parametrize(("col", "value"), [
    ("ID", "n/a"), ("ID", ""), ("ID", "inf"), ("ID", "1" * 30), ("ID", "-5"), ("ID", "1.5"),
    ("Stream", "inf"), ("Stream", "9" * 25),
    ("Grid Size", "(99999999999999, 1, 1)"),
    (DUR, "nan"), (DUR, "inf"), (DUR, "-100"),
    (DUR, "1,5"), (DUR, "1.830,5"),  # a decimal-comma locale: was read as 15 and 1.8305
])
def test_values_ncu_never_writes_are_one_error(tmp_path: Path, col: str, value: str) -> None:
    f = _write(tmp_path / "bad.csv", _set(_rows(), col, value))
    with pytest.raises(ncu.CountersFormatError, match="counters file's"):
        ncu.read_csv(f)


def test_a_step_id_past_any_step_is_outside_every_step(tmp_path: Path) -> None:
    rows = _rows()
    rows[0].insert(4, "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg")
    for r in rows[1:]:
        r.insert(4, "")
    rows[2][4] = '1  "<default domain>:tracekit.step id=' + "9" * 23 + ':none" '  # OverflowError before
    rows[3][4] = '1  "<default domain>:tracekit.step id=4:none" '
    got = ncu.read_csv(_write(tmp_path / "steps.csv", rows)).to_pandas()
    assert got["step_id"].isna().iloc[0] and got["step_id"].iloc[1] == 4


@pytest.mark.parametrize(("args", "said"), [
    (["--steps", "5:2"], "--steps '5:2'"),  # was named "--trace-steps", a flag counters does not have
    (["--steps", "x"], "--steps 'x'"),
    (["--timeout", "nan"], "--timeout nan"),  # passed click's range: a wait for ncu that never times out
])
def test_counters_options_out_of_range_name_the_option(tmp_path: Path, args: list[str], said: str) -> None:
    from faultlib import cli, one_line

    run = tmp_path / "run"
    run.mkdir()
    (run / "run.json").write_text("{}")
    r = cli(["counters", run, *args, "--csv", SRC])
    one_line(r)
    assert r.rc == 2 and f"error: {said}" in r.err, r.err
