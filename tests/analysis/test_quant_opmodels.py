"""Op models of the quantized GEMMs: bytes at the quantized width, worked out by hand.

The CPU ops are recorded for real (torch.profiler on this machine, ingested by tracekit); the CUDA
tinygemm op is given the shapes torchao's Int4TilePackedTo4dTensor passes it (its source: B int32
[N/8, K/(16*8), 32, 4], scale_and_zero bf16 [K/g, N, 2]).
"""

from __future__ import annotations

import json

import pytest
from helpers import need_module

from tracekit.analysis.opmodels import GEMM, op_cost


def test_weight_int4pack_mm_cuda_shapes_count_half_a_byte_per_weight_plus_scales() -> None:
    m, k, n, g = 1, 2048, 5632, 128
    dims = [[m, k], [n // 8, k // 128, 32, 4], [], [k // g, n, 2]]
    types = ["c10::BFloat16", "int", "Scalar", "c10::BFloat16"]
    c = op_cost("aten::_weight_int4pack_mm", json.dumps(dims), json.dumps(types))
    assert c is not None and c.op_class == GEMM and c.dtype == "bf16"
    # A 2*2048 + packed 5632*2048/2 + scales/zeros 16*5632*2*2 + out 5632*2
    assert c.bytes == 4096 + 5_767_168 + 360_448 + 11_264
    assert c.flops == 2 * 2048 * 5632


def test_scaled_mm_reads_fp8_operands_and_writes_two_byte_output() -> None:
    dims = [[16, 2048], [2048, 5632], [16, 1], [1, 5632], [], [], [], []]
    types = ["c10::Float8_e4m3fn", "c10::Float8_e4m3fn", "float", "float", "", "", "Scalar", "Scalar"]
    c = op_cost("aten::_scaled_mm", json.dumps(dims), json.dumps(types))
    assert c is not None and c.dtype == "fp8" and c.tensor_core
    # a 16*2048*1 + b 2048*5632*1 + scales 16*4 + 5632*4 + out 16*5632*2
    assert c.bytes == 32_768 + 11_534_336 + 64 + 22_528 + 180_224


@pytest.fixture(scope="module")
def recorded_cpu_ops(tmp_path_factory: pytest.TempPathFactory):
    """The quantized GEMMs torch runs on a CPU, recorded with shapes and ingested by tracekit."""
    torch = need_module("torch")
    from tracekit.ingest.run import ingest

    a = torch.randn(2, 256, dtype=torch.bfloat16)
    w4 = torch.randint(0, 16, (64, 256), dtype=torch.int32)
    sz = torch.randn(256 // 128, 64, 2, dtype=torch.bfloat16)
    a8 = torch.randint(-5, 5, (32, 64), dtype=torch.int8)
    b8 = torch.randint(-5, 5, (64, 48), dtype=torch.int8)
    f8a = torch.randn(16, 32).to(torch.float8_e4m3fn)
    f8b = torch.randn(16, 32).to(torch.float8_e4m3fn).t()
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(w4, 2)
    with torch.profiler.profile(record_shapes=True) as prof:
        torch.ops.aten._weight_int4pack_mm_for_cpu(a, packed, 128, sz)
        torch._int_mm(a8, b8)
        torch.ops.aten._weight_int8pack_mm(a, torch.randint(-5, 5, (64, 256), dtype=torch.int8),
                                           torch.randn(64, dtype=torch.bfloat16))
        torch._scaled_mm(f8a, f8b, torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.bfloat16)
    d = tmp_path_factory.mktemp("qops")
    prof.export_chrome_trace(str(d / "trace.json"))
    ingest([d / "trace.json"], d / "run")
    import pandas as pd

    ops = pd.read_parquet(d / "run" / "tables" / "cpu_ops.parquet")
    return {n: g.iloc[0] for n, g in ops.groupby(ops["name"].astype(str))}


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        # A 2x256 bf16 + packed uint8 [64, 128] + scales/zeros [2, 64, 2] bf16 + out 2x64 bf16
        ("aten::_weight_int4pack_mm_for_cpu", 1024 + 8192 + 512 + 256),
        # a 32x64 + b 64x48 int8 + out 32x48 int32
        ("aten::_int_mm", 2048 + 3072 + 6144),
        # A 2x256 bf16 + B [64, 256] int8 + scales 64 bf16 + out 2x64 bf16
        ("aten::_weight_int8pack_mm", 1024 + 16384 + 128 + 256),
        # a, b 16x32 fp8 + two 0-d fp32 scales + out 16x16 bf16
        ("aten::_scaled_mm", 512 + 512 + 8 + 512),
    ],
)
def test_recorded_quantized_gemms_have_hand_computed_bytes(recorded_cpu_ops, name: str, expected: int) -> None:
    row = recorded_cpu_ops[name]
    c = op_cost(name, row["input_dims"], row["input_types"])
    assert c is not None and c.op_class == GEMM
    assert c.bytes == expected
