"""What an artifact stores: each weight once, in the form its backend reads (a content-addressed
store shared by the graph's parameters and every backend's arrays), nothing the runtime never
reads, and a tar file created with the user's umask."""

from __future__ import annotations

import hashlib
import importlib.util
import io
import json
import os
import tarfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ArtifactError, IRError, PluginArtifactError
from tessera.ir.graph import Function
from tessera.ir.printer import format_function
from tessera.ir.serialize import to_json
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.target import TargetKind
from tessera.testing.kit import register_backend

needs_llvm = pytest.mark.skipif(importlib.util.find_spec("tessera_llvm") is None,
                                reason="the llvm plugin is not installed")
TARGETS = ["ref", pytest.param("llvm", marks=needs_llvm)]


def squeeze_like(seed: int = 0) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A small SqueezeNet: a strided 3x3 convolution, max pooling, two fire modules (1x1
    squeeze, 1x1 and 3x3 expand, concatenated) and a 1x1 classifier over 1000 classes, about
    2 MB of float32 weights (most in the classifier, as in SqueezeNet)."""
    rng = np.random.default_rng(seed)
    inits: dict[str, np.ndarray] = {}
    nodes: list[onnx.NodeProto] = []

    def conv(name: str, x: str, cin: int, cout: int, k: int, stride: int = 1) -> str:
        w = rng.standard_normal((cout, cin, k, k)) * np.sqrt(2 / (cin * k * k))
        inits[f"{name}_w"] = w.astype(np.float32)
        inits[f"{name}_b"] = (rng.standard_normal(cout) * 0.05).astype(np.float32)
        nodes.append(helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"],
                                      name=name, pads=[k // 2] * 4, strides=[stride] * 2))
        nodes.append(helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_r"))
        return f"{name}_r"

    def fire(name: str, x: str, cin: int, squeeze: int, expand: int) -> str:
        s = conv(f"{name}_squeeze", x, cin, squeeze, 1)
        a, b = conv(f"{name}_e1", s, squeeze, expand, 1), conv(f"{name}_e3", s, squeeze, expand, 3)
        nodes.append(helper.make_node("Concat", [a, b], [f"{name}_cat"], axis=1, name=name))
        return f"{name}_cat"

    x = conv("conv1", "x", 3, 64, 3, stride=2)
    nodes.append(helper.make_node("MaxPool", [x], ["pool"], kernel_shape=[3, 3], strides=[2, 2]))
    y = conv("conv10", fire("fire3", fire("fire2", "pool", 64, 32, 128), 256, 48, 192),
             384, 1000, 1)
    nodes += [helper.make_node("GlobalAveragePool", [y], ["gap"]),
              helper.make_node("Flatten", ["gap"], ["flat"]),
              helper.make_node("Softmax", ["flat"], ["prob"])]
    graph = helper.make_graph(
        nodes, "squeeze_like", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                              [1, 3, 32, 32])],
        [helper.make_tensor_value_info("prob", TensorProto.FLOAT, [1, 1000])],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((1, 3, 32, 32)).astype(np.float32)}


def weight_bytes(model: onnx.ModelProto) -> int:
    return sum(numpy_helper.to_array(t).nbytes for t in model.graph.initializer)


def read_tar(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                if m.isfile()}


def stored_arrays(members: dict[str, bytes]) -> dict[str, np.ndarray]:
    return {name: np.load(io.BytesIO(data), allow_pickle=False)
            for name, data in members.items() if name.startswith("constants/")}


def regions(graph: dict[str, Any]) -> Iterator[dict[str, Any]]:
    return (n["body"] for n in graph["function"]["nodes"] if "body" in n)


@pytest.fixture(scope="module")
def squeeze() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    return squeeze_like()


@pytest.mark.parametrize("target", TARGETS)
def test_each_weight_is_stored_once_in_its_backends_form(squeeze, tmp_path: Path,
                                                         target: str) -> None:
    model, inputs = squeeze
    module = tessera.compile(model, target=target)
    path = module.export(tmp_path / "model.tar")
    members = read_tar(path)
    arrays = stored_arrays(members)
    # the weights in the form the kernels read and a little more (graph, kernels, manifest),
    # not twice them: the ONNX file's size, or the kernels' form where that is larger (3x3
    # convolutions that default to Winograd, as on AVX2, keep their transformed weights)
    stored = sum(a.nbytes for a in arrays.values())
    assert path.stat().st_size <= 1.1 * max(weight_bytes(model), stored)
    data = [a.tobytes() for a in arrays.values()]
    assert len(set(data)) == len(data), "two members hold the same array"
    for name, raw in members.items():  # every array is named by its content
        if name.startswith("constants/"):
            assert name == f"constants/{hashlib.sha256(raw).hexdigest()}.npy"
    # no weight hides in a backend's own files: those hold code and tables
    other = sum(len(d) for n, d in members.items() if not n.startswith("constants/"))
    assert other < 0.05 * weight_bytes(model)
    manifest = json.loads(members["manifest.json"])
    graph = json.loads(members["graph.json"])
    if target == "ref":  # the reference backend reads the graph's constants
        assert set(manifest["params"]) == set(weight_bytes_names(model))
        assert manifest["arrays"] == {}
    else:  # llvm keeps its packed weights: the graph-form ones are not stored
        assert manifest["params"] == {}
        for body in regions(graph):
            assert all(c["held_by"] == "llvm" for c in body["constants"].values())
    want = module.run(**inputs)
    got = tessera.load(path).run(**inputs)
    assert got is not None and want is not None
    np.testing.assert_array_equal(got["prob"], want["prob"])


def weight_bytes_names(model: onnx.ModelProto) -> list[str]:
    return [t.name for t in model.graph.initializer]


@needs_llvm
@pytest.mark.slow
def test_a_loaded_module_holds_no_graph_copy_and_exports_again(squeeze, tmp_path: Path) -> None:
    model, inputs = squeeze
    path = tessera.compile(model, target="llvm").export(tmp_path / "model.tar")
    loaded = tessera.load(path)
    (body,) = [n.body for n in loaded.graph.nodes if n.body is not None]
    held = body.constants()
    assert held and all(v.is_constant and v.is_held and v.held_by == "llvm" for v in held)
    with pytest.raises(IRError, match=f"{held[0].name}.*backend 'llvm' holds it"):
        _ = held[0].data
    assert "(held by llvm)" in format_function(body)
    with pytest.raises(IRError, match="holds it in its compiled form"):
        to_json(body, with_data=True)
    again = loaded.export(tmp_path / "again.tar")
    assert set(read_tar(again)) == set(read_tar(path))
    np.testing.assert_array_equal(tessera.load(again).run(**inputs)["prob"],
                                  loaded.run(**inputs)["prob"])


@pytest.mark.parametrize(("umask", "mode"), [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_the_tar_is_created_with_the_users_umask(tmp_path: Path, umask: int, mode: int) -> None:
    module = tessera.compile(_mul_add_model(), target="ref")
    old = os.umask(umask)
    try:
        path = module.export(tmp_path / "out" / "model.tar")
    finally:
        os.umask(old)
    assert path.stat().st_mode & 0o777 == mode
    assert os.listdir(path.parent) == ["model.tar"]  # no temporary file left behind


def test_a_failed_export_leaves_no_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    module = tessera.compile(_mul_add_model(), target="ref")
    path = module.export(tmp_path / "model.tar")
    before = path.read_bytes()

    def full_disk(*args: Any, **kwargs: Any) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(tarfile.TarFile, "addfile", full_disk)
    with pytest.raises(OSError, match="No space"):
        module.export(path)
    assert os.listdir(tmp_path) == ["model.tar"] and path.read_bytes() == before


# -- the shared store, with a backend that saves its constants as arrays --------------------------

class ArrayNPU(Backend):
    """Runs Mul; saves its constants unchanged, as arrays, and keeps them (or not)."""

    device = "cpu"

    def __init__(self, name: str, keeps: bool = True, keeps_names: list[str] | None = None):
        self.name = name
        self.keeps = keeps
        self.keeps_names = keeps_names

    def claims(self, target: TargetKind) -> list[Pattern]:
        return [Pattern("Mul")]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        consts = {v.name: np.asarray(v.data) for v in region.constants()}
        return self._assemble(region, consts)

    def _assemble(self, region: Function, consts: dict[str, np.ndarray]) -> CompiledRegion:
        node = region.nodes[0]

        def mul(ins: list[Any], outs: list[Any]) -> None:
            np.multiply(ins[0], ins[1], out=outs[0])

        names = [v.name for v in node.inputs if v is not None]
        tensors = {v.name: v.type for v in region.inputs}
        tensors.update({o.name: o.type for o in node.outputs})
        return CompiledRegion(self.name, region,
                              [Kernel(node.name, mul, names, [node.outputs[0].name], "Mul")],
                              tensors, consts)

    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        return {"table.json": b"{}",
                **{f"w/{k}": np.asarray(v) for k, v in compiled.constants.items()}}

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        if self.keeps_names is not None:
            return self.keeps_names
        return [v.name for v in compiled.region.constants()] if self.keeps else []

    def load(self, region: Function, files: dict[str, bytes | np.ndarray], target: TargetKind,
             options: CompileOptions) -> CompiledRegion:
        assert files["table.json"] == b"{}"
        consts = {k[2:]: v for k, v in files.items() if k.startswith("w/")}
        assert all(isinstance(v, np.ndarray) and not v.flags.writeable for v in consts.values())
        return self._assemble(region, consts)


def _mul_add_model() -> onnx.ModelProto:
    """``y = x * w + w``: one weight read by a Mul and by an Add."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])
    w = numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"], name="mul"),
             helper.make_node("Add", ["m", "w"], ["y"], name="add")]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.mark.parametrize("keeps", [True, False])
