"""The tables: one place for every column name, type and unit.

Timestamps are int64 nanoseconds on one clock (the trace's); durations are
int64 nanoseconds; names are dictionary-encoded strings. Every table is valid
when empty (``empty(name)``). Bump SCHEMA_VERSION whenever a column changes
meaning or type: caches and readers key on it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pyarrow as pa

from tracekit.errors import SchemaError

SCHEMA_VERSION = 3

_dict = pa.dictionary(pa.int32(), pa.string())
_i64 = pa.int64()
_i32 = pa.int32()
_f64 = pa.float64()


def _schema(*fields: tuple[str, pa.DataType], doc: str) -> pa.Schema:
    return pa.schema([pa.field(n, t) for n, t in fields], metadata={"doc": doc})


SCHEMAS: dict[str, pa.Schema] = {
    # --- raw tables: written by ingest, one row per trace event -------------
    "gpu_activity": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("kind", _dict),  # kernel | memcpy | memset
        ("name", _dict),
        ("device", _i32),
        ("stream", _i32),
        ("correlation", _i64),
        ("external_id", _i64),
        ("op_id", _i64),  # cpu_ops.op_id of the launching CPU op (null if unknown)
        ("launch_name", _dict),  # runtime call that launched it (cudaLaunchKernel, cudaGraphLaunch, ...)
        ("grid", pa.list_(_i32)),
        ("block", pa.list_(_i32)),
        ("registers_per_thread", _i32),
        ("shared_memory_bytes", _i64),
        ("bytes", _i64),  # memcpy / memset bytes
        ("memcpy_kind", _dict),  # HtoD, DtoH, DtoD, ...
        doc="GPU kernels, memcpys and memsets",
    ),
    "cpu_ops": _schema(
        ("rank", _i32),
        ("op_id", _i64),  # unique within a run
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("name", _dict),
        ("cat", _dict),  # cpu_op | user_annotation | python_function ...
        ("pid", _i64),
        ("tid", _i64),
        ("external_id", _i64),
        ("sequence_number", _i64),
        ("input_dims", pa.string()),  # JSON text, e.g. "[[2,22],[32000,2048]]"
        ("input_types", pa.string()),  # JSON text, e.g. '["c10::Half","long int"]'
        # JSON text: the values of the scalar inputs ("" for tensors), e.g. '["","","512"]', null where no
        # input has a value; an inductor (Triton) kernel's op carries its element counts (xnumel, r0_numel)
        ("concrete_inputs", pa.string()),
        # JSON text: the inputs' strides ([] for scalars), kept only where some input is an expanded view
        # (a 0 stride, e.g. '[[1,0],[2048,1]]'); null elsewhere, where the dims are dense
        ("input_strides", pa.string()),
        ("parent_id", _i64),  # op_id of the enclosing op on the same thread
        # True: an op that ran while a CUDA/HIP graph was captured (in a graph-capture trace, on that
        # trace's clock, or inside the trace's own capture window): nothing it launched ran then; it
        # lends its shapes to the kernels the graph replays (tracekit.ingest.capture)
        ("captured", pa.bool_()),
        doc="CPU-side aten and user ops",
    ),
    "runtime": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("name", _dict),
        ("pid", _i64),
        ("tid", _i64),
        ("correlation", _i64),
        ("external_id", _i64),
        doc="CUDA runtime and driver calls",
    ),
    "annotations": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("name", _dict),
        ("cat", _dict),  # user_annotation | gpu_user_annotation | profiler_step | tracekit
        ("pid", _i64),
        ("tid", _i64),
        ("device", _i32),  # GPU annotations only
        ("stream", _i32),
        doc="User, profiler-step and GPU annotations",
    ),
    "counters": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("device", _i32),
        ("metric", _dict),
        ("value", _f64),
        ("unit", _dict),
        ("source", _dict),  # nvml | gpm | kineto
        doc="Counter samples, long form",
    ),
    "memory": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("device_type", _i32),
        ("device", _i32),
        ("addr", _i64),
        ("bytes", _i64),  # allocation (+) or free (-)
        ("total_allocated_bytes", _i64),
        ("total_reserved_bytes", _i64),
        doc="Allocator events ([memory] instants)",
    ),
    "step_memory": _schema(
        ("rank", _i32),
        ("step_id", _i64),
        ("request_id", _i64),
        ("kind", _dict),  # prefill | decode | mixed
        ("batch", _i64),
        ("kv_len", _i64),
        ("ts_ns", _i64),  # the step's end on the trace clock
        ("device", _dict),  # cuda:0, cpu
        # The caching allocator at the step's end (null where there is none: a CPU run).
        ("allocated_bytes", _i64),
        ("reserved_bytes", _i64),
        ("peak_allocated_bytes", _i64),  # highest allocated inside the step
        # allocated = weights + kv_cache + transient (exactly, where allocated is known)
        ("weights_bytes", _i64),  # the model's parameters and buffers (packed, scales and zeros included)
        ("kv_cache_bytes", _i64),  # the K/V tensors the cache holds after the step
        ("transient_bytes", _i64),  # everything else: activations, workspace, logits
        ("peak_transient_bytes", _i64),  # peak - weights - kv_cache: the step's working set
        ("kv_source", _dict),  # cache-tensors | formula
        doc="Memory at each step boundary: allocator state split into weights, KV cache and transient",
    ),
    "other_events": _schema(
        ("rank", _i32),
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("ph", _dict),
        ("cat", _dict),
        ("name", _dict),
        ("pid", pa.string()),
        ("tid", pa.string()),
        ("args", pa.string()),  # JSON text
        doc="Events of categories tracekit does not model; kept, never dropped",
    ),
    # --- derived tables: written by record / analysis passes ---------------
    "steps": _schema(
        ("rank", _i32),
        ("step_id", _i64),
        ("request_id", _i64),
        ("kind", _dict),  # prefill | decode | mixed (llm); denoise (diffusion); iteration (iterations)
        ("batch", _i64),
        ("q_len", _i64),  # query tokens per sequence (max over the batch)
        ("kv_len", _i64),  # KV positions attended after this step (past + q)
        ("tokens", _i64),  # query tokens in the step, all sequences
        ("source", _dict),  # which source decided the split (docs/metrics.md, Steps and Workload kinds)
        ("cpu_start_ns", _i64),
        ("cpu_end_ns", _i64),
        ("gpu_start_ns", _i64),
        ("gpu_end_ns", _i64),
        ("gpu_busy_ns", _i64),
        ("captured", pa.bool_()),  # the trace has this step's kernels (false: outside a --trace-steps window)
        ("token_ns", _i64),  # GPU end of the step's token copy to the host (null: none seen in its window)
        # Per-phase sequence sums an engine annotation gives, JSON text (null: none given):
        # {"context": {"requests", "sq", "sk", "sqsq", "sqsk"}, "generation": {...}}; sq = query tokens,
        # sk = KV length after the step, summed over the phase's sequences (docs/schema.md)
        ("seq_stats", pa.string()),
        ("graph_launches", _i64),  # CUDA/HIP graph launches issued in the step's window
        doc="One row per model forward pass",
    ),
    "requests": _schema(
        ("rank", _i32),
        ("request_id", _i64),
        ("name", _dict),
        ("batch", _i64),
        ("input_tokens", _i64),
        ("output_tokens", _i64),
        ("start_ns", _i64),
        ("end_ns", _i64),
        ("ttft_ns", _i64),
        ("tpot_ns", _f64),
        ("e2e_ns", _i64),
        ("prefill_share", _f64),
        ("source", _dict),
        # Inter-token latency percentiles, throughput and the read/write asymmetry
        # (GPU ns per input token in prefill vs per output token in decode).
        ("itl_p50_ns", _f64),
        ("itl_p90_ns", _f64),
        ("itl_p99_ns", _f64),
        ("prefill_tok_s", _f64),
        ("decode_tok_s", _f64),
        ("prefill_gpu_ns_per_token", _f64),
        ("decode_gpu_ns_per_token", _f64),
        # Host-side timings from run.json, beside the trace-derived ones.
        ("host_ttft_ns", _f64),
        ("host_tpot_ns", _f64),
        ("host_e2e_ns", _f64),
        # Serving under load (record --serve): arrival to first scheduled, and TTFT / e2e
        # read from the trace's step windows, beside the engine's own token timestamps.
        ("queue_ns", _i64),
        ("trace_ttft_ns", _i64),
        ("trace_e2e_ns", _i64),
        # Speculative decoding (record --assistant): draft tokens proposed / accepted, and the
        # same prompt without the assistant in the same run (plain_request_id; speedup = its e2e / this e2e).
        ("assistant", _dict),
        ("proposed_tokens", _i64),
        ("accepted_tokens", _i64),
        ("acceptance_rate", _f64),
        ("plain_request_id", _i64),
        ("speedup", _f64),
        # The request's cost inside the batches it shared (analysis/cost.py, docs/metrics.md):
        # sums over its steps of its share of each step.
        ("steps", _i64),  # steps it took part in
        ("step_time_ns", _i64),  # share of the steps' wall time
        ("gpu_time_ns", _i64),  # share of the steps' GPU busy time
        ("compute_bound_ns", _i64),
        ("memory_bound_ns", _i64),
        ("latency_bound_ns", _i64),
        ("other_ns", _i64),
        ("idle_ns", _i64),
        ("flops", _f64),
        ("bytes", _f64),
        ("energy_j", _f64),
        ("mean_step_share", _f64),  # mean over its steps of its share of the step's wall time
        doc="One row per request",
    ),
    "step_requests": _schema(
        ("rank", _i32),
        ("step_id", _i64),
        ("request_id", _i64),
        ("phase", _dict),  # p / f / d (batch steps), or the step's kind
        ("q_len", _i64),  # this request's query tokens in the step
        ("kv_len", _i64),  # its KV positions after the step (past + q_len)
        ("round", _i64),  # speculative decoding: the round
        ("proposed_tokens", _i64),  # verify steps: draft tokens checked
        ("accepted_tokens", _i64),  # verify steps: of those, accepted
        # Its share of the step's cost (analysis/cost.py): the shares of a step sum to it
        # (exactly for the integer ns columns).
        ("share", _f64),  # of the step's wall time
        ("step_time_ns", _i64),
        ("gpu_time_ns", _i64),
        ("compute_bound_ns", _i64),
        ("memory_bound_ns", _i64),
        ("latency_bound_ns", _i64),
        ("other_ns", _i64),
        ("comm_ns", _i64),
        ("memcpy_ns", _i64),
        ("idle_ns", _i64),
        ("flops", _f64),
        ("bytes", _f64),
        ("energy_j", _f64),
        doc="One row per (step, request in it): the requests a batch step served and each one's share",
    ),
    "kernel_steps": _schema(
        ("rank", _i32),
        ("row", _i64),  # position of the activity in gpu_activity
        ("device", _i32),
        ("ts_ns", _i64),
        ("dur_ns", _i64),
        ("category", _dict),  # compute | memcpy | memset | comm
        ("step_id", _i64),  # null: outside every step
        ("request_id", _i64),
        doc="The step of every GPU activity (analysis; gpu_activity itself is not rewritten)",
    ),
    "gpu_timeline": _schema(
        ("rank", _i32),  # set when a multi-rank run's per-rank tables are merged
        ("device", _i32),
        ("span_ns", _i64),
        ("busy_ns", _i64),
        ("compute_ns", _i64),
        ("memcpy_ns", _i64),
        ("comm_ns", _i64),
        ("idle_ns", _i64),
        ("activities", _i64),
        ("outside_steps", _i64),
        doc="Per device over the whole trace: busy by category and idle",
    ),
    "op_class_split": _schema(
        ("rank", _i32),
        ("phase", pa.string()),  # prefill | decode | mixed | outside
        ("op_class", pa.string()),  # attention | gemm | norm | elementwise | sampling | framework
        ("time_ns", _i64),
        ("share", _f64),
        ("steps", _i64),
        doc="CPU runs: each phase's host time by operator class (analysis/opclass.py)",
    ),
    "phases": _schema(
        ("rank", _i32),
        ("request_id", _i64),  # null: the whole run
        ("phase", _dict),  # prefill | decode | mixed | outside
        ("steps", _i64),
        ("steps_captured", _i64),  # steps with kernel capture; the time columns cover only these
        ("time_ns", _i64),
        ("gpu_busy_ns", _i64),
        ("compute_bound_ns", _i64),
        ("memory_bound_ns", _i64),
        ("latency_bound_ns", _i64),  # kernels under 60% of both peaks (docs/roofline.md)
        ("idle_ns", _i64),  # = idle_profiler_ns + idle_host_ns + idle_wait_ns + idle_before_window_ns
        ("idle_profiler_ns", _i64),  # the profiler's own cost (null: no unprofiled timing pass)
        ("idle_host_ns", _i64),  # the host had not issued the next work yet
        ("idle_wait_ns", _i64),  # work was issued; the GPU waited (sync, copy, other stream)
        ("idle_before_window_ns", _i64),  # queued behind work the trace does not show (before its window, other process)
        ("other_ns", _i64),
        ("comm_ns", _i64),
        ("memcpy_ns", _i64),
        ("flops", _f64),
        ("bytes", _f64),
        ("achieved_tflops", _f64),
        ("achieved_tbps", _f64),
        ("pct_peak_flops", _f64),
        ("pct_peak_bandwidth", _f64),
        ("energy_j", _f64),
        # rates over wall time, model coverage, the ceiling used (analysis/bound.py, docs/roofline.md)
        ("achieved_tflops_wall", _f64),
        ("achieved_tbps_wall", _f64),
        ("kernels_modelled", _i64),  # FLOPs/bytes from the launching op's shapes
        ("kernels_class_only", _i64),  # bound from the kernel-name class only
        ("kernels_unmodelled", _i64),  # counted in other_ns
        ("ceiling", _dict),  # "<gpu> (datasheet|measured)"
        ("ceiling_dtype", _dict),  # dtype whose peak pct_peak_flops uses
        ("energy_j_per_token", _f64),
        ("gpm_dram_bw_util_pct", _f64),  # GPM DRAM bandwidth utilisation, time-weighted over the phase windows
        ("gpm_dram_tbps", _f64),  # that × the ceiling's peak bandwidth
        ("kernels_measured", _i64),  # classified by Nsight Compute counters (source ncu)
        ("advice", pa.string()),  # what would help, from the split (analysis/advice.py)
        doc="Time attribution per (request or run, phase)",
    ),
}

SCHEMAS["ncu_counters"] = _schema(
    ("step_id", _i64),  # tracekit step whose NVTX range the kernel ran in (null: none)
    ("ordinal", _i64),  # position in the step's launch order
    ("ncu_id", _i64),  # Nsight Compute's result ID
    ("name", pa.string()),  # demangled: Kineto's spelling of the kernel name
    ("stream", _i32),
    ("grid", pa.list_(_i32)),
    ("block", pa.list_(_i32)),
    ("ncu_dur_ns", _f64),  # gpu__time_duration.sum (under replay; the trace's duration stays the time)
    ("dram_bytes", _f64),  # dram__bytes_read.sum + dram__bytes_write.sum
    ("dram_pct", _f64),  # dram__throughput, % of peak sustained
    ("sm_pct", _f64),  # sm__throughput, % of peak (null: not collected)
    ("memory_pct", _f64),  # gpu__compute_memory_throughput, % of peak (null: not collected)
    ("tensor_pct", _f64),  # sm__pipe_tensor_cycles_active, % of peak
    ("ncu_flops", _f64),  # from SASS FP32/FP16 instruction counters where collected
    ("waves", _f64),  # launch__waves_per_multiprocessor
    doc="Nsight Compute counters per profiled kernel (tracekit counters)",
)



def _copy(base: str, doc: str) -> pa.Schema:
    """Another table's schema under its own doc: a table stored in two roles."""
    return SCHEMAS[base].with_metadata({"doc": doc})


