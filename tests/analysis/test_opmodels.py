from __future__ import annotations

import json

import pandas as pd
import pytest

from tracekit.analysis.opmodels import dominant_dtype, is_modelled, op_cost, op_costs

H, F, L = "c10::Half", "float", "long int"


def cost(name: str, dims: list, types: list, **kw: object):
    c = op_cost(name, json.dumps(dims), json.dumps(types), **kw)  # type: ignore[arg-type]
    assert c is not None, name
    return c


def test_linear_prefill_and_decode() -> None:
    m, k, n = 1000, 2048, 5632
    c = cost("aten::linear", [[1, m, k], [n, k], []], [H, H, ""])
    assert c.flops == 2 * m * k * n
    assert c.bytes == 2 * (m * k + n * k + m * n)
    assert (c.op_class, c.dtype, c.tensor_core) == ("gemm", "fp16", True)
    g = cost("aten::linear", [[1, 1, k], [n, k], [n]], [H, H, H])  # GEMV with bias
    assert g.flops == 2 * k * n and g.bytes == 2 * (k + n * k + n + n)
    assert g.intensity < 1.01


def test_mm_addmm_bmm_baddbmm_matmul() -> None:
    assert cost("aten::mm", [[64, 128], [128, 32]], [F, F]).flops == 2 * 64 * 128 * 32
    a = cost("aten::addmm", [[32], [64, 128], [128, 32], [], []], [F, F, F, "Scalar", "Scalar"])
    assert a.flops == 2 * 64 * 128 * 32 and a.bytes == 4 * (32 + 64 * 128 + 128 * 32 + 64 * 32)
    b = cost("aten::bmm", [[8, 16, 64], [8, 64, 16]], [H, H])
    assert b.flops == 2 * 8 * 16 * 64 * 16 and b.bytes == 2 * (8 * 16 * 64 * 2 + 8 * 16 * 16)
    bb = cost("aten::baddbmm", [[8, 16, 16], [8, 16, 64], [8, 64, 16], [], []], [H, H, H, "Scalar", "Scalar"])
    assert bb.flops == b.flops and bb.bytes == b.bytes + 2 * 8 * 16 * 16
    mm = cost("aten::matmul", [[2, 10, 64], [64, 32]], [H, H])  # batch folds into M
    assert mm.flops == 2 * 20 * 64 * 32
    bm = cost("aten::matmul", [[2, 4, 10, 64], [2, 4, 64, 10]], [H, H])  # batched
    assert bm.flops == 2 * 8 * 10 * 64 * 10


def test_attention_causal_halving_and_layouts() -> None:
    b, h, hk, lq, d = 1, 32, 4, 1000, 64
    q, kv = [b, h, lq, d], [b, hk, lq, d]
    full = cost("aten::_scaled_dot_product_efficient_attention", [q, kv, kv, [], []], [H, H, H, "", "Scalar"],
                assume_causal=False)
    assert full.flops == 2 * b * h * lq * lq * (d + d)
    causal = cost("aten::_scaled_dot_product_efficient_attention", [q, kv, kv, [], []], [H, H, H, "", "Scalar"])
    pairs = lq * lq - lq * (lq - 1) / 2
    assert causal.flops == pytest.approx(2 * b * h * pairs * 2 * d)
    assert 0.5 < causal.flops / full.flops < 0.51
    assert causal.bytes == 2 * (b * h * lq * d * 2 + 2 * b * hk * lq * d)  # q + o, k + v (GQA: 4 KV heads)
    # decode: one query, no halving
    dec = cost("aten::scaled_dot_product_attention", [[1, h, 1, d], [1, hk, 500, d], [1, hk, 500, d]], [H, H, H])
    assert dec.flops == 2 * h * 500 * 2 * d
    # flash forward's own layout is [B, L, H, D]
    fl = cost("aten::_flash_attention_forward", [[b, lq, h, d], [b, lq, hk, d], [b, lq, hk, d]], [H, H, H])
    assert fl.flops == causal.flops
    for n in ["aten::_scaled_dot_product_flash_attention", "aten::_scaled_dot_product_cudnn_attention",
              "aten::_efficient_attention_forward", "aten::_flash_attention_forward"]:
        assert is_modelled(n)


