"""Recurrent, attention, signal and miscellaneous ops (tessera.ops.sequence) and their ONNX
converters: one-node models on random data checked against onnxruntime, and the ONNX
conformance cases (expected outputs) for the ops onnxruntime does not run."""

from __future__ import annotations

import warnings
from functools import partial

import numpy as np
import onnx_node
import pytest
from onnx import TensorProto
from onnx_node import feeds_of, one_node_model, run_tessera

from tessera.errors import ModelImportError, NeedsConstantError, OpError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import get_schema

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


# -- attention -----------------------------------------------------------------------------------


def attention_inputs(rng, *, b=2, hq=4, hkv=4, sq=3, skv=5, d=8, dv=8, past=0, three_d=False,
                     mask=None, dtype=np.float32):
    if three_d:
        q, k, v = rand(rng, b, sq, hq * d), rand(rng, b, skv, hkv * d), rand(rng, b, skv, hkv * dv)
    else:
        q, k, v = rand(rng, b, hq, sq, d), rand(rng, b, hkv, skv, d), rand(rng, b, hkv, skv, dv)
    total = past + skv
    m = None
    if mask == "bool":
        m = rng.random((sq, total)) > 0.3
        m[:, 0] = True
    elif mask == "float":
        m = rand(rng, b, 1, sq, total)
    elif mask == "float3d":
        m = rand(rng, hq, sq, total)
    ins = [q.astype(dtype), k.astype(dtype), v.astype(dtype),
           None if m is None else (m if m.dtype == bool else m.astype(dtype))]
    if past:
        ins += [rand(rng, b, hkv, past, d).astype(dtype), rand(rng, b, hkv, past, dv).astype(dtype)]
    return ins


ATTENTION_OUTS = ["y0", "y1", "y2", "y3"]


@pytest.mark.parametrize("case", [
    {},
    {"hkv": 2},
    {"hkv": 1, "dv": 6},
    {"mask": "bool"},
    {"mask": "float"},
    {"mask": "float3d", "past": 2},
    {"past": 3, "hkv": 2},
    {"three_d": True, "hkv": 2},
    {"three_d": True, "past": 2, "mask": "float"},
])
@pytest.mark.parametrize("attrs", [
    {},
    {"is_causal": 1},
    {"scale": 0.2, "softcap": 2.0},
    {"qk_matmul_output_mode": 1, "softcap": 3.0},
    {"qk_matmul_output_mode": 2},
    {"qk_matmul_output_mode": 3, "is_causal": 1},
])
def test_attention_against_onnxruntime(rng, case, attrs):
    case = dict(case)
    ins = attention_inputs(rng, **case)
    full = dict(attrs)
    if case.get("three_d"):
        full.update(q_num_heads=4, kv_num_heads=case.get("hkv", 4))
    outs = ATTENTION_OUTS if case.get("past") else ["y0", "", "", "y3"]
    if attrs.get("qk_matmul_output_mode") == 2 and case.get("mask") == "bool":
        outs = outs[:3]  # onnxruntime writes the lowest float, not -inf, for masked scores
    check("Attention", ins, full, opset=23, outputs=outs)


def test_attention_nonpad_kv_seqlen(rng):
    ins = attention_inputs(rng, b=2, sq=2, skv=6, hkv=2)
    ins += [None, None, np.array([4, 6], dtype=np.int64)]
    check("Attention", ins, {"is_causal": 1}, opset=24, outputs=["y0"])
    check("Attention", ins, opset=24, outputs=["y0"])


def test_attention_float16(rng):
    ins = attention_inputs(rng, hkv=2, mask="float", dtype=np.float16)
    check("Attention", ins, {"is_causal": 1}, opset=23, outputs=["y0"], rtol=5e-3, atol=5e-3)


def test_attention_short_mask_is_padded(rng):
    """A mask shorter than the total sequence is padded with False (onnxruntime rejects short
    masks: compare with the explicitly padded mask)."""
    ins = attention_inputs(rng, past=2)
    short = rng.random((3, 4)) > 0.2  # kv dimension 4 < total 7
    short[:, 0] = True
    ins[3] = np.concatenate([short, np.zeros((3, 3), bool)], axis=1)
    want = check("Attention", ins, opset=23, outputs=ATTENTION_OUTS)
    ins[3] = short
    model = one_node_model("Attention", ins, opset=23, outputs=ATTENTION_OUTS)
    got = run_tessera(model, feeds_of(ins))
    for g, w in zip(got, want):
        np.testing.assert_array_equal(g, w)


