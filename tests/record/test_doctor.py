"""`tracekit doctor`: every probe against fakes (NVML, torch, ncu, the driver's parameters), and for real here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import fake_pynvml as fk
import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.collectors import doctor
from tracekit.collectors.doctor import FAIL, OK, WARN

pynvml = need_module("pynvml")


def fake_torch(n: int = 1, name: str = "NVIDIA H200", cuda: str | None = "13.0") -> Any:
    return SimpleNamespace(
        __version__="2.11.0+cu130", version=SimpleNamespace(cuda=cuda),
        cuda=SimpleNamespace(is_available=lambda: n > 0, device_count=lambda: n, get_device_name=lambda i: name,
                             get_device_capability=lambda i: (9, 0),
                             get_device_properties=lambda i: SimpleNamespace(total_memory=141 * 2**30)))


TRANSFORMERS = SimpleNamespace(__version__="5.17.0")


def _by_name(checks: list[doctor.Check]) -> dict[str, doctor.Check]:
    return {c.name: c for c in checks}


def test_nvml_driver_and_gpm_on_a_hopper() -> None:
    c = _by_name(doctor.probe_nvml(fk.FakeNvml(device_count=2)))
    assert c["driver"].status == OK and c["driver"].detail == "NVIDIA 999.99"
    assert c["NVML"].status == OK and c["NVML"].detail.startswith("NVML 13.999, 2 GPU(s)")
    assert c["GPM 0"].status == OK and c["GPM 1"].status == OK and c["GPM 0"].detail.startswith("Fake H200: DRAM")


@pytest.mark.parametrize(("fake", "name", "needle", "fix"), [
    (fk.gpm_unsupported(), "GPM 0", "not supported (GPM needs Hopper or later", "Hopper"),
    (fk.FakeNvml(gpm_query_error=pynvml.NVML_ERROR_FUNCTION_NOT_FOUND), "GPM 0", "GPM query failed", "driver"),
    (fk.no_library(), "NVML", "not available: ", "install the NVIDIA driver"),
    (fk.FakeNvml(init_error=pynvml.NVML_ERROR_DRIVER_NOT_LOADED), "NVML", "not available: ", "NVIDIA driver"),
])
def test_what_nvml_cannot_do_says_why_and_how_to_fix_it(fake: Any, name: str, needle: str, fix: str) -> None:
    c = _by_name(doctor.probe_nvml(fake))
    assert c[name].status == WARN and needle in c[name].detail, c[name]
    assert c[name].fix and fix in c[name].fix
    if name == "NVML":
        assert "NVML error" in c["NVML"].detail and c["GPM"].detail == "not checked: needs NVML"
    assert fake.initialised == 0  # every successful init was shut down


def test_no_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    c = _by_name(doctor.probe_nvml())
    assert c["NVML"].status == WARN and "pynvml not installed" in c["NVML"].detail
    assert "nvidia-ml-py" in (c["NVML"].fix or "")


def _ncu(tmp_path: Path) -> str:
    p = tmp_path / "ncu"
    p.write_text("#!/bin/sh\necho 'NVIDIA (R) Nsight Compute Command Line Profiler'\n"
                 "echo 'Version 2025.3.1.0 (build 36398880) (public-release)'\n")
    p.chmod(0o755)
    return str(p)


@pytest.mark.parametrize(("setting", "euid", "status", "needle"), [
    ("RmProfilingAdminOnly: 1", 1000, WARN, "not permitted: RmProfilingAdminOnly=1 and not root: ncu fails with ERR_NVGPUCTRPERM"),
    ("RmProfilingAdminOnly: 1", 0, OK, "permitted (RmProfilingAdminOnly=1, running as root)"),
    ("RmProfilingAdminOnly: 0", 1000, OK, "permitted (RmProfilingAdminOnly=0: every user may)"),
    (None, 1000, WARN, "unknown ("),
])
def test_counters_permission_from_the_driver_setting(tmp_path: Path, setting: str | None, euid: int, status: str,
                                                      needle: str) -> None:
    params = tmp_path / "params"
    if setting is not None:
        params.write_text(f"ResmanDebugLevel: 4294967295\n{setting}\nEnableMSI: 1\n")
    c = _by_name(doctor.probe_ncu(_ncu(tmp_path), params=params, euid=euid))
    assert c["Nsight Compute"].status == OK and c["Nsight Compute"].detail.startswith("2025.3.1.0 at ")
    assert c["counters"].status == status and needle in c["counters"].detail, c["counters"]
    if status != OK:
        assert c["counters"].fix
    if euid == 1000 and setting and setting.endswith("1"):
        assert "NVreg_RestrictProfilingToAdminUsers=0" in (c["counters"].fix or "")


NCU_OK = """==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "vectorized_elementwise_kernel" - 0: 0%....50%....100% - 1 pass
==PROF== Disconnected from process 4242
[4242] python3.12@127.0.0.1
  void at::native::vectorized_elementwise_kernel<4, ...>(int, T2, T3) (1, 1, 1)x(128, 1, 1), Context 1, Stream 7, Device 0, CC 9.0
    Section: Command line profiler metrics
    ----------------------- ----------- ------------
    Metric Name             Metric Unit Metric Value
    ----------------------- ----------- ------------
    gpu__time_duration.sum      nsecond        2,144
    ----------------------- ----------- ------------
