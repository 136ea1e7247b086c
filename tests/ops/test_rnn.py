"""Recurrent ops (tessera.ops.rnn: RNN, GRU, LSTM) and their ONNX converters: one-node models
on random data checked against onnxruntime."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx_node import feeds_of, one_node_model, run_tessera

from tessera.errors import ModelImportError
from tessera.frontend.onnx import import_onnx

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, rtol=1e-4, atol=1e-5)


def rand(rng: np.random.Generator, *shape: int, dtype=np.float32, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)

# -- recurrent layers -----------------------------------------------------------------------------


GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def rnn_inputs(rng, op: str, seq: int, batch: int, inp: int, hidden: int, nd: int,
               layout: int = 0, bias: bool = True, seq_lens: np.ndarray | None = None,
               initial: bool = True, peepholes: bool = False) -> list[np.ndarray | None]:
    g = GATES[op]
    x = rand(rng, *((seq, batch, inp) if layout == 0 else (batch, seq, inp)))
    state = (nd, batch, hidden) if layout == 0 else (batch, nd, hidden)
    ins = [x, rand(rng, nd, g * hidden, inp, scale=0.5), rand(rng, nd, g * hidden, hidden,
                                                              scale=0.5),
           rand(rng, nd, 2 * g * hidden, scale=0.5) if bias else None, seq_lens,
           rand(rng, *state) if initial else None]
    if op == "LSTM":
        ins += [rand(rng, *state) if initial else None,
                rand(rng, nd, 3 * hidden, scale=0.5) if peepholes else None]
    return ins


def rnn_outputs(op: str) -> list[str]:
    return ["y0", "y1", "y2"] if op == "LSTM" else ["y0", "y1"]


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "reverse", "bidirectional"])
@pytest.mark.parametrize("seq_lens", [False, True])
def test_recurrent_directions_and_lengths(rng, op, direction, seq_lens):
    nd = 2 if direction == "bidirectional" else 1
    lens = np.array([4, 0, 2], dtype=np.int32) if seq_lens else None
    ins = rnn_inputs(rng, op, 4, 3, 5, 6, nd, seq_lens=lens, peepholes=True)
    check(op, ins, {"hidden_size": 6, "direction": direction}, opset=14,
          outputs=rnn_outputs(op))


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
def test_recurrent_minimal_inputs_and_optional_outputs(rng, op):
    ins = rnn_inputs(rng, op, 3, 2, 4, 5, 1, bias=False, initial=False)
    outs = ["", "y1"] if op != "LSTM" else ["", "", "y2"]
    check(op, ins, {"hidden_size": 5}, opset=7, outputs=outs)


@pytest.mark.parametrize("op", ["RNN", "GRU", "LSTM"])
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_recurrent_batch_major_layout(rng, op, direction):
    """layout=1 (onnxruntime has no batch-major kernel): equals the sequence-major result
    transposed."""
    nd = 2 if direction == "bidirectional" else 1
    ins = rnn_inputs(rng, op, 4, 3, 2, 5, nd, peepholes=True)
    attrs = {"hidden_size": 5, "direction": direction}
    seq_major = check(op, ins, attrs, opset=14, outputs=rnn_outputs(op))
    batch_ins = list(ins)
    batch_ins[0] = np.swapaxes(ins[0], 0, 1)
    for i in ([5, 6] if op == "LSTM" else [5]):
        batch_ins[i] = np.swapaxes(ins[i], 0, 1)
    model = one_node_model(op, batch_ins, {**attrs, "layout": 1}, opset=14, outputs=rnn_outputs(op))
    got = run_tessera(model, feeds_of(batch_ins))
    np.testing.assert_allclose(got[0], np.transpose(seq_major[0], (2, 0, 1, 3)), rtol=1e-6)
    for g, s in zip(got[1:], seq_major[1:]):
        np.testing.assert_allclose(g, np.swapaxes(s, 0, 1), rtol=1e-6)


@pytest.mark.parametrize("op,attrs", [
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["LeakyRelu", "Sigmoid"], "activation_alpha": [0.3],
             "direction": "bidirectional"}),
    ("RNN", {"clip": 0.5}),
    ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"activations": ["HardSigmoid", "Softsign"], "activation_alpha": [0.3],
             "activation_beta": [0.4]}),
    ("GRU", {"activations": ["Sigmoid", "Tanh", "Sigmoid", "Elu"], "activation_alpha": [0.7],
             "direction": "bidirectional", "clip": 1.0}),
    ("LSTM", {"input_forget": 1}),
    ("LSTM", {"clip": 0.4}),
    ("LSTM", {"activations": ["Sigmoid", "Softplus", "Affine"], "activation_alpha": [0.5],
              "activation_beta": [0.1]}),
    ("LSTM", {"activations": ["ThresholdedRelu", "ScaledTanh", "Tanh"],
              "activation_alpha": [0.2, 1.5], "activation_beta": [0.8]}),
])
def test_recurrent_activations_and_options(rng, op, attrs):
    nd = 2 if attrs.get("direction") == "bidirectional" else 1
    lens = np.array([3, 2], dtype=np.int32)
    ins = rnn_inputs(rng, op, 3, 2, 4, 5, nd, seq_lens=lens, peepholes=True)
    check(op, ins, {"hidden_size": 5, **attrs}, opset=14, outputs=rnn_outputs(op))


@pytest.mark.parametrize("op", ["GRU", "LSTM"])
def test_recurrent_float64(rng, op):
    """float64 (onnxruntime has float32 kernels only): close to the float32 result."""
    ins = rnn_inputs(rng, op, 3, 2, 4, 5, 1, seq_lens=np.array([3, 2], np.int32))
    want = check(op, ins, {"hidden_size": 5}, opset=14, outputs=rnn_outputs(op))
    ins64 = [a.astype(np.float64) if a is not None and a.dtype == np.float32 else a for a in ins]
    model = one_node_model(op, ins64, {"hidden_size": 5}, opset=14, outputs=rnn_outputs(op))
    got = run_tessera(model, feeds_of(ins64))
    for g, w in zip(got, want):
        assert g.dtype == np.float64
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)


def test_recurrent_errors(rng):
    ins = rnn_inputs(rng, "LSTM", 3, 2, 4, 5, 1)
    with pytest.raises(ModelImportError, match="hidden_size"):
        import_onnx(one_node_model("LSTM", ins, {"hidden_size": 7}, opset=14), check=False)
    with pytest.raises(ModelImportError, match="direction"):
        import_onnx(one_node_model("LSTM", ins, {"direction": "bidirectional"}, opset=14),
                    check=False)
    with pytest.raises(ModelImportError, match="activation"):
        import_onnx(one_node_model("RNN", rnn_inputs(rng, "RNN", 3, 2, 4, 5, 1),
                                   {"activations": ["Gelu"]}, opset=14), check=False)
