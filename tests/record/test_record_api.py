"""The Python API, wrapping a user's script, the hooks, and the presets."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from helpers import need_module

import tracekit
from tracekit.cli import main
from tracekit.collectors import presets
from tracekit.collectors.hooks import RequestRecord
from tracekit.collectors.profiler import StepWindow, parse_trace_steps
from tracekit.collectors.script import parse_script_argv
from tracekit.errors import UsageError
from tracekit.store.rundir import STATUS_COMPLETE, STATUS_INCOMPLETE, RunDir

torch = need_module("torch")
need_module("transformers")

SCRIPT = textwrap.dedent(
    """
    import sys
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    n = int(sys.argv[sys.argv.index("--n") + 1])
    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    model = LlamaForCausalLM(cfg).eval()
    for i in range(n):
        ids = torch.randint(3, 256, (1, 6 + i))
        model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=4, min_new_tokens=4,
                       do_sample=False, pad_token_id=0)
    if "--fail" in sys.argv:
        sys.exit(3)
    """
)


def _tiny_model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(
        vocab_size=256,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
    )
    return LlamaForCausalLM(cfg).eval()


def _gen(model, n_in: int, n_out: int, **kw):
    ids = torch.randint(3, 256, (1, n_in))
    return model.generate(
        ids,
        attention_mask=torch.ones_like(ids),
        max_new_tokens=n_out,
        min_new_tokens=n_out,
        do_sample=False,
        pad_token_id=0,
        **kw,
    )


def test_python_api_annotates_every_generate_in_the_block(tmp_path: Path) -> None:
    model = _tiny_model()
    with tracekit.record("api", out=tmp_path / "r", nvml=False) as run:
        run.name_next("first")
        _gen(model, 7, 3)
        _gen(model, 4, 2)
    r = RunDir.open(run.path)
    assert r.status == STATUS_COMPLETE
    req = r.read_df("requests")
    assert list(req["name"]) == ["first", "request-1"]
    assert list(req["input_tokens"]) == [7, 4] and list(req["output_tokens"]) == [3, 2]
    steps = r.read_df("steps")
    assert list(steps["kind"]) == ["prefill", "decode", "decode", "prefill", "decode"]
    assert list(steps["kv_len"]) == [7, 8, 9, 4, 5]
    assert r.read_manifest()["workload"] == {"kind": "python-api", "name": "api"}
    if not torch.cuda.is_available():  # the API's recordings on a CPU get their split as well
        assert {"prefill", "decode"} <= set(_split_adds_up(r.read_manifest()))
    # The patch is gone after the block: generate is the library's own again.
    from transformers.generation.utils import GenerationMixin

    assert not hasattr(GenerationMixin.generate, "__wrapped__") or "tracker" not in repr(
        GenerationMixin.generate
    )


def test_python_api_block_that_raises_leaves_the_run_incomplete(tmp_path: Path) -> None:
    model = _tiny_model()
    with pytest.raises(ValueError, match="user bug"), tracekit.record("api", out=tmp_path / "r", nvml=False):
        _gen(model, 5, 2)
        raise ValueError("user bug")
    r = RunDir.open(tmp_path / "r")
    m = r.read_manifest()
    assert m["status"] == STATUS_INCOMPLETE and "user bug" in m["incomplete_reason"]
    assert len(r.read_df("requests")) == 1 and r.trace_path.is_file()


def test_user_streamer_still_receives_every_token(tmp_path: Path) -> None:
    class Collect:
        def __init__(self) -> None:
            self.puts = 0
            self.ended = False

        def put(self, value) -> None:
            self.puts += 1

        def end(self) -> None:
            self.ended = True

    s = Collect()
    with tracekit.record("api", out=tmp_path / "r", nvml=False):
        _gen(_tiny_model(), 5, 4, streamer=s)
    assert s.puts == 5 and s.ended  # prompt + 4 tokens


def _split_adds_up(m: dict) -> list[str]:
    """run.json's cpu_split: the phases it covers, each one's classes summing to its time."""
    split = m["cpu_split"]
    for p in split:
        assert sum(p["classes"].values()) == p["time_ns"] > 0, p
    return [p["phase"] for p in split]


def test_record_runs_a_user_script_in_process(tmp_path: Path, capsys) -> None:
    script = tmp_path / "my_script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "r"
    assert main(["record", "--no-nvml", "--out", str(out), "--", "python", str(script), "--n", "2"]) == 0
    r = RunDir.open(out)
    m = r.read_manifest()
    assert m["status"] == STATUS_COMPLETE and m["workload"]["kind"] == "script"
    assert m["script_exit_code"] == 0
    req = r.read_df("requests")
    assert list(req["input_tokens"]) == [6, 7] and list(req["output_tokens"]) == [4, 4]
    assert list(r.read_df("steps")["kind"]).count("prefill") == 2
    if not torch.cuda.is_available():  # a script recorded on a CPU leads its summary with the split too
        assert {"prefill", "decode"} <= set(_split_adds_up(m))
        summary = capsys.readouterr().out.splitlines()
        assert summary[1].startswith("  where the time went (CPU: no roofline"), summary
        assert any(ln.startswith("  decode ") and "GEMM" in ln for ln in summary), summary


def test_a_failing_script_returns_its_exit_code_and_stays_incomplete(tmp_path: Path) -> None:
    script = tmp_path / "my_script.py"
    script.write_text(SCRIPT)
    out = tmp_path / "r"
    rc = main(
        ["record", "-q", "--no-nvml", "--out", str(out), "--", "python", str(script), "--n", "1", "--fail"]
    )
    assert rc == 3
    r = RunDir.open(out)
    assert r.status == STATUS_INCOMPLETE and len(r.read_df("requests")) == 1


def test_script_argv_forms() -> None:
    assert parse_script_argv(["python", "-m", "pkg.mod", "a"]) == ("module", "pkg.mod", ["a"])
    assert parse_script_argv(["python3", "-u", "-m", "pkg"]) == ("module", "pkg", [])
    with pytest.raises(UsageError, match="only wrap Python"):
        parse_script_argv(["torchrun", "x.py"])
    with pytest.raises(UsageError, match="not found"):
        parse_script_argv(["python", "missing.py"])


def test_request_metrics_follow_vllm_definitions() -> None:
    # start 0; tokens at 100, 130, 170, 200; generate returned at 210
    r = RequestRecord(0, "r", 1, 10, 4, start_ns=0, token_ns=[100, 130, 170, 200], end_ns=210, complete=True)
    m = r.metrics()
    assert m["ttft_ns"] == 100 and m["e2e_ns"] == 210
    assert m["tpot_ns"] == pytest.approx((210 - 100) / 3)
    assert m["prefill_share"] == pytest.approx(100 / 210)
    assert m["itl_ns"]["max"] == 40 and m["itl_ns"]["p50"] == 30


def test_trace_steps_parsing() -> None:
    assert parse_trace_steps("16") == StepWindow(0, 16)
    assert parse_trace_steps("4:20") == StepWindow(4, 20)
    assert parse_trace_steps(None) is None and parse_trace_steps("all") is None
    for bad in ("x", "3:3", "-1:2"):
        with pytest.raises(UsageError):
            parse_trace_steps(bad)


@pytest.mark.parametrize("name", sorted(presets.MODEL_PRESETS))
def test_presets_build_the_published_shape(name: str) -> None:
    from transformers import AutoConfig, AutoModelForCausalLM

    p = presets.MODEL_PRESETS[name]
    config = AutoConfig.for_model(p.model_type, **p.config)
    with torch.device("meta"):  # no memory, no init: only the architecture
        model = AutoModelForCausalLM.from_config(config)
    n = sum(t.numel() for t in model.parameters())
    assert n == p.parameters()
    for key in ("hidden_size", "intermediate_size", "num_hidden_layers", "num_key_value_heads", "vocab_size"):
        assert getattr(model.config, key) == p.config[key]


def test_published_numbers() -> None:
    t = presets.MODEL_PRESETS["tinyllama-1.1b"].config
    assert (t["num_hidden_layers"], t["hidden_size"], t["intermediate_size"]) == (22, 2048, 5632)
    assert (t["num_attention_heads"], t["num_key_value_heads"], t["vocab_size"]) == (32, 4, 32000)
    assert 1.09e9 < presets.MODEL_PRESETS["tinyllama-1.1b"].parameters() < 1.11e9
    assert 1.22e9 < presets.MODEL_PRESETS["llama-3.2-1b"].parameters() < 1.25e9
    assert 0.49e9 < presets.MODEL_PRESETS["qwen2.5-0.5b"].parameters() < 0.5e9
    assert 8.0e9 < presets.MODEL_PRESETS["llama-3.1-8b"].parameters() < 8.1e9
    assert presets.MODEL_PRESETS["tiny"].parameters() * 4 < 10_000_000  # a few MB in fp32
    assert {s: (v.input_tokens, v.output_tokens) for s, v in presets.SHAPES.items()} == {
        "smoke": (22, 8),
        "chat": (128, 128),
        "rag": (1205, 60),
        "creative": (25, 500),
    }