_str = pa.string()

# --- copies of steps / requests under other names ---------------------------
SCHEMAS["recorded_steps"] = _copy(
    "steps", "The recorder's own steps (host-timed, every step), kept when analysis replaces steps")
SCHEMAS["recorded_requests"] = _copy(
    "requests", "The recorder's own requests (host-timed), kept when analysis replaces requests")
SCHEMAS["trace_steps"] = _copy(
    "steps", "A sweep point's steps as its trace window shows them (steps keeps the host-timed ones)")
SCHEMAS["trace_requests"] = _copy(
    "requests", "A sweep point's requests as its trace window shows them (requests keeps the host-timed ones)")

# --- the bound pass (analysis/bound.py): per kernel and per step -------------
SCHEMAS["kernel_bound"] = _schema(
    # the gpu_activity columns, names as plain text
    ("rank", _i32),
    ("ts_ns", _i64),
    ("dur_ns", _i64),
    ("kind", _str),
    ("name", _str),
    ("short_name", _str),  # the function without namespaces, template arguments, parameters (model/kernelnames)
    ("device", _i32),
    ("stream", _i32),
    ("correlation", _i64),
    ("external_id", _i64),
    ("op_id", _i64),
    ("launch_name", _str),
    ("grid", _str),  # as text, e.g. "[128 1 1]"
    ("block", _str),
    ("registers_per_thread", _i32),
    ("shared_memory_bytes", _i64),
    ("bytes", _f64),  # modelled bytes moved (memcpy / memset: the trace's, x2 for DtoD)
    ("memcpy_kind", _str),
    # the roofline model
    ("kclass", _str),  # kernel-name class: gemm, attention, elementwise, ...
    ("model", _str),  # shape | kernel_class | none: where FLOPs and bytes came from
    ("op_name", _str),  # the modelled CPU op
    ("flops", _f64),
    ("dtype", _str),
    ("ridge", _f64),  # FLOP per byte where the roofs meet, for this kernel's dtype
    ("intensity", _f64),  # flops / bytes
    ("flops_pct_of_peak", _f64),
    ("bw_pct_of_peak", _f64),
    ("over_peak", pa.bool_()),  # a modelled rate above every peak (ceiling in use and datasheet): the model over-counts
    ("roof", _str),  # compute | memory: the roof under the kernel's intensity
    ("bound", _str),  # compute | memory | latency | comm | memcpy | other
    ("source", _str),  # model | ncu: what decided ``bound``
    ("step_id", _i64),  # null: outside every step
    ("issued_ns", _i64),  # when the host issued it (its runtime call's start)
    ("phase", _str),  # its step's kind
    # Nsight Compute's counters where `tracekit counters` joined them (null elsewhere; ncu_counters)
    ("ncu_dur_ns", _f64),
    ("dram_bytes", _f64),
    ("dram_pct", _f64),
    ("sm_pct", _f64),
    ("memory_pct", _f64),
    ("tensor_pct", _f64),
    ("ncu_flops", _f64),
    ("waves", _f64),
    ("ncu_match", _str),  # exact | base: how the kernel matched its counter row (same name, same function)
    doc="One row per GPU activity: its roofline numbers and bound class (docs/roofline.md)",
)
SCHEMAS["step_bound"] = _schema(
    # the step's columns (steps) ...
    ("step_id", _i64),
    ("request_id", _i64),
    ("kind", _str),
    ("batch", _i64),
    ("q_len", _i64),
    ("kv_len", _i64),
    ("tokens", _i64),
    ("source", _str),
    ("cpu_start_ns", _i64),
    ("cpu_end_ns", _i64),
    ("gpu_start_ns", _i64),
    ("gpu_end_ns", _i64),
    ("captured", pa.bool_()),
    ("seq_stats", _str),
    ("graph_launches", _i64),
    ("token_ns", _i64),
    # ... its window [cpu start, max(cpu end, gpu end)) and the window's time split
    ("start_ns", _i64),
    ("end_ns", _i64),
    ("compute_bound_ns", _i64),
    ("memory_bound_ns", _i64),
    ("latency_bound_ns", _i64),
    ("other_ns", _i64),
    ("comm_ns", _i64),
    ("memcpy_ns", _i64),
    ("idle_ns", _i64),
    ("idle_profiler_ns", _i64),
    ("idle_wait_ns", _i64),
    ("idle_before_window_ns", _i64),
    ("idle_host_ns", _i64),
    ("time_ns", _i64),
    ("gpu_busy_ns", _i64),
    ("flops", _f64),
    ("bytes", _f64),
    ("kernels_modelled", _i64),
    ("kernels_class_only", _i64),
    ("kernels_unmodelled", _i64),
    ("kernels_measured", _i64),
    doc="One row per captured step: its window's time split, FLOPs and bytes (analysis/bound.py)",
)

