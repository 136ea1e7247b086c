"""The compiled model and the planner: ``tessera.compile`` builds a typed
:class:`CompiledModel`, :func:`plan_module` makes its plans, a :class:`Module` holds them;
the older ``Module(graph, compiled, ...)`` form and artifacts keep working."""

from __future__ import annotations

import hashlib
import io
import json
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ArtifactError, CompileError
from tessera.runtime import CompiledModel, Module, ModulePlan, plan_module


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


def test_a_module_holds_the_compiled_model_and_the_planners_results() -> None:
    mod = tessera.compile(_model(), target="ref")
    model = mod.model
    assert isinstance(model, CompiledModel)
    (region,) = model.regions
    assert (region.backend, region.kind.name, region.device) == ("ref", "ref", "cpu")
    assert set(model.compiled) == {region.name} and model.graph is mod.graph
    planned = plan_module(model)
    assert isinstance(planned, ModulePlan)
    assert [s.name for s in planned.plan.steps] == [s.name for s in mod.plan.steps]
    assert planned.signature.output_names == mod.output_names == ["y"]
    again = Module(model, planned=planned)
    x = np.linspace(-1, 1, 6, dtype=np.float32).reshape(2, 3)
    np.testing.assert_array_equal(again.run(x=x)["y"], -np.maximum(x, 0))
    assert again.plan is planned.plan and again.memory is planned.memory


def test_the_older_constructor_reads_the_regions_back_from_the_graph() -> None:
    base = tessera.compile(_model(), target="ref")
    mod = Module(base.graph, base.compiled, base.backends, base.target, base.report)
    assert mod.model.regions == base.model.regions
    x = np.ones((2, 3), np.float32)
    np.testing.assert_array_equal(mod.run(x=x)["y"], base.run(x=x)["y"])
    with pytest.raises(TypeError, match="already holds"):
        Module(base.model, base.compiled)


def test_a_compiled_model_needs_every_region_compiled() -> None:
    base = tessera.compile(_model(), target="ref")
    with pytest.raises(CompileError, match="has no compiled form"):
        CompiledModel(base.model.partitioned, {}, base.backends)


def test_a_region_the_artifact_cannot_name_says_to_compile_again(tmp_path: Path) -> None:
    mod = tessera.compile(_model(), target="ref")
    with tarfile.open(mod.export(tmp_path / "model.tar")) as tar:
        members = {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                   if m.isfile()}
    doc = json.loads(members["graph.json"])
    for node in doc["function"]["nodes"]:
        if "body" in node:
            node["attrs"].pop("device", None)
            node["body"]["attrs"].pop("device", None)
    members["graph.json"] = json.dumps(doc).encode()
    manifest = json.loads(members["manifest.json"])
    manifest["files"]["graph.json"] = hashlib.sha256(members["graph.json"]).hexdigest()
    members["manifest.json"] = json.dumps(manifest).encode()
    path = tmp_path / "old.tar"
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    with pytest.raises(ArtifactError, match=r"names no device.*compile the model again"):
        tessera.load(path)
