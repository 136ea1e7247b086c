"""A third-party backend from a separate distribution: discovered through its entry point."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ArtifactError, TargetError
from tessera.plugin import get_registry, reload_plugins

SAMPLE = Path(__file__).parents[1] / "plugins" / "tessera_toynpu"


@pytest.fixture
def toynpu_installed(tmp_path, monkeypatch):
    """Install the sample plugin the way pip lays it out: package + .dist-info on sys.path."""
    site = tmp_path / "site"
    shutil.copytree(SAMPLE / "tessera_toynpu", site / "tessera_toynpu")
    info = site / "tessera_toynpu-0.1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tessera-toynpu\n"
                                   "Version: 0.1.0\n")
    (info / "entry_points.txt").write_text("[tessera.backends]\n"
                                           "toynpu = tessera_toynpu.plugin\n")
    (info / "top_level.txt").write_text("tessera_toynpu\n")
    monkeypatch.syspath_prepend(str(site))
    reload_plugins()
    yield site
    monkeypatch.undo()
    for mod in [m for m in sys.modules if m.startswith("tessera_toynpu")]:
        del sys.modules[mod]
    reload_plugins()


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Exp", ["r"], ["e"]), helper.make_node("Mul", ["e", "x"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_plugin_is_discovered_through_its_entry_point(toynpu_installed):
    registry = get_registry()
    assert "toynpu" in registry.backends
    info = [p for p in registry.plugins if "toynpu" in p.backends][0]
    assert info.distribution == "tessera-toynpu"
    assert info.version == "0.1.0"


def test_plugin_claims_and_runs_part_of_a_model(toynpu_installed, rng):
    from tessera_toynpu.plugin import CALLS

    mod = tessera.compile(_model(), target="toynpu, ref")
    report = mod.partition_report()
    backends = [r.backend for r in report.regions]
    assert backends == ["toynpu", "ref"]
    assert sorted(report.regions[0].ops) == ["Add", "Relu"]
    assert {c.dst for c in report.copies} == {"toynpu", "cpu"}
    x = rng.standard_normal((2, 8)).astype(np.float32)
    before = dict(CALLS)
    y = mod.run(x=x)["y"]
    b = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_allclose(y, np.exp(np.maximum(x + b, 0)) * x, rtol=1e-6)
    assert CALLS.get("Add", 0) == before.get("Add", 0) + 1
    assert CALLS.get("Relu", 0) == before.get("Relu", 0) + 1


def test_artifact_names_the_missing_plugin(toynpu_installed, tmp_path, rng):
    mod = tessera.compile(_model(), target="toynpu, ref")
    path = mod.export(tmp_path / "m.tar")
    x = rng.standard_normal((2, 8)).astype(np.float32)
    want = mod.run(x=x)["y"]
    np.testing.assert_allclose(tessera.load(path).run(x=x)["y"], want)
    # uninstall: drop it from sys.path and reload
    sys.path.remove(str(toynpu_installed))
    reload_plugins()
    assert "toynpu" not in get_registry().backends
    with pytest.raises(ArtifactError, match="toynpu.*tessera-toynpu"):
        tessera.load(path)
    sys.path.insert(0, str(toynpu_installed))


def test_unknown_target_lists_installed_backends():
    with pytest.raises(TargetError, match="installed backends: .*ref"):
        tessera.compile(_model(), target="nosuchnpu")
