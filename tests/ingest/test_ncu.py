"""Reading Nsight Compute's CSV: real H200 counter files (tests/fixtures/ncu/README.md)."""

from __future__ import annotations

import csv
import re

import pytest
from helpers import FIXTURES

from tracekit.ingest import ncu

NCU = FIXTURES / "ncu"
STEP3 = re.compile(r"step(\d+)")  # the probe named its NVTX range "step3", not tracekit's format


def kineto_kernels() -> list[str]:
    rows = [line.split("|") for line in (NCU / "tiny_forward_kineto.txt").read_text().splitlines()]
    return [r[0] for r in rows if r[1] == "kernel"]


def test_mangled_names_demangle_to_kinetos_spelling() -> None:
    t = ncu.read_csv(NCU / "tiny_forward_mangled.csv").to_pandas()
    assert len(t) == 102
    # GIVEN ncu's mangled names THEN __cxa_demangle gives exactly the names torch.profiler recorded
    assert t["name"].tolist() == kineto_kernels()
    assert t["ncu_id"].tolist() == list(range(102))
    assert t["ordinal"].tolist() == list(range(102))  # no NVTX column: one group, launch order
    assert t["step_id"].isna().all()
    first = t.iloc[0]
    assert first["grid"].tolist() == [64, 1, 1] and first["block"].tolist() == [32, 1, 1] and first["stream"] == 7
    # byte and ns columns (--print-units base), "36,352"-style thousands separators
    assert first["ncu_dur_ns"] == 2880.0 and first["dram_bytes"] == 36352.0
    assert first["dram_pct"] == pytest.approx(0.26) and first["tensor_pct"] == 0.0
    assert t["sm_pct"].isna().all() and t["ncu_flops"].isna().all()


def test_units_are_scaled_whatever_print_units_said() -> None:
    text = (NCU / "tiny_forward_auto_units.csv").read_text()
    t = ncu.read_csv(NCU / "tiny_forward_auto_units.csv").to_pandas()
    # the file's first kernel: "2.528000" us and "0.000000" Kbyte written
    assert '"us"' in text.splitlines()[1] and '"2.528000"' in text.splitlines()[2]
    assert t.loc[0, "ncu_dur_ns"] == pytest.approx(2528.0)
    rows = [r.split('","') for r in text.splitlines()[2:]]
    writes_kb = [float(r[12]) for r in rows]
    reads_b = [float(r[11].replace(",", "")) for r in rows]
    assert t["dram_bytes"].tolist() == pytest.approx([a + 1000 * b for a, b in zip(reads_b, writes_kb, strict=True)])


def test_nvtx_columns_give_the_step() -> None:
    t = ncu.read_csv(NCU / "tiny_forward_nvtx.csv", step_pattern=STEP3).to_pandas()
    assert len(t) == 102 and set(t["step_id"]) == {3}
    assert t["ordinal"].tolist() == list(range(102))
    # tracekit's own pattern finds no tracekit step range here: no step, never a guessed one
    assert ncu.read_csv(NCU / "tiny_forward_nvtx.csv")["step_id"].null_count == 102


def test_speed_of_light_inputs_are_read() -> None:
    t = ncu.read_csv(NCU / "tiny_forward_sol.csv", required=(ncu.SM_PCT, ncu.MEMORY_PCT)).to_pandas()
    assert len(t) == 102
    assert t["sm_pct"].notna().all() and t["memory_pct"].notna().all()
    assert t["dram_pct"].notna().all()  # gpu__dram_throughput stands in for dram__throughput
    assert t["waves"].notna().all()


def test_graph_replay_is_read_per_node() -> None:
    t = ncu.read_csv(NCU / "tiny_forward_graph_nodes.csv").to_pandas()
    assert len(t) == 121  # one row per kernel node of one replay
    assert {7, 29} <= set(t["stream"])
    assert (t["ncu_dur_ns"] > 0).all()
    assert not any(n.startswith("_Z") for n in t["name"])


