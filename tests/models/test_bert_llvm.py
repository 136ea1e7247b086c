"""The BERT-style encoder of :mod:`tessera.testing.bert` compiled for the ``llvm`` target
against onnxruntime: BERT-base widths with two layers (LayerNorm decomposed, as exported by
PyTorch, and as the ``LayerNormalization`` op) and a small encoder; every node runs on llvm."""

from __future__ import annotations

import numpy as np
import pytest
from models.support import assert_outputs_match
from models.support import run_onnxruntime as onnxruntime_outputs
from optional import require

import tessera
from tessera.plugin.manager import get_backends
from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder

ort = require("onnxruntime")
pytestmark = pytest.mark.skipif("llvm" not in get_backends(),
                                reason="the tessera-llvm plugin is not installed")

#: As tests/models/test_bert.py (the reference backend); observed max abs error about 5e-6.
RTOL = 1e-4
ATOL = 1e-5

SMALL = BertConfig(vocab=1000, hidden=64, heads=4, intermediate=256, layers=2, seq_len=16)
CONFIGS = [
    pytest.param(BertConfig(layers=2), id="base2-decomposed", marks=pytest.mark.slow),
    pytest.param(BertConfig(layers=2, layer_norm="op"), id="base2-op", marks=pytest.mark.slow),
    pytest.param(BertConfig(**{**SMALL.__dict__, "layer_norm": "op"}), id="small-op",
                 marks=pytest.mark.slow),
    pytest.param(SMALL, id="small-decomposed", marks=pytest.mark.slow),
]


def run_onnxruntime(model, inputs: dict[str, np.ndarray]) -> np.ndarray:  # noqa: ANN001
    return onnxruntime_outputs(model, inputs)[0]


@pytest.mark.parametrize("config", CONFIGS)
def test_llvm_matches_onnxruntime(config: BertConfig) -> None:
    model = make_bert_encoder(config, seed=1)
    inputs = bert_inputs(config, seed=2)
    want = run_onnxruntime(model, inputs)
    assert np.isfinite(want).all() and 0.5 < float(want.std()) < 2.0

    mod = tessera.compile(model, target="llvm")
    report = mod.partition_report()
    assert not report.fallback, report.table()
    assert {r.backend for r in report.regions} == {"llvm"}, report.table()
    ops = {op for r in report.regions for op in r.ops}
    assert {"MatMul", "Softmax", "Gather", "Erf"} <= ops
    if config.layer_norm == "op":
        assert "LayerNormalization" in ops
    kernels = [k.op for cr in mod.compiled.values() for k in cr.kernels]
    assert any("MatMul" in op and "+" in op for op in kernels)  # epilogues fused

    assert_outputs_match(mod.run(**inputs), {"last_hidden_state": want}, str(config),
                         rtol=RTOL, atol=ATOL)


@pytest.mark.slow
def test_padding_mask_changes_the_output() -> None:
    """The additive attention mask reaches the llvm kernels (masked tokens matter)."""
    model = make_bert_encoder(SMALL)
    inputs = bert_inputs(SMALL)
    unmasked = {**inputs, "attention_mask": np.ones_like(inputs["attention_mask"])}
    mod = tessera.compile(model, target="llvm")
    a = mod.run(**inputs)
    b = mod.run(**unmasked)
    assert a is not None and b is not None
    assert np.abs(a["last_hidden_state"] - b["last_hidden_state"]).max() > 1e3 * ATOL
    np.testing.assert_allclose(b["last_hidden_state"], run_onnxruntime(model, unmasked),
                               rtol=RTOL, atol=ATOL)
