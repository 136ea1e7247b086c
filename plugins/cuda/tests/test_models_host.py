"""A whole model's generated CUDA C, run on the host: a small BERT-style encoder (embedding
gather, layer norms, attention with softmax, GELU through erf, fused matmul epilogues)
against onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
from optional import require

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.frontend.onnx import import_onnx
from tessera.passes import PassManager
from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder
from tessera_cuda.emulate import run_on_host
from tessera_cuda.lowering import lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

ort = require("onnxruntime")

SMALL = BertConfig(vocab=1000, hidden=64, heads=4, intermediate=256, layers=2, seq_len=16)


@needs_cxx
@needs_nvrtc
@pytest.mark.parametrize("layer_norm", ["decomposed", "op"])
@pytest.mark.slow
def test_bert_encoder_on_host_matches_onnxruntime(layer_norm: str) -> None:
    from models.support import run_onnxruntime

    config = BertConfig(**{**SMALL.__dict__, "layer_norm": layer_norm})
    model = make_bert_encoder(config, seed=1)
    inputs = bert_inputs(config, seed=2)
    want = run_onnxruntime(model, inputs)[0]
    graph = PassManager(opt_level=3).run(import_onnx(model))
    lowered = lower_region(graph, GPUInfo())
    ops = [g.op for g in lowered.groups]
    assert any(op.startswith("MatMul+") for op in ops)  # epilogues fused into the products
    assert compile_cuda(lowered.source.text, "sm_90").cubin
    got = run_on_host(lowered, inputs)[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)


@needs_cxx
@needs_nvrtc
def test_depthwise_network_on_host_matches_onnxruntime() -> None:
    """MobileNet v1 (narrow, small images): the stem and pointwise convolutions through the
    shared-memory template, the depthwise ones one output per thread, pooling and the
    classifier."""
    from models.support import run_onnxruntime

    from tessera.testing.mobilenet import make_mobilenet, mobilenet_inputs

    model = make_mobilenet(batch=2, resolution=32, width=0.25, classes=20, seed=1)
    inputs = mobilenet_inputs(2, 32, seed=1)
    want = run_onnxruntime(model, inputs)[0]
    graph = PassManager(opt_level=3).run(import_onnx(model))
    lowered = lower_region(graph, GPUInfo())
    templates = [g.template for g in lowered.groups]
    assert templates.count("cuda_conv2d_direct") == 14  # the stem and 13 pointwise convs
    got = run_on_host(lowered, inputs)[graph.outputs[0].name]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
