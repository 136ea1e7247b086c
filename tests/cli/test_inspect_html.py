"""``tessera inspect --html``: the partition picture as a self-contained HTML page."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from partition.html_support import nodes_of, svg_of

from tessera.cli.main import main


@pytest.fixture
def model(tmp_path: Path) -> Path:
    """``out = Relu(x + bias) * x``, with a node named like markup."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="<b>relu</b>"),
         helper.make_node("Mul", ["r", "x"], ["out"], name="mul")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 3])],
        initializer=[numpy_helper.from_array(np.ones(3, np.float32), "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return path


def test_inspect_writes_the_html_page(model: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    page = tmp_path / "out" / "tiny.html"
    page.parent.mkdir()
    assert main(["inspect", str(model), "--target", "ref", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    assert f"partition page written to {page}" in out
    text = page.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>") and "<h1>tiny.onnx</h1>" in text
    assert "target <b>ref</b>" in text
    assert "http://" not in text.replace("http://www.w3.org/2000/svg", "")
    svg = svg_of(text)
    assert sorted(g.get("data-name") for g in nodes_of(svg, "op")) == ["<b>relu</b>", "add",
                                                                       "mul"]
    assert "<b>relu</b>" not in text


def test_inspect_tar_with_dot_and_html(model: Path, tmp_path: Path,
                                       capsys: pytest.CaptureFixture[str]) -> None:
    tar = tmp_path / "tiny.tar"
    assert main(["compile", str(model), "--target", "ref", "-o", str(tar)]) == 0
    capsys.readouterr()
    page, dot = tmp_path / "p.html", tmp_path / "p.dot"
    assert main(["inspect", str(tar), "--html", str(page), "--dot", str(dot)]) == 0
    out = capsys.readouterr().out
    assert f"written to {page}" in out and f"written to {dot}" in out
    assert len(nodes_of(svg_of(page.read_text(encoding="utf-8")), "op")) == 3
    assert dot.read_text().startswith("digraph tessera {")
