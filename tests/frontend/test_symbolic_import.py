"""The ONNX importer's symbolic mode: one graph for every size of the model's variables."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera  # noqa: F401  (installs the dimension algebra)
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import ModelImportError
from tessera.frontend.onnx.importer import import_onnx
from tessera.ir.graph import Function
from tessera.ir.symbolic import is_dim_expr
from tessera.ir.verifier import verify
from tessera.passes import PassManager

HIDDEN, HEADS, VOCAB, MAX_POS = 16, 2, 50, 64
SIZES = [{"batch": 1, "seq": 1}, {"batch": 2, "seq": 7}, {"batch": 3, "seq": 33}]
SERVING = Path.home() / ".cache" / "tessera-bench" / "serving-encoder.onnx"


def _encoder(seed: int = 0) -> onnx.ModelProto:
    """An encoder layer the way exporters write one: the shape arithmetic through Shape,
    Gather, Unsqueeze and Concat, a position Range, a mask through Where, Erf gelu."""
    rng = np.random.default_rng(seed)
    inits: list[TensorProto] = []
    nodes: list[onnx.NodeProto] = []

    def init(name: str, array: np.ndarray) -> str:
        inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def weight(name: str, *shape: int) -> str:
        return init(name, (rng.standard_normal(shape) * 0.3).astype(np.float32))

    def node(op: str, inputs: list[str], out: str, **attrs: object) -> str:
        nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    i0, i1, i2, neg1 = (init(f"c_{n}", np.array(v, np.int64)) for n, v in
                        (("0", 0), ("1", 1), ("ax0", [0]), ("m1", [-1])))
    one = init("c_step", np.array(1, np.int64))
    head_dim = init("c_hd", np.array([HIDDEN // HEADS], np.int64))
    hidden = init("c_hidden", np.array([HIDDEN], np.int64))
    word = node("Gather", [weight("word_emb", VOCAB, HIDDEN), "input_ids"], "word")
    shape = node("Shape", ["input_ids"], "ids_shape")
    batch = node("Gather", [shape, i0], "batch_dim", axis=0)
    seq = node("Gather", [shape, i1], "seq_dim", axis=0)
    positions = node("Range", [i0, seq, one], "positions")
    pos = node("Gather", [weight("pos_emb", MAX_POS, HIDDEN),
                          node("Unsqueeze", [positions, i2], "positions_2d")], "pos")
    x = node("Add", [word, pos], "embedded")
    x = node("LayerNormalization", [x, weight("ln0_g", HIDDEN), weight("ln0_b", HIDDEN)],
             "ln0", axis=-1, epsilon=1e-5)
    b1 = node("Unsqueeze", [batch, i2], "batch_1d")
    s1 = node("Unsqueeze", [seq, i2], "seq_1d")
    heads_shape = node("Concat", [b1, s1, neg1, head_dim], "heads_shape", axis=0)
    split = {}
    for name in "qkv":
        proj = node("Add", [node("MatMul", [x, weight(f"w{name}", HIDDEN, HIDDEN)],
                                 f"{name}_mm"), weight(f"b{name}", HIDDEN)], f"{name}_proj")
        perm = [0, 2, 3, 1] if name == "k" else [0, 2, 1, 3]
        split[name] = node("Transpose", [node("Reshape", [proj, heads_shape],
                                              f"{name}_heads")], f"{name}_t", perm=perm)
    scores = node("Div", [node("MatMul", [split["q"], split["k"]], "qk"),
                          init("c_scale", np.array(np.sqrt(HIDDEN // HEADS), np.float32))],
                  "scores")
    keep = node("Unsqueeze", [node("Equal", ["attention_mask",
                                             init("c_zero", np.array(0, np.int64))],
                                   "masked"), init("c_ax12", np.array([1, 2], np.int64))],
                "masked_4d")
    bias = node("Where", [keep, init("c_neg", np.array(-1e4, np.float32)),
                          init("c_fzero", np.array(0.0, np.float32))], "mask_bias")
    probs = node("Softmax", [node("Add", [scores, bias], "biased")], "probs", axis=-1)
    ctx = node("Transpose", [node("MatMul", [probs, split["v"]], "ctx_heads")], "ctx_t",
               perm=[0, 2, 1, 3])
    out_shape = node("Concat", [b1, s1, hidden], "out_shape", axis=0)
    attn = node("MatMul", [node("Reshape", [ctx, out_shape], "ctx"),
                           weight("wo", HIDDEN, HIDDEN)], "attn")
    x = node("LayerNormalization", [node("Add", [attn, x], "res1"), weight("ln1_g", HIDDEN),
                                    weight("ln1_b", HIDDEN)], "ln1", axis=-1, epsilon=1e-5)
    h = node("MatMul", [x, weight("w1", HIDDEN, 4 * HIDDEN)], "ffn1")
    erf = node("Erf", [node("Div", [h, init("c_sqrt2", np.array(np.sqrt(2), np.float32))],
                            "h_scaled")], "erf")
    gelu = node("Mul", [node("Mul", [h, node("Add", [erf, init("c_fone", np.array(
        1.0, np.float32))], "erf1")], "h_erf"), init("c_half", np.array(0.5, np.float32))],
        "gelu")
    y = node("Add", [node("MatMul", [gelu, weight("w2", 4 * HIDDEN, HIDDEN)], "ffn2"), x],
             "res2")
    last = node("Sub", [seq, one], "seq_minus_1")
    head = node("Slice", [y, init("c_start", np.array([0], np.int64)),
                          node("Unsqueeze", [last, i2], "end_1d"), init("c_axis1",
                                                                        np.array([1], np.int64))],
                "head")
    nodes.append(helper.make_node("ReduceMean", [head], ["pooled"], name="pooled", axes=[1],
                                  keepdims=0))
    graph = helper.make_graph(
        nodes, "encoder",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, ["batch", "seq"]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, ["batch", "seq"])],
        [helper.make_tensor_value_info(y, TensorProto.FLOAT, ["batch", "seq", HIDDEN]),
         helper.make_tensor_value_info("pooled", TensorProto.FLOAT, ["batch", HIDDEN])],
        inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _inputs(sizes: dict[str, int], seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    b, s = sizes["batch"], sizes["seq"]
    mask = (rng.random((b, s)) > 0.3).astype(np.int64)
    mask[:, 0] = 1
    return {"input_ids": rng.integers(0, VOCAB, (b, s)).astype(np.int64),
            "attention_mask": mask}


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return _encoder()


@pytest.fixture(scope="module")
def graph(model: onnx.ModelProto) -> Function:
    g = import_onnx(model, symbolic=True, dim_bounds={"seq": (1, MAX_POS)})
    verify(g)
    return g


def test_symbolic_import_keeps_the_variables(graph: Function) -> None:
    assert [str(v.type) for v in graph.inputs] == ["int64[batch, seq]"] * 2
    assert [str(v.type) for v in graph.outputs] == [f"float32[batch, seq, {HIDDEN}]",
                                                     f"float32[batch, {HIDDEN}]"]
    ops = {n.op for n in graph.nodes}
    assert "Shape" not in ops and "Concat" not in ops  # the shape arithmetic is folded
    reshapes = [n for n in graph.nodes if n.op == "Reshape"]
    assert reshapes and all(any(is_dim_expr(d) for d in n.attrs["shape"]) for n in reshapes)
    text = str(graph)
    assert f"shape=[batch, seq, -1, {HIDDEN // HEADS}]" in text
    assert f"shape=[batch, seq, {HIDDEN}]" in text
    assert "Range() {delta=1, dtype=int64, limit=seq, start=0}" in text
    assert "ends=[seq - 1]" in text
    assert f"float32[batch, {HEADS}, seq, seq]" in text


@pytest.mark.parametrize("sizes", SIZES)
def test_types_match_the_static_import_at_each_size(model: onnx.ModelProto, graph: Function,
                                                     sizes: dict[str, int]) -> None:
    b, s = sizes["batch"], sizes["seq"]
    static = import_onnx(model, input_shapes={"input_ids": [b, s], "attention_mask": [b, s]})
    symbolic = {v.name: v for v in graph.values()}
    compared = 0
    for node in static.nodes:  # every node of the static import, with the same types
        for out in node.outputs:
            assert out.name in symbolic, out.name
            assert symbolic[out.name].type.evaluate(sizes) == out.type, out.name
            compared += 1
    assert compared > 30
    statics = {v.name: v for v in static.values()}
    for node in graph.nodes:  # what is a node only here is a constant of the static import
        for out in node.outputs:
            if out.name in statics and statics[out.name].producer is None:
                assert out.type.evaluate(sizes) == statics[out.name].type, out.name
    for a, c in zip(graph.outputs, static.outputs):
        assert a.type.evaluate(sizes) == c.type


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # seq 1: the mean over no rows is nan
@pytest.mark.parametrize("sizes", SIZES)
def test_specialized_symbolic_graph_computes_the_model(model: onnx.ModelProto, graph: Function,
                                                       sizes: dict[str, int]) -> None:
    feeds = _inputs(sizes, sizes["seq"])
    want = ReferenceEvaluator(model).run(None, feeds)
    optimized = PassManager(opt_level=3, verify=True).run(graph.copy())
    assert optimized.is_symbolic
    for fn in (graph, optimized):
        got = list(evaluate_function(fn.specialize(sizes), feeds).values())
        for a, w in zip(got, want):
            np.testing.assert_allclose(a, w, rtol=1e-4, atol=1e-4)


def test_static_import_is_unchanged(model: onnx.ModelProto) -> None:
    g = import_onnx(model, input_shapes={"input_ids": [2, 5], "attention_mask": [2, 5]})
    assert not g.is_symbolic
    assert not any(n.op in ("Range", "ShapeValues") for n in g.nodes)
    with pytest.raises(ModelImportError, match="symbolic dimension"):
        import_onnx(model)


def test_symbolic_import_errors(model: onnx.ModelProto) -> None:
    with pytest.raises(ModelImportError, match="need symbolic=True"):
        import_onnx(model, dim_bounds={"seq": (1, 8)})
    with pytest.raises(ModelImportError, match="'len'"):
        import_onnx(model, symbolic=True, dim_bounds={"len": (1, 8)})
    unnamed = onnx.ModelProto()
    unnamed.CopyFrom(model)
    unnamed.graph.input[0].type.tensor_type.shape.dim[1].ClearField("dim_param")
    with pytest.raises(ModelImportError, match="unnamed dynamic dimension 1"):
        import_onnx(unnamed, symbolic=True)


def test_input_shapes_fix_some_variables(model: onnx.ModelProto) -> None:
    g = import_onnx(model, symbolic=True, input_shapes={"input_ids": [4, "seq"],
                                                        "attention_mask": [4, "seq"]})
    assert str(g.outputs[0].type) == f"float32[4, seq, {HIDDEN}]"
    assert g.size_variables == ["seq"]
    feeds = _inputs({"batch": 4, "seq": 6}, 1)
    got = list(evaluate_function(g.specialize({"seq": 6}), feeds).values())
    np.testing.assert_allclose(got[0], ReferenceEvaluator(model).run(None, feeds)[0],
                               rtol=1e-4, atol=1e-4)


@pytest.mark.skipif(not SERVING.is_file(), reason="the serving encoder is not downloaded")
def test_serving_encoder() -> None:
    with pytest.raises(ModelImportError, match=r"seq and min\(seq, 512\)"):
        import_onnx(SERVING, symbolic=True)  # its 512 positions bound seq
    g = import_onnx(SERVING, symbolic=True, dim_bounds={"seq": (1, 512)})
    assert str(g.outputs[0].type) == "float32[batch, seq, 512]"
    g = PassManager(opt_level=3, verify=True).run(g)
    assert g.is_symbolic
    feeds = _inputs({"batch": 2, "seq": 5}, 2)
    feeds["input_ids"] = feeds["input_ids"] * 100
    static = import_onnx(SERVING, input_shapes={k: v.shape for k, v in feeds.items()})
    a = list(evaluate_function(g.specialize({"batch": 2, "seq": 5}), feeds).values())[0]
    b = list(evaluate_function(static, feeds).values())[0]
    np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4)
