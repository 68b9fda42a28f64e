"""Quantization modes of the built-in workload and the bytes one weight takes in each.

Pure data: which torchao config a mode means (``QuantMode``), and how many bytes of HBM a
quantized linear weight of shape (N out, K in) occupies, packed values plus their scales and
zeros. ``weight_bytes`` is what decode reads per token for that weight, and what the op models
of the quantized GEMMs (tracekit.analysis.opmodels) count for it.
"""

from __future__ import annotations

from dataclasses import dataclass

NONE = "none"


@dataclass(frozen=True)
class QuantMode:
    """One ``--quant`` choice: ``config`` is the torchao config class's name, ``kwargs`` its arguments."""

    name: str
    config: str
    kwargs: tuple[tuple[str, object], ...]
    weight_bits: int
    activation: str  # "dynamic": activations quantized per call too; "none": weight-only
    describe: str
    needs_bf16: bool = False  # the kernel takes bf16 activations only (tinygemm int4)


MODES: dict[str, QuantMode] = {
    "int8": QuantMode("int8", "Int8WeightOnlyConfig", (), 8, "none",
                      "int8 weights, one scale per output row; activations stay fp16/bf16"),
    "int8-dyn": QuantMode("int8-dyn", "Int8DynamicActivationInt8WeightConfig", (), 8, "dynamic",
                          "int8 weights and per-token dynamic int8 activations (aten::_int_mm)"),
    "int4": QuantMode("int4", "Int4WeightOnlyConfig",
                      (("group_size", 128), ("int4_packing_format", "tile_packed_to_4d")), 4, "none",
                      "int4 weights packed for tinygemm (aten::_weight_int4pack_mm), bf16 scale and zero "
                      "per group of 128 inputs", needs_bf16=True),
    "fp8": QuantMode("fp8", "Float8DynamicActivationFloat8WeightConfig", (), 8, "dynamic",
                     "fp8 e4m3 weights and dynamic fp8 activations (aten::_scaled_mm)"),
}
CHOICES = (NONE, *MODES)


def weight_bytes(mode: str, n: int, k: int, *, dtype_bytes: int = 2, group_size: int = 128) -> float:
    """HBM bytes of one (n out, k in) linear weight under ``mode`` (``none``: ``dtype_bytes`` each).

    int8: n*k + a ``dtype_bytes`` scale per row; int4: n*k/2 packed + a scale and a zero
    (bf16, 2 B each) per group of ``group_size`` inputs per row; fp8: n*k + one fp32 scale
    (tensor-wise) . Unknown modes raise KeyError.
    """
    if mode == NONE:
        return float(n * k * dtype_bytes)
    m = MODES[mode]
    if m.weight_bits == 4:
        groups = -(-k // group_size)
        return n * k / 2 + n * groups * 2 * 2
    if mode == "fp8":
        return float(n * k + 4)
    return float(n * k + n * dtype_bytes)
