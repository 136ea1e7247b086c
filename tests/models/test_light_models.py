"""The nine light model-zoo topologies of the ``onnx`` package, with random weights
(:mod:`tessera.testing.light_models`), compiled for the reference backend and compared with
onnxruntime on the same weights and input."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest
from models.support import ATOL, Compiled, assert_outputs_match, compile_light
from tiers import slow_except

from tessera.testing.light_models import LIGHT_MODELS, load_light_model


# the fast tier runs the four lightest on ref (under 0.5 s each); VGG-19, ZFNet, AlexNet, ...
# take 1 to 8 s
@pytest.fixture(scope="module", params=slow_except(LIGHT_MODELS, fast={
    "light_squeezenet", "light_shufflenet", "light_inception_v1", "light_inception_v2"}))
def compiled(request: pytest.FixtureRequest) -> Iterator[Compiled]:
    yield compile_light(request.param, "ref")


def test_weights_make_a_meaningful_output(compiled: Compiled) -> None:
    """The random weights keep activations finite and the output well above the tolerance."""
    for name, want in compiled.want.items():
        assert np.isfinite(want).all(), name
        assert np.abs(want).max() > 100 * ATOL, f"{name}: output too small to compare"
        if compiled.light.model.graph.node[-1].op_type == "Softmax":  # DenseNet: logits
            assert want.max() < 0.99, f"{name}: saturated softmax"


def test_matches_onnxruntime(compiled: Compiled) -> None:
    got = compiled.mod.run(**compiled.light.inputs)
    assert got is not None and list(got) == compiled.light.output_names
    assert_outputs_match(got, compiled.want, compiled.light.name)


def test_memory_plan_reuses_buffers(compiled: Compiled) -> None:
    report = compiled.mod.memory_report()
    assert report.rows
    for device, tensors, planned, no_reuse in report.rows:
        assert tensors > 0, device
        assert 0 < planned < no_reuse, f"{device}: planned {planned} B, no reuse {no_reuse} B"


def test_loader_replaces_every_constant_of_shape_deterministically() -> None:
    import onnx
    from onnx import numpy_helper

    from tessera.testing.light_models import light_model_path

    original = onnx.load(str(light_model_path("squeezenet")))
    inits = {t.name: numpy_helper.to_array(t) for t in original.graph.initializer}
    shapes = {n.output[0]: tuple(inits[n.input[0]]) for n in original.graph.node
              if n.op_type == "ConstantOfShape"}
    a = load_light_model("squeezenet", seed=3)
    b = load_light_model("squeezenet", seed=3)
    c = load_light_model("squeezenet", seed=4)
    onnx.checker.check_model(a.model)
    assert not [n for n in a.model.graph.node if n.op_type == "ConstantOfShape"]
    weights = {t.name: numpy_helper.to_array(t) for t in a.model.graph.initializer}
    assert {k: v.shape for k, v in weights.items() if k in shapes} == shapes
    assert [vi.name for vi in a.model.graph.input] == list(a.inputs) == ["data_0"]
    assert a.inputs["data_0"].shape == (1, 3, 224, 224)
    for t, u in zip(a.model.graph.initializer, b.model.graph.initializer):
        np.testing.assert_array_equal(numpy_helper.to_array(t), numpy_helper.to_array(u))
    np.testing.assert_array_equal(a.inputs["data_0"], b.inputs["data_0"])
    assert not np.array_equal(a.inputs["data_0"], c.inputs["data_0"])