def test_memory_bound_ops_use_dtype_sizes() -> None:
    x = [1, 10, 2048]
    n = 10 * 2048
    assert cost("aten::add", [x, x, []], [H, H, "Scalar"]).bytes == 3 * 2 * n
    assert cost("aten::mul", [x, [2048]], [F, F]).bytes == 4 * (n + 2048 + n)  # broadcast output
    assert cost("aten::silu", [x], [H]).flops == 4 * n
    assert cost("aten::pow", [x, []], [F, "Scalar"]).bytes == 4 * 2 * n
    assert cost("aten::mean", [x, [], [], []], [F, "", "", ""]).bytes == 4 * n  # output not in the shapes
    assert cost("aten::rsqrt", [[1, 10, 1]], [F]).bytes == 4 * 2 * 10
    assert cost("aten::rms_norm", [x, [], [2048], []], [H, "", H, ""]).bytes == 2 * (2 * n + 2048)
    assert cost("aten::native_layer_norm", [x, [], [2048], [2048], []], [H, "", H, H, ""]).bytes == 2 * (2 * n + 2 * 2048)
    assert cost("aten::_softmax", [[1, 32, 10, 10], [], []], [F, "", ""]).bytes == 4 * 2 * 3200
    e = cost("aten::embedding", [[32000, 2048], [1, 10], [], [], []], [H, L, "", "", ""])
    assert e.bytes == 8 * 10 + 2 * 2 * 10 * 2048
    c = cost("aten::copy_", [x, x, []], [H, F, ""])  # fp32 -> fp16
    assert c.bytes == 2 * n + 4 * n
    t = cost("aten::cat", [[[1, 4, 10, 64], [1, 4, 1, 64]], []], ["TensorList", "Scalar"], list_dtype=H)
    assert t.bytes == 2 * 2 * (4 * 11 * 64)
    # in-place variants share the model
    assert cost("aten::add_", [x, x, []], [H, H, "Scalar"]).bytes == 3 * 2 * n
    assert cost("aten::neg", [x], [H]).op_class == "elementwise"


def test_unmodelled_and_malformed_are_none() -> None:
    assert op_cost("aten::nonexistent_op", "[[1]]", '["float"]') is None
    assert op_cost("my_module.forward", "[[1]]", '["float"]') is None
    assert op_cost("aten::mm", "not json", "[]") is None
    assert op_cost("aten::mm", "[[2,3]]", '["float"]') is None  # one operand missing
    assert op_cost("aten::linear", None, None) is None


def test_op_costs_frame_models_each_shape_once_and_keeps_ids() -> None:
    rows = [
        {"op_id": i, "name": "aten::linear", "input_dims": "[[1,1,64],[128,64],[]]", "input_types": json.dumps([H, H, ""])}
        for i in range(5)
    ] + [
        {"op_id": 9, "name": "aten::cat", "input_dims": "[[[2,3],[2,3]],[]]", "input_types": '["TensorList","Scalar"]'},
        {"op_id": 10, "name": "aten::empty", "input_dims": "[[]]", "input_types": "[]"},
    ]
    ops = pd.DataFrame(rows)
    before = ops.copy()
    out = op_costs(ops)
    pd.testing.assert_frame_equal(ops, before)
    assert sorted(out["op_id"]) == [0, 1, 2, 3, 4, 9]
    assert (out[out["op_name"] == "aten::linear"]["flops"] == 2 * 64 * 128).all()
    assert dominant_dtype(ops) == H
    assert out.set_index("op_id").loc[9, "bytes"] == 2 * 2 * 12  # the list's dtype guessed from the run: fp16


def test_gather_reads_one_element_per_index_not_the_whole_source() -> None:
    # logits [1, 512, 32000] fp32, gather(dim=-1, index [1, 512, 1] int64): 512 values picked, not 65 MB read
    g = cost("aten::gather", [[1, 512, 32000], [], [1, 512, 1]], [F, "Scalar", L])
    assert g.bytes == 512 * 8 + 2 * 512 * 4
    # index_select of rows still moves whole rows: 4 rows of 2048 fp16
    s = cost("aten::index_select", [[32000, 2048], [], [4]], [H, "Scalar", L])
    assert s.bytes == 4 * 8 + 2 * 4 * 2048 * 2


