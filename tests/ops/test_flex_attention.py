"""FlexAttention (ONNX ai.onnx.preview, tessera.ops.flex_attention): models with and without
score_mod/prob_mod sub-graphs compiled for ref and llvm and checked against onnx's reference
implementation (onnxruntime does not run preview ops) on random data; refusals."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator
from onnx.reference.ops.aionnx_preview.op_flex_attention import _compute_flex_attention

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import TesseraError
from tessera.frontend.onnx import import_onnx

PREVIEW = "ai.onnx.preview"
TOL = {np.float16: 2e-3, np.float32: 1e-5, np.float64: 1e-12}


def _targets() -> list[str]:
    from tessera.plugin.manager import get_registry

    backend = get_registry().backends.get("llvm")
    return ["ref"] + (["llvm"] if backend is not None and backend.available() is None else [])


TARGETS = _targets()


# -- models -------------------------------------------------------------------------------------

def _mod_graph(nodes: list[onnx.NodeProto], dtype: int, inits: list[onnx.TensorProto],
               name: str, extra_inputs: list[onnx.ValueInfoProto] | None = None
               ) -> onnx.GraphProto:
    x = helper.make_tensor_value_info("x", dtype, ["B", "H", "L", "S"])
    y = helper.make_tensor_value_info("y", dtype, ["B", "H", "L", "S"])
    return helper.make_graph(nodes, name, [x, *(extra_inputs or [])], [y], inits)


def soft_cap(cap: float, dtype: int = TensorProto.FLOAT) -> onnx.GraphProto:
    """x -> tanh(x / cap) * cap."""
    return _mod_graph([helper.make_node("Div", ["x", "cap"], ["d"]),
                       helper.make_node("Tanh", ["d"], ["t"]),
                       helper.make_node("Mul", ["t", "cap"], ["y"])], dtype,
                      [helper.make_tensor("cap", dtype, [], [cap])], "soft_cap")


def _index_nodes() -> tuple[list[onnx.NodeProto], list[onnx.TensorProto]]:
    """q (L, 1) and k (1, S) int64 index tensors built from Shape(x)."""
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "two"], ["L"], axis=0),
             helper.make_node("Gather", ["shape", "three"], ["S"], axis=0),
             helper.make_node("Range", ["zero", "L", "one"], ["qr"]),
             helper.make_node("Range", ["zero", "S", "one"], ["kr"]),
             helper.make_node("Reshape", ["qr", "col"], ["q"]),
             helper.make_node("Reshape", ["kr", "row"], ["k"])]
    inits = [helper.make_tensor(n, TensorProto.INT64, [], [v])
             for n, v in (("zero", 0), ("one", 1), ("two", 2), ("three", 3))]
    inits += [helper.make_tensor("col", TensorProto.INT64, [2], [-1, 1]),
              helper.make_tensor("row", TensorProto.INT64, [2], [1, -1])]
    return nodes, inits


def relative_bias(slope: float, dtype: int = TensorProto.FLOAT) -> onnx.GraphProto:
    """x -> x + slope * (q_idx - k_idx) (an ALiBi-like relative-position bias)."""
    nodes, inits = _index_nodes()
    nodes += [helper.make_node("Sub", ["q", "k"], ["rel"]),
              helper.make_node("Cast", ["rel"], ["relf"], to=dtype),
              helper.make_node("Mul", ["relf", "slope"], ["bias"]),
              helper.make_node("Add", ["x", "bias"], ["y"])]
    inits.append(helper.make_tensor("slope", dtype, [], [slope]))
    return _mod_graph(nodes, dtype, inits, "relative_bias")


def causal(window: int | None = None, dtype: int = TensorProto.FLOAT) -> onnx.GraphProto:
    """x -> Where(q_idx >= k_idx [and q_idx - k_idx < window], x, -inf)."""
    nodes, inits = _index_nodes()
    nodes.append(helper.make_node("GreaterOrEqual", ["q", "k"], ["keep"]))
    if window is not None:
        nodes += [helper.make_node("Sub", ["q", "k"], ["dist"]),
                  helper.make_node("Less", ["dist", "window"], ["near"]),
                  helper.make_node("And", ["keep", "near"], ["keep2"])]
        inits.append(helper.make_tensor("window", TensorProto.INT64, [], [window]))
    nodes.append(helper.make_node("Where", ["keep2" if window else "keep", "x", "ninf"], ["y"]))
    inits.append(helper.make_tensor("ninf", dtype, [], [-np.inf]))
    return _mod_graph(nodes, dtype, inits, "causal")


def prob_scale(factor: float, dtype: int = TensorProto.FLOAT) -> onnx.GraphProto:
    """p -> p * factor + p * p (nonlinear in p)."""
    return _mod_graph([helper.make_node("Mul", ["x", "f"], ["a"]),
                       helper.make_node("Mul", ["x", "x"], ["b"]),
                       helper.make_node("Add", ["a", "b"], ["y"])], dtype,
                      [helper.make_tensor("f", dtype, [], [factor])], "prob_scale")


def flex_model(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
               extra: dict[str, np.ndarray] | None = None, checked: bool = True,
               **attrs: object) -> onnx.ModelProto:
    """One FlexAttention node on graph inputs Q, K, V (and ``extra`` graph inputs the mods
    read from the outer scope); ``checked``: passes ONNX's checker (with shape inference)."""
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW,
                            **{k_: a for k_, a in attrs.items() if a is not None})
    arrays = {"Q": q, "K": k, "V": v, **(extra or {})}
    inputs = [helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype),
                                            list(a.shape)) for n, a in arrays.items()]
    y_shape = [q.shape[0], q.shape[1], q.shape[2], v.shape[3]]
    out = helper.make_tensor_value_info("Y", helper.np_dtype_to_tensor_dtype(q.dtype), y_shape)
    graph = helper.make_graph([node], "flex", inputs, [out])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid(PREVIEW, 1)])
    model.ir_version = 10
    if checked:
        onnx.checker.check_model(model, full_check=True)
    return model


