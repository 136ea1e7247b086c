"""Symbolic shapes in the graph IR: types, inference, printing, serialization and passes."""

from __future__ import annotations

import numpy as np
import pytest

import tessera  # noqa: F401  (installs the dimension algebra)
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import IRError, OpError
from tessera.ir.graph import Function, contents_of
from tessera.ir.schema import get_schema
from tessera.ir.serialize import from_json, to_json
from tessera.ir.symbolic import (
    dim_bounds_scope,
    dim_str,
    dim_var,
    dims_equal,
    eval_dim,
    has_dim_expr,
    normalize_dim,
    substitute,
)
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.kernel.fuse_ops import fuse_ops
from tessera.passes import PassManager
from tessera.passes.canonicalize import Canonicalize
from tessera.passes.fold_constants import FoldConstants
from tessera.tir import expr as E

B, S = dim_var("batch"), dim_var("seq")
SIZES = [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 33}]


# -- types ---------------------------------------------------------------------------------------

def test_static_types_are_unchanged() -> None:
    t = TensorType((2, 3, 4), DType.float32)
    assert t.is_static and t.size == 24 and t.nbytes == 96 and isinstance(t.size, int)
    assert t == TensorType((np.int64(2), 3, 4), "float32")
    assert hash(t) == hash(TensorType((2, 3, 4), DType.float32))
    assert t != TensorType((2, 3, 5), DType.float32)
    assert str(t) == "float32[2, 3, 4]"
    assert t.upper_bound({}) is t and t.evaluate({"seq": 3}) is t
    with pytest.raises(IRError, match="negative"):
        TensorType((2, -1), DType.float32)


