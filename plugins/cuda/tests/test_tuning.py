"""The cuda backend through the tuner's contract (``Backend.tuning_candidate``): its templates'
knobs become tasks, a candidate is the fused group built with the proposed knobs, and on a GPU
the same tuners measure it with no change to them. Without a GPU, building works (NVRTC) and
measuring says to tune on the GPU machine."""

from __future__ import annotations

import json

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

from plugins.cuda.tests.conftest import needs_gpu, needs_nvrtc
from tessera.autotune import extract_tasks
from tessera.errors import RunError
from tessera.plugin.backend import CompileOptions
from tessera.plugin.target import TargetKind
from tessera_cuda.backend import CUDABackend, build_region

pytestmark = needs_nvrtc


def _model() -> object:
    rng = np.random.default_rng(0)
    w = numpy_helper.from_array(rng.standard_normal((64, 48)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 48])], [w])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _compiled():  # noqa: ANN202
    import tessera

    mod = tessera.compile(_model(), target="cuda -arch=sm_90", keep_graph_weights=True)
    (compiled,) = mod.compiled.values()
    return compiled


def test_cuda_templates_are_tasks() -> None:
    tasks = extract_tasks(_model(), target="cuda -arch=sm_90")
    assert tasks and all(t.backend == "cuda" for t in tasks)
    assert any(t.tunable for t in tasks)


def test_proposed_knobs_change_the_built_kernel() -> None:
    compiled = _compiled()
    (task,) = [t for t in extract_tasks(_model(), target="cuda -arch=sm_90") if t.tunable][:1]
    knob, cands = next((k, c) for k, c in task.knobs.items() if len(c) > 1)
    other = next(c for c in cands if c != task.default[knob])
    target = TargetKind("cuda", {"arch": "sm_90"})
    default = build_region(compiled.region, target, CompileOptions())
    proposed = build_region(compiled.region, target, CompileOptions(),
                            overrides={task.key: {knob: other}})
    configs = {e["name"]: e["config"] for e in proposed.table}
    assert any(c.get(knob) == other for c in configs.values())
    assert proposed.cubin != default.cubin


def test_without_a_gpu_the_candidate_says_where_to_tune() -> None:
    if CUDABackend().device_api().missing() is None:
        pytest.skip("this machine has a GPU")
    compiled = _compiled()
    with pytest.raises(RunError, match="tune on the GPU machine"):
        CUDABackend().tuning_candidate(compiled.region, compiled.kernels[0].name, {},
                                       TargetKind("cuda", {"arch": "sm_90"}), CompileOptions())


def test_tuning_without_the_gpu_fails_at_once(tmp_path) -> None:  # noqa: ANN001
    from tessera.autotune.tune import tune
    from tessera.errors import TesseraError

    if CUDABackend().device_api().missing() is None:
        pytest.skip("this machine has a GPU")
    with pytest.raises(TesseraError, match="cannot tune for .*tune on a machine that has"):
        tune(_model(), target="cuda -arch=sm_90", output=tmp_path / "r.jsonl", trials=2,
             progress=None)
    assert not (tmp_path / "r.jsonl").exists()


@pytest.mark.gpu
@needs_gpu
def test_the_tuners_tune_cuda_kernels_on_the_gpu(tmp_path) -> None:  # noqa: ANN001
    from tessera.autotune.tune import tune

    out = tmp_path / "cuda.jsonl"
    summary = tune(_model(), target="cuda", output=out, trials=6, tuner="xgb", progress=None)
    assert summary is not None
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows and all(r["backend"] == "cuda" for r in rows)
    assert any(r.get("costs") for r in rows)