"""
NCU_PERM = ("==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters "
            "on the target device 0.\n")


@pytest.mark.parametrize(("rc", "out", "status", "needle"), [
    (0, NCU_OK, OK, "permitted: ncu read gpu__time_duration of a probe kernel (2,144)"),
    (0, NCU_PERM, WARN, "not permitted: ncu says ERR_NVGPUCTRPERM"),
    (1, "==ERROR== Failed to initialize the profiler: LibraryNotLoaded\n", WARN, "LibraryNotLoaded"),
    (0, "==WARNING== No kernels were profiled.\n", WARN, "inconclusive (exit 0): ==WARNING== No kernels were profiled."),
])
def test_counters_probe_reads_what_ncu_says(tmp_path: Path, rc: int, out: str, status: str, needle: str) -> None:
    calls: list[list[str]] = []

    def run(cmd: list[str], **kw: Any) -> subprocess.CompletedProcess[str]:
        calls.append(cmd)
        if "--version" in cmd:
            return subprocess.CompletedProcess(cmd, 0, "Version 2025.3.1.0 (build 1)\n", "")
        return subprocess.CompletedProcess(cmd, rc, out, "")

    c = _by_name(doctor.probe_ncu("/opt/ncu", run=run, probe_counters=True, python="/usr/bin/python3"))
    assert c["counters"].status == status and needle in c["counters"].detail, c["counters"]
    probe = calls[-1]
    assert probe[:3] == ["/opt/ncu", "--clock-control", "none"] and "gpu__time_duration.sum" in probe
    assert probe[-3:-1] == ["/usr/bin/python3", "-c"]


def test_no_ncu_and_no_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(doctor, "find_ncu", lambda env=None: None)
    c = _by_name(doctor.probe_ncu())
    assert c["Nsight Compute"].status == WARN and "ncu not found" in c["Nsight Compute"].detail
    assert c["counters"].detail == "not checked: needs ncu" and "Nsight Compute" in (c["counters"].fix or "")
    monkeypatch.undo()
    # find_ncu looks at TRACEKIT_NCU, PATH and CUDA_HOME
    ncu = _ncu(tmp_path)
    assert doctor.find_ncu({"PATH": str(tmp_path)}) == ncu
    assert doctor.find_ncu({"PATH": "/nonexistent", "TRACEKIT_NCU": ncu}) == ncu
    (tmp_path / "cuda" / "bin").mkdir(parents=True)
    other = _ncu(tmp_path / "cuda" / "bin")
    assert doctor.find_ncu({"PATH": "/nonexistent", "CUDA_HOME": str(tmp_path / "cuda")}) == other
    c = _by_name(doctor.probe_ncu(ncu, have_gpu=False))
    assert c["counters"].status == WARN and c["counters"].detail == "not checked: no GPU"


def test_scanner_calibration_and_runs_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tracekit.ingest import native
    from tracekit.model.ceilings import datasheet
    from tracekit.store.calibration import save_measured

    scanner = doctor.probe_scanner()
    assert (scanner.status == OK) is native.available()
    monkeypatch.setenv("TRACEKIT_INGEST_ENGINE", "duckdb")
    assert doctor.probe_scanner().status == WARN and "TRACEKIT_INGEST_ENGINE" in doctor.probe_scanner().detail
    monkeypatch.delenv("TRACEKIT_INGEST_ENGINE")

    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    [c] = doctor.probe_calibration(["NVIDIA H200"])
    assert c.status == WARN and "datasheet" in c.detail and c.fix and "tracekit calibrate" in c.fix
    [c] = doctor.probe_calibration(["Mystery GPU 9000"])
    assert c.status == WARN and "no datasheet entry" in c.detail
    ds = datasheet("NVIDIA H200")
    assert ds is not None
    from dataclasses import replace

    save_measured(replace(ds, kind="measured", peak_bytes_per_s=4.04e12))
    [c] = doctor.probe_calibration(["NVIDIA H200", "NVIDIA H200"])
    assert c.status == OK and "measured, 4.04 TB/s" in c.detail

    assert doctor.probe_runs(tmp_path / "runs").status == OK
    (tmp_path / "file").write_text("x")
    assert doctor.probe_runs(tmp_path / "file").status == FAIL
    bad = doctor.probe_runs(tmp_path / "file" / "runs")
    assert bad.status == FAIL and bad.fix and "--out" in bad.fix


def test_diagnose_on_an_h200_as_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRACEKIT_CACHE_DIR", str(tmp_path / "cache"))
    params = tmp_path / "params"
    params.write_text("RmProfilingAdminOnly: 1\n")
    d = doctor.diagnose(tmp_path / "runs", torch=fake_torch(), transformers=TRANSFORMERS, nvml=fk.FakeNvml(),
                        ncu=_ncu(tmp_path), params=params, euid=0)
    c = {x.name: x for x in d.checks}
    assert [x.name for x in d.checks][:4] == ["python", "torch", "GPU 0", "transformers"]
    assert c["GPU 0"].detail == "NVIDIA H200, compute capability 9.0, 141 GiB"
    assert c["torch"].detail == "2.11.0+cu130, CUDA build 13.0"
    for name in ("driver", "NVML", "GPM 0", "Nsight Compute", "counters", "runs folder"):
        assert c[name].status == OK, c[name]
    assert c["ceiling"].status == WARN  # nothing calibrated yet
    assert d.can_record
    assert json.loads(doctor.to_json(d))["can_record"] is True


def test_diagnose_without_torch_cannot_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)
    d = doctor.diagnose(tmp_path / "runs", transformers=TRANSFORMERS, nvml=fk.no_library(), ncu=None,
                        params=tmp_path / "none")
    t = d.check("torch")
    assert t is not None and t.status == FAIL and "tracekit-llm[record]" in (t.fix or "")
    assert not d.can_record


def test_doctor_for_real_on_this_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    need_module("torch")
    out = tmp_path / "doctor.json"
    assert main(["doctor", "--runs", str(tmp_path / "runs"), "--json", str(out)]) == 0
    text = capsys.readouterr().out
    lines = text.splitlines()
    assert lines[0] == "tracekit doctor: what this machine can record and measure"
    for name in ("python", "torch", "transformers", "NVML", "Nsight Compute", "counters", "ingest", "runs folder"):
        assert any(ln[8:].startswith(name) for ln in lines), name
    # every line that is not ok is followed by its fix
    for i, ln in enumerate(lines[1:-1], start=1):
        if ln.startswith("  warn") or ln.startswith("  FAIL"):
            assert lines[i + 1].strip().startswith("fix: "), ln
    assert lines[-1].startswith("recording can proceed")
    data = json.loads(out.read_text())
    assert data["can_record"] is True and {c["name"] for c in data["checks"]} >= {"torch", "ingest", "runs folder"}
    (tmp_path / "file").write_text("")
    assert main(["doctor", "--runs", str(tmp_path / "file")]) == 1
    assert "recording cannot proceed" in capsys.readouterr().out
