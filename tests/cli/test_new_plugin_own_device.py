"""``tessera new-plugin NAME --own-device``: a backend on a device whose memory the host cannot
read, so the runtime's copies carry every tensor across; its constants are stored packed in
the artifact. The package installs with pip and passes its own tests; in-process, its backend
runs a model through ``tessera.compile`` with the copies and the packed weight checked."""

from __future__ import annotations

import importlib
import io
import json
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from cli.test_new_plugin import _pip_install, _pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.cli.main import main
from tessera.testing.kit import register_backend

W = np.random.default_rng(5).standard_normal((8, 6)).astype(np.float32)


@pytest.fixture
def generated(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Iterator[ModuleType]:
    """The backend module ``tessera new-plugin acme_npu --own-device`` wrote, imported from
    its folder (removed from ``sys.modules`` afterwards)."""
    package = tmp_path / "tessera-acme_npu"
    assert main(["new-plugin", "acme_npu", "--own-device", "--dir", str(package)]) == 0
    assert "tessera_acme_npu/device.py" in capsys.readouterr().out
    sys.path.insert(0, str(package))
    try:
        yield importlib.import_module("tessera_acme_npu.backend")
    finally:
        sys.path.remove(str(package))
        for name in [m for m in sys.modules if m.startswith("tessera_acme_npu")]:
            del sys.modules[name]


def _model() -> onnx.ModelProto:
    """Relu(x @ W) on the device, Neg on the host, Flatten and Relu on the device again."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 18])
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Relu", ["m"], ["r"]), helper.make_node("Neg", ["r"], ["n"]),
             helper.make_node("Flatten", ["n"], ["f"]), helper.make_node("Relu", ["f"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], [numpy_helper.from_array(W, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_own_device_backend_runs_with_copies_and_packed_constants(
        generated: ModuleType, tmp_path: Path) -> None:
    backend = generated.AcmeNpuBackend()
    device = backend.device_api()
    assert backend.device == device.name == "acme_npu" and not device.host_memory
    x = np.random.default_rng(6).standard_normal((2, 3, 8)).astype(np.float32)
    expected = np.maximum(-np.maximum(x @ W, 0), 0).reshape(2, 18)
    with register_backend(backend):
        mod = tessera.compile(_model(), target="acme_npu")
        report = mod.partition_report()
        assert [r.device for r in report.regions] == ["acme_npu", "cpu", "acme_npu"]
        assert [(c.src, c.dst) for c in report.copies] == [
            ("cpu", "acme_npu"), ("acme_npu", "cpu"), ("cpu", "acme_npu"), ("acme_npu", "cpu")]
        [weight] = [b for r in mod.compiled.values() if r.backend == "acme_npu"
                    for b in r.constants.values()]
        with pytest.raises(TypeError, match="cannot read"):
            np.asarray(weight)  # device memory: only the device's copies reach it
        np.testing.assert_allclose(mod.run(x=x)["y"], expected, rtol=1e-6)
        assert device.counts["to_device"] == 2 and device.counts["to_host"] == 2

        path = mod.export(tmp_path / "model.tar")
        with tarfile.open(path) as tar:
            arrays = [np.load(io.BytesIO(tar.extractfile(m).read()))  # type: ignore[union-attr]
                      for m in tar.getmembers() if m.name.endswith(".npy")]
            graph = json.loads(tar.extractfile("graph.json").read())  # type: ignore[union-attr]
        assert [a.shape for a in arrays] == [(6, 8)]  # W, once, packed (transposed)
        np.testing.assert_array_equal(arrays[0], W.T)
        assert '"held_by": "acme_npu"' in json.dumps(graph)
        np.testing.assert_allclose(tessera.load(path).run(x=x)["y"], expected, rtol=1e-6)


@pytest.mark.slow
def test_own_device_plugin_installs_and_passes_its_tests(tmp_path: Path) -> None:
    package = tmp_path / "tessera-acme_npu"
    assert main(["new-plugin", "acme_npu", "--own-device", "--dir", str(package)]) == 0
    site = tmp_path / "site"
    _pip_install(package, site)
    entry_points = next(site.glob("tessera_acme_npu-*.dist-info")) / "entry_points.txt"
    assert "acme_npu = tessera_acme_npu.plugin" in entry_points.read_text()
    run = _pytest(package, site)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "7 passed" in run.stdout
    assert "backend 'acme_npu': ran 1 nodes in 1 passing cases; 0 failed" in run.stdout
