"""The MobileNet-v1-style network of :mod:`tessera.testing.mobilenet`: valid ONNX with the
expected depthwise structure, deterministic, activations of unit order, and the llvm backend
matching onnxruntime on it."""

from __future__ import annotations

import collections

import numpy as np
import pytest
from models.support import run_onnxruntime
from optional import require

import tessera
from tessera.testing.mobilenet import BLOCKS, make_mobilenet, mobilenet_inputs

require("onnxruntime")


def test_structure_and_determinism() -> None:
    model = make_mobilenet(batch=2, resolution=64, width=0.25, classes=10, seed=4)
    ops = collections.Counter(n.op_type for n in model.graph.node)
    assert ops["Conv"] == 1 + 2 * len(BLOCKS) and ops["Clip"] == ops["Conv"]
    groups = [next((a.i for a in n.attribute if a.name == "group"), 1)
              for n in model.graph.node if n.op_type == "Conv"]
    assert sum(g > 1 for g in groups) == len(BLOCKS)  # one depthwise conv per block
    again = make_mobilenet(batch=2, resolution=64, width=0.25, classes=10, seed=4)
    assert model.SerializeToString() == again.SerializeToString()
    with pytest.raises(ValueError, match="resolution"):
        make_mobilenet(resolution=16)


@pytest.mark.slow
@pytest.mark.parametrize("batch,resolution,width", [(1, 64, 0.25), (3, 32, 0.5)])
def test_llvm_matches_onnxruntime(batch: int, resolution: int, width: float) -> None:
    model = make_mobilenet(batch=batch, resolution=resolution, width=width, classes=100)
    inputs = mobilenet_inputs(batch, resolution)
    want = run_onnxruntime(model, inputs)[0]
    assert want.shape == (batch, 100) and 0.05 < float(want.std()) < 20
    got = tessera.compile(model, target="llvm").run(**inputs)["logits"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
