"""Faithful synthetic vLLM and SGLang traces (the engines cannot run here), built from their own source.

What each event is, and where its name and args come from:

- Kineto's Chrome-trace layout (pytorch/kineto libkineto/src/output_json.cpp, CuptiActivity.cpp,
  RocprofActivity_inl.h): ``cpu_op`` with ``Input Dims``/``Input type``/``External id``;
  ``cuda_runtime`` launches with ``correlation`` (+ ``kernel`` on ROCm); ``kernel`` on the device's
  stream with the launch's ``correlation``; a replayed graph's kernels all carry the correlation of
  its ``cudaGraphLaunch``/``hipGraphLaunch`` (no External id on ROCm); ``deviceProperties``.
- vLLM: ``execute_context_C(T)_generation_G(T)`` and the detailed ``execute_N_context_C(sq..sk..sqsq..
  sqsk..)_generation_G(...)`` around model_runner.execute_model (vllm/v1/worker/gpu_worker.py
  annotate_profile); sampling and the token's device-to-host copy after it; graph captures in
  ``capture_traces/graph_capture_rank_0.<ns>.pt.trace.json.gz``, one file per captured size, each with
  ``capture_<N>_<FULL|PIECEWISE>`` (vllm/profiler/graph_capture.py) around ``_dummy_run``, one
  StreamBeginCapture/EndCapture window per graph (PIECEWISE: one per piece, the attention between them
  eager); the ops are vLLM's custom ops (_C::fused_add_rms_norm, _C::rotary_embedding,
  vllm::unified_attention_with_output, _C::silu_and_mul) and aten::mm for the linears.
- SGLang: ``step[DECODE bs=N]`` / ``step[EXTEND bs=N toks=T]`` around ModelRunner.forward (model_runner.py
  _build_step_span_name); ``copy_result_to_cpu`` and the token's copy after it; per-batch capture files
  ``capture_traces/bs_<n>_rank0.json.gz`` without capture markers.

Shapes: a small Llama-like model (MODEL); kernel names are real ones from the engines' source and
TraceLens's MI300X fixtures.
"""

from __future__ import annotations

import gzip
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BF16 = "c10::BFloat16"
BASE_NS = 1_780_000_000_000_000_000


@dataclass(frozen=True)
class Model:
    hidden: int = 1024
    q_heads: int = 8
    kv_heads: int = 2
    head_dim: int = 128
    inter: int = 2816
    vocab: int = 32000
    layers: int = 4


MODEL = Model()

H100_PROPS = {"id": 0, "name": "", "totalGlobalMem": 85029158912, "computeMajor": 9, "computeMinor": 0,
              "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048, "regsPerBlock": 65536,
              "warpSize": 32, "sharedMemPerBlock": 49152, "numSms": 132, "regsPerMultiprocessor": 65536,
              "sharedMemPerBlockOptin": 232448, "sharedMemPerMultiprocessor": 233472}
MI300X_PROPS = {"id": 0, "name": "AMD Radeon Graphics", "totalGlobalMem": 206141652992, "computeMajor": 9,
                "computeMinor": 4, "maxThreadsPerBlock": 1024, "maxThreadsPerMultiprocessor": 2048,
                "regsPerBlock": 65536, "warpSize": 64, "sharedMemPerBlock": 65536, "numSms": 304,
                "maxSharedMemoryPerMultiProcessor": 65536}


@dataclass
class Op:
    """One op of the forward pass: its name, input shapes and types, and the kernels it launches."""

    name: str
    dims: list[Any]
    types: list[str]
    kernels: list[tuple[str, str, float]]  # (name, kind, duration µs), launched after its children
    attention: bool = False  # the op piecewise graphs leave eager
    children: list[Op] = field(default_factory=list)  # ops it calls (their kernels are theirs)

    def host_us(self) -> float:
        return 4.0 + 6.0 * len(self.kernels) + sum(c.host_us() + 1.0 for c in self.children)


def gemm_name(hip: bool, m: int, n: int) -> str:
    if hip:
        return (f"Cijk_Alik_Bljk_BBS_BH_Bias_HA_S_SAV_UserArgs_MT{min(m, 256)}x{min(n, 256)}x64_MI16x16x1_SN_"
                "LDSB0_AFC1_ISA942_WG32_8_1")
    return f"nvjet_sm90_tst_{min(m, 256)}x{min(n, 256)}_64x4_2x1_v_bz_TNT"


