"""Marking warm-ups from Python: ``rec.warmup()`` (the next request) and ``with rec.warmup():`` (a block)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import need_module

import tracekit
from tracekit.store.rundir import RunDir

torch = need_module("torch")
need_module("transformers")


def _model():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=256, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=1)
    return LlamaForCausalLM(cfg).eval()


def _gen(model) -> None:
    ids = torch.randint(3, 256, (1, 6))
    model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=3, min_new_tokens=3, do_sample=False,
                   pad_token_id=0)


def test_call_and_context_forms_mark_exactly_their_requests(tmp_path: Path) -> None:
    model = _model()
    with tracekit.record("warm", out=tmp_path / "r", nvml=False) as rec:
        rec.warmup()          # marks request 0
        _gen(model)
        _gen(model)           # 1: timed
        with rec.warmup():    # marks 2 and 3
            _gen(model)
            _gen(model)
        _gen(model)           # 4: timed
        with rec.warmup():    # an empty block marks nothing
            pass
        _gen(model)           # 5: timed
    m = RunDir.open(tmp_path / "r").read_manifest()
    assert m["warmup_requests"] == [0, 2, 3]
    prof = m["timings"]["profiled"]
    assert [r.get("warmup", False) for r in prof["requests"]] == [True, False, True, True, False, False]
    assert prof["aggregate"]["requests"] == 3 and prof["aggregate"]["warmup_requests"] == 3
    timed = [r["ttft_ns"] for r in prof["requests"] if not r.get("warmup")]
    assert prof["aggregate"]["ttft_ns"] == pytest.approx(sum(timed) / len(timed))


def test_module_level_warmup_marks_the_open_recording_and_is_harmless_outside(tmp_path: Path) -> None:
    model = _model()
    with tracekit.warmup():  # no recording open: nothing happens, the code still runs
        _gen(model)
    tracekit.warmup()
    with tracekit.record("warm", out=tmp_path / "r", nvml=False):
        tracekit.warmup()
        _gen(model)
        _gen(model)
    assert RunDir.open(tmp_path / "r").read_manifest()["warmup_requests"] == [0]
