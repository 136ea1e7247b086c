"""The cuda backend on a real GPU (marked ``gpu``; skipped where the backend is unavailable):
every op family, light models and a BERT-style encoder against the reference and onnxruntime,
artifacts, profiles with device events, device instances and concurrent runs.

Run on a GPU machine with ``python -m pytest -m gpu plugins/cuda/tests``."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from backend_cases.support import check_cases, conv_block_model, run_onnxruntime

import tessera
from plugins.cuda.tests.cases import FAMILY_NAMES, family_cases
from plugins.cuda.tests.conftest import needs_gpu

pytestmark = [pytest.mark.gpu, needs_gpu]


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_family_on_the_gpu(family: str) -> None:
    cases = family_cases(family, per_op=1000)
    if not cases:
        pytest.skip(f"no case of {family} is claimed by cuda")
    built = check_cases(cases, target="cuda")
    report = built.module.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"cuda"}


def test_conv_block_matches_onnxruntime_and_round_trips(tmp_path) -> None:  # noqa: ANN001
    model, inputs = conv_block_model()
    want = run_onnxruntime(model, inputs)
    mod = tessera.compile(model, target="cuda")
    got = mod.run(**inputs)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)
    path = tmp_path / "block.tar"
    mod.export(path)
    again = tessera.load(path)
    np.testing.assert_allclose(again.run(**inputs)["y"], got["y"], rtol=0, atol=0)
    prof = mod.profile(**inputs)
    assert prof.kernels and all(k.ms >= 0 for k in prof.kernels)


def test_concurrent_runs_are_correct() -> None:
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="cuda")
    want = mod.run(**inputs)["y"]
    errors: list[str] = []

    def work() -> None:
        for _ in range(5):
            got = mod.run(**inputs)["y"]
            if not np.array_equal(got, want):
                errors.append("differs")

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


def test_model_across_cuda_and_llvm() -> None:
    """float16 is not claimed by cuda: the middle of the chain runs on llvm, with copies
    between the GPU and the host both ways."""
    import onnx
    from onnx import helper

    f32, f16 = onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16
    nodes = [helper.make_node("Relu", ["x"], ["a"]),
             helper.make_node("Cast", ["a"], ["b"], to=f16),
             helper.make_node("Neg", ["b"], ["c"]),
             helper.make_node("Cast", ["c"], ["d"], to=f32),
             helper.make_node("Sigmoid", ["d"], ["y"])]
    graph = helper.make_graph(nodes, "mix", [helper.make_tensor_value_info("x", f32, [64, 33])],
                              [helper.make_tensor_value_info("y", f32, [64, 33])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    x = np.random.default_rng(3).standard_normal((64, 33)).astype(np.float32)
    mod = tessera.compile(model, target="cuda, llvm")
    backends = {r.backend for r in mod.partition_report().regions}
    assert backends == {"cuda", "llvm"}
    want = run_onnxruntime(model, {"x": x})["y"]
    np.testing.assert_allclose(mod.run(x=x)["y"], want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("name", ["squeezenet", "resnet50", "inception_v1", "densenet121",
                                  "shufflenet"])
def test_light_model_matches_onnxruntime(name: str) -> None:
    from models.support import assert_outputs_match, compile_light

    compiled = compile_light(name, "cuda")
    assert_outputs_match(compiled.mod.run(**compiled.light.inputs), compiled.want, name)


def test_bert_encoder_matches_onnxruntime() -> None:
    from models.support import run_onnxruntime as ort_outputs

    from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder

    config = BertConfig(layers=2)
    model = make_bert_encoder(config, seed=1)
    inputs = bert_inputs(config, seed=2)
    want = ort_outputs(model, inputs)[0]
    mod = tessera.compile(model, target="cuda")
    np.testing.assert_allclose(mod.run(**inputs)["last_hidden_state"], want, rtol=1e-4,
                               atol=1e-4)


@pytest.mark.parametrize("batch", [1, 4])
def test_depthwise_network_matches_onnxruntime(batch: int) -> None:
    from tessera.testing.mobilenet import make_mobilenet, mobilenet_inputs

    model = make_mobilenet(batch=batch, resolution=96, width=0.5, seed=3)
    inputs = mobilenet_inputs(batch, 96, seed=3)
    want = run_onnxruntime(model, inputs)["logits"]
    mod = tessera.compile(model, target="cuda")
    np.testing.assert_allclose(mod.run(**inputs)["logits"], want, rtol=1e-4, atol=1e-4)


def test_a_cross_compiled_artifact_runs(tmp_path) -> None:  # noqa: ANN001
    """What ``tessera compile --target "cuda -arch=<this GPU's>"`` writes on a machine without
    a GPU loads here without recompiling."""
    from tessera_cuda.driver import CUDADevice

    model, inputs = conv_block_model()
    arch = CUDADevice.get(0).arch()
    path = tessera.compile(model, target=f"cuda -arch={arch}").export(tmp_path / "m.tar")
    got = tessera.load(path).run(**inputs)["y"]
    np.testing.assert_allclose(got, run_onnxruntime(model, inputs)["y"], rtol=1e-4, atol=1e-4)


def test_symbolic_shapes_specialise_and_split_on_the_gpu() -> None:
    # a model exported with dynamic axes: one compile, any size (a module per size), and the
    # cache length left open (split: its fixed-shape parts compiled once for cuda)
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((16, 16)).astype(np.float32) / 4, "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["k"]),
         helper.make_node("Concat", ["past", "k"], ["present"], axis=1),
         helper.make_node("ReduceSum", ["present", "one"], ["s"], keepdims=0),
         helper.make_node("MatMul", ["s", "w"], ["h"]), helper.make_node("Tanh", ["h"], ["y"])],
        "step",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 1, 16]),
         helper.make_tensor_value_info("past", TensorProto.FLOAT, ["batch", "past", 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 16]),
         helper.make_tensor_value_info("present", TensorProto.FLOAT, ["batch", None, 16])],
        [w, numpy_helper.from_array(np.array([1], np.int64), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    want = ReferenceEvaluator(model)
    for options in ({"shape_mode": "specialize"}, {"symbolic_dims": ["past"]}):
        mod = tessera.compile(model, target="cuda", **options)
        for batch, past in ((1, 3), (2, 7), (1, 0), (2, 7)):
            feeds = {"x": rng.standard_normal((batch, 1, 16)).astype(np.float32),
                     "past": rng.standard_normal((batch, past, 16)).astype(np.float32)}
            got = mod.run(feeds)
            for name, value in zip(("y", "present"), want.run(None, feeds)):
                np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
        assert mod.cache_info().compiles == (3 if not options else 2)


def test_the_kits_symbolic_shapes_check_on_the_gpu() -> None:
    from tessera.testing.kit import check_symbolic_shapes

    result = check_symbolic_shapes("cuda")
    assert all(result.nodes_per_size) and result.split_nodes > 0


def test_control_flow_bodies_run_on_the_gpu() -> None:
    # If, Loop and Scan run by the controlflow backend around bodies compiled for cuda: the
    # bodies' matrix products run on the GPU, each call against onnxruntime
    from tessera.testing import control_flow_models as cfm

    rng = np.random.default_rng(1)
    cases = [
        (cfm.if_model(), {"x": rng.standard_normal((3, 8)).astype(np.float32),
                          "mode": np.array(False), "scale": np.array([1.5], np.float32)}),
        (cfm.greedy_decoder(), {"h0": rng.standard_normal((1, 32)).astype(np.float32),
                                "token0": np.array([3]), "max_steps": np.array(12)}),
        (cfm.scan_rnn(), {"h0": rng.standard_normal((2, 10)).astype(np.float32),
                          "x": rng.standard_normal((7, 2, 6)).astype(np.float32)}),
    ]
    for model, feeds in cases:
        mod = tessera.compile(model, target="cuda")
        info = mod.compiled[mod.report.regions[0].name].info
        assert any("on cuda" in line for line in info["subgraphs"]), info
        got = mod.run(feeds)
        want = run_onnxruntime(model, feeds)
        for name, value in want.items():
            np.testing.assert_allclose(got[name], value, rtol=1e-4, atol=1e-4)