# --- across the ranks of a multi-rank run (analysis/ranks.py) ---------------
SCHEMAS["rank_steps"] = _schema(
    ("step_id", _i64),
    ("request_id", _i64),
    ("kind", _str),
    ("ranks", _i64),  # ranks that ran the step
    ("missing_ranks", _str),  # comma-separated ranks without it ("" when none)
    ("start_min_ns", _i64),
    ("start_skew_ns", _i64),  # latest start minus earliest
    ("end_min_ns", _i64),
    ("end_max_ns", _i64),
    ("skew_ns", _i64),  # latest end minus earliest
    ("straggler_rank", _i64),  # the rank that ended last
    ("dur_min_ns", _i64),
    ("dur_max_ns", _i64),
    doc="One row per step across ranks: alignment, skew, straggler",
)
SCHEMAS["rank_skew"] = _schema(
    ("phase", _str),
    ("steps", _i64),
    ("skew_p50_ns", _f64),
    ("skew_p90_ns", _f64),
    ("skew_max_ns", _i64),
    ("straggler_counts", _str),  # JSON text: {rank: steps it ended last}
    doc="Per phase: the distribution of step-end skew across ranks",
)
SCHEMAS["comm_steps"] = _schema(
    ("rank", _i64),
    ("step_id", _i64),
    ("request_id", _i64),
    ("kind", _str),
    ("window_ns", _i64),
    ("comm_ns", _i64),  # union of the step's NCCL kernels
    ("exposed_comm_ns", _i64),  # NCCL time with no compute kernel beside it
    ("compute_ns", _i64),
    ("nccl_kernels", _i64),
    doc="Per (rank, step): NCCL time, exposed and overlapped",
)
SCHEMAS["comm_phases"] = _schema(
    ("rank", _i64),
    ("phase", _str),
    ("steps", _i64),
    ("time_ns", _i64),
    ("comm_ns", _i64),
    ("exposed_comm_ns", _i64),
    ("overlapped_comm_ns", _i64),
    ("comm_share", _f64),
    ("exposed_share", _f64),
    ("nccl_kernels", _i64),
    ("nccl_kernel_ns", _i64),
    ("transfer_ns", _i64),  # = nccl_kernel_ns - wait_ns - unmatched_ns
    ("wait_ns", _i64),  # waiting for the last rank to arrive
    ("unmatched_ns", _i64),  # NCCL kernels with no counterpart on every rank
    ("wait_share", _f64),
    ("last_arrivals", _i64),  # collectives this rank arrived at last
    doc="Per (rank, phase): NCCL time split into transfer, wait and unmatched",
)
SCHEMAS["comm_collectives"] = _schema(
    ("rank", _i64),
    ("collective", _str),
    ("kernels", _i64),
    ("total_ns", _i64),
    ("mean_ns", _f64),
    ("max_ns", _i64),
    doc="Per (rank, collective type): NCCL kernel count and time",
)
SCHEMAS["comm_instances"] = _schema(
    ("rank", _i64),
    ("step_id", _i64),
    ("kind", _str),
    ("seq", _i64),  # position of the collective in the step, matched across ranks
    ("collective", _str),
    ("name", _str),
    ("ts_ns", _i64),
    ("dur_ns", _i64),
    ("matched", pa.bool_()),  # every rank has this instance
    ("min_dur_ns", _i64),  # the shortest of the ranks' durations: the transfer
    ("transfer_ns", _i64),
    ("wait_ns", _i64),
    ("unmatched_ns", _i64),
    ("last_arrival", pa.bool_()),  # this rank started the instance last
    ("end_spread_ns", _i64),
    doc="One row per NCCL kernel instance per rank: matched across ranks, transfer and wait",
)