def test_attention_errors(rng):
    ins = attention_inputs(rng, three_d=True)
    with pytest.raises(ModelImportError, match="q_num_heads"):
        import_onnx(one_node_model("Attention", ins, opset=23), check=False)
    ins = attention_inputs(rng, hq=3, hkv=2)
    with pytest.raises(ModelImportError, match="multiple"):
        import_onnx(one_node_model("Attention", ins, opset=23), check=False)


@pytest.mark.parametrize("attrs,x_shape,cache_last", [
    ({}, (2, 4, 3, 8), 4),
    ({"interleaved": 1}, (2, 4, 3, 8), 4),
    ({"rotary_embedding_dim": 4}, (2, 4, 3, 8), 2),
    ({"rotary_embedding_dim": 4, "interleaved": 1}, (2, 4, 3, 8), 2),
    ({"num_heads": 4}, (2, 3, 32), 4),
    ({"num_heads": 2, "rotary_embedding_dim": 6, "interleaved": 1}, (1, 5, 20), 3),
])
@pytest.mark.parametrize("position_ids", [True, False])
def test_rotary_embedding(rng, attrs, x_shape, cache_last, position_ids):
    b = x_shape[0]
    s = x_shape[2] if len(x_shape) == 4 else x_shape[1]
    x = rand(rng, *x_shape)
    if position_ids:
        cos, sin = rand(rng, 16, cache_last), rand(rng, 16, cache_last)
        pos = rng.integers(0, 16, (b, s)).astype(np.int64)
        ins = [x, cos, sin, pos]
    else:
        ins = [x, rand(rng, b, s, cache_last), rand(rng, b, s, cache_last)]
    check("RotaryEmbedding", ins, attrs, opset=23)


# -- ops onnxruntime does not run: ONNX conformance expectations ----------------------------------

def _conformance_cases(prefixes: tuple[str, ...]) -> list:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        return [c for c in collect_testcases(None)
                if c.name.startswith(prefixes) and not c.name.endswith("_expanded")]


CONFORMANCE_ONLY = _conformance_cases((
    "test_swiglu", "test_linear_attention", "test_causal_conv_with_state",
    "test_attention_local_window", "test_attention_bidirectional_window",
    "test_attention_3d_local_window", "test_attention_4d_softcap_neginf",
    "test_attention_causal_boolmask_nan", "test_attention_23_", "test_attention_24_",
    "test_attention_4d_causal_nonpad", "test_attention_4d_gqa_causal_nonpad"))


@pytest.mark.parametrize("case", CONFORMANCE_ONLY, ids=lambda c: c.name)
def test_conformance_expectations(case):
    """Ops (or attribute combinations) onnxruntime does not run, checked against the outputs
    the ONNX test generators computed."""
    g = case.model.graph
    for inputs, expected in case.data_sets:
        feeds = {vi.name: np.asarray(a) for vi, a in zip(g.input, inputs)}
        got = run_tessera(case.model, feeds)
        for have, want in zip(got, expected):
            assert have.dtype == want.dtype and have.shape == want.shape
            np.testing.assert_allclose(have, want, rtol=case.rtol, atol=case.atol)


def test_conformance_cases_found():
    names = {c.name for c in CONFORMANCE_ONLY}
    assert {"test_swiglu", "test_linear_attention_gated_delta_gqa",
            "test_causal_conv_with_state_kernel_size_one", "test_attention_local_window"} <= names


def test_linear_attention_rule_checks(rng):
    q = rand(rng, 1, 2, 8)
    with pytest.raises(ModelImportError, match="decay"):
        import_onnx(one_node_model("LinearAttention", [q, q, q], {
            "q_num_heads": 2, "kv_num_heads": 2, "update_rule": "gated"}, opset=27,
            outputs=["y0", "y1"]), check=False)


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


# -- miscellaneous --------------------------------------------------------------------------------

