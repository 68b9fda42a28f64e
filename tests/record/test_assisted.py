"""`tracekit record --assistant`: assisted generation on the CPU (tiny preset, a layer-truncated draft)."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import need_module

from tracekit.cli import main
from tracekit.model.stepnames import parse_accept, parse_step
from tracekit.store.rundir import STATUS_COMPLETE, RunDir
from tracekit.trace import chrome as chrome_trace

need_module("torch")
need_module("transformers")

PROMPT, OUT, K = 12, 12, 4


@pytest.fixture(scope="module")
def assisted(tmp_path_factory: pytest.TempPathFactory) -> tuple[RunDir, int]:
    d = tmp_path_factory.mktemp("assisted")
    rc = main(["record", "--assistant", "layers:3", "--assistant-tokens", str(K), "--input-tokens", str(PROMPT),
               "--output-tokens", str(OUT), "--requests", "1", "--warmup", "0", "--device", "cpu", "--no-nvml", "-q",
               "--out", str(d / "run")])
    return RunDir.open(d / "run"), rc


@pytest.mark.slow
def test_each_request_runs_plainly_and_assisted_in_one_run(assisted: tuple[RunDir, int]) -> None:
    run, rc = assisted
    assert rc == 0
    m = run.read_manifest()
    assert m["status"] == STATUS_COMPLETE, m.get("incomplete_reason")
    assert m["assisted"]["assistant"] == "layers:3" and m["assisted"]["tokens_per_round"] == K
    req = run.read_df("requests").set_index("request_id")
    assert req["name"].tolist() == ["smoke-custom-0.plain", "smoke-custom-0"]
    assert (req["output_tokens"] == OUT).all()
    fast = req[req["assistant"].notna()]
    assert fast["plain_request_id"].astype(int).tolist() == [0]
    for _rid, r in fast.iterrows():
        plain = req.loc[int(r["plain_request_id"])]
        assert r["speedup"] == pytest.approx(plain["e2e_ns"] / r["e2e_ns"])
        assert r["acceptance_rate"] == pytest.approx(r["accepted_tokens"] / r["proposed_tokens"])
    for key in ("unprofiled", "profiled"):
        s = m["timings"][key]["assisted"]
        assert s["requests"] == 1 and s["proposed"] > 0 and s["draft_forwards"] >= s["proposed"]


@pytest.mark.slow
def test_draft_and_verify_are_steps_of_their_own_with_q_len_proposed_plus_one(assisted: tuple[RunDir, int]) -> None:
    run, _ = assisted
    steps = run.read_df("steps")
    req = run.read_df("requests").set_index("request_id")
    sr = run.read_df("step_requests")
    plain_ids = set(req.index[req["assistant"].isna()])
    assert set(steps.loc[steps["request_id"].isin(plain_ids), "kind"]) == {"prefill", "decode"}
    mine = steps[~steps["request_id"].isin(plain_ids)]
    assert {"draft", "verify", "prefill"} <= set(mine["kind"])
    rounds = sr[sr["phase"].astype(str).isin(["verify", "prefill"]) & ~sr["request_id"].isin(plain_ids)]
    verify = rounds[rounds["phase"].astype(str) == "verify"]
    assert (verify["q_len"] == verify["proposed_tokens"] + 1).all()
    first = rounds[rounds["phase"].astype(str) == "prefill"]
    assert (first["round"] == 0).all() and (first["q_len"] == PROMPT + first["proposed_tokens"]).all()
    assert (rounds["accepted_tokens"] <= rounds["proposed_tokens"]).all()
    for rid, g in rounds.groupby("request_id"):
        r = req.loc[rid]
        assert int(g["accepted_tokens"].sum()) == int(r["accepted_tokens"])
        assert int(g["proposed_tokens"].sum()) == int(r["proposed_tokens"])
        assert g["round"].tolist() == list(range(len(g)))
        # Each round appends its accepted tokens and one more (the last may be cut at the length).
        assert int((g["accepted_tokens"] + 1).sum()) >= OUT > int((g["accepted_tokens"] + 1).iloc[:-1].sum())
    # Draft forwards: the draft's own prefill, then one per proposed token after the first.
    drafts = sr[sr["phase"].astype(str) == "draft"]
    assert len(drafts) >= int(rounds["proposed_tokens"].sum())


@pytest.mark.slow
def test_the_trace_has_every_forward_and_an_accept_marker_per_round(assisted: tuple[RunDir, int]) -> None:
    run, _ = assisted
    sr = run.read_df("step_requests")
    steps = {lab.step_id: lab for a in chrome_trace.find_annotations(run.trace_path)
             if (lab := parse_step(a.name)) is not None}
    events = chrome_trace.load(run.trace_path)["traceEvents"]
    accepts = [acc for e in events if e.get("cat") == "user_annotation"
               and (acc := parse_accept(str(e.get("name", "")))) is not None]
    assert sorted(steps) == sorted(sr["step_id"].tolist())
    rounds = sr[sr["round"].notna() & sr["phase"].astype(str).isin(["verify", "prefill"])]
    want = sorted(zip(rounds["request_id"], rounds["round"], rounds["accepted_tokens"], strict=True))
    assert sorted((a.request_id, a.round, a.accepted) for a in accepts) == want
    assert all(a.emitted <= a.accepted + 1 for a in accepts)


@pytest.mark.slow
def test_analyze_gives_draft_and_verify_phases_and_each_requests_cost(assisted: tuple[RunDir, int]) -> None:
    run, _ = assisted
    assert main(["analyze", str(run.path)]) == 0
    ph = run.read_df("phases")
    assert {"draft", "verify"} <= set(ph["phase"].astype(str))
    req = run.read_df("requests")
    assert req["step_time_ns"].notna().all() and req["acceptance_rate"].notna().sum() == 1
    steps = run.read_df("steps")
    window = int((steps["cpu_end_ns"] - steps["cpu_start_ns"]).sum())
    assert int(req["step_time_ns"].sum()) == window


@pytest.mark.slow
def test_truncated_draft_shares_the_targets_modules() -> None:
    from tracekit.collectors import presets
    from tracekit.collectors import workload as wl
    from tracekit.collectors.assisted import truncated_draft
    from tracekit.errors import UsageError

    cfg = wl.WorkloadConfig(model=presets.resolve_model("tiny"), device="cpu", dtype="fp32", shape="smoke",
                            input_tokens=4, output_tokens=2)
    model, _ = wl.build_model(cfg)
    draft = truncated_draft(model, 2)
    assert draft.lm_head is model.lm_head and draft.model.embed_tokens is model.model.embed_tokens
    assert len(draft.model.layers) == 2 and draft.model.layers[1] is model.model.layers[1]
    assert len(model.model.layers) == 4
    import torch

    out = draft(torch.tensor([[11, 12, 13]])).logits
    assert tuple(out.shape) == (1, 3, model.config.vocab_size)
    with pytest.raises(UsageError):
        truncated_draft(model, 4)


def test_assistant_options_are_checked(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["record", "--assistant", "layers:1", "--batch", "2", "--device", "cpu"]) == 2
    assert "--assistant does not combine with --batch" in capsys.readouterr().err
    assert main(["record", "--assistant-tokens", "3", "--device", "cpu"]) == 2
    assert "--assistant-tokens applies to --assistant only" in capsys.readouterr().err
    rc = main(["record", "--assistant", "layers:x", "--device", "cpu", "-q", "--out", str(tmp_path / "r")])
    assert rc == 2 and "layers:N" in capsys.readouterr().err