# --- a fleet's dataset (tracekit.app.fleet): one row per (run, rank) of its last analysis ---------
SCHEMAS["fleet_runs"] = _schema(
    ("rank", _i32),
    ("status", _str),  # complete / failed
    ("error", _str),  # the run's one-line error (null: complete)
    ("gpu", _str),  # the GPU's name as the recorder or the trace gives it (null: not named)
    ("workload", _str),  # llm / diffusion / iterations / other
    ("source", _str),  # the run's first trace file, or "dataset"
    ("analysis_s", _f64),  # the task's wall time, ingest and analysis, s
    ("peak_rss_bytes", _i64),  # the task's peak resident set
    ("worker", _str),  # the node that ran the task (Ray node id, else host name) : its process id
    doc="A fleet's runs: one row per (run, rank) of the last analysis, failed runs included",
)

TABLES = tuple(SCHEMAS)

# The files of a sweep directory (tracekit.store.sweepdir): <name>.parquet beside sweep.json.
SWEEP_SCHEMAS: dict[str, pa.Schema] = {
    "summary": _schema(
        *[(c, _str) for c in ("point_id", "group", "shape", "mode", "quant", "agent_mode")],
        *[(c, _i64) for c in ("batch", "input_tokens", "output_tokens", "calls")],
        *[(c, _f64) for c in ("sent_input_tokens", "prefilled_tokens", "generated_tokens")],
        ("repeats", _i64),
        *[(c, _f64) for c in (
            "ttft_ms", "tpot_ms", "e2e_ms", "ttft_ms_min", "ttft_ms_max", "tpot_ms_min", "tpot_ms_max",
            "e2e_ms_min", "e2e_ms_max", "prefill_ms", "prefill_share", "prefill_tok_s", "decode_tok_s",
            "ms_per_input_token", "ms_per_output_token", "read_write_asymmetry",
            "prefill_compute_share", "prefill_memory_share", "prefill_idle_share",
            "decode_compute_share", "decode_memory_share", "decode_idle_share",
            "prefill_latency_share", "decode_latency_share",
            "prefill_idle_host_share", "prefill_idle_wait_share", "prefill_idle_profiler_share",
            "decode_idle_host_share", "decode_idle_wait_share", "decode_idle_profiler_share",
            "kv_formula_bytes_per_token", "kv_cache_bytes_per_token", "kv_allocated_bytes_per_token",
            "kv_peak_bytes_per_token", "logits_fp32_bytes_per_token", "kv_cache_tokens",
            "prefill_transient_bytes_per_prompt_token", "compile_s", "cost_usd", "cost_vs_chat",
            "rate_rps", "requests", "throughput_tok_s", "ttft_p50_ms", "ttft_p99_ms", "tpot_p50_ms",
            "tpot_p99_ms", "itl_p99_ms", "queue_p99_ms", "step_ms_per_request", "gpu_ms_per_request",
            "j_per_request", "usd_per_request")],
        *[(c, _str) for c in ("status", "reason", "run_dir")],
        doc="One row per sweep point (analysis/sweep.py SUMMARY_COLUMNS; docs/sweep.md)",
    ),
    "agent_steps": _schema(
        ("point_id", _str),
        ("mode", _str),
        ("agent_mode", _str),
        ("step", _i64),
        ("prompt_tokens", _i64),
        ("prefilled_tokens", _i64),
        ("output_tokens", _i64),
        ("prefill_ms", _f64),
        ("e2e_ms", _f64),
        ("cumulative_ms", _f64),
        doc="One row per agent-loop step per point",
    ),
    "seed_comparison": _schema(
        ("claim", _str),
        ("key", _str),
        ("unit", _str),
        ("seed_t4", _f64),
        ("measured", _f64),
        ("measured_vs_seed", _f64),
        ("holds", pa.bool_()),
        ("verdict", _str),
        doc="The seed study's claims beside this sweep's measurements",
    ),
}


