"""Convolution and resampling op models from Input Dims and Concrete Inputs (stride, padding, groups, sizes).

TraceLens's CONV model (after torch.utils.flop_counter): the output shape from the input [N, C, *S],
the weight ([K, C/g, *R]; transposed: [C, K/g, *R]), stride, padding, dilation (and output_padding);
flops = 2·numel(out)·prod(w[1:]) (transposed: 2·numel(in)·prod(w[1:])) + numel(out) with a bias;
bytes = input, weight and bias read, output written, each at its recorded width (the output at the
input's). Unlike TraceLens, a bias tensor that is present is counted (TraceLens counts none when
the op records its 9 arguments).

Each aten spelling keeps its own argument order (``SIGNATURES``): conv2d puts stride before padding,
cudnn_convolution / miopen_convolution / mkldnn_convolution padding before stride.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tracekit.analysis.optensor import COPY, GEMM, OpCost, Tensor, dtype_key, get, parse


@dataclass(frozen=True)
class Signature:
    """Argument positions of one convolution op (None: not an argument of it)."""

    bias: int | None
    stride: int
    padding: int
    dilation: int | None
    groups: int | None
    transposed: int | bool = False  # an argument position, or the op's fixed value
    output_padding: int | None = None


SIGNATURES: dict[str, Signature] = {
    "conv1d": Signature(2, 3, 4, 5, 6),
    "conv2d": Signature(2, 3, 4, 5, 6),
    "conv3d": Signature(2, 3, 4, 5, 6),
    "convolution": Signature(2, 3, 4, 5, 8, transposed=6, output_padding=7),
    "_convolution": Signature(2, 3, 4, 5, 8, transposed=6, output_padding=7),
    "conv_transpose1d": Signature(2, 3, 4, 7, 6, transposed=True, output_padding=5),
    "conv_transpose2d": Signature(2, 3, 4, 7, 6, transposed=True, output_padding=5),
    "conv_transpose3d": Signature(2, 3, 4, 7, 6, transposed=True, output_padding=5),
    "cudnn_convolution": Signature(None, 3, 2, 4, 5),
    "cudnn_convolution_transpose": Signature(None, 4, 2, 5, 6, transposed=True, output_padding=3),
    "cudnn_convolution_relu": Signature(2, 3, 4, 5, 6),
    "miopen_convolution": Signature(2, 4, 3, 5, 6),
    "miopen_depthwise_convolution": Signature(2, 4, 3, 5, 6),
    "miopen_convolution_transpose": Signature(2, 5, 3, 6, 7, transposed=True, output_padding=4),
    "mkldnn_convolution": Signature(2, 4, 3, 5, 6),
}


def _ints(values: list[Any], i: int | None, nd: int, default: int) -> tuple[int, ...] | None:
    """A ScalarList ('[2, 2]') or int ('2') argument broadcast to nd dims; the default where absent."""
    if i is None or i >= len(values) or values[i] in ("", None):
        return (default,) * nd
    v = values[i]
    text = str(v).strip()
    try:
        if text.startswith("["):
            xs = [int(x) for x in parse(text)]
        else:
            xs = [int(text)]
    except (TypeError, ValueError):
        return None
    if len(xs) == 1:
        xs = xs * nd
    return tuple(xs) if len(xs) == nd else None


def conv_output(x: tuple[int, ...], w: tuple[int, ...], stride: tuple[int, ...], padding: tuple[int, ...],
                dilation: tuple[int, ...], transposed: bool, output_padding: tuple[int, ...], groups: int
                ) -> tuple[int, ...]:
    """The output shape [N, K, *S_out] of a convolution."""
    spatial = []
    for i in range(len(x) - 2):
        r = w[2 + i]
        if transposed:
            spatial.append((x[2 + i] - 1) * stride[i] - 2 * padding[i] + dilation[i] * (r - 1) + output_padding[i] + 1)
        else:
            spatial.append((x[2 + i] + 2 * padding[i] - dilation[i] * (r - 1) - 1) // stride[i] + 1)
    out_ch = w[1] * groups if transposed else w[0]
    return (x[0], out_ch, *spatial)


def conv_cost(x: Tensor, w: Tensor, bias: Tensor | None, stride: tuple[int, ...], padding: tuple[int, ...],
              dilation: tuple[int, ...], transposed: bool, output_padding: tuple[int, ...], groups: int) -> OpCost:
    out = conv_output(x.shape, w.shape, stride, padding, dilation, transposed, output_padding, groups)
    per = 2 * math.prod(w.shape[1:])
    out_n = math.prod(out)
    flops = (x.numel if transposed else out_n) * per + (out_n if bias is not None else 0)
    nbytes = x.nbytes + w.nbytes + (bias.nbytes if bias is not None else 0) + out_n * x.itemsize
    return OpCost(float(flops), float(nbytes), GEMM, dtype_key(x), True)


def model_for(name: str) -> Callable[[list[Tensor | None], list[Any]], OpCost | None]:
    sig = SIGNATURES[name]

    def model(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
        x, w = get(ts, 0), get(ts, 1)
        if x is None or w is None or len(x.shape) < 3 or len(w.shape) != len(x.shape):
            return None
        nd = len(x.shape) - 2
        bias = get(ts, sig.bias) if sig.bias is not None else None
        if isinstance(sig.transposed, bool):
            transposed = sig.transposed
        else:
            t = values[sig.transposed] if sig.transposed < len(values) else ""
            transposed = str(t).strip().lower() == "true"
        stride = _ints(values, sig.stride, nd, 1)
        dilation = _ints(values, sig.dilation, nd, 1)
        out_pad = _ints(values, sig.output_padding, nd, 0)
        groups_t = _ints(values, sig.groups, 1, 1)
        pad_text = str(values[sig.padding]).strip().strip("'\"") if sig.padding < len(values) else ""
        if stride is None or dilation is None or out_pad is None or groups_t is None:
            return None
        if pad_text in ("same", "valid"):  # conv2d's padding='same' / 'valid' overload
            padding = tuple((dilation[i] * (w.shape[2 + i] - 1)) // 2 if pad_text == "same" else 0
                            for i in range(nd))
        else:
            p = _ints(values, sig.padding, nd, 0)
            if p is None:
                return None
            padding = p
        if min(stride) <= 0 or groups_t[0] <= 0:
            return None
        return conv_cost(x, w, bias, stride, padding, dilation, transposed, out_pad, groups_t[0])

    return model


def upsample(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
    """upsample_{nearest,bilinear,bicubic}{1,2,3}d(input [N, C, *S], output_size, scale_factors) (.vec) and
    the (input, output_size, scales...) overload: the input read once, the output [N, C, *S_out] written;
    S_out is output_size where recorded, else floor(S · scale). flops = numel(out): one per element
    (``_upsample`` multiplies by the taps an interpolation reads: linear 2, bilinear 4, trilinear 8,
    bicubic 16)."""
    x = get(ts, 0)
    if x is None or len(x.shape) < 3:
        return None
    nd = len(x.shape) - 2
    size: tuple[int, ...] | None = None
    if len(values) > 1 and str(values[1]).strip().startswith("["):
        size = _ints(values, 1, nd, 1)
    if size is None:
        text = str(values[2]).strip() if len(values) > 2 else ""
        try:
            scales = [float(v) for v in parse(text.replace(".,", ".0,").replace(".]", ".0]"))] if text.startswith(
                "[") else []
        except (TypeError, ValueError):
            return None
        if len(scales) == 1:
            scales = scales * nd
        if len(scales) != nd:
            return None
        size = tuple(int(x.shape[2 + i] * scales[i]) for i in range(nd))
    out = x.shape[0] * x.shape[1] * math.prod(size)
    return OpCost(float(out), float(x.nbytes + out * x.itemsize), COPY, dtype_key(x), False)


def _upsample(taps: int) -> Callable[[list[Tensor | None], list[Any]], OpCost | None]:
    def model(ts: list[Tensor | None], values: list[Any]) -> OpCost | None:
        c = upsample(ts, values)
        return None if c is None else OpCost(c.flops * taps, c.bytes, c.op_class, c.dtype, False)

    return model


MODELS_WITH_VALUES: dict[str, Callable[..., OpCost | None]] = {f"aten::{n}": model_for(n) for n in SIGNATURES}
for _d in (1, 2, 3):
    MODELS_WITH_VALUES[f"aten::upsample_nearest{_d}d"] = _upsample(1)
    MODELS_WITH_VALUES[f"aten::_upsample_nearest_exact{_d}d"] = _upsample(1)
MODELS_WITH_VALUES["aten::upsample_linear1d"] = _upsample(2)
MODELS_WITH_VALUES["aten::upsample_bilinear2d"] = _upsample(4)
MODELS_WITH_VALUES["aten::upsample_trilinear3d"] = _upsample(8)
MODELS_WITH_VALUES["aten::upsample_bicubic2d"] = _upsample(16)
