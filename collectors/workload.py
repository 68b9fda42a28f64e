"""The built-in workload: build a model, make prompts, run requests through ``model.generate``.

Generation goes through the real Transformers loop so that what is measured
is what users run. The output length is forced (min = max new tokens) so runs
compare; prompts are random token ids, deterministic by seed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

from tracekit.collectors.presets import ModelSpec
from tracekit.errors import UsageError

DTYPES = ("fp32", "fp16", "bf16")


@dataclass(frozen=True)
class WorkloadConfig:
    model: ModelSpec
    device: str  # "cpu", "cuda", "cuda:1"
    dtype: str  # fp32 | fp16 | bf16
    shape: str  # preset name or "custom"
    input_tokens: int
    output_tokens: int
    batch: int = 1
    requests: int = 1
    warmup: int = 2
    seed: int = 0
    trust_remote_code: bool = False
    compile: bool = False  # static KV cache + torch.compile (collectors/compiled.py)
    quant: str = "none"  # tracekit.model.quant mode, applied by collectors/quant.py after the build
    memory: bool = False  # --memory: the step_memory table (collectors/memory.py) and profile_memory

    def manifest(self) -> dict[str, Any]:
        return {
            "model": self.model.label,
            "device": self.device,
            "dtype": self.dtype,
            "shape": self.shape,
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "batch": self.batch,
            "requests": self.requests,
            "warmup": self.warmup,
            "seed": self.seed,
            "mode": "compiled" if self.compile else "eager",
            "quant": self.quant,
        }


def cuda_available() -> bool:
    import torch

    return bool(torch.cuda.is_available())


def resolve_device(device: str) -> str:
    if device == "auto":
        return "cuda" if cuda_available() else "cpu"
    if device.startswith("cuda") and not cuda_available():
        raise UsageError(f"--device {device}: CUDA is not available on this machine")
    if device != "cpu" and not device.startswith("cuda"):
        raise UsageError(f"--device {device!r}: use auto, cpu, cuda or cuda:N")
    return device


def resolve_dtype(dtype: str, device: str) -> str:
    if dtype == "auto":
        return "fp32" if device == "cpu" else "fp16"
    if dtype not in DTYPES:
        raise UsageError(f"--dtype {dtype!r}: use auto, {', '.join(DTYPES)}")
    return dtype


def torch_dtype(name: str) -> Any:
    import torch

    return {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}[name]


def build_model(cfg: WorkloadConfig) -> tuple[Any, dict[str, Any]]:
    """The model in eval mode on its device, and a description for run.json."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    dt = torch_dtype(cfg.dtype)
    t0 = time.perf_counter()
    if cfg.model.preset is not None:
        preset = cfg.model.preset
        # Build directly on the target device in the target dtype: random init of
        # a 1B model then takes well under a second on a GPU instead of minutes on CPU.
        torch.manual_seed(cfg.seed)
        try:
            config = AutoConfig.for_model(preset.model_type, **preset.config)
            with torch.device(cfg.device):
                model = _from_config(AutoModelForCausalLM, config, dt)
        except (ValueError, KeyError, TypeError) as exc:  # a config.json transformers cannot build
            raise UsageError(f"--model {preset.name}: cannot build model_type {preset.model_type!r} "
                             f"({str(exc).splitlines()[0] if str(exc) else type(exc).__name__})") from None
        source = {"preset": preset.name, "source": preset.source, "weights": "random"}
    else:
        assert cfg.model.path is not None
        try:
            model = _from_pretrained(AutoModelForCausalLM, str(cfg.model.path), dt, cfg.trust_remote_code)
        except (OSError, ValueError) as exc:
            raise UsageError(f"--model {cfg.model.path}: cannot load ({exc})") from None
        model = model.to(cfg.device)
        config = model.config
        source = {"path": str(cfg.model.path), "weights": "pretrained"}
    model.eval()
    n_params = sum(p.numel() for p in model.parameters())
    quant_info = None
    if cfg.quant != "none":
        from tracekit.collectors import quant

        model, quant_info = quant.apply(model, cfg.quant, cfg.device)
    info = {
        **source,
        "model_type": getattr(config, "model_type", None),
        "parameters": int(n_params),
        "build_s": round(time.perf_counter() - t0, 3),
        "config": _config_dict(config),
    }
    if quant_info is not None:
        info["quant"] = quant_info
    return model, info


def _from_config(auto: Any, config: Any, dt: Any) -> Any:
    try:
        return auto.from_config(config, dtype=dt)
    except TypeError:  # transformers 4.x spelled it torch_dtype
        return auto.from_config(config, torch_dtype=dt)


def _from_pretrained(auto: Any, path: str, dt: Any, trust_remote_code: bool) -> Any:
    kwargs = {"trust_remote_code": trust_remote_code, "use_safetensors": True}
    try:
        return auto.from_pretrained(path, dtype=dt, **kwargs)
    except TypeError:
        return auto.from_pretrained(path, torch_dtype=dt, **kwargs)


def _config_dict(config: Any) -> dict[str, Any]:
    keep = (
        "model_type",
        "vocab_size",
        "hidden_size",
        "intermediate_size",
        "num_hidden_layers",
        "num_attention_heads",
        "num_key_value_heads",
        "head_dim",
        "max_position_embeddings",
        "tie_word_embeddings",
        "rms_norm_eps",
        # mixture of experts (the names transformers' MoE configs use)
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "n_shared_experts",
        "num_experts_per_tok",
        "moe_intermediate_size",
        "shared_expert_intermediate_size",
    )
    out: dict[str, Any] = {}
    for k in keep:
        v = getattr(config, k, None)
        if v is not None:
            out[k] = v
    return out


def make_prompts(cfg: WorkloadConfig, vocab_size: int, n: int, seed_offset: int = 0) -> list[Any]:
    """``n`` prompts of shape (batch, input_tokens): random ids, deterministic by seed."""
    import torch

    gen = torch.Generator().manual_seed(cfg.seed + seed_offset)
    # Skip the lowest ids: they are special tokens (pad, bos, eos) in most vocabularies.
    low = min(10, vocab_size - 1)
    return [
        torch.randint(low, vocab_size, (cfg.batch, cfg.input_tokens), generator=gen).to(cfg.device)
        for _ in range(n)
    ]


def generate_kwargs(cfg: WorkloadConfig, prompt: Any) -> dict[str, Any]:
    """Greedy decoding of exactly ``output_tokens`` tokens: eos cannot stop it early."""
    import torch

    return {
        "input_ids": prompt,
        "attention_mask": torch.ones_like(prompt),
        "min_new_tokens": cfg.output_tokens,
        "max_new_tokens": cfg.output_tokens,
        "do_sample": False,
        "num_beams": 1,
        "pad_token_id": 0,
    }


def check_fits(cfg: WorkloadConfig, model: Any) -> None:
    limit = getattr(model.config, "max_position_embeddings", None)
    need = cfg.input_tokens + cfg.output_tokens
    if limit is not None and need > int(limit):
        raise UsageError(
            f"shape {cfg.input_tokens}+{cfg.output_tokens} tokens exceeds the model's "
            f"max_position_embeddings ({limit})"
        )