def forward_ops(tokens: int, hip: bool, m: Model = MODEL) -> list[Op]:
    """vLLM's decoder forward for ``tokens`` packed tokens, as the ops it runs (in order)."""
    h, hq, hkv, d, i = m.hidden, m.q_heads, m.kv_heads, m.head_dim, m.inter
    t = tokens
    gemm_us = lambda k, n: 2.0 + 2 * k * n * 2 / 2.0e6  # weight-read time at ~2 TB/s  # noqa: E731
    blocks = 4096
    cache = Op("_C_cache_ops::reshape_and_cache_flash",
               [[t, hkv, d], [t, hkv, d], [blocks, 16, hkv, d], [blocks, 16, hkv, d], [t], [], [], []],
               [BF16, BF16, BF16, BF16, "long int", "std::string", "", ""],
               [("void vllm::reshape_and_cache_flash_kernel<__nv_bfloat16, __nv_bfloat16, "
                 "(vllm::Fp8KVCacheDataType)0>", "kernel", 2.0)])
    if hip:  # vLLM's Triton unified attention, launched by the custom op itself
        attn_children, attn_kernels = [cache], [("kernel_unified_attention_2d", "kernel", 12.0)]
    else:  # vllm-flash-attn's varlen forward over the paged cache
        attn_children = [cache, Op("_vllm_fa2_C::varlen_fwd", [[t, hq, d], [blocks, 16, hkv, d], [blocks, 16, hkv, d]],
                                   [BF16, BF16, BF16],
                                   [("void flash::flash_fwd_splitkv_kernel<Flash_fwd_kernel_traits<128, 64, 128, 4>>",
                                     "kernel", 10.0),
                                    ("void flash::flash_fwd_splitkv_combine_kernel<Flash_fwd_kernel_traits<128, 64, "
                                     "128, 4>>", "kernel", 2.0)])]
        attn_kernels = []
    ops = [Op("aten::embedding", [[m.vocab, h], [t], [], [], []], [BF16, "long int", "Scalar", "Scalar", "Scalar"],
              [("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long, unsigned int>",
                "kernel", 3.0)])]
    for layer in range(m.layers):
        norm = ("_C::rms_norm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "double"],
                "void vllm::rms_norm_kernel<c10::BFloat16, 8>") if layer == 0 else \
            ("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "double"],
             "void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>")
        qkv = (hq + 2 * hkv) * d
        ops += [
            Op(norm[0], norm[1], norm[2], [(norm[3], "kernel", 3.0)]),
            Op("aten::mm", [[t, h], [h, qkv]], [BF16, BF16], [(gemm_name(hip, t, qkv), "kernel", gemm_us(h, qkv))]),
            Op("_C::rotary_embedding", [[t], [t, hq * d], [t, hkv * d], [], [4096, d], []],
               ["long int", BF16, BF16, "Scalar", BF16, "Scalar"],
               [("void vllm::rotary_embedding_kernel<c10::BFloat16, true>", "kernel", 2.5)]),
            Op("vllm::unified_attention_with_output", [[t, hq, d], [t, hkv, d], [t, hkv, d], [t, hq, d], []],
               [BF16, BF16, BF16, BF16, "std::string"], attn_kernels, attention=True, children=attn_children),
            Op("aten::mm", [[t, hq * d], [hq * d, h]], [BF16, BF16],
               [(gemm_name(hip, t, h), "kernel", gemm_us(hq * d, h))]),
            Op("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "double"],
               [("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", "kernel", 3.0)]),
            Op("aten::mm", [[t, h], [h, 2 * i]], [BF16, BF16], [(gemm_name(hip, t, 2 * i), "kernel", gemm_us(h, 2 * i))]),
            Op("_C::silu_and_mul", [[t, i], [t, 2 * i]], [BF16, BF16],
               [("void vllm::act_and_mul_kernel<c10::BFloat16, &vllm::silu_kernel<c10::BFloat16>, true>", "kernel", 3.0)]),
            Op("aten::mm", [[t, i], [i, h]], [BF16, BF16], [(gemm_name(hip, t, h), "kernel", gemm_us(i, h))]),
        ]
    ops.append(Op("_C::fused_add_rms_norm", [[t, h], [t, h], [h], []], [BF16, BF16, BF16, "double"],
                  [("void vllm::fused_add_rms_norm_kernel<c10::BFloat16, 8>", "kernel", 3.0)]))
    return ops


def pieces(ops: list[Op]) -> list[list[Op]]:
    """The graphs of a piecewise capture: the ops between the attention ops (which stay eager)."""
    out: list[list[Op]] = [[]]
    for op in ops:
        if op.attention:
            out.append([])
        else:
            out[-1].append(op)
    return out


