"""Optimizer ops of domain ai.onnx.preview.training (tessera.ops.training: Adagrad, Adam,
Momentum) and their converters, against onnx's reference evaluator (onnxruntime's standard
build has no training ops) on random data: one and several tensors per node, float32 and
float64, the first step (T = 0) and later ones, every attribute; and the refusals."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.errors import ModelImportError, OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import get_schema
from tessera.ops.training import ACCUMULATORS, adam_step, momentum_step
from tessera.testing.conformance import compile_and_run

DOMAIN = "ai.onnx.preview.training"
TARGETS = ["ref", "llvm"]
SHAPES = [(5,), (3, 4), (2, 3, 4), ()]
F32 = np.dtype(np.float32)


def optimizer_model(op: str, shapes: list[tuple[int, ...]], attrs: dict,
                    dtype: np.dtype = F32,
                    outputs: int | None = None) -> onnx.ModelProto:
    """One ``op`` node over tensors of ``shapes``: inputs R, T, X*, G*, then the accumulators
    (named after ACCUMULATORS); outputs X*_new then the new accumulators."""
    elem = helper.np_dtype_to_tensor_dtype(dtype)
    kinds = ("X", "G") + ACCUMULATORS[op]
    names = [f"{k}{i}" for k in kinds for i in range(len(shapes))]
    out_kinds = ("X",) + ACCUMULATORS[op]
    out_names = [f"{k}{i}_new" for k in out_kinds for i in range(len(shapes))]
    out_names = out_names[:outputs] if outputs is not None else out_names
    node = helper.make_node(op, ["R", "T", *names], out_names, domain=DOMAIN, **attrs)
    shape_of = {f"{k}{i}": s for k in kinds for i, s in enumerate(shapes)}
    inputs = [helper.make_tensor_value_info("R", TensorProto.FLOAT, []),
              helper.make_tensor_value_info("T", TensorProto.INT64, [])]
    inputs += [helper.make_tensor_value_info(n, elem, list(shape_of[n])) for n in names]
    outs = [helper.make_tensor_value_info(n, elem, list(shape_of[n.removesuffix("_new")]))
            for n in out_names]
    graph = helper.make_graph([node], op.lower(), inputs, outs)
    return helper.make_model(graph, ir_version=8, opset_imports=[
        helper.make_opsetid("", 18), helper.make_opsetid(DOMAIN, 1)])


def random_feeds(rng: np.random.Generator, op: str, shapes: list[tuple[int, ...]], t: int,
                 dtype: np.dtype = F32) -> dict[str, np.ndarray]:
    feeds = {"R": np.array(rng.uniform(0.01, 0.5), np.float32), "T": np.array(t, np.int64)}
    for k in ("X", "G") + ACCUMULATORS[op]:
        for i, s in enumerate(shapes):
            a = rng.standard_normal(s)
            feeds[f"{k}{i}"] = (np.abs(a) + 0.1 if k == "H" else a).astype(dtype)
    return feeds


def check(op: str, shapes: list[tuple[int, ...]], attrs: dict, t: int, target: str,
          dtype: np.dtype = F32, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    model = optimizer_model(op, shapes, attrs, dtype)
    feeds = random_feeds(rng, op, shapes, t, dtype)
    got = compile_and_run(model, feeds, target, {})
    want = ReferenceEvaluator(model).run(None, feeds)
    assert len(got) == len(want) == len(shapes) * (1 + len(ACCUMULATORS[op]))
    tol = 1e-5 if dtype == np.float32 else 1e-12
    if op == "Adam" and len(shapes) > 1:
        tol = max(tol, 1e-6)  # onnx's reference rounds a several-tensor Adam's results to float32
    for k, (g, w) in enumerate(zip(got, want)):
        assert g.dtype == dtype and g.shape == np.shape(w), k
        np.testing.assert_allclose(g, np.asarray(w, dtype), rtol=tol, atol=tol, err_msg=f"{k}")


# -- against onnx's reference ---------------------------------------------------------------------

ADAGRAD_ATTRS = [{}, {"norm_coefficient": 0.01, "decay_factor": 0.1, "epsilon": 1e-4}]
MOMENTUM_ATTRS = [{"alpha": 0.9, "beta": 0.5, "norm_coefficient": 0.02, "mode": mode}
                  for mode in ("standard", "nesterov")]
ADAM_ATTRS = [{}, {"alpha": 0.8, "beta": 0.95, "epsilon": 1e-3, "norm_coefficient": 0.05,
                   "norm_coefficient_post": 0.01}]


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("t", [0, 3])
@pytest.mark.parametrize("n", [1, 3])
@pytest.mark.parametrize("op,attrs", [("Adagrad", a) for a in ADAGRAD_ATTRS]
                         + [("Momentum", a) for a in MOMENTUM_ATTRS]
                         + [("Adam", a) for a in ADAM_ATTRS])
def test_against_onnx_reference(op, attrs, n, t, target):
    check(op, SHAPES[:n] if n > 1 else [SHAPES[2]], attrs, t, target, seed=n * 10 + t)


@pytest.mark.parametrize("op,attrs", [("Adagrad", ADAGRAD_ATTRS[1]),
                                      ("Momentum", MOMENTUM_ATTRS[1]), ("Adam", ADAM_ATTRS[1])])
def test_float64_and_a_scalar_tensor(op, attrs):
    check(op, [(4, 3), ()], attrs, 2, "ref", np.dtype(np.float64))


@pytest.mark.parametrize("target", TARGETS)
def test_several_steps_with_t_given_at_run_time(target):
    """One compiled Adam module run five times, its outputs fed back (T counts up at run time;
    the first step has no bias correction)."""
    rng = np.random.default_rng(4)
    shapes = [(3, 5), (7,)]
    model = optimizer_model("Adam", shapes, ADAM_ATTRS[1])
    feeds = random_feeds(rng, "Adam", shapes, 0)
    mod = tessera.compile(model, target=target,
                          input_shapes={k: list(v.shape) for k, v in feeds.items()})
    ref = ReferenceEvaluator(model)
    ours, theirs = dict(feeds), dict(feeds)
    for step in range(5):
        ours["T"] = theirs["T"] = np.array(step, np.int64)
        ours["G0"] = theirs["G0"] = rng.standard_normal((3, 5)).astype(np.float32)
        got = mod.run(ours)
        want = dict(zip([o.name for o in model.graph.output], ref.run(None, theirs)))
        for name, w in want.items():
            np.testing.assert_allclose(got[name], w, rtol=1e-5, atol=1e-6, err_msg=name)
            ours[name.removesuffix("_new")] = got[name]
            theirs[name.removesuffix("_new")] = np.asarray(w, np.float32)


# -- the formulas, written out ------------------------------------------------------------------

def test_momentum_first_step_uses_a_gradient_coefficient_of_one():
    x, g, v = np.float32([1.0, 2.0]), np.float32([0.5, -1.0]), np.float32([0.25, 0.25])
    x0, v0 = momentum_step(0.1, 0, x, g, v, alpha=0.9, beta=0.5, norm_coefficient=0.0,
                           mode="standard")
    np.testing.assert_allclose(v0, 0.9 * v + g)
    np.testing.assert_allclose(x0, x - 0.1 * (0.9 * v + g))
    x1, v1 = momentum_step(0.1, 1, x, g, v, alpha=0.9, beta=0.5, norm_coefficient=0.0,
                           mode="nesterov")
    np.testing.assert_allclose(v1, 0.9 * v + 0.5 * g)
    np.testing.assert_allclose(x1, x - 0.1 * (g + 0.9 * v1), rtol=1e-6)


def test_adam_bias_correction_and_post_norm():
    x, g = np.float64([1.0, -2.0]), np.float64([0.3, 0.1])
    v, h = np.float64([0.1, 0.2]), np.float64([0.04, 0.09])
    xn, vn, hn = adam_step(0.2, 2, x, g, v, h, alpha=0.9, beta=0.99, epsilon=1e-8,
                           norm_coefficient=0.1, norm_coefficient_post=0.05)
    gr = 0.1 * x + g
    np.testing.assert_allclose(vn, 0.9 * v + 0.1 * gr)
    np.testing.assert_allclose(hn, 0.99 * h + 0.01 * gr * gr)
    rate = 0.2 * np.sqrt(1 - 0.99 ** 2) / (1 - 0.9 ** 2)
    np.testing.assert_allclose(xn, 0.95 * (x - rate * vn / (np.sqrt(hn) + 1e-8)))


# -- refusals -------------------------------------------------------------------------------------

def test_missing_outputs_are_refused():
    model = optimizer_model("Adam", [(3,), (4,)], {}, outputs=4)
    with pytest.raises(ModelImportError, match="expected 6 outputs, got 4") as e:
        tessera.compile(model, target="ref")
    assert "Adam" in str(e.value)


def test_bad_mode_is_refused():
    model = optimizer_model("Momentum", [(3,)], {**MOMENTUM_ATTRS[0], "mode": "heavy_ball"})
    with pytest.raises(ModelImportError, match="mode must be 'standard' or 'nesterov'"):
        tessera.compile(model, target="ref")


@pytest.mark.parametrize("types,match", [
    ([TensorType((), DType.float32), TensorType((), DType.int32)], "update count T"),
    ([TensorType((2,), DType.float32), TensorType((), DType.int64)], "learning rate R"),
])
def test_bad_scalars(types, match):
    x = TensorType((3,), DType.float32)
    with pytest.raises(OpError, match=match):
        get_schema("Adagrad").infer_types("opt", [*types, x, x, x], {
            "norm_coefficient": 0.0, "decay_factor": 0.0, "epsilon": 1e-6})


def test_mismatched_tensors_and_counts():
    r, t = TensorType((), DType.float32), TensorType((), DType.int64)
    x, y = TensorType((3,), DType.float32), TensorType((4,), DType.float32)
    attrs = {"alpha": 0.9, "beta": 0.999, "epsilon": 1e-6, "norm_coefficient": 0.0,
             "norm_coefficient_post": 0.0}
    with pytest.raises(OpError, match="G1 .* must have the type of X1"):
        get_schema("Adam").infer_types("opt", [r, t, x, y, x, x], attrs)
    with pytest.raises(OpError, match="a multiple of 4 inputs"):
        get_schema("Adam").infer_types("opt", [r, t, x, x, x, x, x], attrs)
    i = TensorType((3,), DType.int32)
    with pytest.raises(OpError, match="float32 or float64"):
        get_schema("Adam").infer_types("opt", [r, t, i, i, i, i], attrs)