def qkv(rng: np.random.Generator, b: int, hq: int, hkv: int, length: int, s: int, e: int,
        ev: int, dtype: type = np.float32, spread: float = 1.0
        ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    def r(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * spread).astype(dtype)

    return r(b, hq, length, e), r(b, hkv, s, e), r(b, hkv, s, ev)


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str,
          want: np.ndarray | None = None, tol: float | None = None) -> np.ndarray:
    """Tessera (compiled for ``target``, and the reference interpreter) against onnx's
    reference implementation; returns Tessera's output."""
    if want is None:
        want = ReferenceEvaluator(model).run(None, feeds)[0]
    mod = tessera.compile(model, target=target)
    got = mod.run(feeds)["Y"]
    assert got.dtype == want.dtype and got.shape == want.shape
    tol = tol or TOL[want.dtype.type]
    np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    assert not np.isnan(got).any()
    fn = import_onnx(model)
    interpreted = evaluate_function(fn, feeds)["Y"]
    np.testing.assert_allclose(interpreted, want, rtol=tol, atol=tol)
    return got


# -- no modifiers -------------------------------------------------------------------------------

SHAPES = [  # b, hq, hkv, L, S, E, Ev
    (2, 4, 4, 8, 6, 16, 16),
    (1, 8, 2, 5, 7, 8, 8),      # GQA
    (3, 6, 1, 4, 9, 4, 12),     # MQA, larger V head
    (2, 2, 2, 1, 1, 3, 5),      # one query, one key
    (1, 3, 3, 6, 2, 32, 2),     # V head smaller than Q/K
]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("shape", SHAPES)
def test_plain_attention(target: str, dtype: type, shape: tuple[int, ...]) -> None:
    rng = np.random.default_rng(sum(shape))
    q, k, v = qkv(rng, *shape, dtype=dtype)
    check(flex_model(q, k, v), {"Q": q, "K": k, "V": v}, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("scale", [0.1, 1.0, 2.5])
def test_explicit_scale(target: str, scale: float) -> None:
    rng = np.random.default_rng(3)
    q, k, v = qkv(rng, 2, 4, 2, 5, 6, 8, 8)
    check(flex_model(q, k, v, scale=scale), {"Q": q, "K": k, "V": v}, target)


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("precision,dtype", [(TensorProto.DOUBLE, np.float32),
                                             (TensorProto.FLOAT16, np.float32),
                                             (TensorProto.FLOAT, np.float64)])
def test_softmax_precision(target: str, precision: int, dtype: type) -> None:
    rng = np.random.default_rng(precision)
    q, k, v = qkv(rng, 1, 4, 2, 6, 5, 8, 4, dtype=dtype)
    mod = soft_cap(3.0, precision)
    feeds = {"Q": q, "K": k, "V": v}
    tol = max(TOL[dtype], TOL[helper.tensor_dtype_to_np_dtype(precision).type])
    got = check(flex_model(q, k, v, softmax_precision=precision, score_mod=mod), feeds, target,
                tol=tol)
    # the precision matters: float16 scores give other results than float32 ones
    if precision == TensorProto.FLOAT16:
        other = ReferenceEvaluator(flex_model(q, k, v, score_mod=soft_cap(3.0))).run(
            None, feeds)[0]
        assert np.abs(got - other).max() > 1e-6


@pytest.mark.parametrize("target", TARGETS)
def test_bfloat16(target: str) -> None:
    """bfloat16 Q/K/V: scores in bfloat16, the softmax and the modifier in float32."""
    rng = np.random.default_rng(8)
    q, k, v = qkv(rng, 1, 4, 2, 4, 5, 8, 8, dtype=ml_dtypes.bfloat16)
    model = flex_model(q, k, v, score_mod=soft_cap(2.0))
    feeds = {"Q": q, "K": k, "V": v}
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    got = tessera.compile(model, target=target).run(feeds)["Y"]
    assert got.dtype == want.dtype == ml_dtypes.bfloat16
    np.testing.assert_allclose(got.astype(np.float32), want.astype(np.float32), rtol=1e-2,
                               atol=1e-2)


# -- modifiers ----------------------------------------------------------------------------------

MODS = {
    "soft_cap": lambda dt: {"score_mod": soft_cap(2.0, dt)},
    "relative_bias": lambda dt: {"score_mod": relative_bias(-0.25, dt)},
    "causal": lambda dt: {"score_mod": causal(None, dt)},
    "sliding_window": lambda dt: {"score_mod": causal(2, dt)},
    "prob_mod": lambda dt: {"prob_mod": prob_scale(0.5, dt)},
    "both": lambda dt: {"score_mod": relative_bias(0.5, dt), "prob_mod": prob_scale(2.0, dt)},
}


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
@pytest.mark.parametrize("mod", sorted(MODS))
def test_modifiers(target: str, dtype: type, mod: str) -> None:
    rng = np.random.default_rng(len(mod))
    q, k, v = qkv(rng, 2, 4, 2, 6, 6, 8, 5, dtype=dtype, spread=2.0)
    mod_dtype = TensorProto.DOUBLE if dtype == np.float64 else TensorProto.FLOAT
    model = flex_model(q, k, v, **MODS[mod](mod_dtype))
    feeds = {"Q": q, "K": k, "V": v}
    got = check(model, feeds, target)
    # the modifier changes the result (the test would not notice a dropped sub-graph)
    plain = ReferenceEvaluator(flex_model(q, k, v)).run(None, feeds)[0]
    assert np.abs(got.astype(np.float64) - plain).max() > 1e-3


@pytest.mark.parametrize("target", TARGETS)
def test_causal_with_more_keys_than_queries(target: str) -> None:
    """L < S: row i keeps keys 0..i (query 0 attends to key 0 only, so Y[..., 0, :] = V[0])."""
    rng = np.random.default_rng(11)
    q, k, v = qkv(rng, 1, 2, 1, 3, 7, 4, 6)
    got = check(flex_model(q, k, v, score_mod=causal()), {"Q": q, "K": k, "V": v}, target)
    np.testing.assert_allclose(got[:, :, 0, :], np.broadcast_to(v[:, :, 0, :], (1, 2, 6)),
                               rtol=1e-6)


@pytest.mark.parametrize("target", TARGETS)
def test_modifier_reads_outer_scope_values(target: str) -> None:
    """score_mod adds a bias tensor that is a graph input (a captured input of the node and of
    the sub-graph); prob_mod reads the same value. onnx's reference evaluator cannot resolve
    outer-scope names inside FlexAttention's mods, so the expectation runs its implementation
    on mods with the bias's value as an initializer."""
    rng = np.random.default_rng(5)
    q, k, v = qkv(rng, 2, 4, 2, 5, 6, 8, 8)
    bias = rng.standard_normal((5, 6)).astype(np.float32)
    score = helper.make_graph([helper.make_node("Add", ["x", "bias"], ["y"])], "s",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    prob = helper.make_graph([helper.make_node("Sigmoid", ["bias"], ["g"]),
                              helper.make_node("Mul", ["x", "g"], ["y"])], "p",
                             [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = flex_model(q, k, v, extra={"bias": bias}, score_mod=score, prob_mod=prob)

    def closed(g: onnx.GraphProto) -> ReferenceEvaluator:
        c = onnx.GraphProto()
        c.CopyFrom(g)
        c.initializer.append(numpy_helper.from_array(bias, "bias"))
        return ReferenceEvaluator(helper.make_model(c, opset_imports=[
            helper.make_opsetid("", 26)]))

    (want,) = _compute_flex_attention(q, k, v, score_mod=closed(score), prob_mod=closed(prob))
    check(model, {"Q": q, "K": k, "V": v, "bias": bias}, target, want)
    fn = import_onnx(model)
    node = fn.nodes[-1]
    assert node.op == "FlexAttention" and node.attrs["captures"] == 1
    assert [len(g.inputs) for _, g in node.subgraphs] == [2, 2]


@pytest.mark.parametrize("target", TARGETS)
def test_modifiers_compile_for_the_target(target: str) -> None:
    """The node runs on the controlflow backend; its sub-graphs are compiled for the target."""
    rng = np.random.default_rng(2)
    q, k, v = qkv(rng, 1, 2, 2, 4, 4, 8, 8)
    model = flex_model(q, k, v, score_mod=soft_cap(5.0), prob_mod=prob_scale(0.3))
    mod = tessera.compile(model, target=target)
    assert [r.backend for r in mod.report.regions] == ["controlflow"]
    info = mod.compiled[mod.report.regions[0].name].info
    assert len(info["subgraphs"]) == 2
    assert all(f"on {target}" in line for line in info["subgraphs"])
    check(model, {"Q": q, "K": k, "V": v}, target)


def test_reference_runs_each_modifier_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The mods are evaluated on the whole (B, Hq, L, S) tensor, not once per element."""
    import tessera.ops.flex_attention as fa

    calls: list[tuple[int, ...]] = []
    real = fa.run_graph

    def counting(graph, args):  # type: ignore[no-untyped-def]
        calls.append(np.asarray(args[0]).shape)
        return real(graph, args)

    monkeypatch.setattr(fa, "run_graph", counting)
    rng = np.random.default_rng(9)
    q, k, v = qkv(rng, 2, 4, 2, 3, 5, 4, 4)
    model = flex_model(q, k, v, score_mod=causal(), prob_mod=prob_scale(1.5))
    fn = import_onnx(model)
    evaluate_function(fn, {"Q": q, "K": k, "V": v})
    assert calls == [(2, 4, 3, 5), (2, 4, 3, 5)]


@pytest.mark.parametrize("target", TARGETS)
def test_artifact_round_trip(target: str, tmp_path) -> None:  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(4)
    q, k, v = qkv(rng, 1, 4, 2, 5, 5, 8, 8)
    model = flex_model(q, k, v, score_mod=relative_bias(0.3), prob_mod=prob_scale(0.7))
    feeds = {"Q": q, "K": k, "V": v}
    path = tessera.compile(model, target=target).export(tmp_path / "flex.tar")
    got = tessera.load(path).run(feeds)["Y"]
    want = ReferenceEvaluator(model).run(None, feeds)[0]
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


# -- refusals -----------------------------------------------------------------------------------

def _refused(model: onnx.ModelProto, match: str) -> None:
    with pytest.raises(TesseraError, match=match) as info:
        import_onnx(model)
    assert "FlexAttention" in str(info.value)


def test_refuses_heads_that_do_not_group() -> None:
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, 1, 3, 2, 4, 4, 8, 8)
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW)
    arrays = {"Q": q, "K": k, "V": v}
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, list(a.shape)) for n, a in arrays.items()],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 3, 4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid(PREVIEW, 1)])
    _refused(model, "multiple of kv_num_heads 2")


def test_refuses_rank_three_inputs() -> None:
    rng = np.random.default_rng(0)
    q = rng.standard_normal((2, 4, 8)).astype(np.float32)
    node = helper.make_node("FlexAttention", ["Q", "Q", "Q"], ["Y"], domain=PREVIEW)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        "Q", TensorProto.FLOAT, list(q.shape))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [2, 4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid(PREVIEW, 1)])
    _refused(model, "rank 4")


def test_refuses_a_modifier_that_changes_the_type() -> None:
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, 1, 2, 2, 4, 4, 8, 8)
    to_half = helper.make_graph([helper.make_node("Cast", ["x"], ["y"], to=TensorProto.FLOAT16)],
                                "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                   None)],
                                [helper.make_tensor_value_info("y", TensorProto.FLOAT16, None)])
    _refused(flex_model(q, k, v, checked=False, score_mod=to_half),
             "score_mod must give one float32")
    sums = helper.make_graph([helper.make_node("ReduceSum", ["x", "ax"], ["y"], keepdims=1)],
                             "m", [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
                             [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                             [helper.make_tensor("ax", TensorProto.INT64, [1], [3])])
    _refused(flex_model(q, k, v, checked=False, prob_mod=sums),
             r"prob_mod must give one float32\[1, 2, 4, 4\]")


def test_refuses_a_modifier_with_two_inputs() -> None:
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, 1, 2, 2, 4, 4, 8, 8)
    two = helper.make_graph([helper.make_node("Add", ["x", "z"], ["y"])], "m",
                            [helper.make_tensor_value_info("x", TensorProto.FLOAT, None),
                             helper.make_tensor_value_info("z", TensorProto.FLOAT, None)],
                            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    node = helper.make_node("FlexAttention", ["Q", "K", "V"], ["Y"], domain=PREVIEW,
                            score_mod=two)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(
        n, TensorProto.FLOAT, list(a.shape)) for n, a in (("Q", q), ("K", k), ("V", v))],
        [helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, 2, 4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 26),
                                                    helper.make_opsetid(PREVIEW, 1)])
    with pytest.raises(TesseraError, match="score_mod"):
        import_onnx(model)


def test_refuses_an_integer_softmax_precision() -> None:
    rng = np.random.default_rng(0)
    q, k, v = qkv(rng, 1, 2, 2, 4, 4, 8, 8)
    _refused(flex_model(q, k, v, checked=False,
                                       softmax_precision=TensorProto.INT32), "softmax_precision")