@dataclass
class Kineto:
    """Builds one Kineto Chrome trace. Times in µs from the trace's start, as Kineto writes them."""

    hip: bool = False
    props: dict[str, Any] | None = None
    pid: int = 4242
    tid: int = 4242
    events: list[dict[str, Any]] = field(default_factory=list)
    corr: int = 1000
    ext: int = 1
    stream: int = 7
    meta: dict[str, Any] = field(default_factory=dict)

    def _next_ext(self) -> int:
        self.ext += 1
        return self.ext

    def annotation(self, name: str, ts: float, dur: float, gpu: bool = True) -> None:
        ext = self._next_ext()
        self.events.append({"ph": "X", "cat": "user_annotation", "name": name, "pid": self.pid, "tid": self.tid,
                            "ts": ts, "dur": dur, "args": {"External id": ext, "Record function id": 0}})
        if gpu:
            self.events.append({"ph": "X", "cat": "gpu_user_annotation", "name": name, "pid": 0, "tid": self.stream,
                                "ts": ts + 5, "dur": dur, "args": {"External id": ext}})

    def python(self, name: str, ts: float, dur: float) -> None:
        self.events.append({"ph": "X", "cat": "python_function", "name": name, "pid": self.pid, "tid": self.tid,
                            "ts": ts, "dur": dur, "args": {"Python id": self._next_ext()}})

    def op(self, name: str, ts: float, dur: float, dims: list[Any] | None = None,
           types: list[str] | None = None) -> int:
        ext = self._next_ext()
        args: dict[str, Any] = {"External id": ext, "Record function id": 0, "Ev Idx": ext}
        if dims is not None:
            args["Input Dims"] = dims
            args["Input type"] = types or []
        self.events.append({"ph": "X", "cat": "cpu_op", "name": name, "pid": self.pid, "tid": self.tid,
                            "ts": ts, "dur": dur, "args": args})
        return ext

    def runtime(self, name: str, ts: float, dur: float, ext: int | None, kernel: str | None = None) -> int:
        self.corr += 1
        args: dict[str, Any] = {"correlation": self.corr}
        if self.hip:
            args["cid"] = 1
            if kernel is not None:
                args["kernel"] = kernel
        else:
            args["cbid"] = 211
        if ext is not None:
            args["External id"] = ext
        self.events.append({"ph": "X", "cat": "cuda_runtime", "name": name, "pid": self.pid, "tid": self.tid,
                            "ts": ts, "dur": dur, "args": args})
        return self.corr

    def device(self, name: str, kind: str, ts: float, dur: float, corr: int, ext: int | None,
               nbytes: int = 0) -> None:
        cat = {"kernel": "kernel", "memcpy": "gpu_memcpy", "memset": "gpu_memset"}[kind]
        args: dict[str, Any] = {"device": 0, "stream": self.stream, "correlation": corr}
        if kind == "kernel":
            args.update({"grid": [64, 1, 1], "block": [256, 1, 1]})
        else:
            args["bytes"] = nbytes
        if ext is not None and not self.hip:
            args["External id"] = ext
        self.events.append({"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": self.stream, "ts": ts,
                            "dur": dur, "args": args})

    def launch_name(self, kind: str) -> str:
        if kind == "memcpy":
            return "hipMemcpyAsync" if self.hip else "cudaMemcpyAsync"
        if kind == "memset":
            return "hipMemsetAsync" if self.hip else "cudaMemsetAsync"
        return "hipLaunchKernel" if self.hip else "cudaLaunchKernel"

    def eager(self, op: Op, ts: float, gpu_ts: float) -> tuple[float, float]:
        """The op, its children and its kernels, run eagerly; returns (host time after it, GPU time after)."""
        host = op.host_us()
        ext = self.op(op.name, ts, host, op.dims, op.types)
        t = ts + 2.0
        for child in op.children:
            t, gpu_ts = self.eager(child, t, gpu_ts)
        for name, kind, dur in op.kernels:
            c = self.runtime(self.launch_name(kind), t, 4.0, ext, name)
            gpu_ts = max(gpu_ts, t + 6.0)
            self.device(name, kind, gpu_ts, dur, c, ext)
            gpu_ts += dur + 1.0
            t += 6.0
        return ts + host + 1.0, gpu_ts

    def capture(self, ops: list[Op], ts: float) -> float:
        """One StreamBeginCapture ... StreamEndCapture window capturing ``ops`` (launches, no kernels run)."""
        api = "hip" if self.hip else "cuda"
        self.runtime(f"{api}StreamBeginCapture", ts, 3.0, None)
        t = ts + 4.0
        for op in ops:
            t = self.captured(op, t)
        self.runtime(f"{api}StreamEndCapture", t, 3.0, None)
        return t + 4.0

    def captured(self, op: Op, t: float) -> float:
        """The op's launch calls under capture (its children's first): nothing runs on the GPU."""
        ext = self.op(op.name, t, op.host_us(), op.dims, op.types)
        k = t + 2.0
        for child in op.children:
            k = self.captured(child, k)
        for name, kind, _ in op.kernels:
            self.runtime(self.launch_name(kind), k, 4.0, ext, name)
            k += 6.0
        return t + op.host_us() + 1.0

    def replay(self, ops: list[Op], ts: float, gpu_ts: float, ext: int | None) -> tuple[float, float]:
        """One graph launch replaying ``ops``' kernels: they share its correlation."""
        api = "hipGraphLaunch" if self.hip else "cudaGraphLaunch"
        c = self.runtime(api, ts, 20.0, ext)
        g = max(gpu_ts, ts + 25.0)
        for op in ops:
            g = self.replayed(op, g, c, ext)
        return ts + 21.0, g

    def replayed(self, op: Op, g: float, corr: int, ext: int | None) -> float:
        for child in op.children:
            g = self.replayed(child, g, corr, ext)
        for name, kind, dur in op.kernels:
            self.device(name, kind, g, dur, corr, ext)
            g += dur + 0.5
        return g

    def token_copy(self, ts: float, gpu_ts: float) -> tuple[float, float]:
        """Sampling (argmax) and the sampled ids' copy to pinned host memory, then the event wait."""
        t, g = self.eager(Op("aten::argmax", [[64, MODEL.vocab], [], []], [BF16, "Scalar", "Scalar"],
                             [("void at::native::reduce_kernel<512, 1, at::native::ReduceOp<float>>", "kernel", 4.0)]),
                          ts, gpu_ts)
        name = "Memcpy DtoH (Device -> Host)" if self.hip else "Memcpy DtoH (Device -> Pinned)"
        ext = self.op("aten::copy_", t, 10.0, [[64], [64], []], ["long int", "long int", "Scalar"])
        c = self.runtime(self.launch_name("memcpy"), t + 2.0, 5.0, ext)
        g = max(g, t + 8.0)
        self.device(name, "memcpy", g, 2.0, c, ext, nbytes=512)
        self.runtime("hipEventSynchronize" if self.hip else "cudaEventSynchronize", t + 11.0, max(g + 3.0 - t - 11.0, 1.0),
                     None)
        return max(t + 12.0, g + 4.0), g + 2.0

    def write(self, path: Path) -> Path:
        doc: dict[str, Any] = {"schemaVersion": 1, "traceEvents": self.events, "baseTimeNanoseconds": BASE_NS,
                               "displayTimeUnit": "ms", "record_shapes": 1, **self.meta}
        if self.props is not None:
            doc["deviceProperties"] = [self.props]
        path.parent.mkdir(parents=True, exist_ok=True)
        data = json.dumps(doc).encode()
        path.write_bytes(gzip.compress(data) if path.name.endswith(".gz") else data)
        return path


