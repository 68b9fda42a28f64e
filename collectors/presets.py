"""Model and request-shape presets for the built-in workload.

Model presets are published architectures typed in from each model's
``config.json`` (the numbers below are the published values); tracekit builds
them with random weights, so no download is ever needed. Timing depends on
shapes, not on weight values, so random weights give the real cost of the
real architecture.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tracekit.errors import UsageError, visible


@dataclass(frozen=True)
class ModelPreset:
    name: str
    model_type: str  # transformers' model_type: selects the config class
    config: dict[str, Any] = field(hash=False)
    source: str  # where the numbers come from

    def parameters(self) -> int:
        """Approximate parameter count (dense decoder: embeddings, attention, MLP, norms)."""
        c = self.config
        h, i, n = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"]
        heads, kv = c["num_attention_heads"], c["num_key_value_heads"]
        head_dim = c.get("head_dim", h // heads)
        attn = h * heads * head_dim * 2 + h * kv * head_dim * 2
        if self.model_type == "qwen2":  # Qwen2 has biases on q, k and v
            attn += heads * head_dim + 2 * kv * head_dim
        per_layer = attn + 3 * h * i + 2 * h
        emb = c["vocab_size"] * h
        lm_head = 0 if c.get("tie_word_embeddings", False) else emb
        return int(emb + lm_head + n * per_layer + h)


_LLAMA3_ROPE_1B = {
    "factor": 32.0,
    "high_freq_factor": 4.0,
    "low_freq_factor": 1.0,
    "original_max_position_embeddings": 8192,
    "rope_type": "llama3",
}
_LLAMA3_ROPE_8B = dict(_LLAMA3_ROPE_1B, factor=8.0)

MODEL_PRESETS: dict[str, ModelPreset] = {
    p.name: p
    for p in (
        ModelPreset(
            "tiny",
            "llama",
            {
                # A few MB: fast enough on a CPU that `tracekit record` with no
                # arguments finishes in seconds, yet every op of a Llama layer is there.
                "vocab_size": 4096,
                "hidden_size": 128,
                "intermediate_size": 352,
                "num_hidden_layers": 4,
                "num_attention_heads": 4,
                "num_key_value_heads": 2,
                "max_position_embeddings": 4096,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
                "tie_word_embeddings": False,
            },
            "tracekit (Llama architecture, scaled down)",
        ),
        ModelPreset(
            "tinyllama-1.1b",
            "llama",
            {
                "vocab_size": 32000,
                "hidden_size": 2048,
                "intermediate_size": 5632,
                "num_hidden_layers": 22,
                "num_attention_heads": 32,
                "num_key_value_heads": 4,
                "max_position_embeddings": 2048,
                "rms_norm_eps": 1e-5,
                "rope_theta": 10000.0,
                "tie_word_embeddings": False,
            },
            "TinyLlama/TinyLlama-1.1B-Chat-v1.0 config.json",
        ),
        ModelPreset(
            "llama-3.2-1b",
            "llama",
            {
                "vocab_size": 128256,
                "hidden_size": 2048,
                "intermediate_size": 8192,
                "num_hidden_layers": 16,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 64,
                "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "rope_scaling": _LLAMA3_ROPE_1B,
                "tie_word_embeddings": True,
            },
            "meta-llama/Llama-3.2-1B config.json",
        ),
        ModelPreset(
            "qwen2.5-0.5b",
            "qwen2",
            {
                "vocab_size": 151936,
                "hidden_size": 896,
                "intermediate_size": 4864,
                "num_hidden_layers": 24,
                "num_attention_heads": 14,
                "num_key_value_heads": 2,
                "max_position_embeddings": 32768,
                "rms_norm_eps": 1e-6,
                "rope_theta": 1000000.0,
                "sliding_window": 32768,
                "use_sliding_window": False,
                "tie_word_embeddings": True,
            },
            "Qwen/Qwen2.5-0.5B config.json",
        ),
        ModelPreset(
            "llama-3.1-8b",
            "llama",
            {
                "vocab_size": 128256,
                "hidden_size": 4096,
                "intermediate_size": 14336,
                "num_hidden_layers": 32,
                "num_attention_heads": 32,
                "num_key_value_heads": 8,
                "head_dim": 128,
                "max_position_embeddings": 131072,
                "rms_norm_eps": 1e-5,
                "rope_theta": 500000.0,
                "rope_scaling": _LLAMA3_ROPE_8B,
                "tie_word_embeddings": False,
            },
            "meta-llama/Llama-3.1-8B config.json",
        ),
    )
}

CPU_DEFAULT_MODEL = "tiny"
GPU_DEFAULT_MODEL = "tinyllama-1.1b"


@dataclass(frozen=True)
class ShapePreset:
    name: str
    input_tokens: int
    output_tokens: int


SHAPES: dict[str, ShapePreset] = {
    s.name: s
    for s in (
        ShapePreset("smoke", 22, 8),
        ShapePreset("chat", 128, 128),
        ShapePreset("rag", 1205, 60),
        ShapePreset("creative", 25, 500),
    )
}
DEFAULT_SHAPE = "smoke"


@dataclass(frozen=True)
class ModelSpec:
    """What ``--model`` resolved to: a preset, or a local Hugging Face directory."""

    preset: ModelPreset | None = None
    path: Path | None = None

    @property
    def label(self) -> str:
        if self.preset is not None:
            return self.preset.name
        return str(self.path)


def resolve_model(name_or_path: str) -> ModelSpec:
    """A known preset name selects the preset; anything else must be a local model directory. A
    directory with a config.json and no weight files is built like a preset, with random weights."""
    if name_or_path in MODEL_PRESETS:
        return ModelSpec(preset=MODEL_PRESETS[name_or_path])
    path = Path(name_or_path).expanduser()
    if not path.is_dir():
        raise UsageError(
            f"--model {name_or_path!r} is neither a preset ({', '.join(MODEL_PRESETS)}) nor a local model directory"
        )
    if not (path / "config.json").is_file():
        raise UsageError(f"--model {name_or_path!r}: no config.json in that directory")
    if not has_weights(path):
        return ModelSpec(preset=config_preset(path))
    return ModelSpec(path=path)


WEIGHT_FILES = ("*.safetensors", "*.safetensors.index.json", "*.bin", "*.bin.index.json", "*.pt", "*.pth")


def has_weights(path: Path) -> bool:
    """Whether a model directory holds weight files (else only its config: random weights)."""
    return any(next(path.glob(pattern), None) is not None for pattern in WEIGHT_FILES)


# config.json fields that describe the checkpoint, not the architecture: dropped for random weights
# (a quantization_config would ask for the checkpoint's quantized weights).
_CHECKPOINT_FIELDS = ("architectures", "transformers_version", "quantization_config", "_name_or_path")


def config_preset(path: Path) -> ModelPreset:
    """A model directory with only a config.json, as a preset: its architecture with random weights,
    so any published architecture can be measured without its weights."""
    import json

    where = path / "config.json"
    from tracekit.store.fsops import decode_text, read_input

    try:
        config = json.loads(decode_text(read_input(where, "--model config.json"), f"--model {visible(path)}"))
    except (RecursionError, ValueError) as exc:
        raise UsageError(f"--model {str(path)!r}: config.json is unreadable ({exc})") from None
    if not isinstance(config, dict) or not isinstance(config.get("model_type"), str):
        raise UsageError(f"--model {str(path)!r}: config.json names no model_type")
    fields = {k: v for k, v in config.items() if k != "model_type" and k not in _CHECKPOINT_FIELDS}
    return ModelPreset(str(path), config["model_type"], fields, f"{where} (no weight files: random weights)")


def resolve_shape(name: str) -> ShapePreset:
    try:
        return SHAPES[name]
    except KeyError:
        raise UsageError(f"unknown --shape {name!r}; known: {', '.join(SHAPES)}") from None
