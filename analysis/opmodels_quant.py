"""Block-scaled fp8 / mxfp4 / nvfp4 GEMMs of the serving engines (vLLM CUTLASS, SGLang, aiter), by registered name.

Each reads its operands at their stored width (fp8: 1 B; fp4: two values per byte, so a [M, K/2]
uint8 tensor holds M·K values), its scale tensors as recorded (per-tensor, per-token / per-channel,
128x128 blocks, or one scale per 16 / 32 values), an optional bias, and writes its [M, N] output
once (at the out tensor's width, else 2 B: bf16 / fp16, what these ops return).
flops = 2·M·N·K with K the logical depth. The compute dtype is fp4 where both operands are stored as
fp4 (the GPU's fp4 rate; a GPU without one runs them at its fp8 rate, tracekit.model.ceilings), else fp8.
"""

from __future__ import annotations

from collections.abc import Callable

from tracekit.analysis.optensor import GEMM, OpCost, Tensor, get

_FP4_STORED = ("unsigned char", "c10::Float4_e2m1fn_x2")  # two fp4 values per stored byte


def _gemm(m: int, n: int, k: int, operands: list[Tensor | None], out: Tensor | None) -> OpCost:
    read = sum(t.nbytes for t in operands if t is not None)
    written = m * n * (out.itemsize if out is not None else 2)
    a, b = operands[0], operands[1]
    fp4 = a is not None and b is not None and a.dtype in _FP4_STORED and b.dtype in _FP4_STORED
    return OpCost(2.0 * m * n * k, float(read + written), GEMM, "fp4" if fp4 else "fp8", True)


def out_a_bt(fp4: bool) -> Callable[[list[Tensor | None]], OpCost | None]:
    """(out [M, N], a [M, K(/2)], b [N, K(/2)] or [K, N], a_scales, b_scales, bias / alpha):
    vLLM _C::cutlass_scaled_mm (b [K, N]), _C::cutlass_scaled_fp4_mm and sgl_kernel::cutlass_scaled_fp4_mm
    (b [N, K/2] packed fp4)."""

    def model(ts: list[Tensor | None]) -> OpCost | None:
        out, a, b = get(ts, 0), get(ts, 1), get(ts, 2)
        if out is None or a is None or b is None or len(out.shape) != 2 or len(a.shape) != 2:
            return None
        m, n = out.shape
        k = a.shape[1] * (2 if fp4 and a.dtype in _FP4_STORED else 1)
        return _gemm(m, n, k, [a, b, *ts[3:6]], out)

    return model


def a_b_scales(b_is_nk: bool, fp4: bool = False, out_at: int | None = None
               ) -> Callable[[list[Tensor | None]], OpCost | None]:
    """(a [M, K(/2)], b [N, K(/2)] (b_is_nk) or [K, N], a_scales, b_scales, ... [out]): sgl_kernel::fp8_scaled_mm,
    fp8_blockwise_scaled_mm (b [K, N]); vLLM's / aiter's a8w8 and a4w4 GEMMs (b [N, K]); ``out_at`` the
    output tensor's position where the op takes one."""

    def model(ts: list[Tensor | None]) -> OpCost | None:
        a, b = get(ts, 0), get(ts, 1)
        if a is None or b is None or len(a.shape) != 2 or len(b.shape) != 2:
            return None
        m = a.shape[0]
        k = a.shape[1] * (2 if fp4 and a.dtype in _FP4_STORED else 1)
        n = b.shape[0] if b_is_nk else b.shape[1]
        out = get(ts, out_at) if out_at is not None else None
        return _gemm(m, n, k, [a, b, get(ts, 2), get(ts, 3)], out)

    return model


MODELS: dict[str, Callable[..., OpCost | None]] = {
    "_C::cutlass_scaled_mm": out_a_bt(False),
    "_C::cutlass_scaled_fp4_mm": out_a_bt(True),
    "sgl_kernel::cutlass_scaled_fp4_mm": out_a_bt(True),
    "sgl_kernel::fp8_scaled_mm": a_b_scales(False),
    "sgl_kernel::fp8_blockwise_scaled_mm": a_b_scales(False),
    "vllm::rocm_aiter_gemm_a8w8_blockscale": a_b_scales(True),
    "vllm::rocm_aiter_gemm_a8w8": a_b_scales(True),
    "aiter::gemm_a8w8_blockscale": a_b_scales(True, out_at=4),
    "aiter::gemm_a8w8": a_b_scales(True, out_at=4),
    "aiter::gemm_a4w4": a_b_scales(True, fp4=True, out_at=4),
    "aiter::gemm_a4w4_asm": a_b_scales(True, fp4=True, out_at=4),
    # vLLM's op around FlashInfer's mm_fp4(A [M, K/2], B [K/2, N] (a transposed [N, K/2] weight), A_scale,
    # B_scale, g_scale, ...): its fake returns [A.shape[0], B.shape[1]]
    "vllm::flashinfer_mm_fp4": a_b_scales(False, fp4=True),
}
