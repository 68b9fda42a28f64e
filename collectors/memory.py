"""``--memory``: the allocator at every step boundary, split into weights, KV cache and transient.

``MemoryProbe`` is driven by the step hooks (``on_step_start`` / ``on_step_end``): at a step's
start it resets the allocator's peak; at its end it reads allocated, reserved and the peak
(``torch.cuda.memory_allocated`` / ``memory_reserved`` / ``max_memory_allocated``) and the bytes
of the K/V tensors the generation's cache holds (the cache object is taken from the forward's
``past_key_values`` or ``cache`` argument). Weights are measured once (tracekit.collectors.quant.weight_storage_bytes).
``table(steps_t)`` makes the ``step_memory`` rows: transient = allocated - weights - kv_cache.

On a CPU there is no caching allocator: allocated, reserved, peak and transient stay null (run.json
``memory.reason`` says so) while weights and KV are still measured from the tensors. Where hooks
would break a compiled forward (``--compile``), no hook is installed and the KV bytes come from
the formula (kv_source ``formula``).
"""

from __future__ import annotations

from typing import Any

from tracekit.model import schema


class MemoryProbe:
    def __init__(self, model: Any, *, kv_bytes_per_token: int, hook_cache: bool = True) -> None:
        import torch

        from tracekit.collectors.quant import weight_storage_bytes

        self.model = model
        dev = next(model.parameters()).device
        self.cuda = dev.type == "cuda" and torch.cuda.is_available()
        self.device = str(dev) if dev.index is not None or not self.cuda else f"cuda:{torch.cuda.current_device()}"
        self.weights_bytes = weight_storage_bytes(model)
        self.kv_per_token = int(kv_bytes_per_token)
        self.hook_cache = hook_cache
        self.rows: dict[int, dict[str, Any]] = {}
        self._cache: Any = None
        self._handle: Any = None

    def start(self) -> None:
        if self.hook_cache:
            self._handle = self.model.register_forward_pre_hook(self._pre_forward, with_kwargs=True)

    def stop(self) -> None:
        if self._handle is not None:
            self._handle.remove()
            self._handle = None
        self._cache = None

    def _pre_forward(self, module: Any, args: Any, kwargs: dict[str, Any]) -> None:
        # Transformers passes the cache as ``past_key_values`` (5.17) or ``cache`` (later 5.x).
        cache = kwargs.get("past_key_values", kwargs.get("cache"))
        if cache is not None and (hasattr(cache, "layers") or hasattr(cache, "key_cache")):
            self._cache = cache

    def on_step_start(self, step_id: int) -> None:
        if self.cuda:
            import torch

            torch.cuda.reset_peak_memory_stats()

    def on_step_end(self, step_id: int) -> None:
        row: dict[str, Any] = {"kv_cache_bytes": None}
        if self.cuda:
            import torch

            row["allocated_bytes"] = int(torch.cuda.memory_allocated())
            row["reserved_bytes"] = int(torch.cuda.memory_reserved())
            row["peak_allocated_bytes"] = int(torch.cuda.max_memory_allocated())
        if self._cache is not None:
            row["kv_cache_bytes"] = cache_tensor_bytes(self._cache)
        self.rows[step_id] = row

    def manifest(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "device": self.device,
            "weights_bytes": self.weights_bytes,
            "kv_bytes_per_token_formula": self.kv_per_token,
            "kv_source": "cache-tensors" if self.hook_cache else "formula",
            "profile_memory": True,
        }
        if self.cuda:
            import torch

            free, total = torch.cuda.mem_get_info()
            out.update(source="cuda caching allocator", total_bytes=int(total), free_bytes_at_end=int(free))
        else:
            out.update(source="tensors only", reason="device is cpu: no caching allocator statistics; allocated, "
                       "reserved, peak and transient are null, weights and KV measured from the tensors")
        return out

    def table(self, steps_t: Any) -> Any:
        """``step_memory`` rows for the steps the probe saw, joined to the steps table's columns."""
        cols: dict[str, list[Any]] = {k: [] for k in (
            "step_id", "request_id", "kind", "batch", "kv_len", "ts_ns", "device", "allocated_bytes",
            "reserved_bytes", "peak_allocated_bytes", "weights_bytes", "kv_cache_bytes", "transient_bytes",
            "peak_transient_bytes", "kv_source")}
        for s in steps_t.to_pylist():
            r = self.rows.get(int(s["step_id"]))
            if r is None:
                continue
            kv, src = r["kv_cache_bytes"], "cache-tensors"
            if kv is None:
                kv, src = int(s["kv_len"] or 0) * int(s["batch"] or 1) * self.kv_per_token, "formula"
            alloc, peak = r.get("allocated_bytes"), r.get("peak_allocated_bytes")
            for k in ("step_id", "request_id", "kind", "batch", "kv_len"):
                cols[k].append(s[k])
            cols["ts_ns"].append(s["cpu_end_ns"])
            cols["device"].append(self.device)
            cols["allocated_bytes"].append(alloc)
            cols["reserved_bytes"].append(r.get("reserved_bytes"))
            cols["peak_allocated_bytes"].append(peak)
            cols["weights_bytes"].append(self.weights_bytes)
            cols["kv_cache_bytes"].append(kv)
            cols["transient_bytes"].append(None if alloc is None else alloc - self.weights_bytes - kv)
            cols["peak_transient_bytes"].append(None if peak is None else peak - self.weights_bytes - kv)
            cols["kv_source"].append(src)
        return schema.from_columns("step_memory", cols)


def kv_formula(config: dict[str, Any], model: Any) -> int:
    """2 x layers x KV heads x head dim x bytes per element of the model's floating dtype (its first
    floating parameter's: quantized weights keep fp16/bf16 activations and cache)."""
    heads = int(config.get("num_attention_heads", 1))
    head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // heads)
    kv_heads = int(config.get("num_key_value_heads") or heads)
    elem = next((p.element_size() for p in model.parameters() if p.is_floating_point() and p.element_size() >= 2), 4)
    return 2 * int(config["num_hidden_layers"]) * kv_heads * head_dim * int(elem)


def cache_tensor_bytes(cache: Any) -> int:
    """Bytes of the K/V tensors a Transformers cache holds (allocated size, static caches included)."""
    total = 0
    layers = getattr(cache, "layers", None)
    if layers is not None:
        for layer in layers:
            for name in ("keys", "values"):
                t = getattr(layer, name, None)
                if t is not None and hasattr(t, "numel"):
                    total += t.numel() * t.element_size()
        return total
    for name in ("key_cache", "value_cache"):
        for t in getattr(cache, name, []) or []:
            total += t.numel() * t.element_size()
    return total
