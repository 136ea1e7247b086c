"""ONNX importer: sources, shapes, constants, and every kind of bad model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ModelImportError, NeedsConstantError
from tessera.frontend.onnx import import_onnx


def _relu_model(shape=(2, 3), opset=17, dim_param=None) -> onnx.ModelProto:
    dims = list(shape)
    if dim_param:
        dims[0] = dim_param
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, dims)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_path_bytes_and_proto_give_the_same_function(tmp_path):
    model = _relu_model()
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    texts = {str(import_onnx(src)) for src in (model, model.SerializeToString(), path,
                                               str(path))}
    assert len(texts) == 1


def test_truncated_and_garbage_models(tmp_path):
    data = _relu_model().SerializeToString()
    with pytest.raises(ModelImportError, match="cannot parse|empty graph|malformed"):
        import_onnx(data[: len(data) // 2])
    junk = tmp_path / "junk.onnx"
    junk.write_bytes(b"\xff\x00garbage" * 20)
    with pytest.raises(ModelImportError):
        import_onnx(junk)
    with pytest.raises(ModelImportError, match="does not exist"):
        import_onnx(tmp_path / "missing.onnx")


def test_every_unsupported_op_is_reported_at_once():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    nodes = [helper.make_node("FancyOp", ["x"], ["a"], name="first", domain="com.vendor"),
             helper.make_node("Relu", ["a"], ["b"]),
             helper.make_node("OtherOp", ["b"], ["c"], name="second", domain="com.vendor"),
             helper.make_node("FancyOp", ["c"], ["y"], name="third", domain="com.vendor")]
    graph = helper.make_graph(nodes, "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17),
                                                    helper.make_opsetid("com.vendor", 1)])
    with pytest.raises(ModelImportError) as info:
        import_onnx(model, check=False)
    err = info.value
    assert [name for _, name, _ in err.unsupported] == ["first", "second", "third"]
    text = str(err)
    assert "3 node(s)" in text and "com.vendor.FancyOp" in text and "'second'" in text


def test_symbolic_dims_need_input_shapes():
    model = _relu_model(dim_param="N")
    with pytest.raises(ModelImportError, match="symbolic dimension 0 .*'N'.*input_shapes"):
        import_onnx(model)
    fn = import_onnx(model, input_shapes={"x": [5, 3]})
    assert fn.inputs[0].type.shape == (5, 3)
    with pytest.raises(ModelImportError, match="rank 3"):
        import_onnx(model, input_shapes={"x": [5, 3, 1]})
    with pytest.raises(ModelImportError, match="'z' is not an input"):
        import_onnx(model, input_shapes={"z": [1]})


def test_old_opsets_are_upgraded():
    """More in test_old_opsets.py."""
    with pytest.warns(UserWarning, match="opset 6; .* upgraded it to opset 7"):
        fn = import_onnx(_relu_model(opset=6))
    assert [n.op for n in fn.nodes] == ["Relu"]


def _reshape_model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    s = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"], name="rs")],
                              "g", [x, s], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_shape_operands_must_be_constant_and_can_be_frozen(rng):
    with pytest.raises(NeedsConstantError) as info:
        import_onnx(_reshape_model())
    assert info.value.inputs == ["shape"]
    assert "'rs' (Reshape)" in str(info.value)
    mod = tessera.compile(_reshape_model(), target="ref",
                          freeze_inputs={"shape": np.array([3, 4])})
    x = rng.standard_normal((2, 6)).astype(np.float32)
    np.testing.assert_array_equal(mod.run(x=x)["y"], x.reshape(3, 4))
    assert list(mod.input_types) == ["x"]


def test_initializer_listed_as_input_is_a_constant(rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])
    w_info = helper.make_tensor_value_info("w", TensorProto.FLOAT, [4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4])
    w = numpy_helper.from_array(np.arange(4, dtype=np.float32), "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x, w_info],
                              [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 3
    fn = import_onnx(model)
    assert [v.name for v in fn.inputs] == ["x"]


def test_external_data_is_loaded(tmp_path, rng):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    w_val = rng.standard_normal((64, 64)).astype(np.float32)
    w = numpy_helper.from_array(w_val, "w")
    graph = helper.make_graph([helper.make_node("Add", ["x", "w"], ["y"])], "g", [x], [y], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "ext.onnx"
    onnx.save(model, path, save_as_external_data=True, all_tensors_to_one_file=True,
              location="weights.bin", size_threshold=0)
    assert (tmp_path / "weights.bin").exists()
    mod = tessera.compile(path, target="ref")
    xv = rng.standard_normal((64, 64)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=xv)["y"], xv + w_val, rtol=1e-6)


def test_unsupported_input_dtype_is_named():
    x = helper.make_tensor_value_info("x", TensorProto.STRING, [2])
    y = helper.make_tensor_value_info("y", TensorProto.STRING, [2])
    graph = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="graph input 'x'.*STRING"):
        import_onnx(model)


def test_dangling_reference_is_reported():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    graph = helper.make_graph([helper.make_node("Add", ["x", "ghost"], ["y"], name="add")], "g",
                              [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="ghost"):
        import_onnx(model)


# -- found by the fuzzer (tessera.testing.fuzz) -------------------------------------------------

def test_huge_input_is_refused_before_any_allocation(monkeypatch):
    monkeypatch.setenv("TESSERA_MAX_TENSOR_BYTES", str(1 << 30))
    with pytest.raises(ModelImportError, match=r"graph input 'x': float32\[1099511627776, 3\] "
                                               r"takes 12.0 TiB, more than the 1.0 GiB"):
        tessera.compile(_relu_model(shape=(2**40, 3)), target="ref")


def test_huge_folded_constant_is_refused_before_numpy_allocates(monkeypatch):
    monkeypatch.setenv("TESSERA_MAX_TENSOR_BYTES", str(1 << 30))
    shape = numpy_helper.from_array(np.array([2**20, 2**20], np.int64), "shape")
    nodes = [helper.make_node("ConstantOfShape", ["shape"], ["c"], name="fill"),
             helper.make_node("Add", ["x", "c"], ["y"], name="add")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", 1, [1])],
                              [helper.make_tensor_value_info("y", 1, [2**20, 2**20])], [shape])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="node .fill. .*the result "
                                               r"float32\[1048576, 1048576\] takes"):
        import_onnx(model)


@pytest.mark.parametrize("which", ["input", "output"])
def test_a_graph_input_or_output_without_shape_is_named(which):
    model = _relu_model()
    getattr(model.graph, which)[0].type.tensor_type.ClearField("shape")
    name = "x" if which == "input" else "y"
    with pytest.raises(ModelImportError, match=f"graph {which} '{name}' declares no shape"):
        import_onnx(model)


def test_gather_with_a_constant_index_out_of_range_names_the_node():
    idx = numpy_helper.from_array(np.array([0, 3], np.int64), "idx")
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "idx"], ["y"], name="pick", axis=1)], "g",
        [helper.make_tensor_value_info("x", 1, [2, 3])],
        [helper.make_tensor_value_info("y", 1, [2, 2])], [idx])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match=r"node 'pick' \(Gather.*constant index 3 is out "
                                               r"of range for axis 1 of size 3"):
        import_onnx(model)


def test_a_graph_input_without_element_type_is_named():
    model = _relu_model()
    model.graph.input[0].type.tensor_type.ClearField("elem_type")
    with pytest.raises(ModelImportError, match="graph input 'x' declares no element type"):
        import_onnx(model)


def test_a_nameless_initializer_or_input_is_refused():
    model = _relu_model()
    model.graph.initializer.append(numpy_helper.from_array(np.zeros(2, np.float32), ""))
    with pytest.raises(ModelImportError, match=r"initializer #0 \(dims \[2\]\) has no name"):
        import_onnx(model)
    model = _relu_model()
    model.graph.input[0].name = ""
    with pytest.raises(ModelImportError, match="graph input #0 has no name"):
        import_onnx(model)


def test_tensors_without_data_type_and_float_axes_are_named():
    """Fuzzer findings: the checker's own messages named no tensor, and float axes failed
    inside int() conversion."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])
    axes = numpy_helper.from_array(np.array([1.0]), "axes")
    node = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="rsum", keepdims=0)
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [axes]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="'rsum'.*axes must be an integer tensor"):
        import_onnx(model)
    axes.ClearField("data_type")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [axes]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="initializer 'axes' has no data_type"):
        import_onnx(model)
    const = helper.make_node("Constant", [], ["axes"], name="c",
                             value=numpy_helper.from_array(np.array([1], np.int64)))
    const.attribute[0].t.ClearField("data_type")
    model = helper.make_model(helper.make_graph([const, node], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(ModelImportError, match="node 'c' .*attribute 'value' has no data_type"):
        import_onnx(model)
