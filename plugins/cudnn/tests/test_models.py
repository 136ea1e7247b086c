"""Whole models on cuDNN and cuBLAS. Without a GPU: compiled for
``cuda -arch=sm_90 -libs=cudnn,cublas`` and run with the library plans emulated (``emulate.py``;
the generated-kernel regions by the reference ops) against onnxruntime. On a GPU (marked
``gpu``): the light models, the BERT-style encoder, a cross-compiled artifact whose algorithms
are measured on load, profiles and concurrent runs.

    python -m pytest -m gpu plugins/cudnn/tests    # on a GPU machine
"""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import tessera
from plugins.cudnn.tests.conftest import CROSS, needs_gpu, needs_libs
from plugins.cudnn.tests.emulate import run_module

pytestmark = needs_libs
LIBS = "cuda -libs=cudnn,cublas, llvm"
LIGHT = ["squeezenet", "resnet50", "inception_v1", "densenet121", "shufflenet"]


def _bert():  # noqa: ANN202
    from models.support import run_onnxruntime

    from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder

    config = BertConfig(layers=2)
    model, inputs = make_bert_encoder(config, seed=1), bert_inputs(config, seed=2)
    return model, inputs, run_onnxruntime(model, inputs)[0]


def test_squeezenet_plans_compute_onnxruntimes_result() -> None:
    from models.support import assert_outputs_match, compile_light

    compiled = compile_light("squeezenet", CROSS)
    counts = compiled.mod.partition_report().backend_counts()
    assert counts["cudnn"] > counts.get("cuda", 0)
    assert_outputs_match(run_module(compiled.mod, compiled.light.inputs), compiled.want,
                         "squeezenet (emulated cudnn plans)")


@pytest.mark.slow
def test_bert_plans_compute_onnxruntimes_result() -> None:
    model, inputs, want = _bert()
    mod = tessera.compile(model, target=CROSS, keep_graph_weights=True)  # emulated: reads them
    assert mod.partition_report().backend_counts()["cublas"] >= 12
    got = run_module(mod, inputs)["last_hidden_state"]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@needs_gpu
@pytest.mark.parametrize("name", LIGHT)
def test_light_model_on_the_libraries(name: str) -> None:
    from models.support import assert_outputs_match, compile_light

    compiled = compile_light(name, LIBS)
    assert "cudnn" in compiled.mod.partition_report().backend_counts()
    assert_outputs_match(compiled.mod.run(**compiled.light.inputs), compiled.want, name,
                         rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
@needs_gpu
def test_bert_on_the_libraries() -> None:
    model, inputs, want = _bert()
    mod = tessera.compile(model, target=LIBS, keep_graph_weights=True)
    np.testing.assert_allclose(mod.run(**inputs)["last_hidden_state"], want, rtol=1e-3,
                               atol=1e-3)


@pytest.mark.gpu
@needs_gpu
def test_cross_compiled_artifact_measures_on_load(tmp_path) -> None:  # noqa: ANN001
    from models.support import assert_outputs_match, compile_light

    from tessera_cuda.driver import CUDADevice

    arch = CUDADevice.get(0).arch()
    compiled = compile_light("squeezenet", f"cuda -arch={arch} -libs=cudnn,cublas, llvm")
    path = compiled.mod.export(tmp_path / "m.tar")
    mod = tessera.load(path)
    infos = [c.info for c in mod.compiled.values() if c.backend == "cudnn"]
    assert infos and all(s.startswith("measured") for i in infos
                         for s in i["algorithms"].values())
    assert_outputs_match(mod.run(**compiled.light.inputs), compiled.want, "squeezenet",
                         rtol=1e-3, atol=1e-3)
    again = tessera.load(mod.export(tmp_path / "again.tar"))  # the choices travel
    assert again.run(**compiled.light.inputs).keys() == compiled.want.keys()


@pytest.mark.gpu
@needs_gpu
def test_concurrent_runs_and_profiles() -> None:
    from models.support import compile_light

    compiled = compile_light("squeezenet", LIBS)
    mod, inputs = compiled.mod, compiled.light.inputs
    want = mod.run(**inputs)
    errors: list[str] = []

    def work() -> None:
        for _ in range(5):
            got = mod.run(**inputs)
            if not all(np.array_equal(got[k], want[k]) for k in want):
                errors.append("differs")

    threads = [threading.Thread(target=work) for _ in range(4)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, f"{len(errors)} concurrent runs differ ({time.perf_counter() - start:.1f}s)"
    prof = mod.profile(**inputs)
    assert any(k.backend == "cudnn" for k in prof.kernels)