# --- vLLM -----------------------------------------------------------------------------------------

CAPTURE_SIZES = (1, 2, 4, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144)


def padded(n: int, sizes: tuple[int, ...] = CAPTURE_SIZES) -> int:
    return min(s for s in sizes if s >= n)


def vllm_capture_file(folder: Path, size: int, mode: str, hip: bool, model: Model = MODEL, ts_ns: int = 0) -> Path:
    """One vLLM capture trace: capture_<size>_<mode> around _dummy_run; warm-up runs outside the windows."""
    k = Kineto(hip=hip, props=MI300X_PROPS if hip else H100_PROPS)
    ops = forward_ops(size, hip, model)
    k.annotation(f"capture_{size}_{mode}", 100.0, 100000.0, gpu=False)
    k.python("vllm/v1/worker/gpu_model_runner.py(3521): _dummy_run", 110.0, 99000.0)
    t, g = 200.0, 200.0
    for op in ops:  # the warm-up run, eager: its kernels do run
        t, g = k.eager(op, t, g)
    t += 50.0
    if mode == "FULL":
        t = k.capture(ops, t)
    else:
        for i, piece in enumerate(pieces(ops)):
            t = k.capture(piece, t)
            if i < model.layers:  # the attention between two pieces runs eagerly during the capture run
                att = next(o for o in ops if o.attention)
                t, g = k.eager(att, t, max(g, t))
    name = f"graph_capture_rank_0.{ts_ns or 1773709679453551615 + size}.pt.trace.json.gz"
    return k.write(folder / name)


