"""tracekit.collectors.plan: each pair of record options that does not combine is refused in one line,
before anything is built; the plan's mode follows the options."""

from __future__ import annotations

from pathlib import Path

import pytest

from tracekit.collectors.plan import RecordPlan
from tracekit.errors import UsageError

SCRIPT = ("python", "my.py")

CONFLICTS = [
    # --serve and --assistant are workloads of their own
    ({"serve": True, "script": SCRIPT}, "--serve does not combine with a script"),
    ({"serve": True, "tp": 2}, "--serve does not combine with --tp"),
    ({"serve": True, "use_compile": True}, "--serve does not combine with --compile"),
    ({"serve": True, "trace_steps": "0:2"}, "--serve does not combine with --trace-steps"),
    ({"serve": True, "batch": 4}, "--serve does not combine with --batch (the engine batches the requests itself)"),
    ({"serve": True, "assistant": "layers:2"}, "--serve does not combine with --assistant"),
    ({"assistant": "layers:2", "script": SCRIPT}, "--assistant does not combine with a script"),
    ({"assistant": "layers:2", "tp": 2}, "--assistant does not combine with --tp"),
    ({"assistant": "layers:2", "use_compile": True}, "--assistant does not combine with --compile"),
    ({"assistant": "layers:2", "trace_steps": "1"}, "--assistant does not combine with --trace-steps"),
    ({"assistant": "layers:2", "batch": 2}, "--assistant does not combine with --batch"),
    # --serve's own options without --serve, --assistant's without --assistant
    ({"rate": 4.0}, "--rate applies to --serve only"),
    ({"lengths_file": Path("l.txt")}, "--lengths applies to --serve only"),
    ({"max_batch_tokens": 256}, "--max-batch-tokens applies to --serve only"),
    ({"kv_blocks": 8}, "--kv-blocks applies to --serve only"),
    ({"cuda_graphs": True}, "--cuda-graphs applies to --serve only"),
    ({"assistant_tokens": 6}, "--assistant-tokens applies to --assistant only"),
    # --memory and --quant
    ({"with_memory": True, "tp": 2}, "--memory does not combine with --tp yet"),
    ({"with_memory": True, "script": SCRIPT}, "--memory does not combine with a script yet"),
    ({"with_memory": True, "assistant": "layers:2"}, "--memory does not combine with --assistant yet"),
    ({"quant": "int8", "tp": 2}, "--quant int8 does not combine with --tp yet"),
    ({"quant": "int4", "script": SCRIPT}, "--quant int4 does not combine with a script yet"),
    ({"quant": "fp8", "assistant": "layers:2"}, "--quant fp8 does not combine with --assistant yet"),
    ({"with_memory": True, "serve": True}, "--memory does not combine with --serve yet (the profiler's memory "
                                           "events and profile_all_threads exclude each other)"),
    # --tp
    ({"tp": 2, "with_counters": True}, "--counters does not combine with --tp yet: run tracekit counters on a rank's run"),
    ({"tp": 2, "script": SCRIPT}, "--tp does not combine with a script yet"),
    ({"tp": 2, "use_compile": True}, "--tp does not combine with --compile yet"),
    ({"tp": 2, "trace_steps": "0:2"}, "--tp does not combine with --trace-steps yet"),
    ({"tp": 2, "device": "cuda:1"}, "--tp with --device cuda:1: use auto, cpu or cuda (CUDA_VISIBLE_DEVICES picks GPUs)"),
    # a script
    ({"script": SCRIPT, "use_compile": True},
     "--compile applies to the built-in workload, not to a script (compile in your script)"),
    ({"script": SCRIPT, "model": "tiny", "seed": 3, "given": (("model", "--model tiny"), ("seed", "--seed 3"))},
     "--model tiny, --seed 3 and the script 'python my.py' conflict: these options shape the built-in workload; "
     "a script builds its own model and requests"),
    # the built-in workload
    ({"no_nvml": True, "sample_hz": 50.0, "given": (("sample_hz", "--sample-hz 50.0"),)},
     "--sample-hz 50 and --no-nvml conflict: there is nothing to sample"),
    ({"model": "tiny", "model_preset": "tiny"},
     "--model tiny and --model-preset tiny conflict: give one (--model takes presets too)"),
    ({"shape": "chat,rag"}, "--shape chat,rag: a mix of shapes and the agentic shape need --serve"),
    ({"shape": "agentic"}, "--shape agentic: a mix of shapes and the agentic shape need --serve"),
    ({"repeat": 3, "with_counters": True}, "--repeat and --counters conflict: measure counters on one run"),
]


@pytest.mark.parametrize(("options", "line"), CONFLICTS, ids=[c[1][:48] for c in CONFLICTS])
def test_each_conflicting_pair_is_refused_in_one_clear_line(options: dict, line: str) -> None:
    with pytest.raises(UsageError) as err:
        RecordPlan(**options).validate()
    assert err.value.message == line and "\n" not in str(err.value)


def test_an_unknown_model_preset_names_the_known_ones() -> None:
    with pytest.raises(UsageError, match=r"^--model-preset 'nope': known presets: tiny, "):
        RecordPlan(model_preset="nope").validate()


def test_options_that_combine_pass_and_the_mode_follows_them() -> None:
    # the defaults, and each mode with what it accepts
    plans = {
        "workload": RecordPlan(shape="chat", batch=4, with_memory=True, quant="int8", repeat=2),
        "serve": RecordPlan(serve=True, shape="chat,rag,agentic", rate=4.0, kv_blocks=8, cuda_graphs=True),
        "assisted": RecordPlan(assistant="layers:2", assistant_tokens=6, shape="chat"),
        "script": RecordPlan(script=SCRIPT, with_counters=True, trace_steps="0:2", sample_hz=50.0),
        "tp": RecordPlan(tp=2, device="cpu", batch=2, n_requests=2, given=(("sample_hz", "--sample-hz 50"),)),
    }
    for mode, plan in plans.items():
        plan.validate()
        assert plan.mode == mode
    # a flag given at its default value is no conflict: only what the user typed counts for a script
    RecordPlan(script=SCRIPT, seed=0).validate()
