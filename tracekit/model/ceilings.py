"""Hardware ceilings: datasheet peaks per GPU, and the Ceiling a ``tracekit calibrate`` measurement makes.

A ceiling is what a kernel is compared against: peak FLOP/s per dtype and peak
DRAM bytes/s. Its kind is ``datasheet`` (this module's table), ``achievable`` (what the
GPU's best kernels reach, published: tracekit.model.achievable) or ``measured`` (``tracekit
calibrate``); ``achieved`` names its rates that are achievable figures rather than datasheet
ones. Every ceiling carries ``source`` so that every report can say which one it used.

All FLOP/s here are DENSE (no 2:4 sparsity): NVIDIA datasheets print the sparse
figure first for Ampere and later; we halve it. Bytes/s are decimal (1 TB/s =
1e12 B/s) as in the datasheets.

Lookup is by the device name NVML and torch report ("NVIDIA H100 80GB HBM3",
"Tesla T4", ...): exact aliases first, then ordered patterns (specific before
general, so "H100 PCIe" never matches the SXM entry). Measured ceilings are cached per user by
tracekit.store.calibration.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

T = 1e12
TB = 1e12

# dtype keys used everywhere in tracekit (opmodels' dtypes map onto these)
DTYPES = ("fp64", "fp32", "tf32", "fp16", "bf16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Ceiling:
    """Peak rates of one GPU.

    peak_flops: dtype -> FLOP/s. fp16/bf16/tf32/fp8/int8/fp4 are tensor-core rates
    (dense, FP32 accumulate where the datasheet distinguishes); fp32/fp64 are
    the non-tensor (CUDA core) rates, which is what elementwise kernels can use.
    """

    gpu: str
    peak_flops: Mapping[str, float]
    peak_bytes_per_s: float
    source: str
    kind: str = "datasheet"  # datasheet | achievable | measured
    date: str = ""
    notes: str = ""
    aliases: tuple[str, ...] = field(default=())
    # The rates (dtype names, and "bandwidth") that are what kernels reach, measured or published,
    # rather than datasheet figures (tracekit.model.achievable; measured_ceiling).
    achieved: tuple[str, ...] = field(default=())

    def is_achieved(self, rate: str) -> bool:
        """Whether a rate (a dtype, or "bandwidth") is an achievable figure rather than a datasheet peak."""
        return self._rate_key(rate) in self.achieved

    def flops(self, dtype: str) -> float | None:
        """Peak FLOP/s for a dtype, or None where the GPU has no such rate. fp4 on a GPU without fp4
        tensor cores is the fp8 rate (its fp4 kernels widen the operands to fp8)."""
        v = self.peak_flops.get(self._rate_key(dtype))
        return float(v) if v else None

    def _rate_key(self, dtype: str) -> str:
        d = _DTYPE_FALLBACK.get(dtype, dtype)
        return "fp8" if d == "fp4" and not self.peak_flops.get("fp4") else d

    def ridge_point(self, dtype: str) -> float | None:
        """Arithmetic intensity (FLOP/byte) where compute and bandwidth ceilings meet."""
        f = self.flops(dtype)
        if f is None or self.peak_bytes_per_s <= 0:
            return None
        return f / self.peak_bytes_per_s

    def ridge_points(self) -> dict[str, float]:
        """Per dtype the GPU has a rate of its own (not a fallback's)."""
        return {d: r for d in DTYPES if self.peak_flops.get(d) and (r := self.ridge_point(d)) is not None}

    def describe(self) -> str:
        """One line naming the ceiling, for reports."""
        return (
            f"{self.gpu} ({self.kind}): {self.peak_bytes_per_s / TB:.2f} TB/s, "
            + ", ".join(f"{d} {v / T:.0f} TFLOP/s" for d, v in self.peak_flops.items() if v)
            + f"; source: {self.source}"
        )

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["peak_flops"] = dict(self.peak_flops)
        d["aliases"] = list(self.aliases)
        d["achieved"] = list(self.achieved)
        d["ridge_points"] = self.ridge_points()
        return d

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Ceiling:
        """The ceiling ``to_dict`` wrote. ValueError (saying which field) unless ``gpu`` is a name,
        ``peak_bytes_per_s`` a finite rate above 0, ``peak_flops`` an object of finite rates (0 or
        null: no such rate) and ``aliases`` a list of names. Without ``achieved``, every rate of a
        ``measured`` or ``achievable`` ceiling is an achievable figure, none of another kind's."""
        if not isinstance(d, Mapping):
            raise ValueError(f"not a JSON object but {type(d).__name__}")
        missing = [k for k in ("gpu", "peak_flops", "peak_bytes_per_s") if k not in d]
        if missing:
            raise ValueError(f"no {', '.join(missing)}")
        if not isinstance(d["gpu"], str) or not d["gpu"]:
            raise ValueError(f"gpu {d['gpu']!r} is not a GPU name")
        bw = _rate(d["peak_bytes_per_s"], "peak_bytes_per_s")
        if not bw:
            raise ValueError("peak_bytes_per_s must be above 0")
        if not isinstance(d["peak_flops"], Mapping):
            raise ValueError("peak_flops is not an object of dtype -> FLOP/s")
        aliases = d.get("aliases", ())
        if not isinstance(aliases, list | tuple) or not all(isinstance(a, str) for a in aliases):
            raise ValueError("aliases is not a list of names")
        kind = str(d.get("kind", "datasheet"))
        achieved = d.get("achieved")
        if achieved is None:
            achieved = [*d["peak_flops"], "bandwidth"] if kind in ("measured", "achievable") else []
        if not isinstance(achieved, list | tuple) or not all(isinstance(a, str) for a in achieved):
            raise ValueError("achieved is not a list of rate names")
        return cls(
            gpu=d["gpu"],
            peak_flops={str(k): r for k, v in d["peak_flops"].items() if (r := _rate(v, f"peak_flops.{k}"))},
            peak_bytes_per_s=bw,
            source=str(d.get("source", "")),
            kind=kind,
            date=str(d.get("date", "")),
            notes=str(d.get("notes", "")),
            aliases=tuple(aliases),
            achieved=tuple(str(a) for a in achieved),
        )


def _rate(v: Any, what: str) -> float:
    """A peak rate read from a file: a finite number >= 0 (null reads as 0), else ValueError."""
    if v is None:
        return 0.0
    if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or v < 0:
        raise ValueError(f"{what} {v!r} is not a rate (a finite number >= 0)")
    return float(v)


# A dtype a GPU lacks falls back to the rate its kernels really run at: bf16 on
# a Turing/Volta GPU is emulated, so no fallback (None) there; fp8 -> none.
_DTYPE_FALLBACK: dict[str, str] = {"half": "fp16", "float16": "fp16", "bfloat16": "bf16", "float32": "fp32"}


def _c(
    gpu: str,
    *,
    bw_tbps: float,
    fp32: float,
    fp16: float | None = None,
    bf16: float | None = None,
    tf32: float | None = None,
    fp8: float | None = None,
    int8: float | None = None,
    fp64: float | None = None,
    fp4: float | None = None,
    source: str,
    date: str,
    aliases: tuple[str, ...] = (),
    notes: str = "",
) -> Ceiling:
    rates = {"fp64": fp64, "fp32": fp32, "tf32": tf32, "fp16": fp16, "bf16": bf16, "fp8": fp8, "int8": int8,
             "fp4": fp4}
    return Ceiling(
        gpu=gpu,
        peak_flops={k: v * T for k, v in rates.items() if v},
        peak_bytes_per_s=bw_tbps * TB,
        source=source,
        date=date,
        aliases=aliases,
        notes=notes,
    )


_MI300X_DS = ("AMD Instinct MI300X data sheet (amd.com/content/dam/amd/en/documents/instinct-tech-docs/data-sheets/"
              "amd-instinct-mi300x-data-sheet.pdf), dense figures as printed (sparsity listed separately)")
_MI200_DS = ("AMD Instinct MI200 series data sheets (amd.com/en/products/accelerators/instinct/mi200.html), "
             "peak figures as printed; an MI250X / MI250 module is two GCDs that the runtime shows as two "
             "GPUs, so its entries are one GCD: half the module's rates and bandwidth")
_GB200_DS = ("NVIDIA GB200 NVL72 datasheet (nvidia.com/en-us/data-center/gb200-nvl72/), rack figures / 72 GPUs, "
             "dense = sparse / 2")
_HOPPER_DS = "NVIDIA H100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h100/), dense = sparse / 2"
_A100_DS = "NVIDIA A100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/a100/), dense = sparse / 2"
_ADA_WP = "NVIDIA Ada GPU Architecture whitepaper v2.1, appendix A (GeForce: FP32-accumulate tensor rates)"

# Values in TFLOP/s (dense) and TB/s.
DATASHEET: dict[str, Ceiling] = {
    c.gpu: c
    for c in [
        _c("NVIDIA B200", bw_tbps=8.0, fp64=37, fp32=75, tf32=1100, fp16=2250, bf16=2250, fp8=4500, int8=4500,
           fp4=9000, source="NVIDIA HGX B200 / DGX B200 datasheet (nvidia.com/en-us/data-center/hgx/), per GPU, dense = sparse / 2",
           date="2024-2025", aliases=("B200",),
           notes="preliminary figures; fp32 is the non-tensor rate as printed"),
        _c("NVIDIA GB200", bw_tbps=8.0, fp64=40, fp32=80, tf32=1250, fp16=2500, bf16=2500, fp8=5000, int8=5000,
           fp4=10000, source=_GB200_DS, date="2024-2025", aliases=("GB200",),
           notes="per GPU of a GB200 superchip (1200 W); fp64/fp32 are the revised rack figures (45/90 at launch): "
                 "uncertain, calibrate"),
        _c("NVIDIA H20", bw_tbps=4.0, fp64=1, fp32=44, tf32=74, fp16=148, bf16=148, fp8=296, int8=296,
           source="no NVIDIA datasheet is public (China-market part); figures from NVIDIA partner specifications "
                  "as reported (96 GB HBM3, 4.0 TB/s, 78 SMs), dense",
           date="2024", aliases=("H20",), notes="unverified: calibrate"),
        _c("AMD Instinct MI300X", bw_tbps=5.3, fp64=81.7, fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4,
           fp8=2614.9, int8=2614.9, source=_MI300X_DS, date="2023-12", aliases=("MI300X",),
           notes="192 GB HBM3, 304 CUs; fp32/fp64 are the vector rates (fp32 counts packed FP32, 2x the scalar)"),
        _c("AMD Instinct MI325X", bw_tbps=6.0, fp64=81.7, fp32=163.4, tf32=653.7, fp16=1307.4, bf16=1307.4,
           fp8=2614.9, int8=2614.9,
           source="AMD Instinct MI325X product page (amd.com/en/products/accelerators/instinct/mi300/mi325x.html): "
                  "same compute as MI300X (same CDNA 3 die and clock), dense",
           date="2024-10", aliases=("MI325X",), notes="256 GB HBM3E, 304 CUs"),
        _c("AMD Instinct MI355X", bw_tbps=8.0, fp64=78.6, fp32=157.3, fp16=2516.6, bf16=2516.6, fp8=5033.2,
           int8=5033.2, fp4=10066.3,
           source="AMD Instinct MI355X product page (amd.com/en/products/accelerators/instinct/mi350/mi355x.html) and "
                  "the AMD CDNA 4 architecture whitepaper, dense",
           date="2025-06", aliases=("MI355X",),
           notes="288 GB HBM3E, 256 CUs; no TF32 matrix rate on CDNA 4 (tf32 falls back to nothing: use fp32)"),
        _c("AMD Instinct MI250X (1 GCD)", bw_tbps=1.6384, fp64=23.95, fp32=23.95, fp16=191.5, bf16=191.5,
           int8=191.5, source=_MI200_DS + ", MI250X column (module: 47.9 TF fp32/fp64 vector, 383 TF fp16, "
                                          "3.2768 TB/s)", date="2021-11",
           aliases=("AMD Instinct MI250X", "MI250X", "AMD Instinct MI250X/MI250"),
           notes="64 GB HBM2e, 110 CUs per GCD; fp32/fp64 are the vector rates (packed FP32); no tf32 or fp8"),
        _c("AMD Instinct MI250 (1 GCD)", bw_tbps=1.6384, fp64=22.65, fp32=22.65, fp16=181.05, bf16=181.05,
           int8=181.05, source=_MI200_DS + ", MI250 column (module: 45.3 TF fp32/fp64 vector, 362.1 TF fp16, "
                                           "3.2768 TB/s)", date="2021-11",
           aliases=("AMD Instinct MI250", "MI250"),
           notes="64 GB HBM2e, 104 CUs per GCD; fp32/fp64 are the vector rates (packed FP32); no tf32 or fp8"),
        _c("AMD Instinct MI210", bw_tbps=1.6384, fp64=22.6, fp32=22.6, fp16=181.0, bf16=181.0, int8=181.0,
           source=_MI200_DS + ", MI210 column (one GCD)", date="2022-03", aliases=("MI210",),
           notes="64 GB HBM2e, 104 CUs; the same GCD and clock as one MI250 GCD; no tf32 or fp8"),
        _c("NVIDIA H200", bw_tbps=4.8, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979, int8=1979,
           source="NVIDIA H200 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/h200/), H200 SXM, dense = sparse / 2",
           date="2024-11", aliases=("NVIDIA H200 SXM", "NVIDIA H200 141GB HBM3e")),
        _c("NVIDIA H200 NVL", bw_tbps=4.8, fp64=30, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5,
           int8=1670.5, source="NVIDIA H200 Tensor Core GPU datasheet, H200 NVL column, dense = sparse / 2",
           date="2024-11"),
        _c("NVIDIA H100 SXM", bw_tbps=3.35, fp64=34, fp32=67, tf32=494.5, fp16=989.5, bf16=989.5, fp8=1979,
           int8=1979, source=_HOPPER_DS + ", H100 SXM column", date="2023",
           aliases=("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "H100 SXM")),
        _c("NVIDIA H100 PCIe", bw_tbps=2.0, fp64=26, fp32=51, tf32=378, fp16=756, bf16=756, fp8=1513, int8=1513,
           source=_HOPPER_DS + ", H100 PCIe column", date="2023", aliases=("H100 PCIe",)),
        _c("NVIDIA H100 NVL", bw_tbps=3.9, fp64=30, fp32=60, tf32=417.5, fp16=835.5, bf16=835.5, fp8=1670.5,
           int8=1670.5, source=_HOPPER_DS + ", H100 NVL column", date="2023"),
        _c("NVIDIA A100-SXM4-80GB", bw_tbps=2.039, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624,
           source=_A100_DS + ", A100 80GB SXM column", date="2021"),
        _c("NVIDIA A100-SXM4-40GB", bw_tbps=1.555, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624,
           source=_A100_DS + ", A100 40GB SXM column (first A100 datasheet, 2020)", date="2020"),
        _c("NVIDIA A100 80GB PCIe", bw_tbps=1.935, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624,
           source=_A100_DS + ", A100 80GB PCIe column", date="2021", aliases=("NVIDIA A100-PCIE-80GB",)),
        _c("NVIDIA A100-PCIE-40GB", bw_tbps=1.555, fp64=9.7, fp32=19.5, tf32=156, fp16=312, bf16=312, int8=624,
           source=_A100_DS + ", A100 40GB PCIe column", date="2021", aliases=("NVIDIA A100 40GB PCIe",)),
        _c("NVIDIA A10", bw_tbps=0.6, fp32=31.2, tf32=62.5, fp16=125, bf16=125, int8=250,
           source="NVIDIA A10 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/products/a10-gpu/), dense = sparse / 2",
           date="2021"),
        _c("NVIDIA A10G", bw_tbps=0.6, fp32=31.2, tf32=35, fp16=70, bf16=70, int8=140,
           source="AWS EC2 G5 instance documentation (A10G, 24 GB, 600 GB/s); NVIDIA publishes no A10G datasheet: "
                  "tensor rates are the commonly quoted 70 dense fp16 TFLOP/s, run `tracekit calibrate`",
           date="2021", notes="tensor rates unverified: calibrate"),
        _c("NVIDIA L4", bw_tbps=0.3, fp32=30.3, tf32=60, fp16=121, bf16=121, fp8=242.5, int8=242.5,
           source="NVIDIA L4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/l4/), dense = sparse / 2",
           date="2023"),
        _c("NVIDIA L40S", bw_tbps=0.864, fp32=91.6, tf32=183, fp16=362, bf16=362, fp8=733, int8=733,
           source="NVIDIA L40S GPU datasheet (nvidia.com/en-us/data-center/l40s/), dense = sparse / 2", date="2023"),
        _c("NVIDIA L40", bw_tbps=0.864, fp32=90.5, tf32=90.5, fp16=181, bf16=181, fp8=362, int8=362,
           source="NVIDIA L40 GPU datasheet (nvidia.com/en-us/data-center/l40/), dense = sparse / 2", date="2022"),
        _c("Tesla T4", bw_tbps=0.32, fp32=8.1, fp16=65, int8=130,
           source="NVIDIA T4 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/tesla-t4/), mixed-precision FP16/FP32",
           date="2019", aliases=("NVIDIA T4",), notes="no bf16/tf32 tensor cores (Turing)"),
        _c("Tesla V100-SXM2", bw_tbps=0.9, fp64=7.8, fp32=15.7, fp16=125,
           source="NVIDIA V100 Tensor Core GPU datasheet (nvidia.com/en-us/data-center/v100/), V100 SXM2 column",
           date="2020", aliases=("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB", "Tesla V100S-PCIE-32GB"),
           notes="no bf16/tf32 tensor cores (Volta)"),
        _c("Tesla V100-PCIE", bw_tbps=0.9, fp64=7, fp32=14, fp16=112,
           source="NVIDIA V100 Tensor Core GPU datasheet, V100 PCIe column", date="2020",
           aliases=("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB")),
        _c("NVIDIA GeForce RTX 4090", bw_tbps=1.008, fp32=82.6, tf32=82.6, fp16=165.2, bf16=165.2, fp8=330.3,
           int8=660.6, source=_ADA_WP + ", RTX 4090 column", date="2023"),
        _c("NVIDIA GeForce RTX 3090", bw_tbps=0.936, fp32=35.6, tf32=35.6, fp16=71, bf16=71, int8=284,
           source="NVIDIA Ampere GA102 GPU Architecture whitepaper v2, RTX 3090 column (FP32-accumulate tensor rates)",
           date="2021"),
    ]
}

# Ordered patterns for names not matched exactly (NVML names vary by board and driver).
_PATTERNS: list[tuple[str, str]] = [
    (r"\bGB200\b", "NVIDIA GB200"),
    (r"\bB200\b", "NVIDIA B200"),
    (r"\bH20\b", "NVIDIA H20"),
    (r"\bMI300X\b", "AMD Instinct MI300X"),
    (r"\bMI325X\b", "AMD Instinct MI325X"),
    (r"\bMI355X\b", "AMD Instinct MI355X"),
    (r"\bMI250X\b", "AMD Instinct MI250X (1 GCD)"),
    (r"\bMI250\b", "AMD Instinct MI250 (1 GCD)"),
    (r"\bMI210\b", "AMD Instinct MI210"),
    (r"\bH200\b.*\bNVL\b", "NVIDIA H200 NVL"),
    (r"\bH200\b", "NVIDIA H200"),
    (r"\bH100\b.*\bNVL\b", "NVIDIA H100 NVL"),
    (r"\bH100\b.*\bPCIE\b", "NVIDIA H100 PCIe"),
    (r"\bH100\b", "NVIDIA H100 SXM"),
    (r"\bA100\b.*PCIE.*80\s*GB|\bA100\b.*80\s*GB.*PCIE", "NVIDIA A100 80GB PCIe"),
    (r"\bA100\b.*PCIE", "NVIDIA A100-PCIE-40GB"),
    (r"\bA100\b.*80\s*GB", "NVIDIA A100-SXM4-80GB"),
    (r"\bA100\b", "NVIDIA A100-SXM4-40GB"),
    (r"\bA10G\b", "NVIDIA A10G"),
    (r"\bA10\b", "NVIDIA A10"),
    (r"\bL40S\b", "NVIDIA L40S"),
    (r"\bL40\b", "NVIDIA L40"),
    (r"\bL4\b", "NVIDIA L4"),
    (r"\bT4\b", "Tesla T4"),
    (r"\bV100\b.*PCIE", "Tesla V100-PCIE"),
    (r"\bV100", "Tesla V100-SXM2"),
    (r"\bRTX 4090\b", "NVIDIA GeForce RTX 4090"),
    (r"\bRTX 3090\b", "NVIDIA GeForce RTX 3090"),
]


@dataclass(frozen=True)
class Ceilings:
    """The ceilings one analysis uses, decided once before the passes (tracekit.app.ceiling.decide):
    ``ceiling`` rates and classes the kernels (None: the GPU has none); ``peaks`` is what the latency
    line is drawn against (the ceiling itself, or the GPU's datasheet); ``note`` says how the ceiling
    was found, or why there is none (None: the GPU named in run.json, found directly)."""

    ceiling: Ceiling | None = None
    peaks: Ceiling | None = None
    note: str | None = None


def gpu_name(manifest: Mapping[str, Any] | None) -> str | None:
    """The GPU's name as the recorder (torch) or the trace (Kineto deviceProperties) gives it."""
    if not manifest:
        return None
    env = manifest.get("environment") or {}
    if isinstance(env, Mapping) and env.get("gpu"):
        return str(env["gpu"])
    meta = manifest.get("trace_meta") or {}
    metas = [meta] if isinstance(meta, Mapping) and "deviceProperties" in meta else (
        list(meta.values()) if isinstance(meta, Mapping) else []
    )
    for m in metas:
        props = m.get("deviceProperties") if isinstance(m, Mapping) else None
        if props and isinstance(props, list) and isinstance(props[0], Mapping) and props[0].get("name"):
            return str(props[0]["name"])
    return None


def datasheet(device_name: str) -> Ceiling | None:
    """The datasheet ceiling for a device name as NVML/torch report it, or None."""
    name = device_name.strip()
    for c in DATASHEET.values():
        if name.lower() == c.gpu.lower() or name.lower() in (a.lower() for a in c.aliases):
            return c
    upper = name.upper()
    for pat, key in _PATTERNS:
        if re.search(pat, upper, flags=re.IGNORECASE):
            return DATASHEET[key]
    return None


# L2 cache per GPU (bytes), from the same datasheets and the vendors' architecture whitepapers: a
# kernel whose whole footprint fits in it can be served from it (tracekit.analysis.bound, the
# L2-resident rule). AMD GPUs are absent: their Infinity Cache sits between L2 and HBM, so what
# fits where is not one number. torch.cuda.get_device_properties().L2_cache_size on an H200: 60 MiB.
_L2_MIB = {
    "NVIDIA B200": 126, "NVIDIA GB200": 126, "NVIDIA H20": 60, "NVIDIA H200": 60, "NVIDIA H200 NVL": 60,
    "NVIDIA H100 SXM": 50, "NVIDIA H100 PCIe": 50, "NVIDIA H100 NVL": 50, "NVIDIA A100-SXM4-80GB": 40,
    "NVIDIA A100-SXM4-40GB": 40, "NVIDIA A100 80GB PCIe": 40, "NVIDIA A100-PCIE-40GB": 40, "NVIDIA A10": 6,
    "NVIDIA A10G": 6, "NVIDIA L4": 48, "NVIDIA L40S": 96, "NVIDIA L40": 96, "Tesla T4": 4, "Tesla V100-SXM2": 6,
    "Tesla V100-PCIE": 6, "NVIDIA GeForce RTX 4090": 72, "NVIDIA GeForce RTX 3090": 6,
}


def l2_bytes(device_name: str | None) -> float | None:
    """The L2 cache size of a GPU (its datasheet entry's), or None where unknown."""
    ds = datasheet(device_name) if device_name else None
    mib = _L2_MIB.get(ds.gpu) if ds is not None else None
    return float(mib) * 2**20 if mib else None


# --- measured calibrations -------------------------------------------------


def slug(device_name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]+", "-", device_name).strip("-").lower() or "gpu"


def measured_ceiling(device_name: str, measurement: Mapping[str, Any]) -> Ceiling:
    """A Ceiling from what ``collectors.calibrate.measure`` returned.

    Dtypes the calibration did not measure (fp8, int8, ...) are taken from the
    datasheet when one is known, and the source says so.
    """
    ds = datasheet(device_name)
    flops = dict(ds.peak_flops) if ds else {}
    measured = {str(k): float(v) for k, v in dict(measurement.get("matmul_flops_per_s", {})).items() if v}
    flops.update(measured)
    bw = float(measurement["copy_bytes_per_s"])
    src = f"measured by tracekit calibrate on {measurement.get('date', '?')} ({', '.join(sorted(measured))} matmul, copy)"
    if ds and set(ds.peak_flops) - set(measured):
        src += f"; {', '.join(sorted(set(ds.peak_flops) - set(measured)))} from {ds.source}"
    return Ceiling(
        gpu=device_name,
        peak_flops=flops,
        peak_bytes_per_s=bw,
        source=src,
        kind="measured",
        date=str(measurement.get("date", "")),
        notes=json.dumps({k: v for k, v in measurement.items() if k not in ("matmul_flops_per_s",)}, default=str),
        achieved=(*sorted(measured), "bandwidth"),
    )


# --- identifying the GPU from Kineto's deviceProperties ----------------------


def _near(x: float, *targets: float, tol: float = 0.06) -> bool:
    return any(abs(x - v) / v < tol for v in targets)


def identify(props: Mapping[str, Any]) -> tuple[str | None, str]:
    """(GPU name, note) from one Kineto ``deviceProperties`` entry, for when its ``name`` is empty or
    generic ("AMD Radeon Graphics" on older ROCm); (None, why) where the properties do not decide.

    Kineto (libkineto/src/DeviceProperties.cpp) writes totalGlobalMem, computeMajor/Minor (on ROCm the
    GFX IP version: gfx90a -> 9.0, gfx942 -> 9.4, gfx950 -> 9.5), warpSize, numSms (CUs on ROCm) and a
    runtime-specific key: sharedMemPerBlockOptin (CUDA), maxSharedMemoryPerMultiProcessor (ROCm).
    Memory is matched within 6% (driver reservations). The note names the GPUs these properties cannot
    tell apart; the first is returned.
    """
    ws, maj, mnr, sms = props.get("warpSize"), props.get("computeMajor"), props.get("computeMinor"), props.get("numSms")
    gib = float(props.get("totalGlobalMem") or 0) / 2**30
    if maj is None or sms is None:
        return None, "no compute capability / SM count in the trace's deviceProperties"
    amd = ws == 64 or "maxSharedMemoryPerMultiProcessor" in props
    if amd:
        if (maj, mnr) == (9, 5) and sms == 256 and _near(gib, 288):
            return "AMD Instinct MI355X", "or MI350X: identical properties, lower clock (use --ceiling)"
        if (maj, mnr) == (9, 4) and sms == 304:
            if _near(gib, 256):
                return "AMD Instinct MI325X", ""
            if _near(gib, 192):
                return "AMD Instinct MI300X", ""
        if (maj, mnr) == (9, 4) and sms == 38:
            return None, "an MI300X/MI325X CPX partition (38 CUs): no datasheet ceiling; calibrate"
        if (maj, mnr) == (9, 0) and _near(gib, 64):
            if sms == 110:
                return "AMD Instinct MI250X (1 GCD)", ""
            if sms == 104:
                return "AMD Instinct MI250 (1 GCD)", "or MI210: identical properties and peaks"
        return None, f"an AMD GPU (gfx{maj}{mnr}, {sms} CUs, {gib:.0f} GiB) tracekit has no ceiling for"
    if ws == 32:
        key = (maj, mnr, sms)
        if key == (9, 0, 132):
            if _near(gib, 139.8):
                return "NVIDIA H200", "or H200 NVL / GH200 144GB: identical properties, NVL peaks ~15% lower"
            if _near(gib, 79.2):
                return "NVIDIA H100 SXM", "or H800"
            if _near(gib, 93.1):
                return "NVIDIA H100 NVL", ""
        if key == (8, 0, 108):
            return ("NVIDIA A100-SXM4-80GB" if gib > 60 else "NVIDIA A100-SXM4-40GB"), "SXM and PCIe look alike"
        if (maj, mnr) == (10, 0) and sms == 148:
            return ("NVIDIA GB200", "by its memory (186 GB)") if gib > 182 else ("NVIDIA B200", "")
        table = {(9, 0, 114): "NVIDIA H100 PCIe", (9, 0, 78): "NVIDIA H20", (8, 9, 58): "NVIDIA L4",
                 (8, 9, 142): "NVIDIA L40S", (8, 6, 72): "NVIDIA A10", (8, 6, 80): "NVIDIA A10G",
                 (7, 5, 40): "Tesla T4", (7, 0, 80): "Tesla V100-SXM2", (8, 9, 128): "NVIDIA GeForce RTX 4090",
                 (8, 6, 82): "NVIDIA GeForce RTX 3090"}
        if key in table:
            note = "or L40: identical properties, L40S has ~2x the tensor rate" if key == (8, 9, 142) else ""
            return table[key], note
        return None, f"an NVIDIA GPU (cc {maj}.{mnr}, {sms} SMs, {gib:.0f} GiB) tracekit cannot name"
    return None, "properties of no known GPU family"


GENERIC_NAMES = re.compile(r"^\s*$|^AMD Radeon Graphics$|^Device \w+$", re.IGNORECASE)
