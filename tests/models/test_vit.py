"""The ViT-style encoder of :mod:`tessera.testing.vit`: valid ONNX with 197-like token counts
(patches plus a class token), deterministic, and Tessera (``ref`` and ``llvm``) matches
onnxruntime on it."""

from __future__ import annotations

import numpy as np
import pytest
from models.support import run_onnxruntime
from optional import require

import tessera
from tessera.plugin.manager import get_backends
from tessera.testing.vit import ViTConfig, make_vit, vit_inputs

require("onnxruntime")

SMALL = ViTConfig(image=32, patch=8, hidden=64, heads=4, intermediate=128, layers=2, batch=2)


def test_model_shape_and_determinism():
    model = make_vit(SMALL, seed=3)
    assert SMALL.tokens == 17  # 16 patches and the class token
    out = model.graph.output[0]
    assert [d.dim_value for d in out.type.tensor_type.shape.dim] == [2, 17, 64]
    assert model.SerializeToString() == make_vit(SMALL, seed=3).SerializeToString()
    assert model.SerializeToString() != make_vit(SMALL, seed=4).SerializeToString()
    ops = {n.op_type for n in model.graph.node}
    assert {"Conv", "Concat", "Expand", "LayerNormalization", "Softmax", "Erf"} <= ops
    assert "Add_mask" not in " ".join(n.name for n in model.graph.node)  # no attention mask


@pytest.mark.parametrize("target", ["ref", pytest.param("llvm", marks=pytest.mark.slow)])
def test_matches_onnxruntime(target):
    if target not in get_backends():
        pytest.skip(f"backend {target} not installed")
    model, inputs = make_vit(SMALL, seed=1), vit_inputs(SMALL, seed=2)
    want = run_onnxruntime(model, inputs)[0]
    got = tessera.compile(model, target=target).run(**inputs)["last_hidden_state"]
    assert float(np.std(want)) > 0.5  # LayerNorm output: unit scale, not all zeros
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("bad", [dict(image=30), dict(hidden=65), dict(layers=-1),
                                 dict(patch=0)])
def test_bad_configs(bad):
    with pytest.raises(ValueError):
        ViTConfig(**bad)