def test_bad_counters_files_are_one_clear_error(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ncu.CountersFormatError, match="no such counters file"):
        ncu.read_csv(tmp_path / "missing.csv")
    junk = tmp_path / "junk.csv"
    junk.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(ncu.CountersFormatError, match="not an Nsight Compute CSV"):
        ncu.read_csv(junk)
    head = (NCU / "tiny_forward_mangled.csv").read_text().splitlines()[:2]
    empty = tmp_path / "empty.csv"
    empty.write_text("\n".join(["==PROF== Disconnected", *head]) + "\n")
    with pytest.raises(ncu.CountersFormatError, match="no kernels"):
        ncu.read_csv(empty)
    with pytest.raises(ncu.CountersFormatError, match="not in the counters file: sm__throughput"):
        ncu.read_csv(NCU / "tiny_forward_mangled.csv", required=(ncu.SM_PCT,))
    rows = list(csv.reader((NCU / "tiny_forward_mangled.csv").open()))
    i = rows[0].index(ncu.TENSOR_PCT)
    for r in rows[2:]:
        r[i] = "(!) n/a"  # what ncu writes for a metric this GPU does not have (and exits 0)
    na = tmp_path / "na.csv"
    with na.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(rows)
    with pytest.raises(ncu.CountersFormatError, match="n/a for every kernel"):
        ncu.read_csv(na, required=(ncu.TENSOR_PCT,))


def test_the_details_page_reads_as_the_raw_page() -> None:
    """pages_h200_*: one ncu report of a fp16 GEMM, an add and a softmax inside a tracekit NVTX step,
    exported as the raw page, as the details page (ncu's default CSV: one row per kernel and metric,
    named as its sections show them, with rule rows) and, for a report of three metrics by id, as the
    details page again (each value in its own unit: Kbyte, Mbyte, us). scripts/gpu/ncu_details.sh."""
    raw = ncu.read_csv(NCU / "pages_h200_raw.csv").to_pandas()
    details = ncu.read_csv(NCU / "pages_h200_details.csv").to_pandas()
    assert list(details["ncu_id"]) == list(raw["ncu_id"]) == [2, 3, 4] and list(details["step_id"]) == [0, 0, 0]
    assert list(details["name"]) == list(raw["name"])
    # the details page prints three significant digits in its own units (32.32 us, 8.19 us)
    assert details["ncu_dur_ns"].to_numpy() == pytest.approx(raw["ncu_dur_ns"].to_numpy(), rel=2e-3)
    for c in ("dram_pct", "sm_pct", "memory_pct", "waves"):
        assert details[c].to_numpy() == pytest.approx(raw[c].to_numpy(), abs=0.006), c
    # the same counter classes: the GEMM compute-bound (SM 76%), the add (memory 43%) and the softmax
    # (SM 46%) under the 60% line
    from tracekit.analysis.counters import counter_classes
    assert list(counter_classes(details)) == list(counter_classes(raw)) == ["compute", "latency", "latency"]
    by_id = ncu.read_csv(NCU / "pages_h200_details_metrics.csv").to_pandas()
    assert list(by_id["ncu_dur_ns"]) == [33310.0, 8510.0, 53540.0]  # us, scaled
    assert list(by_id["dram_bytes"]) == [16.80e6, 16.78e6, 8.44e6]  # Mbyte reads + 0 byte writes


def test_a_csv_without_any_counter_tracekit_reads_is_refused(tmp_path) -> None:  # type: ignore[no-untyped-def]
    rows = list(csv.reader((NCU / "pages_h200_details.csv").open()))
    h = rows[0]
    name = h.index("Metric Name")
    kept = [h] + [r for r in rows[1:] if len(r) > name and r[name] in ("", "Elapsed Cycles", "SM Frequency")]
    other = tmp_path / "other.csv"
    with other.open("w", newline="") as f:
        csv.writer(f, quoting=csv.QUOTE_ALL).writerows(kept)
    with pytest.raises(ncu.CountersFormatError, match="none of the metrics tracekit reads"):
        ncu.read_csv(other)


def test_demangle_leaves_plain_names() -> None:
    assert ncu.demangle(["nvjet_sm90_hsh_64x8_64x16_2x4_h_bz_TNT", "_Znot_really"]) == [
        "nvjet_sm90_hsh_64x8_64x16_2x4_h_bz_TNT", "_Znot_really"]
    assert ncu.demangle(["_ZN2at6native24vectorized_gather_kernelILi16ElEEvPcS2_PT0_illllb"]) == [
        "void at::native::vectorized_gather_kernel<16, long>(char*, char*, long*, int, long, long, long, long, bool)"]