@pytest.mark.parametrize("shape", [(3, 3), (2, 4, 4), (2, 3, 1, 1), (5, 2, 2)])
def test_det(rng, shape):
    x = rand(rng, *shape)
    (want,) = check("Det", [x], opset=11)
    # float64 (onnxruntime has a float32 kernel only): close to the float32 result
    x64 = x.astype(np.float64)
    (got,) = run_tessera(one_node_model("Det", [x64], opset=22), {"x0": x64})
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_det_float16_and_singular(rng):
    x = np.array([[1, 2], [2, 4]], dtype=np.float16)
    model = one_node_model("Det", [x], opset=22)
    (y,) = run_tessera(model, {"x0": x})
    assert y.dtype == np.float16 and y.shape == () and y == 0


@pytest.mark.parametrize("mode,weights", [("TF", None), ("IDF", None), ("TFIDF", None),
                                          ("IDF", True), ("TFIDF", True)])
@pytest.mark.parametrize("grams,skip", [((1, 1), 0), ((2, 2), 0), ((1, 2), 2), ((2, 3), 1),
                                        ((1, 3), 3)])
@pytest.mark.parametrize("batched", [False, True])
def test_tfidf_vectorizer(rng, mode, weights, grams, skip, batched):
    pool = [2, 3, 5, 4,  # unigrams
            5, 6, 7, 8, 6, 7, 2, 2,  # bigrams
            1, 2, 3, 2, 4, 6]  # trigrams
    counts = [0, 4, 12]
    indexes = [int(i) for i in rng.permutation(10)]
    attrs = {"mode": mode, "min_gram_length": grams[0], "max_gram_length": grams[1],
             "max_skip_count": skip, "ngram_counts": counts, "ngram_indexes": indexes,
             "pool_int64s": pool}
    if weights:
        attrs["weights"] = [float(w) for w in rng.random(10) + 0.5]
    x = rng.integers(1, 9, (3, 12) if batched else (15,)).astype(np.int64)
    check("TfIdfVectorizer", [x], attrs, opset=9)


def test_tfidf_int32_input(rng):
    x = rng.integers(1, 5, (2, 9)).astype(np.int32)
    check("TfIdfVectorizer", [x], {"mode": "TF", "min_gram_length": 1, "max_gram_length": 2,
                                   "max_skip_count": 1, "ngram_counts": [0, 3],
                                   "ngram_indexes": [0, 1, 2, 3, 4],
                                   "pool_int64s": [1, 2, 3, 1, 2, 3, 3]}, opset=9)


def test_tfidf_index_count_is_checked():
    x = np.array([1, 2], dtype=np.int64)
    model = one_node_model("TfIdfVectorizer", [x], {
        "mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
        "ngram_counts": [0], "ngram_indexes": [0], "pool_int64s": [1, 2]}, opset=9)
    with pytest.raises(ModelImportError, match="2 n-grams"):
        import_onnx(model, check=False)


def test_tfidf_strings_are_rejected():
    x = np.array([1, 2], dtype=np.int64)
    model = one_node_model("TfIdfVectorizer", [x], {
        "mode": "TF", "min_gram_length": 1, "max_gram_length": 1, "max_skip_count": 0,
        "ngram_counts": [0], "ngram_indexes": [0], "pool_strings": ["a"]}, opset=9)
    with pytest.raises(ModelImportError, match="string"):
        import_onnx(model, check=False)


@pytest.mark.parametrize("shape,update_len,axis,mode", [
    ((2, 3, 8, 4), 2, -2, "linear"), ((2, 3, 8, 4), 3, -2, "circular"),
    ((3, 6, 5), 2, 1, "linear"), ((2, 5, 3, 2), 4, 1, "circular")])
def test_tensor_scatter(rng, shape, update_len, axis, mode):
    past = rand(rng, *shape)
    ax = axis % len(shape)
    upd_shape = list(shape)
    upd_shape[ax] = update_len
    upd = rand(rng, *upd_shape)
    hi = shape[ax] if mode == "circular" else shape[ax] - update_len + 1
    idx = rng.integers(0, hi, shape[0]).astype(np.int64)
    check("TensorScatter", [past, upd, idx], {"axis": axis, "mode": mode}, opset=24)


def test_schema_errors():
    schema = get_schema("SwiGLU")
    with pytest.raises(OpError, match="same shape"):
        schema.infer_types("n", [TensorType((2, 3), DType.float32),
                                 TensorType((2, 4), DType.float32)], {"alpha": 1.0})
