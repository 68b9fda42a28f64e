"""Options and results of the analysis passes are values: nothing can change one after it is made."""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd
import pytest

from tracekit.analysis.bound import BoundOptions
from tracekit.analysis.cost import CostModel, Weights
from tracekit.analysis.counters import JoinReport
from tracekit.analysis.inputs import AnalysisInput, AnalysisOutput
from tracekit.analysis.modelcheck import shape_from_config
from tracekit.analysis.opmodels import AttentionHeads, OpCost
from tracekit.analysis.ranks import RankAnalysis
from tracekit.analysis.sweep import PointData
from tracekit.model.ceilings import Ceilings
from tracekit.model.seedstudy import Claim

EMPTY = pd.DataFrame()
VALUES = [
    BoundOptions(), CostModel(1.0, 1.0, 1.0, 1.0), Weights(np.ones(1), np.ones(1), np.ones(1)), JoinReport(),
    shape_from_config({"hidden_size": 8, "num_attention_heads": 2, "num_hidden_layers": 1, "vocab_size": 4}),
    OpCost(1.0, 1.0, "gemm", "fp16", True), AttentionHeads(1, 1, 8, 8, "c10::Half", "c10::Half"),
    AnalysisInput(tables={}), AnalysisOutput(tables={}), Ceilings(), RankAnalysis(EMPTY, EMPTY, EMPTY, EMPTY, EMPTY, EMPTY),
    PointData({}, "complete"), Claim("k", "text", 1.0, "x", True),
]


@pytest.mark.parametrize("value", VALUES, ids=lambda v: type(v).__name__)
def test_frozen(value: object) -> None:
    field = dataclasses.fields(value)[0].name  # type: ignore[arg-type]
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(value, field, None)