def test_one_array_shared_by_a_backend_and_the_graph_is_stored_once(tmp_path: Path,
                                                                    keeps: bool) -> None:
    """The Mul region's backend saves ``w`` as an array; the Add region (ref) reads ``w`` from
    the graph: one member holds it, whether or not the Mul's backend keeps it."""
    name = f"arraynpu_{'keeps' if keeps else 'shares'}"
    x = np.arange(12, dtype=np.float32).reshape(2, 6)
    with register_backend(ArrayNPU(name, keeps=keeps)):
        module = tessera.compile(_mul_add_model(), target=f"{name}, ref")
        assert [r.backend for r in module.partition_report().regions] == [name, "ref"]
        path = module.export(tmp_path / "model.tar")
        members = read_tar(path)
        manifest = json.loads(members["manifest.json"])
        assert len(stored_arrays(members)) == 1
        (region,) = manifest["arrays"]
        assert manifest["arrays"][region] == {"w/w": manifest["params"]["w"]}
        held = [c for body in regions(json.loads(members["graph.json"]))
                for c in body["constants"].values() if "held_by" in c]
        assert held == ([{"type": {"shape": [6], "dtype": "float32"}, "held_by": name}]
                        if keeps else [])
        np.testing.assert_array_equal(tessera.load(path).run(x=x)["y"], module.run(x=x)["y"])


