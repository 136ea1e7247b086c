"""Attention ops (tessera.ops.attention) and their ONNX converters: one-node models on random
data checked against onnxruntime, and the ONNX conformance cases (expected outputs) for the
ops onnxruntime does not run."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx_node import feeds_of, one_node_model, run_tessera

from tessera.errors import ModelImportError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import get_schema

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, rtol=1e-4, atol=1e-5)


def rand(rng: np.random.Generator, *shape: int, dtype=np.float32, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)

# -- attention -----------------------------------------------------------------------------------


def attention_inputs(rng, *, b=2, hq=4, hkv=4, sq=3, skv=5, d=8, dv=8, past=0, three_d=False,
                     mask=None, dtype=np.float32):
    if three_d:
        q, k, v = rand(rng, b, sq, hq * d), rand(rng, b, skv, hkv * d), rand(rng, b, skv, hkv * dv)
    else:
        q, k, v = rand(rng, b, hq, sq, d), rand(rng, b, hkv, skv, d), rand(rng, b, hkv, skv, dv)
    total = past + skv
    m = None
    if mask == "bool":
        m = rng.random((sq, total)) > 0.3
        m[:, 0] = True
    elif mask == "float":
        m = rand(rng, b, 1, sq, total)
    elif mask == "float3d":
        m = rand(rng, hq, sq, total)
    ins = [q.astype(dtype), k.astype(dtype), v.astype(dtype),
           None if m is None else (m if m.dtype == bool else m.astype(dtype))]
    if past:
        ins += [rand(rng, b, hkv, past, d).astype(dtype), rand(rng, b, hkv, past, dv).astype(dtype)]
    return ins


ATTENTION_OUTS = ["y0", "y1", "y2", "y3"]


@pytest.mark.parametrize("case", [
    {},
    {"hkv": 2},
    {"hkv": 1, "dv": 6},
    {"mask": "bool"},
    {"mask": "float"},
    {"mask": "float3d", "past": 2},
    {"past": 3, "hkv": 2},
    {"three_d": True, "hkv": 2},
    {"three_d": True, "past": 2, "mask": "float"},
])
@pytest.mark.parametrize("attrs", [
    {},
    {"is_causal": 1},
    {"scale": 0.2, "softcap": 2.0},
    {"qk_matmul_output_mode": 1, "softcap": 3.0},
    {"qk_matmul_output_mode": 2},
    {"qk_matmul_output_mode": 3, "is_causal": 1},
])
def test_attention_against_onnxruntime(rng, case, attrs):
    case = dict(case)
    ins = attention_inputs(rng, **case)
    full = dict(attrs)
    if case.get("three_d"):
        full.update(q_num_heads=4, kv_num_heads=case.get("hkv", 4))
    outs = ATTENTION_OUTS if case.get("past") else ["y0", "", "", "y3"]
    if attrs.get("qk_matmul_output_mode") == 2 and case.get("mask") == "bool":
        outs = outs[:3]  # onnxruntime writes the lowest float, not -inf, for masked scores
    check("Attention", ins, full, opset=23, outputs=outs)


def test_attention_nonpad_kv_seqlen(rng):
    ins = attention_inputs(rng, b=2, sq=2, skv=6, hkv=2)
    ins += [None, None, np.array([4, 6], dtype=np.int64)]
    check("Attention", ins, {"is_causal": 1}, opset=24, outputs=["y0"])
    check("Attention", ins, opset=24, outputs=["y0"])


def test_attention_float16(rng):
    ins = attention_inputs(rng, hkv=2, mask="float", dtype=np.float16)
    check("Attention", ins, {"is_causal": 1}, opset=23, outputs=["y0"], rtol=5e-3, atol=5e-3)


def test_attention_short_mask_is_padded(rng):
    """A mask shorter than the total sequence is padded with False (onnxruntime rejects short
    masks: compare with the explicitly padded mask)."""
    ins = attention_inputs(rng, past=2)
    short = rng.random((3, 4)) > 0.2  # kv dimension 4 < total 7
    short[:, 0] = True
    ins[3] = np.concatenate([short, np.zeros((3, 3), bool)], axis=1)
    want = check("Attention", ins, opset=23, outputs=ATTENTION_OUTS)
    ins[3] = short
    model = one_node_model("Attention", ins, opset=23, outputs=ATTENTION_OUTS)
    got = run_tessera(model, feeds_of(ins))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_attention_errors(rng):
    ins = attention_inputs(rng, three_d=True)
    with pytest.raises(ModelImportError, match="q_num_heads"):
        import_onnx(one_node_model("Attention", ins, opset=23), check=False)
    ins = attention_inputs(rng, hq=3, hkv=2)
    with pytest.raises(ModelImportError, match="multiple"):
        import_onnx(one_node_model("Attention", ins, opset=23), check=False)


@pytest.mark.parametrize("attrs,x_shape,cache_last", [
    ({}, (2, 4, 3, 8), 4),
    ({"interleaved": 1}, (2, 4, 3, 8), 4),
    ({"rotary_embedding_dim": 4}, (2, 4, 3, 8), 2),
    ({"rotary_embedding_dim": 4, "interleaved": 1}, (2, 4, 3, 8), 2),
    ({"num_heads": 4}, (2, 3, 32), 4),
    ({"num_heads": 2, "rotary_embedding_dim": 6, "interleaved": 1}, (1, 5, 20), 3),
])
@pytest.mark.parametrize("position_ids", [True, False])
def test_rotary_embedding(rng, attrs, x_shape, cache_last, position_ids):
    b = x_shape[0]
    s = x_shape[2] if len(x_shape) == 4 else x_shape[1]
    x = rand(rng, *x_shape)
    if position_ids:
        cos, sin = rand(rng, 16, cache_last), rand(rng, 16, cache_last)
        pos = rng.integers(0, 16, (b, s)).astype(np.int64)
        ins = [x, cos, sin, pos]
    else:
        ins = [x, rand(rng, b, s, cache_last), rand(rng, b, s, cache_last)]
    check("RotaryEmbedding", ins, attrs, opset=23)


# -- ops onnxruntime does not run: ONNX conformance expectations ----------------------------------

def _conformance_cases(prefixes: tuple[str, ...]) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return [c for c in collect_testcases(None)
                if c.name.startswith(prefixes) and not c.name.endswith("_expanded")]


CONFORMANCE_ONLY = _conformance_cases((
    "test_swiglu", "test_linear_attention", "test_causal_conv_with_state",
    "test_attention_local_window", "test_attention_bidirectional_window",
    "test_attention_3d_local_window", "test_attention_4d_softcap_neginf",
    "test_attention_causal_boolmask_nan", "test_attention_23_", "test_attention_24_",
    "test_attention_4d_causal_nonpad", "test_attention_4d_gqa_causal_nonpad"))


@pytest.mark.parametrize("case", CONFORMANCE_ONLY, ids=lambda c: c.name)
def test_conformance_expectations(case):
    """Ops (or attribute combinations) onnxruntime does not run, checked against the outputs
    the ONNX test generators computed."""
    g = case.model.graph
    for inputs, expected in case.data_sets:
        feeds = {vi.name: np.asarray(a) for vi, a in zip(g.input, inputs)}
        got = run_tessera(case.model, feeds)
        for have, want in zip(got, expected):
            assert have.dtype == want.dtype and have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol)


def test_conformance_cases_found():
    names = {c.name for c in CONFORMANCE_ONLY}
    assert {"test_swiglu", "test_linear_attention_gated_delta_gqa",
            "test_causal_conv_with_state_kernel_size_one", "test_attention_local_window"} <= names


def test_linear_attention_rule_checks(rng):
    q = rand(rng, 1, 2, 8)
    with pytest.raises(ModelImportError, match="decay"):
        import_onnx(one_node_model("LinearAttention", [q, q, q], {
            "q_num_heads": 2, "kv_num_heads": 2, "update_rule": "gated"}, opset=27,
            outputs=["y0", "y1"]), check=False)


@pytest.mark.parametrize("shape,update_len,axis,mode", [
    ((2, 3, 8, 4), 2, -2, "linear"), ((2, 3, 8, 4), 3, -2, "circular"),
    ((3, 6, 5), 2, 1, "linear"), ((2, 5, 3, 2), 4, 1, "circular")])
def test_tensor_scatter(rng, shape, update_len, axis, mode):
    past = rand(rng, *shape)
    ax = axis % len(shape)
    upd_shape = list(shape)
    upd_shape[ax] = update_len
    upd = rand(rng, *upd_shape)
    hi = shape[ax] if mode == "circular" else shape[ax] - update_len + 1
    idx = rng.integers(0, hi, shape[0]).astype(np.int64)
    check("TensorScatter", [past, upd, idx], {"axis": axis, "mode": mode}, opset=24)


def test_schema_errors():
    schema = get_schema("SwiGLU")
    with pytest.raises(OpError, match="same shape"):
        schema.infer_types("n", [TensorType((2, 3), DType.float32),
                                 TensorType((2, 4), DType.float32)], {"alpha": 1.0})
