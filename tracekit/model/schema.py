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

SCHEMA_VERSION = 2

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
        ("parent_id", _i64),  # op_id of the enclosing op on the same thread
        # True: an op of a graph-capture trace (it ran when the CUDA/HIP graph was captured, on that
        # trace's clock); it lends its shapes to the kernels the graph replays (tracekit.ingest.capture)
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
        ("kind", _dict),  # prefill | decode | mixed
        ("batch", _i64),
        ("q_len", _i64),  # query tokens per sequence (max over the batch)
        ("kv_len", _i64),  # KV positions attended after this step (past + q)
        ("tokens", _i64),  # query tokens in the step, all sequences
        ("source", _dict),  # which source decided the split
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
        ("idle_ns", _i64),  # = idle_profiler_ns + idle_host_ns + idle_wait_ns
        ("idle_profiler_ns", _i64),  # the profiler's own cost (null: no unprofiled timing pass)
        ("idle_host_ns", _i64),  # the host had not issued the next work yet
        ("idle_wait_ns", _i64),  # work was issued; the GPU waited (sync, copy, other stream, outside work)
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

TABLES = tuple(SCHEMAS)


def schema(name: str) -> pa.Schema:
    try:
        return SCHEMAS[name]
    except KeyError:
        raise KeyError(f"unknown table {name!r}; known: {', '.join(TABLES)}") from None


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