def test_keeps_constants_must_name_constants_of_the_region(tmp_path: Path) -> None:
    with register_backend(ArrayNPU("arraynpu_bad", keeps_names=["nope"])):
        module = tessera.compile(_mul_add_model(), target="arraynpu_bad, ref")
        with pytest.raises(PluginArtifactError, match="keeps_constants"):
            module.export(tmp_path / "model.tar")


# -- format versions ------------------------------------------------------------------------------

def _write(path: Path, members: dict[str, bytes]) -> Path:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def test_format_1_artifacts_still_load(tmp_path: Path) -> None:
    """Format 1 kept every graph constant in ``params.npz`` (and backends' constants in files
    of their own)."""
    module = tessera.compile(_mul_add_model(), target="ref")
    members = read_tar(module.export(tmp_path / "new.tar"))
    manifest = json.loads(members["manifest.json"])
    arrays = stored_arrays(members)
    buf = io.BytesIO()
    np.savez(buf, **{k: arrays[f"constants/{h}.npy"] for k, h in manifest["params"].items()})
    old = {"graph.json": members["graph.json"], "params.npz": buf.getvalue(),
           "report.json": members["report.json"]}
    manifest = {k: v for k, v in manifest.items() if k not in ("params", "arrays")}
    manifest.update(format=1, files={n: hashlib.sha256(d).hexdigest() for n, d in old.items()})
    path = _write(tmp_path / "old.tar", {"manifest.json": json.dumps(manifest).encode(), **old})
    x = np.ones((2, 6), np.float32)
    np.testing.assert_array_equal(tessera.load(path).run(x=x)["y"], module.run(x=x)["y"])


def test_a_newer_format_is_refused_clearly(tmp_path: Path) -> None:
    module = tessera.compile(_mul_add_model(), target="ref")
    members = read_tar(module.export(tmp_path / "model.tar"))
    manifest = json.loads(members["manifest.json"])
    manifest["format"] = 99
    path = _write(tmp_path / "future.tar",
                  {**members, "manifest.json": json.dumps(manifest).encode()})
    with pytest.raises(ArtifactError, match=r"format 99 \(written by a newer Tessera\) is not "
                                            r"supported.*reads formats 1, 2"):
        tessera.load(path)


def test_an_unused_or_missing_array_is_refused(tmp_path: Path) -> None:
    module = tessera.compile(_mul_add_model(), target="ref")
    members = read_tar(module.export(tmp_path / "model.tar"))
    extra = io.BytesIO()
    np.save(extra, np.zeros(3, np.float32))
    name = f"constants/{hashlib.sha256(extra.getvalue()).hexdigest()}.npy"
    with pytest.raises(ArtifactError, match="not used by the manifest"):
        tessera.load(_write(tmp_path / "extra.tar", {**members, name: extra.getvalue()}))
    (stored,) = [n for n in members if n.startswith("constants/")]
    rest = {n: d for n, d in members.items() if n != stored}
    with pytest.raises(ArtifactError, match="lacks"):
        tessera.load(_write(tmp_path / "missing.tar", rest))
