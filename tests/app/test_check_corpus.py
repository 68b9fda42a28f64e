"""``tracekit check`` on real traces: the verdict each one deserves, worked out by reading the trace.

- tests/data/hta (HTA's test traces; the two large ones trimmed to a time slice by tests/data/hta/trim.py,
  which cuts the window: launches whose kernels ran after the slice's end have none) run everywhere.
- The full corpus ($TRACEKIT_CORPUS, else ../shared/corpus beside the repository: hta/ originals and
  engines/) where it exists.
- tests/fixtures/gpu/check_train_loop.json.gz: an H100 training loop under torch.profiler with
  schedule(wait=1, warmup=1, active=3) (scripts/gpu/foreign_traces.py ``train_loop``).

Why each verdict (what the trace shows):
  amd_trace mi250: 16 GPU activities, all launched in the window; its ProfilerStep windows are its steps (iterations).
  cupti_profiler: CUPTI range-profiler counters (77 cuda_profiler_range events), no kernel -> unfit.
  df_index_resolver: V100 DDP, no Input Dims, profile_memory on, 42% of kernel time sgemm/cudnn without shapes.
  mtia_inference: an MTIA device's events (mtia_ccp_events), nothing tracekit reads as GPU -> unfit.
  ns_resolution: 235 cudaMemsetAsync calls with no gpu_memset record (the V100 trace has memsets missing).
  trace_file_list: 4 kernels, no deviceProperties and no GPU name -> no ceiling.
  trace_filter rank 0/1: no deviceProperties -> no ceiling.
  triton_example: one Triton kernel inside a 13 s ProfilerStep#1.
  sglang decode: a kernel issued at 128.4 us into an idle GPU starts at 463,380.2 us (the stream waits on an
    event of work launched before the window; the host's DtoH copy blocks 463 ms on it): 463.25 ms before-window.
  vllm decode: the first copy issued at 544.8 us starts at 8,370.9 us with nothing visible on the GPU: 7.82 ms.
  xdit flux: Python stack tracing (with_stack) on; every launch runs inside the window.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from helpers import DATA, FIXTURES, REPO

from tracekit.app.check import check

TRIMMED = {
    "amd_trace__mi250_minitoy_train_ROCm6_2_kineto.json.gz": "fit: every check passed",
    "cupti_profiler__benchmark_result_924719_1679055439_trace.json.gz":
        "unfit: no GPU activity (and 1 caveat: dropped or unknown events)",
    "df_index_resolver__df_index_resolver.json.gz":
        # the trimmed slice cuts an iteration (a ProfilerStep window): unfit
        "unfit: window cut mid-step (and 3 caveats: shapes not recorded, kernel time without a model, profiler overhead)",
    "mtia_inference_trace__mtia_inference_rank_0.json.gz":
        "unfit: no GPU activity (and 1 caveat: dropped or unknown events)",
    "ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz":
        "unfit: window cut mid-step (and 3 caveats: correlation ids that link nothing, shapes not recorded, "
        "kernel time without a model)",
    "trace_file_list__inference_rank_1.json.gz":
        "fit, with 4 caveats: no steps, shapes not recorded, kernel time without a model, no ceiling",
    "trace_filter__sampled_rank-0.json.gz": "fit, with 1 caveat: no ceiling",
    "trace_filter__sampled_rank-1.json.gz": "fit, with 1 caveat: no ceiling",
    "triton_example__triton_example.json.gz": "fit: every check passed",
}
# The originals: the two trimmed ones are whole, so nothing cuts their window.
FULL = {
    **{f"hta/{k}": v for k, v in TRIMMED.items()},
    "hta/df_index_resolver__df_index_resolver.json.gz":
        "fit, with 3 caveats: shapes not recorded, kernel time without a model, profiler overhead",
    "hta/ns_resolution_trace__rank-0.Apr_03_18_51_38.1102.pt.trace.json.gz":
        "fit, with 3 caveats: correlation ids that link nothing, shapes not recorded, kernel time without a model",
    "engines/sglang_decode/sglang_Qwen3-8B_decode.json.gz":
        "unfit: work before the window (and 2 caveats: shapes not recorded, profiler overhead)",
    "engines/vllm_decode_full/graph_execution.json.gz":
        "unfit: work before the window (and 2 caveats: shapes not recorded, profiler overhead)",
    "engines/xdit_flux.1_aiter_sage/profile_trace_rank_0.json.gz": "fit, with 1 caveat: profiler overhead",
}


def _full_corpus() -> Path | None:
    env = os.environ.get("TRACEKIT_CORPUS")
    root = Path(env) if env else REPO.parent / "shared" / "corpus"
    return root if (root / "engines").is_dir() else None


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(TRIMMED))
def test_trimmed_hta_traces(name: str, tmp_path: Path) -> None:
    [c] = check(DATA / "hta" / name, tmp_path / "run")
    assert c.verdict.headline == TRIMMED[name]
    assert c.verdict.exit_code == (1 if TRIMMED[name].startswith("unfit") else 0)


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(FULL))
def test_full_corpus(name: str, tmp_path: Path) -> None:
    root = _full_corpus()
    if root is None:
        pytest.skip("full corpus absent (../shared/corpus or $TRACEKIT_CORPUS with engines/)")
    [c] = check(root / name, tmp_path / "run")
    assert c.verdict.headline == FULL[name]
    by = {f.code: f for f in c.verdict.findings}
    if name.startswith("engines/vllm"):
        assert by["before_window"].what.startswith("for 7.82 ms (41%) of the step time (1 of 1 step)")
    if name.startswith("engines/sglang"):
        assert by["before_window"].what.startswith("for 463.25 ms (")
    if "ns_resolution" in name:
        assert by["unlinked"].what.startswith("235 of 6,330 launch calls link to no GPU activity")


def test_training_loop_window_opens_on_the_warmup_step(tmp_path: Path) -> None:
    # the profiler's schedule starts recording at iteration 2 while iteration 1's AdamW kernels
    # (6 multi_tensor_apply kernels, 0.47 ms, launched before the window) still run: a caveat, as the
    # three of them inside the first step are under 1% of the recorded steps' time
    [c] = check(FIXTURES / "gpu" / "check_train_loop.json.gz", tmp_path / "run")
    v = c.verdict
    assert v.headline == "fit, with 1 caveat: window cut mid-step"
    f = next(f for f in v.findings if f.code == "window_cut")
    assert f.what == ("the window opens mid-step: 6 GPU activities (0.47 ms) launched before it ran at its start, "
                      "inside 1 step, whose busy time it inflates")
