"""The passes on arrays (phases, energy, warm-up, opclass) run on Arrow tables without loading pandas."""

from __future__ import annotations

import subprocess
import sys

# Small Arrow tables built in the child process (through tracekit.analysis.arrays: pa.array would import
# pandas): two steps of two requests, three kernels, a power counter, four CPU ops; each pass runs on them.
CODE = """
import sys
from tracekit.analysis import energy, opclass, phases, warmup
from tracekit.analysis.arrays import floats_column as f, from_columns as table, ints_column as i, texts as s
from tracekit.model.ceilings import datasheet

steps = table({"step_id": i([0, 1]), "request_id": i([0, 1]), "kind": s(["prefill", "decode"]),
               "tokens": i([8, 1]), "cpu_start_ns": i([0, 1000]), "cpu_end_ns": i([900, 1900]),
               "gpu_end_ns": i([950, None])})
kernels = table({"step_id": i([0, 1, None]), "device": i([0, 0, 0]), "ts_ns": i([100, 1100, 2500]),
                 "dur_ns": i([300, 200, 50]), "category": s(["compute", "compute", "memcpy"])})
ph, timeline = phases.phases_pass(steps, kernels, (0, 3000))
counters = table({"ts_ns": i([0, 1000, 2000, 3000]), "metric": s(["power"] * 4), "value": f([100.0] * 4),
                  "device": i([0] * 4)})
ph = energy.energy_pass(kernels, steps, ph, counters, bound_ran=True, ceiling=datasheet("NVIDIA H200"))
requests = table({"request_id": i([0, 1]), "start_ns": i([0, 1000]), "ttft_ns": i([900, 100])})
warm = warmup.warmup_pass(requests, ph, manifest={}, warmup_first=1)
ops = table({"op_id": i([1, 2, 3, 4]), "parent_id": i([None, 1, None, None]),
             "name": s(["aten::linear", "aten::mm", "aten::softmax", "aten::argmax"]), "tid": i([7] * 4),
             "ts_ns": i([10, 20, 1100, 2000]), "dur_ns": i([500, 300, 200, 50])})
split = opclass.split(opclass.step_op_classes(ops, steps, (0, 3000)))
assert warm["phases"].num_rows == ph.num_rows - 1 and timeline.num_rows == 1 and split.num_rows == 18
print("pandas" in sys.modules)
"""


def test_the_passes_on_arrays_run_without_pandas() -> None:
    # GIVEN a fresh process WHEN it runs the phases, energy, warm-up and opclass passes on Arrow tables
    # THEN pandas is never imported
    out = subprocess.run([sys.executable, "-c", CODE], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False"]
