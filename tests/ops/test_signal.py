"""Signal-processing ops (tessera.ops.signal: DFT, STFT, windows, MelWeightMatrix) and their
ONNX converters: one-node models on random data checked against onnxruntime."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx import TensorProto
from onnx_node import one_node_model, run_tessera

from tessera.errors import ModelImportError, NeedsConstantError
from tessera.frontend.onnx import import_onnx

# -- harness ------------------------------------------------------------------------------------

check = partial(onnx_node.check, rtol=1e-4, atol=1e-5)


def rand(rng: np.random.Generator, *shape: int, dtype=np.float32, scale: float = 1.0):
    return (rng.standard_normal(shape) * scale).astype(dtype)

# -- signal processing --------------------------------------------------------------------------


DFT_CASES = [  # (opset, input shape, axis, inverse, onesided)
    (opset, shape, axis, inverse, onesided)
    for opset in (17, 20)
    for shape, axis in (((2, 10, 1), 1), ((3, 7, 5, 2), 1), ((2, 4, 6, 1), 2), ((2, 4, 6, 2), -2))
    for inverse, onesided in ((0, 0), (1, 0), (0, 1))
    if not (opset == 17 and axis < 0)  # opset 17's axis attribute is non-negative
    and not (onesided and shape[-1] == 2)  # one-sided needs a real input (test_dft_errors)
]


@pytest.mark.parametrize("opset,shape,axis,inverse,onesided", DFT_CASES)
@pytest.mark.parametrize("dft_length", [None, 8])
def test_dft(rng, opset, shape, axis, inverse, onesided, dft_length):
    x = rand(rng, *shape)
    ins: list = [x, None if dft_length is None else np.array(dft_length, dtype=np.int64)]
    attrs = {"inverse": inverse, "onesided": onesided}
    if opset == 17:
        attrs["axis"] = axis
    else:
        ins.append(np.array(axis, dtype=np.int64))
    check("DFT", ins, attrs, opset=opset, consts={1, 2}, rtol=1e-4, atol=1e-4)


def test_dft_irfft_inverts_rfft(rng):
    x = rand(rng, 2, 10, 3, 1)
    spec = one_node_model("DFT", [x], {"axis": 1, "onesided": 1}, opset=17)
    (half,) = run_tessera(spec, {"x0": x})
    back = one_node_model("DFT", [half], {"axis": 1, "onesided": 1, "inverse": 1}, opset=17)
    (y,) = run_tessera(back, {"x0": half})
    np.testing.assert_allclose(y, x, rtol=1e-4, atol=1e-5)


def test_dft_length_must_be_constant(rng):
    x = rand(rng, 1, 8, 1)
    model = one_node_model("DFT", [x, np.array(8, dtype=np.int64), np.array(1, np.int64)],
                           opset=20)
    with pytest.raises(NeedsConstantError) as info:
        import_onnx(model, check=False)
    assert set(info.value.inputs) == {"x1", "x2"}


@pytest.mark.parametrize("x_shape,attrs,match", [
    ((1, 8, 2), {"onesided": 1}, "real input"),
    ((1, 8, 3), {}, "real.*complex"),
    ((1, 8, 1), {"axis": 2}, "axis"),
])
def test_dft_errors(rng, x_shape, attrs, match):
    model = one_node_model("DFT", [rand(rng, *x_shape)], attrs, opset=17)
    with pytest.raises(ModelImportError, match=match):
        import_onnx(model, check=False)


@pytest.mark.parametrize("length,step,frame,window,onesided", [
    (64, 8, 16, True, 1),
    (64, 8, 16, False, 1),
    (50, 7, 12, True, 0),
    (33, 4, 10, False, 0),
])
def test_stft(rng, length, step, frame, window, onesided):
    x = rand(rng, 2, length, 1)
    win = rand(rng, frame) if window else None
    ins = [x, np.array(step, dtype=np.int64), win, np.array(frame, dtype=np.int64)]
    check("STFT", ins, {"onesided": onesided}, opset=17, consts={1, 3}, rtol=1e-4, atol=1e-4)


def test_stft_complex_signal(rng):
    x = rand(rng, 1, 40, 2)
    ins = [x, np.array(5, dtype=np.int64), rand(rng, 8), None]
    check("STFT", ins, {"onesided": 0}, opset=17, consts={1}, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["HannWindow", "HammingWindow", "BlackmanWindow"])
@pytest.mark.parametrize("size,periodic", [(1, 1), (10, 0), (10, 1), (33, 0), (33, 1)])
@pytest.mark.parametrize("dtype", [TensorProto.FLOAT, TensorProto.DOUBLE])
def test_windows(op, size, periodic, dtype):
    got = check(op, [np.array(size, dtype=np.int32)], {"periodic": periodic,
                                                       "output_datatype": dtype},
                opset=17, consts={0}, atol=1e-6)
    assert got[0].shape == (size,)


def test_window_is_folded():
    model = one_node_model("HannWindow", [np.array(8, dtype=np.int64)], opset=17, consts={0})
    fn = import_onnx(model, check=False)
    assert not fn.nodes or all(n.op == "Identity" for n in fn.nodes)
    assert fn.outputs[0].data is not None


@pytest.mark.parametrize("bins,dft,rate,low,high", [
    (8, 16, 8192, 0.0, 8192 / 2), (10, 64, 16000, 100.0, 7000.0), (4, 30, 1000, 20.0, 400.0)])
def test_mel_weight_matrix(bins, dft, rate, low, high):
    ins = [np.array(bins, np.int64), np.array(dft, np.int64), np.array(rate, np.int64),
           np.array(low, np.float32), np.array(high, np.float32)]
    check("MelWeightMatrix", ins, opset=17, consts={0, 1, 2, 3, 4})
