"""Shared by the light-model tests: a light model compiled for a target, with onnxruntime's
outputs on the same weights and input."""

from __future__ import annotations

from typing import Any

import numpy as np
from optional import require

import tessera
from tessera.testing.light_models import LightModel, load_light_model

ort = require("onnxruntime")

#: Tolerances against onnxruntime (observed max abs errors: 1e-6 on the probabilities and 1e-5
#: on DenseNet's logits).
RTOL = 1e-3
ATOL = 1e-4


class Compiled:
    """A light model, its module for one target and onnxruntime's outputs."""

    def __init__(self, light: LightModel, mod: tessera.Module, want: dict[str, np.ndarray]):
        self.light = light
        self.mod = mod
        self.want = want


def run_onnxruntime(model: Any, inputs: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Every output of the ONNX ``model`` from onnxruntime (two threads), in order."""
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    return session.run(None, inputs)


def compile_light(name: str, target: str) -> Compiled:
    light = load_light_model(name)
    want = dict(zip(light.output_names, run_onnxruntime(light.model, light.inputs)))
    mod = tessera.compile(light.model, target=target, input_shapes=light.input_shapes)
    return Compiled(light, mod, want)


def assert_outputs_match(got: dict[str, np.ndarray] | None, want: dict[str, np.ndarray],
                         label: str, rtol: float = RTOL, atol: float = ATOL) -> None:
    """``got`` has exactly ``want``'s outputs, in order, with their dtypes and shapes, and
    values within the tolerances (the message gives the largest absolute error)."""
    assert got is not None and list(got) == list(want), (label, list(got or ()))
    for name, expected in want.items():
        have = got[name]
        assert have.dtype == expected.dtype and have.shape == expected.shape, (label, name)
        err = np.abs(have.astype(np.float64) - expected).max()
        np.testing.assert_allclose(have, expected, rtol=rtol, atol=atol,
                                   err_msg=f"{label} output {name}: max abs err {err:.3g}")
