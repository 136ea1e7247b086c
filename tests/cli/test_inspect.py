"""``tessera inspect``: the partition and a memory estimate without generating code, and
``--compile`` for what only compiled code tells."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from toy_backends import ToyBackend

from tessera.api import compile as compile_model
from tessera.api import partition_model
from tessera.cli.main import main
from tessera.ir.graph import Function
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import CompiledRegion, CompileOptions
from tessera.plugin.target import TargetKind
from tessera.testing.kit.registration import register_backend


class Refusing(ToyBackend):
    """Claims Relu; compiling raises unless ``allowed``, and counts its calls."""

    def __init__(self) -> None:
        super().__init__("toyinspect", [Pattern("Relu")])
        self.allowed = False
        self.calls = 0

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        self.calls += 1
        if not self.allowed:
            raise AssertionError("inspect compiled a region without --compile")
        return super().compile(region, target, options)


@pytest.fixture
def refusing() -> Iterator[Refusing]:
    backend = Refusing()
    registered = register_backend(backend, "tessera-toyinspect", "0.1")
    yield backend
    registered.remove()


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """A chain Relu (the toy backend), Exp (ref), Relu (the toy backend): three regions."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 256])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 256])
    nodes = [helper.make_node("Relu", ["x"], ["a"], name="relu1"),
             helper.make_node("Exp", ["a"], ["b"], name="exp"),
             helper.make_node("Relu", ["b"], ["y"], name="relu2")]
    graph = helper.make_graph(nodes, "chain", [x], [y])
    path = tmp_path / "chain.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def test_inspect_partitions_without_compiling(refusing: Refusing, model: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(model), "--target", "toyinspect, ref"]) == 0
    assert refusing.calls == 0
    out = capsys.readouterr().out
    assert "region0_toyinspect" in out and "region1_ref" in out and "region2_toyinspect" in out
    assert "nodes per backend: ref: 1, toyinspect: 2" in out
    assert "device  tensors  planned" in out and "an estimate before code generation" in out
    assert "kernels: not generated (--compile" in out


def test_inspect_compile_compiles_and_shows_kernels(refusing: Refusing, model: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    refusing.allowed = True
    assert main(["inspect", str(model), "--target", "toyinspect, ref", "--compile"]) == 0
    assert refusing.calls == 2
    out = capsys.readouterr().out
    assert "an estimate" not in out and "not generated" not in out
    assert "region0_toyinspect        1" in out  # one kernel per node of the toy backend


class Reporting(Refusing):
    """Refusing, allowed to compile, reporting facts of every kind in its regions' info."""

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        compiled = super().compile(region, target, options)
        compiled.info.update({"lower_s": 0.25, "weights_bytes": 3 * 1024, "tiles": 12,
                              "occupancy": 0.8125, "npu_core": "core 2 of 4",
                              "uses_dma": True, "schedule": {"tile": 4}, "queues": [1, 2]})
        return compiled


def test_inspect_compile_shows_every_scalar_fact(model: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    """Only ``*_s`` and ``*_bytes`` facts were shown; a vendor's ``tiles`` and ``npu_core``
    were not."""
    backend = Reporting()
    backend.allowed = True
    registered = register_backend(backend, "tessera-toyinspect", "0.1")
    try:
        assert main(["inspect", str(model), "--target", "toyinspect, ref", "--compile"]) == 0
    finally:
        registered.remove()
    row = [line for line in capsys.readouterr().out.splitlines()
           if line.startswith("region0_toyinspect")][-1]  # the kernel table's row
    for fact in ("lower 0.25 s", "weights 3.0 KiB", "tiles 12", "occupancy 0.8125",
                 "npu_core core 2 of 4", "uses_dma yes"):
        assert fact in row, row
    assert "schedule" not in row and "queues" not in row  # structured facts have own reports


def test_inspect_svg(refusing: Refusing, model: Path, tmp_path: Path,
                     capsys: pytest.CaptureFixture[str]) -> None:
    """A picture without Graphviz or a browser: a standalone SVG file."""
    import xml.etree.ElementTree as ET

    picture = tmp_path / "pictures" / "chain.svg"
    assert main(["inspect", str(model), "--target", "toyinspect, ref", "--svg",
                 str(picture)]) == 0
    assert refusing.calls == 0 and f"partition picture written to {picture}" in \
        capsys.readouterr().out
    root = ET.parse(picture).getroot()
    ns = {"svg": "http://www.w3.org/2000/svg"}
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    texts = " ".join("".join(t.itertext()) for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "chain.onnx" in texts and "target toyinspect, ref" in texts
    assert "3 nodes in 3 regions" in texts
    nodes = root.findall(".//svg:g[@class='node'][@data-kind='op']", ns)
    assert sorted(n.get("data-op") for n in nodes) == ["Exp", "Relu", "Relu"]
    assert {n.get("data-backend") for n in nodes} == {"toyinspect", "ref"}
    assert root.find("svg:style", ns) is not None  # styled without the page's CSS
    code = main(["inspect", str(model), "--svg", str(tmp_path)])  # a folder, not a file
    assert code == 1 and "--svg" in capsys.readouterr().err


def test_inspect_html_without_compiling(refusing: Refusing, model: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "chain.html"
    assert main(["inspect", str(model), "--target", "toyinspect, ref", "--html",
                 str(page)]) == 0
    assert refusing.calls == 0
    assert "toyinspect" in page.read_text(encoding="utf-8")


def test_the_estimate_is_the_reference_backends_plan(model: Path) -> None:
    """The estimate plans one buffer per node output, as the reference backend compiles."""
    estimate = partition_model(str(model), target="ref")
    compiled = compile_model(str(model), target="ref")
    assert str(estimate.memory_report()).splitlines()[:2] == \
        str(compiled.memory_report()).splitlines()[:2]
    assert estimate.partition_report().table() == compiled.partition_report().table()
    assert estimate.input_types == compiled.input_types
    assert estimate.output_names == compiled.output_names
    with pytest.raises(Exception, match="not compiled"):
        estimate.plan.steps[0].fn([np.zeros(1)], [np.zeros(1)])  # type: ignore[misc]


def test_symbolic_dimensions_are_shown_as_one(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    """A model exported with a dynamic batch is inspected without --input-shapes: its open
    dimensions are taken as 1, and the output says so; given shapes are kept."""
    x = helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT, ["batch", 3, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 3, 8])
    graph = helper.make_graph([helper.make_node("Relu", ["pixel_values"], ["y"])], "g", [x], [y])
    path = tmp_path / "dynamic.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert main(["inspect", str(path), "--target", "ref"]) == 0
    captured = capsys.readouterr()
    assert "symbolic dimensions taken as 1 (pixel_values: [1, 3, 8])" in captured.err
    assert "pixel_values float32[1,3,8]" in captured.out
    assert main(["inspect", str(path), "--target", "ref",
                 "--input-shapes", "pixel_values:[5,3,8]"]) == 0
    captured = capsys.readouterr()
    assert "taken as 1" not in captured.err and "float32[5,3,8]" in captured.out
