"""The heterogeneous example (examples/heterogeneous): int8 convolutions on VTA, float ones and
softmax on cuDNN, matrix products on cuBLAS, the rest on generated CUDA kernels. Without a GPU
it compiles for sm_90 and the library plans are checked by emulation; on a GPU it runs."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import tessera
from plugins.cudnn.tests.conftest import needs_gpu, needs_libs

HERE = Path(__file__).resolve().parents[2] / "examples" / "heterogeneous"
pytestmark = needs_libs


def load(name: str) -> ModuleType:
    sys.path.insert(0, str(HERE))
    try:
        spec = importlib.util.spec_from_file_location(f"hetero_{name}", HERE / f"{name}.py")
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        return module
    finally:
        sys.path.remove(str(HERE))


@pytest.fixture(scope="module")
def compiled() -> tuple[object, tessera.Module]:
    model = load("model").quantized_model()
    # the plans are emulated on the host from the graph's weights: the graph keeps them
    return model, tessera.compile(model, target="vta_sim, cuda -arch=sm_90 -libs=cudnn,cublas, "
                                                "llvm", keep_graph_weights=True)


def test_every_device_and_library_gets_its_part(compiled) -> None:  # noqa: ANN001
    _, mod = compiled
    report = mod.partition_report()
    counts = report.backend_counts()
    assert {"vta_sim", "cudnn", "cublas", "cuda", "llvm"} == set(counts)
    ops = {b: {op for r in report.regions if r.backend == b for op in r.ops} for b in counts}
    assert "Conv" in ops["vta_sim"] and "Conv" in ops["cudnn"] and "Softmax" in ops["cudnn"]
    assert {"MatMul", "Gemm", "Gelu"} <= ops["cublas"] and ops["llvm"] == {"Cast"}
    devices = {(c.src, c.dst) for c in report.copies}
    assert {("cuda", "vta"), ("vta", "cuda"), ("cpu", "cuda"), ("cuda", "cpu")} <= devices


def test_the_library_plans_compute_the_reference(compiled) -> None:  # noqa: ANN001
    from plugins.cudnn.tests.emulate import run_module

    model, mod = compiled
    x = load("model").inputs()
    want = tessera.compile(model, target="ref").run(**x)
    got = run_module(mod, x)
    np.testing.assert_allclose(got["logits"], want["logits"], rtol=1e-3, atol=1e-3)
    np.testing.assert_allclose(got["probs_fp16"].astype(np.float32),
                               want["probs_fp16"].astype(np.float32), rtol=1e-2, atol=1e-3)


def test_the_script_compiles_and_draws_without_a_gpu(tmp_path, capsys) -> None:  # noqa: ANN001
    from tessera.plugin import get_registry

    if not get_registry().get("cuda").available():
        pytest.skip("this machine has a GPU: the gpu test runs the script")
    html = tmp_path / "part.html"
    assert load("run").main(["--html", str(html), "--export", str(tmp_path / "m.tar")]) == 0
    out = capsys.readouterr().out
    assert "vta_sim" in out and "cudnn" in out and "cublas" in out and "not run" in out
    assert html.exists() and (tmp_path / "m.tar").exists()


@pytest.mark.gpu
@needs_gpu
def test_the_script_runs_on_the_gpu(capsys) -> None:  # noqa: ANN001
    assert load("run").main([]) == 0
    assert "max |tessera - reference|" in capsys.readouterr().out
