from __future__ import annotations

import json

import pyarrow as pa
import pytest

from tracekit.cli import main
from tracekit.errors import RunExistsError
from tracekit.model import schema
from tracekit.model.stepnames import (
    RequestLabel,
    StepLabel,
    format_request,
    format_step,
    parse_request,
    parse_step,
)
from tracekit.store.rundir import STATUS_COMPLETE, STATUS_INCOMPLETE, RunDir


@pytest.mark.parametrize("name", schema.TABLES)
def test_every_table_is_valid_when_empty(name: str, tmp_path) -> None:
    run = RunDir.create(tmp_path / "r")
    run.write_table(name, schema.empty(name))
    back = run.read_table(name)
    assert back.num_rows == 0
    assert back.schema.names == schema.schema(name).names


def test_from_columns_fills_missing_with_nulls_and_rejects_typos() -> None:
    t = schema.from_columns("steps", {"step_id": [0, 1], "kind": ["prefill", "decode"]})
    assert t.num_rows == 2
    assert t.column("batch").null_count == 2
    assert pa.types.is_dictionary(t.schema.field("kind").type)
    with pytest.raises(ValueError, match="unknown columns"):
        schema.from_columns("steps", {"stepid": [0]})


def test_run_is_incomplete_until_marked_and_not_overwritten(tmp_path) -> None:
    run = RunDir.create(tmp_path / "r", workload={"shape": "smoke"})
    assert run.status == STATUS_INCOMPLETE
    run.mark_complete()
    assert RunDir.open(tmp_path / "r").status == STATUS_COMPLETE
    with pytest.raises(RunExistsError):
        RunDir.create(tmp_path / "r")
    again = RunDir.create(tmp_path / "r", force=True)
    assert again.status == STATUS_INCOMPLETE
    assert "workload" not in json.loads(again.manifest_path.read_text())


def test_step_and_request_names_round_trip() -> None:
    s = StepLabel(step_id=3, request_id=1, kind="decode", batch=2, q_len=1, kv_len=131)
    assert parse_step(format_step(s)) == s
    r = RequestLabel(request_id=1, name="chat 0", batch=2, input_tokens=128, output_tokens=128)
    parsed = parse_request(format_request(r))
    assert parsed is not None and parsed.name == "chat_0" and parsed.input_tokens == 128
    assert parse_step("aten::mm") is None


def test_cli_help_and_unknown_verb() -> None:
    assert main(["--help"]) == 0
    assert main(["no-such-verb"]) == 2