def schema(name: str) -> pa.Schema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}") from None


def declared(name: str) -> pa.Schema:
    """The schema of a stored table: a run or dataset table (SCHEMAS) or a sweep file (SWEEP_SCHEMAS).
    SchemaError if ``name`` is neither."""
    sch = SCHEMAS.get(name) or SWEEP_SCHEMAS.get(name)
    if sch is None:
        raise SchemaError(f"table {name!r} has no schema in tracekit.model.schema; declare it there before "
                          "writing it")
    return sch


def _kind(t: pa.DataType) -> str:
    if pa.types.is_dictionary(t):
        return _kind(t.value_type)
    if pa.types.is_string(t) or pa.types.is_large_string(t):
        return "text"
    if pa.types.is_integer(t) or pa.types.is_floating(t):
        return "number"
    if pa.types.is_boolean(t):
        return "boolean"
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return "list"
    return str(t)


def check(name: str, table: pa.Table) -> pa.Table:
    """``table`` as the stored table ``name``: exactly its declared columns, in order, of their declared
    types (a declared column it lacks is all null). SchemaError, naming the table and the column, for
    an undeclared table, a column the schema does not have, a column holding another kind of data
    (text where numbers are declared, ...) or a value the declared type cannot hold exactly.

    Within a kind the column is cast (int64 -> int32, text -> dictionary, float -> int when whole;
    NaN counts as null in an integer column); a column without a value may have any type.
    """
    import pyarrow.compute as pc

    sch = declared(name)
    unknown = [c for c in table.column_names if sch.get_field_index(c) < 0]
    if unknown:
        raise SchemaError(f"table {name}: columns {unknown} are not in its schema (tracekit.model.schema)")
    if len(set(table.column_names)) != table.num_columns:
        raise SchemaError(f"table {name}: a column appears twice ({table.column_names})")
    arrays = []
    for f in sch:
        i = table.schema.get_field_index(f.name)
        if i < 0:
            arrays.append(pa.nulls(table.num_rows, f.type))
            continue
        col = table.column(i)
        if col.type == f.type:
            arrays.append(col)
            continue
        if col.null_count == len(col):
            arrays.append(pa.nulls(table.num_rows, f.type))
            continue
        if _kind(col.type) != _kind(f.type):
            raise SchemaError(f"table {name}: column {f.name} holds {col.type}, its schema says {f.type}")
        if pa.types.is_floating(col.type) and pa.types.is_integer(f.type):
            col = pc.if_else(pc.is_nan(col), pa.scalar(None, col.type), col)
        try:
            arrays.append(_conform_column(col, f, table.num_rows))
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as exc:
            why = str(exc).strip().split("\n", 1)[0]
            raise SchemaError(f"table {name}: column {f.name} ({col.type}) does not fit {f.type}: {why}") from None
    return pa.Table.from_arrays(arrays, schema=sch)


