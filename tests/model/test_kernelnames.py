"""Kernel short names: what a table shows beside the 5-8-line demangled template."""

from __future__ import annotations

import pytest

from tracekit.model.kernelnames import short_name


@pytest.mark.parametrize("name, short", [
    ("void at::native::(anonymous namespace)::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
     "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)",
     "vectorized_elementwise_kernel"),
    ("void (anonymous namespace)::softmax_warp_forward<c10::Half, c10::Half, float, 8, false, false>(c10::Half*, "
     "c10::Half const*, int, int, int, bool const*, int, bool)", "softmax_warp_forward"),
    ("void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4>(cutlass_80_tensorop_s1688gemm_64x64_"
     "16x6_tn_align4::Params)", "cutlass_80_tensorop_s1688gemm_64x64_16x6_tn_align4"),
    ("void cutlass::device_kernel<flash::enable_sm90_or_later<flash::FlashAttnFwdSm90<cute::tuple<int>>> >"
     "(flash::FlashAttnFwdSm90<x>::Params)", "FlashAttnFwdSm90"),
    ("sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64", "sm90_xmma_gemm_f16f16_f16f32_f32_tn_n_tilesize128x128x64"),
    ("Memcpy DtoD (Device -> Device)", "Memcpy DtoD (Device -> Device)"),
    (None, None),
])
def test_short_names(name: str | None, short: str | None) -> None:
    assert short_name(name) == short


@pytest.mark.slow
def test_query_gives_short_name_for_any_table_and_kernel_bound_stores_it(tmp_path) -> None:
    import shutil

    from helpers import FIXTURES

    from tracekit.app.analyze import analyze
    from tracekit.app.query import run_query

    shutil.copytree(FIXTURES / "record_gpu_smoke", tmp_path / "runs" / "smoke")
    analyze(tmp_path / "runs" / "smoke")
    df = run_query("select name, short_name from kernel_bound where name like '%vectorized_elementwise_kernel%' "
                   "limit 1", tmp_path / "runs")
    df = df.to_pandas() if hasattr(df, "to_pandas") else df
    assert df["short_name"].tolist() == ["vectorized_elementwise_kernel"] and len(df["name"].iloc[0]) > 60
    g = run_query("select count(*) as n from gpu_activity where short_name(name) = 'vectorized_elementwise_kernel'",
                  tmp_path / "runs")
    g = g.to_pandas() if hasattr(g, "to_pandas") else g
    assert int(g["n"].iloc[0]) > 0
