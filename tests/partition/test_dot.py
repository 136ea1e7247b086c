"""Partition pictures: DOT text with one cluster per region and copies as diamonds."""

from __future__ import annotations

import shutil
import subprocess

from toy_backends import ToyBackend

from tessera.backends.reference import ReferenceBackend
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.partition import Pattern, partition
from tessera.partition.dot import to_dot
from tessera.plugin.target import TargetKind


def _partitioned() -> Function:
    fn = Function("g")
    x = fn.add_input("x", TensorType((2, 3), DType.float32))
    a = fn.op("Relu", x, name="a")
    b = fn.op("Neg", a, name="b")
    fn.outputs = [fn.op("Add", a, b, name="c")]
    fn.attrs["output_names"] = ["out"]
    npu = ToyBackend("npu", [Pattern("Relu"), Pattern("Add")], device="npu")
    return partition(fn, [(npu, TargetKind("npu"))],
                     (ReferenceBackend(), TargetKind("ref"))).graph


def test_dot_has_clusters_copies_and_edges():
    text = to_dot(_partitioned())
    assert text.startswith("digraph tessera {")
    assert text.count("subgraph") == 3
    assert "[npu on npu]" in text and "[ref on cpu]" in text
    assert text.count("shape=diamond") == 4  # x in, a out, b in, c out
    assert '"out_out"' in text
    assert "\n" not in text.split('label="')[1].split('"')[0]  # newlines escaped


def test_dot_renders_with_graphviz_when_present(tmp_path):
    dot = shutil.which("dot")
    if dot is None:
        import pytest

        pytest.skip("Graphviz 'dot' is not installed")
    path = tmp_path / "g.dot"
    path.write_text(to_dot(_partitioned()))
    out = subprocess.run([dot, "-Tsvg", str(path)], capture_output=True, text=True, check=True)
    assert "<svg" in out.stdout
