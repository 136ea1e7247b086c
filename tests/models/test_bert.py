"""The BERT-style encoder of :mod:`tessera.testing.bert`: the model is valid ONNX, deterministic,
and Tessera's reference backend matches onnxruntime on it, with LayerNorm decomposed and as the
``LayerNormalization`` op, for a small encoder and a one-layer BERT-base-sized one."""

from __future__ import annotations

import collections

import numpy as np
import onnx
import pytest
from models.support import assert_outputs_match
from models.support import run_onnxruntime as onnxruntime_outputs
from onnx import numpy_helper
from optional import require

import tessera
from tessera.testing.bert import BertConfig, bert_inputs, main, make_bert_encoder

ort = require("onnxruntime")

RTOL = 1e-4
ATOL = 1e-5

SMALL = BertConfig(vocab=1000, hidden=64, heads=4, intermediate=256, layers=2, seq_len=16)
BASE_ONE_LAYER = BertConfig(layers=1)

CONFIGS = [
    pytest.param(SMALL, id="small-decomposed"),
    pytest.param(BertConfig(**{**SMALL.__dict__, "layer_norm": "op"}), id="small-op"),
    pytest.param(BASE_ONE_LAYER, id="base1-decomposed"),
    pytest.param(BertConfig(layers=1, layer_norm="op"), id="base1-op"),
]


def run_onnxruntime(model: onnx.ModelProto, inputs: dict[str, np.ndarray]) -> np.ndarray:
    return onnxruntime_outputs(model, inputs)[0]


@pytest.mark.parametrize("config", CONFIGS)
def test_reference_backend_matches_onnxruntime(config: BertConfig) -> None:
    model = make_bert_encoder(config, seed=1)
    inputs = bert_inputs(config, seed=2)
    want = run_onnxruntime(model, inputs)
    assert want.shape == (config.batch, config.seq_len, config.hidden)
    assert np.isfinite(want).all()
    assert 0.5 < float(want.std()) < 2.0  # a LayerNorm output: unit order of magnitude

    mod = tessera.compile(model, target="ref")
    assert_outputs_match(mod.run(**inputs), {"last_hidden_state": want}, str(config),
                         rtol=RTOL, atol=ATOL)


def test_padding_mask_changes_the_output() -> None:
    """The in-graph additive mask matters by far more than the tolerance, in both runtimes."""
    model = make_bert_encoder(SMALL)
    inputs = bert_inputs(SMALL)
    assert inputs["attention_mask"][0, -1] == 0 and inputs["attention_mask"][0, 0] == 1
    unmasked = {**inputs, "attention_mask": np.ones_like(inputs["attention_mask"])}
    mod = tessera.compile(model, target="ref")
    for run in (lambda x: run_onnxruntime(model, x), lambda x: mod.run(**x)["last_hidden_state"]):
        assert np.abs(run(inputs) - run(unmasked)).max() > 1e3 * ATOL


@pytest.mark.parametrize("layer_norm", ["decomposed", "op"])
def test_graph_has_the_exported_op_patterns(layer_norm: str) -> None:
    config = BertConfig(**{**SMALL.__dict__, "layer_norm": layer_norm})
    model = make_bert_encoder(config)
    onnx.checker.check_model(model, full_check=True)
    assert model.opset_import[0].version == 17
    ops = collections.Counter(n.op_type for n in model.graph.node)
    layers = config.layers
    assert ops["Gather"] == 3
    assert ops["MatMul"] == 8 * layers  # Q, K, V, QK^T, PV, output, two FFN
    assert ops["Softmax"] == layers and ops["Erf"] == layers
    assert ops["Unsqueeze"] == 2 and ops["Cast"] == 1
    n_norms = 2 * layers + 1
    if layer_norm == "op":
        assert ops["LayerNormalization"] == n_norms and "ReduceMean" not in ops
    else:
        assert ops["ReduceMean"] == 2 * n_norms and ops["Pow"] == n_norms
        assert ops["Sqrt"] == n_norms and "LayerNormalization" not in ops
    assert [i.name for i in model.graph.input] == ["input_ids", "attention_mask"]
    assert [o.name for o in model.graph.output] == ["last_hidden_state"]


def test_weights_and_inputs_are_seeded() -> None:
    def weights(model: onnx.ModelProto) -> dict[str, np.ndarray]:
        return {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}

    a, b, c = (weights(make_bert_encoder(SMALL, seed=s)) for s in (3, 3, 4))
    assert a.keys() == b.keys() == c.keys()
    for name in a:
        np.testing.assert_array_equal(a[name], b[name])
    word = "embeddings.word_embeddings.weight"
    assert a[word].shape == (SMALL.vocab, SMALL.hidden)
    assert not np.array_equal(a[word], c[word])
    assert 0.015 < float(a[word].std()) < 0.025
    gamma = a["encoder.layer.0.output.LayerNorm.weight"]
    assert 0.9 <= gamma.min() and gamma.max() <= 1.1

    x, y = bert_inputs(SMALL, seed=5), bert_inputs(SMALL, seed=6)
    assert x["input_ids"].dtype == np.int64 and x["attention_mask"].dtype == np.int64
    assert 0 <= x["input_ids"].min() and x["input_ids"].max() < SMALL.vocab
    assert not np.array_equal(x["input_ids"], y["input_ids"])
    np.testing.assert_array_equal(bert_inputs(SMALL, seed=5)["input_ids"], x["input_ids"])
    assert x["attention_mask"].sum() == SMALL.seq_len - SMALL.seq_len // 8


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="multiple of heads"):
        BertConfig(hidden=100, heads=12)
    with pytest.raises(ValueError, match="layer_norm"):
        BertConfig(layer_norm="fused")
    with pytest.raises(ValueError, match="max_position"):
        BertConfig(seq_len=1024)


def test_cli_writes_model_and_inputs(tmp_path, capsys) -> None:
    out, npz = tmp_path / "bert.onnx", tmp_path / "x.npz"
    assert main(["-o", str(out), "--input", str(npz), "--layers", "1", "--hidden", "32",
                 "--heads", "2", "--intermediate", "64", "--seq-len", "8", "--vocab", "100",
                 "--layer-norm", "op"]) == 0
    model = onnx.load(str(out))
    onnx.checker.check_model(model)
    assert any(n.op_type == "LayerNormalization" for n in model.graph.node)
    with np.load(npz, allow_pickle=False) as data:
        assert data["input_ids"].shape == (1, 8)
        assert set(data.files) == {"input_ids", "attention_mask"}
    assert "wrote" in capsys.readouterr().out