def test_symbolic_type_prints_compares_and_hashes_by_structure() -> None:
    t = TensorType((B, S, 512), DType.float32)
    assert not t.is_static and t.variables == {"batch", "seq"}
    assert str(t) == "float32[batch, seq, 512]"
    # names, interned variables and a foreign tir.Var of the same name are one variable
    same = TensorType(("batch", E.Var("seq", "int64"), 512), "float32")
    assert same == t and hash(same) == hash(t)
    a = TensorType((S * 8 * B,), DType.int64)
    b = TensorType(((B * 2) * (S * 4) + S - S,), DType.int64)
    assert a == b and hash(a) == hash(b) and str(a) == "int64[8*batch*seq]"
    assert TensorType((S,), DType.int64) != TensorType((B,), DType.int64)
    assert TensorType((S,), DType.int64) != TensorType((S,), DType.int32)
    assert TensorType((S - S + 4,), DType.int64).is_static  # a constant expression is an int
    assert dims_equal(normalize_dim((B * S * 512) // (B * S * 8)), 64)


def test_symbolic_size_nbytes_evaluate_and_upper_bound() -> None:
    t = TensorType((B, S * 3 + 1, 8), DType.float16)
    rng = np.random.default_rng(0)
    for _ in range(5):
        sizes = {"batch": int(rng.integers(1, 50)), "seq": int(rng.integers(1, 50))}
        want = (sizes["batch"], sizes["seq"] * 3 + 1, 8)
        assert t.evaluate(sizes) == TensorType(want, DType.float16)
        assert eval_dim(t.size, sizes) == int(np.prod(want))
        assert eval_dim(t.nbytes, sizes) == int(np.prod(want)) * 2
    assert t.upper_bound({"batch": 4, "seq": (1, 100)}) == TensorType((4, 301, 8), "float16")
    with pytest.raises(IRError, match="no upper bound for seq"):
        t.upper_bound({"batch": 4})
    with pytest.raises(IRError, match="not known before run time"):
        t.static_size()
    with pytest.raises(IRError, match="negative dimension"):
        TensorType((S - S - 3 + B * 0, S), "float32")


def test_bounds_simplify_dimensions() -> None:
    d = E.min_(S, 512)
    assert dim_str(normalize_dim(d)) == "min(seq, 512)"
    with dim_bounds_scope({"seq": (1, 512)}):
        assert dims_equal(normalize_dim(d), S)


# -- inference -----------------------------------------------------------------------------------

def _encoder_like() -> Function:
    """A small attention block built directly in the IR, with symbolic shapes."""
    rng = np.random.default_rng(1)
    g = Function("block", {"dim_bounds": {"seq": (1, 64)}})
    x = g.add_input("x", TensorType((B, S, 32), DType.float32))
    mask = g.add_input("mask", TensorType((B, S), DType.int64))
    w = g.constant(rng.standard_normal((32, 32)).astype(np.float32), "w")
    ln = g.add_node("LayerNormalization", [x, g.constant(np.ones(32, np.float32), "gamma")],
                    {"axis": -1}, num_outputs=1).outputs[0]
    q = g.op("Reshape", g.op("MatMul", ln, w), shape=[0, 0, 4, -1])
    qt = g.op("Transpose", q, perm=[0, 2, 1, 3])
    kt = g.op("Transpose", q, perm=[0, 2, 3, 1])
    scores = g.op("MatMul", qt, kt)
    keep = g.op("Unsqueeze", g.op("Cast", mask, to=DType.bool), axes=[1, 2])
    bias = g.op("Where", keep, g.constant(np.float32(0.0)), g.constant(np.float32(-1e9)))
    probs = g.op("Softmax", g.op("Add", scores, bias), axis=-1)
    ctx = g.op("Transpose", g.op("MatMul", probs, qt), perm=[0, 2, 1, 3])
    out = g.op("Reshape", ctx, shape=[B, S, 32])
    gelu = g.op("Mul", out, g.op("Erf", out))
    head = g.op("Slice", gelu, starts=[0], ends=[S - 1], axes=[1], steps=[1])
    pooled = g.op("ReduceMean", head, axes=[1], keepdims=0)
    pos = g.op("Gather", g.constant(rng.standard_normal((64, 32)).astype(np.float32), "pos"),
               g.op("Range", start=0, limit=S, delta=1), axis=0)
    both = g.op("Concat", gelu, g.op("Expand", pos, shape=[B, S, 32]), axis=2)
    flat = g.op("Flatten", both, axis=2)
    g.outputs = [pooled, flat]
    return g


def test_inferred_types_evaluate_to_the_static_inference() -> None:
    g = _encoder_like()
    verify(g)
    types = {v.name: str(v.type) for n in g.nodes for v in n.outputs}
    assert types["reshape"] == "float32[batch, seq, 4, 8]"
    assert types["matmul_1"] == "float32[batch, 4, seq, seq]"
    assert types["slice"] == "float32[batch, seq - 1, 32]"
    assert types["concat"] == "float32[batch, seq, 64]"
    assert types["flatten"] == "float32[batch*seq, 64]"
    for sizes in SIZES:
        for node in g.nodes:
            schema = get_schema(node.op)
            concrete = [v.type.evaluate(sizes) if v is not None else None for v in node.inputs]
            attrs = {k: substitute(v, sizes) for k, v in node.attrs.items()}
            assert not any(has_dim_expr(v) for v in attrs.values())
            static = schema.infer_types(node.name, concrete, attrs)
            assert [o.type.evaluate(sizes) for o in node.outputs] == static[:len(node.outputs)]


def _numpy_block(g: Function, x: np.ndarray, mask: np.ndarray) -> list[np.ndarray]:
    c = {v.name: v.data for v in g.constants()}
    mu, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    ln = (x - mu) / np.sqrt(var + 1e-5) * c["gamma"]
    b, s = x.shape[:2]
    q = (ln @ c["w"]).reshape(b, s, 4, 8)
    qt, kt = q.transpose(0, 2, 1, 3), q.transpose(0, 2, 3, 1)
    scores = qt @ kt + np.where(mask[:, None, None, :] != 0, 0.0, -1e9)
    p = np.exp(scores - scores.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    out = (p @ qt).transpose(0, 2, 1, 3).reshape(b, s, 32)
    from math import erf
    gelu = out * np.vectorize(erf)(out)
    pooled = gelu[:, :s - 1].mean(1)
    pos = np.broadcast_to(c["pos"][:s], (b, s, 32))
    return [pooled, np.concatenate([gelu, pos], 2).reshape(b * s, 64)]


@pytest.mark.parametrize("sizes", SIZES[1:])
def test_specialized_graph_computes_the_block(sizes: dict[str, int]) -> None:
    g = _encoder_like()
    rng = np.random.default_rng(sizes["seq"])
    b, s = sizes["batch"], sizes["seq"]
    x = rng.standard_normal((b, s, 32)).astype(np.float32)
    mask = (rng.random((b, s)) > 0.3).astype(np.int64)
    mask[:, 0] = 1
    spec = g.specialize(sizes)
    assert not spec.is_symbolic and g.is_symbolic
    verify(spec)
    got = list(evaluate_function(spec, {"x": x, "mask": mask}).values())
    for a, want in zip(got, _numpy_block(g, x, mask)):
        np.testing.assert_allclose(a, want, rtol=1e-4, atol=1e-4)


def test_probe_fallback_fits_ops_without_a_rule() -> None:
    g = Function()
    x = g.add_input("x", TensorType((B, S), DType.float32))
    assert get_schema("Tile").symbolic_infer is None and get_schema("Pad").symbolic_infer is None
    tiled = g.op("Tile", x, repeats=[2, 3])
    padded = g.op("Pad", x, None, pads=[1, 2, 3, 4], mode="constant")
    assert str(tiled.type) == "float32[2*batch, 3*seq]"
    assert str(padded.type) == "float32[batch + 4, seq + 6]"
    y = g.add_input("y", TensorType((1, 1, S), DType.uint8))
    w = g.constant(np.ones((1, 1, 3), np.uint8), "w")
    with pytest.raises(OpError, match=r"node convinteger \(ConvInteger\): cannot infer output "
                                      r"types symbolically .*no dimension expression fits"):
        g.op("ConvInteger", y, w, strides=[2])


def test_symbolic_errors_name_the_node_and_op() -> None:
    g = Function()
    a = g.add_input("a", TensorType((B,), DType.float32))
    c = g.add_input("c", TensorType((S,), DType.float32))
    with pytest.raises(OpError, match=r"node add \(Add\): .*batch and seq .*may differ"):
        g.op("Add", a, c)
    with pytest.raises(OpError, match=r"node matmul \(MatMul\): .*inner dimensions"):
        g.op("MatMul", g.op("Unsqueeze", a, axes=[0]), g.op("Unsqueeze", c, axes=[1]))


def test_size_ops_and_contents() -> None:
    g = Function()
    x = g.add_input("x", TensorType((B, S, 4), DType.float32))
    shape = g.op("Shape", x, start=1)
    values = g.op("ShapeValues", values=[B * S, S + 1], shape=[2], dtype=DType.int64)
    ones = g.op("ConstantOfShape", shape=[S, 2], value=np.array([3], np.int32))
    rng = g.op("Range", start=2, limit=S * 2, delta=3)
    assert str(shape.type) == "int64[2]" and str(ones.type) == "int32[seq, 2]"
    assert contents_of(shape) == [S, 4]
    assert [dim_str(d) for d in contents_of(values)] == ["batch*seq", "seq + 1"]
    g.outputs = [shape, values, ones, rng]
    for sizes in SIZES:
        b, s = sizes["batch"], sizes["seq"]
        got = evaluate_function(g.specialize(sizes), {"x": np.zeros((b, s, 4), np.float32)})
        out = list(got.values())
        np.testing.assert_array_equal(out[0], [s, 4])
        np.testing.assert_array_equal(out[1], [b * s, s + 1])
        np.testing.assert_array_equal(out[2], np.full((s, 2), 3, np.int32))
        np.testing.assert_array_equal(out[3], np.arange(2, 2 * s, 3))
        assert g.outputs[3].type.evaluate(sizes).shape == out[3].shape
    with pytest.raises(OpError, match="bind the sizes first"):
        get_schema("Range").evaluate([], {"start": 0, "limit": S, "delta": 1,
                                          "dtype": DType.int64})


# -- printing, serialization, passes ---------------------------------------------------------

def test_printer_and_json_round_trip() -> None:
    g = _encoder_like()
    text = str(g)
    assert "%x: float32[batch, seq, 32]" in text and "ends=[seq - 1]" in text
    back = from_json(to_json(g))
    verify(back)
    assert str(back) == text
    assert back.attrs["dim_bounds"] == {"seq": [1, 64]}


def test_passes_keep_size_dependent_values_and_run_on_symbolic_graphs() -> None:
    g = _encoder_like()
    g.nodes.insert(0, g.nodes.pop(next(i for i, n in enumerate(g.nodes) if n.op == "Range")))
    folded = FoldConstants().run(g.copy())
    assert any(n.op == "Range" for n in folded.nodes)  # Range(0, seq): not one size's constant
    out = PassManager(opt_level=3, verify=True).run(g.copy())
    assert out.is_symbolic and not any(n.op in ("Flatten", "Unsqueeze") for n in out.nodes)
    assert fuse_ops(out)
    spec = PassManager(opt_level=3, verify=True).run(g.specialize({"batch": 2, "seq": 5}))
    assert not any(n.op == "Range" for n in spec.nodes)  # folded once the sizes are bound
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 32)).astype(np.float32)
    mask = np.ones((2, 5), np.int64)
    a = evaluate_function(out.specialize({"batch": 2, "seq": 5}), {"x": x, "mask": mask})
    b = evaluate_function(spec, {"x": x, "mask": mask})
    for u, v in zip(a.values(), b.values()):
        np.testing.assert_allclose(u, v, rtol=1e-5, atol=1e-5)


def test_canonicalize_reshape_chains_with_expressions() -> None:
    g = Function()
    x = g.add_input("x", TensorType((B, S, 8), DType.float32))
    r1 = g.op("Reshape", x, shape=[B * S, 8])
    r2 = g.op("Reshape", r1, shape=[0, 2, 4])
    r3 = g.op("Reshape", r2, shape=[B, S, -1])
    g.outputs = [r3]
    out = Canonicalize().run(g)
    assert not out.nodes and out.outputs[0] is x  # back to x's own shape: gone
