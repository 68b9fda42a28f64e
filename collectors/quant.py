"""``--quant``: quantize the built-in workload's model with torchao before anything is timed.

``apply(model, mode, device)`` runs ``torchao.quantization.quantize_`` with the config
``tracekit.model.quant.MODES[mode]`` names (every ``nn.Linear``, the LM head included; the
embedding table, norms and KV cache keep the model's dtype) and returns run.json's ``quant``
section: mode, config, torchao version, the weights' bytes before and after. Where the stack
cannot (torchao missing, a config this torchao lacks, a kernel this device has not), it raises
``QuantError``: one line naming what is missing, before any request runs.
"""

from __future__ import annotations

from typing import Any

from tracekit.errors import TracekitError
from tracekit.model import quant as qm


class QuantError(TracekitError):
    """The requested quantization cannot run on this stack."""


def weight_storage_bytes(model: Any) -> int:
    """HBM bytes of the model's parameters and buffers, each storage counted once (tied weights once);
    torchao's tensor subclasses count their inner tensors (packed values, scales, zeros)."""
    seen: set[tuple[int, int]] = set()
    total = 0

    def add(t: Any) -> None:
        nonlocal total
        flatten = getattr(t, "__tensor_flatten__", None)
        if flatten is not None and type(t).__name__ not in ("Tensor", "Parameter"):
            names, _ = flatten()
            for n in names:
                inner = getattr(t, n, None)
                if inner is not None:
                    add(inner)
            return
        try:
            key = (int(t.untyped_storage().data_ptr()), int(t.untyped_storage().nbytes()))
        except (RuntimeError, NotImplementedError, AttributeError):
            key = (id(t), 0)
        if key in seen:
            return
        seen.add(key)
        total += key[1] if key[1] else int(t.numel() * t.element_size())

    for p in model.parameters():
        add(p.data if type(p).__name__ == "Parameter" and type(p.data).__name__ != "Tensor" else p)
    for b in model.buffers():
        add(b)
    return total


def apply(model: Any, mode: str, device: str) -> tuple[Any, dict[str, Any]]:
    """Quantize ``model`` in place (``none``: untouched); (model, run.json ``quant`` section)."""
    if mode == qm.NONE:
        return model, {"mode": qm.NONE}
    if mode not in qm.MODES:
        raise QuantError(f"--quant {mode!r}: use one of {', '.join(qm.CHOICES)}", exit_code=2)
    spec = qm.MODES[mode]
    try:
        import torchao
        import torchao.quantization as tq
    except ImportError as exc:
        raise QuantError(f"--quant {mode}: torchao is not installed here ({exc}); pip install torchao") from None
    except Exception as exc:  # installed but broken for this torch: say which
        raise QuantError(f"--quant {mode}: torchao does not import here: {type(exc).__name__}: "
                         f"{(str(exc).strip().splitlines() or [''])[0][:300]}") from None
    version = str(getattr(torchao, "__version__", "?"))
    config_cls = getattr(tq, spec.config, None)
    if config_cls is None:
        raise QuantError(f"--quant {mode}: torchao {version} has no {spec.config}")
    import torch

    notes: list[str] = []
    before = weight_storage_bytes(model)
    if spec.needs_bf16 and next(model.parameters()).dtype != torch.bfloat16:
        model = model.to(torch.bfloat16)
        notes.append(f"{spec.config} takes bf16 activations only: the model was cast to bf16 first")
    try:
        config = config_cls(**dict(spec.kwargs))
        tq.quantize_(model, config)
        _probe(model)
    except Exception as exc:  # a kernel or check this device lacks: name it in one line
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]
        raise QuantError(
            f"--quant {mode}: torchao {version} {spec.config} does not run on {device} "
            f"(torch {torch.__version__}): {type(exc).__name__}: {first}"
        ) from None
    return model, {
        "mode": mode,
        "config": spec.config,
        "config_kwargs": {k: str(v) for k, v in spec.kwargs},
        "activation": spec.activation,
        "weight_bits": spec.weight_bits,
        "describe": spec.describe,
        "torchao": version,
        "weights_bytes_before": before,
        "weights_bytes": weight_storage_bytes(model),
        "notes": notes,
    }


def _probe(model: Any) -> None:
    """One forward of two tokens: kernels that a device lacks fail here, not inside a timed request."""
    import torch

    dev = next(model.parameters()).device
    with torch.no_grad():
        model(input_ids=torch.tensor([[11, 12]], device=dev))
