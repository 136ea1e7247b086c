"""Compiling for a GPU this machine does not have (``cuda -arch=sm_90``, as TVM cross-compiles
with nvcc): the light models compile with every op on ``cuda``, the artifact keeps the CUDA C
and cubin, ``--dump-code cu`` writes the source, and running the module says where it can run.
On a GPU machine the same module runs (``test_gpu.py`` loads such artifacts)."""

from __future__ import annotations

import tarfile

import numpy as np
import onnx
import pytest

import tessera
from plugins.cuda.tests.conftest import needs_nvrtc
from tessera.cli.main import main as cli_main
from tessera.errors import RunError, TargetError
from tessera.testing.light_models import load_light_model
from tessera.testing.mobilenet import make_mobilenet, mobilenet_inputs
from tessera_cuda.driver import driver_missing

pytestmark = needs_nvrtc
NO_GPU = driver_missing()


@pytest.mark.slow
def test_cli_cross_compiles_a_light_model(tmp_path) -> None:  # noqa: ANN001
    light = load_light_model("squeezenet", seed=0)
    src = tmp_path / "squeezenet.onnx"
    onnx.save(light.model, src)
    out = tmp_path / "out" / "squeezenet.tar"
    rc = cli_main(["compile", str(src), "--target", "cuda -arch=sm_90, llvm", "-o", str(out),
                   "--dump-code", "cu"])
    assert rc == 0
    names = tarfile.open(out).getnames()
    assert any(n.endswith("kernels.cubin") for n in names)
    assert any(n.endswith("kernels.cu") for n in names)
    cu = list(out.parent.glob("*.cu"))
    assert cu and "__global__" in cu[0].read_text()


@pytest.mark.slow
def test_every_op_of_a_depthwise_network_is_placed_on_cuda() -> None:
    model = make_mobilenet(batch=1, resolution=64, width=0.25)
    mod = tessera.compile(model, target="cuda -arch=sm_90, llvm")
    report = mod.partition_report()
    assert not report.fallback and set(report.backend_counts()) == {"cuda"}
    info = mod.compiled[report.regions[0].name].info
    assert info["kernels"] > 0
    if NO_GPU:
        assert info["loaded"] is False and "cuda:0" in mod.missing_devices
        with pytest.raises(RunError, match="cannot run.*export it"):
            mod.run(**mobilenet_inputs(1, 64))
    else:
        assert mod.missing_devices is None
        assert np.isfinite(mod.run(**mobilenet_inputs(1, 64))["logits"]).all()


@pytest.mark.skipif(NO_GPU is None, reason="this machine has a GPU")
def test_without_arch_the_gpu_must_be_here() -> None:
    with pytest.raises(TargetError, match="-arch=sm_90"):
        tessera.compile(make_mobilenet(resolution=32, width=0.25), target="cuda")
