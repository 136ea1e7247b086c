"""The public API with the three kinds of model ``tessera.compile`` returns (static, symbolic
input dimensions, data-dependent output shapes): every entry point works or raises one
TesseraError that says why, never an AttributeError."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from model_kinds import KINDS, TARGET, kind_model
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.api import partition_model
from tessera.autotune import extract_tasks, tasks_of_module
from tessera.errors import TesseraError


def _x(kind: str, seed: int = 0) -> np.ndarray:
    shape = (3, 7, 8) if kind == "symbolic" else (2, 5, 8)
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("kind", KINDS)
def test_run_forms_reports_and_measuring(kind: str) -> None:
    model = kind_model(kind)
    mod = tessera.compile(model, TARGET)
    x = _x(kind)
    want = ReferenceEvaluator(model).run(None, {"x": x})
    assert mod.input_names == ["x"] and list(mod.input_specs) == ["x"]
    assert str(mod.input_specs["x"].dtype) == "float32"
    got = mod.run(x=x)
    for name, w in zip(mod.output_names, want):
        np.testing.assert_allclose(got[name], w, rtol=1e-4, atol=1e-4)
    mod.set_input("x", x)
    mod.run()
    np.testing.assert_allclose(mod.get_output(0), want[0], rtol=1e-4, atol=1e-4)
    assert mod.benchmark(repeat=1, number=1, x=x).median > 0
    profile = mod.profile(x=x)
    assert profile.kernels and profile.total_ms > 0
    assert mod.partition_report().regions
    assert mod.memory_report().rows
    if kind == "staged":
        assert any(k.backend == "host" and k.op == "NonZero" for k in profile.kernels)
        assert {r.name.split("/")[0] for r in mod.partition_report().regions} == \
            {"stage1", "rest"}


def test_measuring_binds_the_sizes_of_its_inputs() -> None:
    """benchmark() and profile() of a symbolic module run at the sizes of the inputs they are
    given (not at those of the thread's last run): the step-by-step output they leave has
    those sizes' values."""
    model = kind_model("symbolic")
    mod = tessera.compile(model, TARGET)
    ref = ReferenceEvaluator(model)
    mod.run(x=_x("symbolic"))  # this thread's state last ran at (3, 7)
    for shape, measure in (((2, 3, 8), mod.profile), ((4, 9, 8), mod.benchmark)):
        x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
        measure(x=x) if measure == mod.profile else measure(repeat=1, number=1, x=x)
        np.testing.assert_allclose(mod.get_output(0), ref.run(None, {"x": x})[0], rtol=1e-4,
                                   atol=1e-4)


@pytest.mark.parametrize("kind", KINDS)
def test_export_and_load(kind: str, tmp_path: Path) -> None:
    mod = tessera.compile(kind_model(kind), TARGET)
    x = _x(kind)
    if kind == "staged":
        with pytest.raises(TesseraError, match="cannot be exported yet"):
            mod.export(tmp_path / "m.tar")
        return
    mod.export(tmp_path / "m.tar")
    np.testing.assert_array_equal(tessera.load(tmp_path / "m.tar").run(x=x)["y"],
                                  mod.run(x=x)["y"])


@pytest.mark.parametrize("kind", KINDS)
def test_tasks(kind: str) -> None:
    model = kind_model(kind)
    if kind == "symbolic":
        with pytest.raises(TesseraError, match="symbolic input dimensions"):
            extract_tasks(model, TARGET)
        with pytest.raises(TesseraError, match="symbolic input dimensions"):
            tasks_of_module(tessera.compile(model, TARGET))
        tasks = extract_tasks(model, TARGET, input_shapes={"x": [1, 4, 8]})
    else:
        tasks = extract_tasks(model, TARGET)
    assert tasks_of_module(tessera.compile(model, TARGET, input_shapes=(
        {"x": [1, 4, 8]} if kind == "symbolic" else None))) == tasks
    if TARGET == "llvm":
        assert any(t.template.startswith("dense") or "matmul" in t.template.lower()
                   for t in tasks), [t.template for t in tasks]


@pytest.mark.parametrize("kind", KINDS)
def test_partition_model_and_quantize(kind: str) -> None:
    model = kind_model(kind)
    shapes = {"x": [1, 4, 8]} if kind == "symbolic" else None
    partitioned = partition_model(model, TARGET, input_shapes=shapes)
    assert partitioned.partition_report().regions
    assert ("stage 1" in partitioned.note) == (kind == "staged")
    calibration = [{"x": _x(kind, seed)} for seed in range(2)]
    quantized = tessera.quantize(model, calibration)
    assert isinstance(quantized, onnx.ModelProto)


def test_a_staged_model_that_reads_its_inputs_directly_says_so() -> None:
    nodes = [helper.make_node("NonZero", ["x"], ["nz"]),
             helper.make_node("Transpose", ["nz"], ["idx"], perm=[1, 0]),
             helper.make_node("GatherND", ["x", "idx"], ["vals"]),
             helper.make_node("ReduceSum", ["vals"], ["total"], keepdims=0)]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, [3, 4])], [helper.make_tensor_value_info(
            "total", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(TesseraError, match="read its inputs directly"):
        partition_model(model, TARGET)
    mod = tessera.compile(model, TARGET)
    with pytest.raises(TesseraError, match="nothing of this model compiles before"):
        tasks_of_module(mod)
    x = np.random.default_rng(3).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=x)["total"], x[x != 0].sum(), rtol=1e-5)
    assert mod.profile(x=x).kernels