def test_an_expanded_input_is_read_once_per_distinct_element() -> None:
    # gather(self [32000, 2048] fp16, 0, index [1000, 2048] long with strides [1, 0], out): the index is
    # 1,000 ids expanded along the row; dense it would count 16.4 MB
    dims = [[32000, 2048], [], [1000, 2048], [], [1000, 2048]]
    types = ["c10::Half", "Scalar", "long int", "Scalar", "c10::Half"]
    dense = op_cost("aten::gather", dims, types)
    strided = op_cost("aten::gather", dims, types, input_strides=[[2048, 1], [], [1, 0], [], [2048, 1]])
    assert dense is not None and strided is not None
    assert dense.bytes == 1000 * 2048 * 8 + 2 * 1000 * 2048 * 2
    assert strided.bytes == 1000 * 8 + 2 * 1000 * 2048 * 2
    # clone of a KV tensor expanded over 4 query heads per KV head: read once, written in full
    kv = [[1, 8, 4, 128, 64]]
    c = op_cost("aten::clone", kv, ["c10::BFloat16"], input_strides=[[65536, 8192, 0, 64, 1]])
    assert c is not None and c.bytes == (8 * 128 * 64 + 8 * 4 * 128 * 64) * 2
    # strides that do not fit the dims (or none) change nothing; an overlapping window reads its span
    assert op_cost("aten::clone", kv, ["c10::BFloat16"], input_strides=[[1, 0]]) == op_cost(
        "aten::clone", kv, ["c10::BFloat16"])
    win = op_cost("aten::clone", [[7, 4]], ["float"], input_strides=[[1, 1]])  # unfold(0, 4, 1) of 10 floats
    assert win is not None and win.bytes == (10 + 28) * 4


def test_op_costs_keys_on_strides() -> None:
    base = {"name": "aten::gather", "input_dims": json.dumps([[32000, 2048], [], [1000, 2048], [], [1000, 2048]]),
            "input_types": json.dumps(["c10::Half", "Scalar", "long int", "Scalar", "c10::Half"])}
    df = pd.DataFrame([{**base, "op_id": 1, "input_strides": None},
                       {**base, "op_id": 2, "input_strides": "[[2048,1],[],[1,0],[],[2048,1]]"}])
    got = op_costs(df).set_index("op_id")["bytes"]
    assert got[1] == 1000 * 2048 * 8 + 2 * 1000 * 2048 * 2 and got[2] == 1000 * 8 + 2 * 1000 * 2048 * 2


def test_index_with_unrecorded_indices_takes_its_shape_from_its_as_strided_child() -> None:
    """aten::index's indices are a TensorList the trace writes as []; the op's as_strided child has the
    gathered shape. Without the child the whole input stands for the output, as before."""
    rows = [
        # op_id, name, parent_id, input_dims, input_types, concrete_inputs
        (1, "aten::index", None, "[[128,1536,2048],[]]", '["c10::BFloat16",""]', None),
        (2, "aten::as_strided", 1, "[[128,1536,2048],[],[],[]]", '["c10::BFloat16","ScalarList","ScalarList",""]',
         '["","[8, 1536, 2048]","[0, 2048, 1]",""]'),
        (3, "aten::index", None, "[[64,32],[]]", '["float",""]', None),  # no child: unchanged
        # repeated indices: 16 rows gathered out of 8 (the output outgrows the input)
        (4, "aten::index", None, "[[8,64],[]]", '["float",""]', None),
        (5, "aten::as_strided", 4, "[[8,64],[],[],[]]", '["float","ScalarList","ScalarList",""]',
         '["","[16, 64]","[0, 1]",""]'),
    ]
    cpu = pd.DataFrame(rows, columns=["op_id", "name", "parent_id", "input_dims", "input_types", "concrete_inputs"])
    c = op_costs(cpu).set_index("op_id")
    assert c.loc[1, "bytes"] == 8 * 8 + 2 * 8 * 1536 * 2048 * 2
    assert c.loc[3, "bytes"] == 2 * 64 * 32 * 4
    assert c.loc[4, "bytes"] == 16 * 8 + (8 * 64 + 16 * 64) * 4  # every row of self read once, 16 written
    assert set(cpu["input_dims"]) >= {"[[128,1536,2048],[]]"}  # the caller's frame is not modified


def test_sort_topk_histc_and_a_grouped_gemm_with_fewer_rows_than_groups() -> None:
    sort = op_cost("aten::sort", "[[1024],[],[]]", '["long int","Scalar","Scalar"]')
    assert sort is not None and sort.bytes == 1024 * 8 * 3 and sort.flops == 0
    topk = op_cost("aten::topk", "[[128,128],[],[],[],[]]", '["float","Scalar","Scalar","Scalar","Scalar"]')
    assert topk is not None and topk.bytes == 128 * 128 * 4
    histc = op_cost("aten::histc", "[[1024],[],[],[]]", '["int","Scalar","Scalar","Scalar"]')
    assert histc is not None and histc.bytes == 1024 * 4
    # 8 rows (one decode token routed to 8 experts) reach at most 8 of the 128 experts' weights
    g = op_cost("aten::_grouped_mm", "[[8,2048],[128,2048,1536],[128],[],[]]",
                '["c10::BFloat16","c10::BFloat16","int","",""]')
    assert g is not None and g.flops == 2 * 8 * 2048 * 1536
    assert g.bytes == (8 * 2048 + 8 * 2048 * 1536) * 2 + 8 * 1536 * 2
