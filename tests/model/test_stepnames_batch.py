"""The batch and speculative forms of the step annotation, and the accept marker."""

from __future__ import annotations

from tracekit.model.stepnames import (
    AcceptLabel,
    SeqLabel,
    StepLabel,
    batch_label,
    format_accept,
    format_step,
    parse_accept,
    parse_step,
)


def test_a_batch_step_round_trips_with_each_request_and_exact_kind() -> None:
    seqs = [SeqLabel(4, "f", 25, 25), SeqLabel(0, "d", 1, 43), SeqLabel(2, "p", 16, 16)]
    lab = batch_label(7, seqs)
    name = format_step(lab)
    assert name == "tracekit.step id=7 kind=mixed batch=3 q_len=25 kv_len=43 seqs=4:f25/25,0:d1/43,2:p16/16"
    back = parse_step(name)
    assert back == lab
    assert back is not None and back.request_id is None and back.tokens == 42


def test_batch_kind_comes_from_the_engine_phase_not_the_query_length() -> None:
    # A one-token last prompt chunk is prefill, though q_len is 1; decodes alone are decode.
    assert batch_label(0, [SeqLabel(1, "f", 1, 3), SeqLabel(2, "p", 1, 1)]).kind == "prefill"
    assert batch_label(0, [SeqLabel(1, "d", 1, 3), SeqLabel(2, "d", 1, 9)]).kind == "decode"
    assert batch_label(0, [SeqLabel(1, "f", 1, 3), SeqLabel(2, "d", 1, 9)]).kind == "mixed"
    one = batch_label(3, [SeqLabel(5, "d", 1, 9)])
    assert one.request_id == 5 and one.tokens == 1


def test_spec_steps_round_trip_with_and_without_proposed() -> None:
    verify = StepLabel(9, 0, "verify", 1, 5, 21, round=2, proposed=4)
    draft = StepLabel(8, 0, "draft", 1, 1, 16, round=2)
    for lab in (verify, draft):
        assert parse_step(format_step(lab)) == lab
    assert "proposed" not in format_step(draft)
    # The one-request form is unchanged by the new fields.
    plain = StepLabel(3, 0, "decode", 1, 1, 131)
    assert format_step(plain) == "tracekit.step id=3 request=0 kind=decode batch=1 q_len=1 kv_len=131"


def test_accept_marker_round_trips_and_bad_names_are_not_steps() -> None:
    a = AcceptLabel(0, 2, 4, 3, 4)
    assert parse_accept(format_accept(a)) == a
    assert parse_accept("tracekit.accept request=0 round=x") is None
    assert parse_step("tracekit.step id=1 kind=mixed batch=2 q_len=1 kv_len=2 seqs=0:x1/2") is None
    assert parse_step("tracekit.step id=1 kind=mixed batch=2 q_len=1 kv_len=2 seqs=") is None