def empty(name: str) -> pa.Table:
    """An empty, valid table of the named schema."""
    sch = schema(name)
    # Not Schema.empty_table(): that imports pandas (pyarrow's shim), 0.2 s for nothing here.
    return pa.Table.from_arrays([pa.nulls(0, f.type) for f in sch], schema=sch)


def _conform_column(values: Any, field: pa.Field, n: int) -> pa.Array:
    if values is None:
        return pa.nulls(n, type=field.type)
    if pa.types.is_dictionary(field.type):
        arr = pa.array(values, type=pa.string()) if not isinstance(values, pa.Array | pa.ChunkedArray) else values
        if isinstance(arr, pa.ChunkedArray):
            arr = arr.combine_chunks()
        if pa.types.is_dictionary(arr.type):
            return arr.cast(field.type)
        return arr.cast(pa.string()).dictionary_encode().cast(field.type)
    if isinstance(values, pa.Array | pa.ChunkedArray):
        return values.cast(field.type)
    return pa.array(values, type=field.type, from_pandas=True)


def conform_column(name: str, column: str, values: Any) -> pa.Array:
    """``values`` as column ``column`` of the named schema holds them (as ``from_columns`` casts it),
    without building the rest of the table."""
    field = schema(name).field(column)
    return _conform_column(values, field, len(values))


