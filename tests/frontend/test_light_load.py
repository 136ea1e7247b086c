"""Loading an .onnx file with its large initializers left in the file
(tessera.frontend.onnx.light_load): the same model as onnx.load gives, the large weights read
(mapped) from the file itself, and anything the reader does not follow left to onnx.load."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend.onnx.dtypes import read_initializer
from tessera.frontend.onnx.external_data import uses_external
from tessera.frontend.onnx.light_load import load_light
from tessera.ir.mapped import MAP_MIN_BYTES, mapped_region

RNG = np.random.default_rng(17)


def _model() -> onnx.ModelProto:
    """Two large weights (a MatMul's and a Gather's table), small ones, metadata, and an If
    whose branch holds a large initializer of its own (left in the proto)."""
    w = RNG.standard_normal((128, 160)).astype(np.float32)  # 80 KiB
    table = RNG.standard_normal((200, 128)).astype(np.float32)  # 100 KiB
    branch_w = RNG.standard_normal((160, 160)).astype(np.float32)
    then = helper.make_graph([helper.make_node("MatMul", ["h", "BW"], ["o1"])], "then", [],
                             [helper.make_tensor_value_info("o1", TensorProto.FLOAT, None)],
                             [numpy_helper.from_array(branch_w, "BW")])
    other = helper.make_graph([helper.make_node("Identity", ["h"], ["o2"])], "else", [],
                              [helper.make_tensor_value_info("o2", TensorProto.FLOAT, None)])
    nodes = [helper.make_node("Gather", ["table", "ids"], ["e"]),
             helper.make_node("MatMul", ["e", "W"], ["m"]),
             helper.make_node("Add", ["m", "B"], ["h"]),
             helper.make_node("If", ["flag"], ["y"], then_branch=then, else_branch=other)]
    graph = helper.make_graph(
        nodes, "light",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, [5]),
         helper.make_tensor_value_info("flag", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [5, 160])],
        [numpy_helper.from_array(table, "table"), numpy_helper.from_array(w, "W"),
         numpy_helper.from_array(RNG.standard_normal(160).astype(np.float32), "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9, producer_name="light-test")
    helper.set_model_props(model, {"author": "tessera"})
    return model


def _save(tmp_path: Path, model: onnx.ModelProto | None = None) -> Path:
    path = tmp_path / "light.onnx"
    onnx.save_model(model or _model(), str(path))
    return path


def test_large_initializers_stay_in_the_file_and_read_back_the_same(tmp_path: Path) -> None:
    path = _save(tmp_path)
    light, full = load_light(path), onnx.load(str(path))
    assert light is not None
    assert light.ByteSize() < full.ByteSize() - 150_000
    external = {t.name for t in light.graph.initializer if uses_external(t)}
    assert external == {"table", "W"}  # B is small
    for a, b in zip(light.graph.initializer, full.graph.initializer, strict=True):
        assert (a.name, list(a.dims), a.data_type) == (b.name, list(b.dims), b.data_type)
        got = read_initializer(a)
        np.testing.assert_array_equal(got, numpy_helper.to_array(b))
        assert (mapped_region(got) is not None) == (a.name in external)
        if a.name in external:
            where = {e.key: e.value for e in a.external_data}
            assert where["location"] == "light.onnx" and int(where["length"]) >= MAP_MIN_BYTES
    # everything else is what onnx.load reads
    assert list(light.graph.node) == list(full.graph.node)  # the If's branch keeps its weight
    assert (light.graph.input, light.graph.output) == (full.graph.input, full.graph.output)
    assert (light.producer_name, list(light.metadata_props), list(light.opset_import)) == \
        (full.producer_name, list(full.metadata_props), list(full.opset_import))


def test_a_model_compiled_from_its_file_matches_the_same_model_in_memory(
        tmp_path: Path) -> None:
    path = _save(tmp_path)
    from_file = tessera.compile(str(path), "llvm")
    in_memory = tessera.compile(onnx.load(str(path)), "llvm")
    ids = RNG.integers(0, 200, 5).astype(np.int64)
    for flag in (True, False):
        feeds = {"ids": ids, "flag": np.array(flag)}
        np.testing.assert_array_equal(from_file.run(**feeds)["y"], in_memory.run(**feeds)["y"])


def test_what_the_reader_does_not_follow_is_left_to_onnx_load(tmp_path: Path) -> None:
    small = helper.make_model(helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])]),
        opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    assert load_light(_save(tmp_path, small)) is None  # no large initializer
    text = tmp_path / "text.onnx"
    text.write_text("ir_version: 9\ngraph { name: 'g' }\n")
    assert load_light(text) is None
    empty = tmp_path / "empty.onnx"
    empty.write_bytes(b"")
    assert load_light(empty) is None
    whole = _save(tmp_path).read_bytes()
    cut = tmp_path / "cut.onnx"
    cut.write_bytes(whole[:len(whole) // 2])
    assert load_light(cut) is None
    with pytest.raises(tessera.TesseraError, match="cannot parse the ONNX model"):
        tessera.compile(str(cut), "llvm")