def vllm_trace(path: Path, steps: list[tuple[str, int, int]], *, hip: bool, model: Model = MODEL,
               props: dict[str, Any] | None = None) -> Path:
    """A vLLM worker trace. ``steps``: (annotation, scheduled tokens, piecewise? 0/1) per engine step.

    A FULL step launches one graph; a piecewise one a graph per piece with the attention eager between;
    the logits GEMM runs eagerly after the graph, sampling and the token's copy after the step.
    """
    k = Kineto(hip=hip, props=props if props is not None else (MI300X_PROPS if hip else H100_PROPS))
    k.meta["vllm_version"] = "0.18.0"
    t, g = 1000.0, 1000.0
    for name, tokens, piecewise in steps:
        size = padded(tokens)
        ops = forward_ops(size, hip, model)
        start = t
        ext = k.op("aten::copy_", t + 1.0, 8.0, [[size], [size], []], ["long int", "long int", "Scalar"])
        c = k.runtime(k.launch_name("memcpy"), t + 2.0, 5.0, ext)
        k.device("Memcpy HtoD (Pinned -> Device)", "memcpy", max(g, t + 8.0), 1.5, c, ext, nbytes=8 * size)
        t += 12.0
        if piecewise:
            for i, piece in enumerate(pieces(ops)):
                t, g = k.replay(piece, t, g, None)
                if i < model.layers:
                    att = next(o for o in ops if o.attention)
                    t, g = k.eager(att, t, g)
        else:
            t, g = k.replay(ops, t, g, None)
        logits = Op("aten::mm", [[size, model.hidden], [model.hidden, model.vocab]], [BF16, BF16],
                    [(gemm_name(hip, size, model.vocab), "kernel", 40.0)])
        t, g = k.eager(logits, t, g)
        k.annotation(name, start, t - start)
        t, g = k.token_copy(t + 5.0, g)
        t = max(t, g) + 30.0
    return k.write(path)


# --- SGLang ---------------------------------------------------------------------------------------


def sglang_capture_file(folder: Path, bs: int, hip: bool, model: Model = MODEL) -> Path:
    """SGLang's per-batch capture file (capture_traces/bs_<n>_rank0.json.gz): a scheduled profiler over the
    capture pass, without capture markers; two launches of its input preparation precede the graph's."""
    k = Kineto(hip=hip, props=MI300X_PROPS if hip else H100_PROPS)
    k.meta["record_shapes"] = 1
    t = 100.0
    k.annotation("ProfilerStep#2", 50.0, 90000.0, gpu=False)
    for _ in range(2):
        ext = k.op("aten::copy_", t, 8.0, [[bs], [bs], []], ["int", "int", "Scalar"])
        k.runtime(k.launch_name("memcpy"), t + 2.0, 4.0, ext)
        t += 10.0
    for op in forward_ops(bs, hip, model):
        t = k.captured(op, t)
    return k.write(folder / f"bs_{bs}_rank0.json.gz")


def sglang_trace(path: Path, steps: list[tuple[str, int]], *, hip: bool, model: Model = MODEL,
                 early_copy: bool = True) -> Path:
    """An SGLang scheduler trace: ``steps`` (annotation, batch); a DECODE step replays the graph of its padded
    batch; an EXTEND step runs eagerly. ``early_copy``: a small device-to-host copy inside the step span
    before the graph launch (the step's metadata), which is not the token."""
    k = Kineto(hip=hip, props=MI300X_PROPS if hip else H100_PROPS)
    t, g = 1000.0, 1000.0
    for name, bs in steps:
        start = t
        if early_copy:
            ext = k.op("aten::item", t + 1.0, 6.0, [[]], ["int"])
            c = k.runtime(k.launch_name("memcpy"), t + 2.0, 3.0, ext)
            k.device("Memcpy DtoH (Device -> Pageable)", "memcpy", max(g, t + 4.0), 1.0, c, ext, nbytes=4)
            t += 10.0
        if name.startswith("step[DECODE"):
            t, g = k.replay(forward_ops(padded(bs), hip, model), t, g, None)
        else:
            toks = int(name.split("toks=")[1].rstrip("]").split()[0])
            for op in forward_ops(toks, hip, model):
                t, g = k.eager(op, t, g)
        k.annotation(name, start, t - start)
        k.annotation("copy_result_to_cpu", t + 2.0, 20.0, gpu=False)
        t, g = k.token_copy(t + 3.0, g)
        t = max(t, g) + 40.0
    return k.write(path)