def from_columns(name: str, columns: Mapping[str, Any]) -> pa.Table:
    """Build a table of the named schema from column sequences.

    Missing columns become nulls; unknown columns are an error (a typo in a
    column name must not vanish silently).
    """
    sch = schema(name)
    unknown = set(columns) - set(sch.names)
    if unknown:
        raise ValueError(f"{name}: unknown columns {sorted(unknown)}")
    lengths = {len(v) for v in columns.values() if v is not None}
    if len(lengths) > 1:
        raise ValueError(f"{name}: columns of different lengths {sorted(lengths)}")
    n = lengths.pop() if lengths else 0
    arrays = [_conform_column(columns.get(f.name), f, n) for f in sch]
    return pa.Table.from_arrays(arrays, schema=sch)


def from_pandas(name: str, df: Any) -> pa.Table:
    """Conform a DataFrame to the named schema (extra columns are an error)."""
    table = pa.Table.from_pandas(df, preserve_index=False)
    return conform(name, table)


def conform(name: str, table: pa.Table) -> pa.Table:
    """Cast a table to the named schema, adding null columns it lacks."""
    return from_columns(name, {c: table.column(c) for c in table.column_names})


def fill_rank(table: pa.Table, rank: int) -> pa.Table:
    """``table`` with the nulls of its ``rank`` column set to ``rank`` (a single-rank run is rank 0);
    a table without the column is returned as it is."""
    i = table.schema.get_field_index("rank")
    if i < 0:
        return table
    col = table.column(i)
    if not col.null_count:
        return table
    import pyarrow.compute as pc

    return table.set_column(i, table.schema.field(i), pc.fill_null(col, pa.scalar(int(rank), col.type)))
