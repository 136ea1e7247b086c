"""Models whose weights live in external data files (tessera.frontend.onnx.external_data):
read from their files straight into the importer's arrays, on every load path (a file beside
the model, files per tensor, a dynamic artifact holding both); a missing, short or escaping
data file is a clear error naming the tensor and the file; the model is never serialised
with its weights."""

from __future__ import annotations

import os
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ModelImportError
from tessera.frontend.onnx.dtypes import read_initializer
from tessera.frontend.onnx.external_data import (
    PATH_KEY,
    external_tensors,
    inline_external_data,
    uses_external,
)
from tessera.frontend.onnx.importer import load_model
from tessera.ir.aligned import is_aligned
from tessera.ir.mapped import MAP_MIN_BYTES, mapped_region

ort = pytest.importorskip("onnxruntime")

RNG = np.random.default_rng(43)


def _model() -> onnx.ModelProto:
    """x[n, 64] -> MatMul -> Add -> Relu -> Reshape[n, 4, 4] (shape from an initializer) ->
    Mul (a Constant node's tensor) -> Reshape[n, 16] -> MatMul -> y[n, 3]."""
    inits = [numpy_helper.from_array(RNG.standard_normal((64, 16)).astype(np.float32), "W1"),
             numpy_helper.from_array(RNG.standard_normal(16).astype(np.float32), "B1"),
             numpy_helper.from_array(np.array([-1, 4, 4], np.int64), "shape3"),
             numpy_helper.from_array(np.array([-1, 16], np.int64), "shape2"),
             numpy_helper.from_array(RNG.standard_normal((16, 3)).astype(np.float32), "W2")]
    scale = numpy_helper.from_array(RNG.uniform(0.5, 2, (4, 4)).astype(np.float32), "scale")
    nodes = [helper.make_node("MatMul", ["x", "W1"], ["h1"], name="mm1"),
             helper.make_node("Add", ["h1", "B1"], ["h2"], name="add"),
             helper.make_node("Relu", ["h2"], ["h3"], name="relu"),
             helper.make_node("Reshape", ["h3", "shape3"], ["h4"], name="r3"),
             helper.make_node("Constant", [], ["S"], name="const", value=scale),
             helper.make_node("Mul", ["h4", "S"], ["h5"], name="mul"),
             helper.make_node("Reshape", ["h5", "shape2"], ["h6"], name="r2"),
             helper.make_node("MatMul", ["h6", "W2"], ["y"], name="mm2")]
    graph = helper.make_graph(
        nodes, "ext", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 3])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                             ir_version=9)


def _save(folder: Path, *, one_file: bool = True, name: str = "model.onnx") -> Path:
    """The model saved with every tensor (attributes too) in external data."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    onnx.save_model(_model(), str(path), save_as_external_data=True,
                    all_tensors_to_one_file=one_file,
                    location="model.data" if one_file else None, size_threshold=0,
                    convert_attribute=True)
    return path


def _reference(path: Path, x: np.ndarray) -> np.ndarray:
    """onnxruntime's output, from the model with its data loaded by onnx (onnxruntime's own
    shape inference refuses a Reshape whose shape is external data)."""
    sess = ort.InferenceSession(onnx.load(str(path)).SerializeToString(),
                                providers=["CPUExecutionProvider"])
    return sess.run(None, {"x": x})[0]


@pytest.mark.parametrize("one_file", [True, False], ids=["one-data-file", "file-per-tensor"])
@pytest.mark.parametrize("target", ["ref", "llvm"])
def test_a_model_split_over_data_files_compiles_and_matches_onnxruntime(
        tmp_path: Path, one_file: bool, target: str) -> None:
    path = _save(tmp_path, one_file=one_file)
    proto = onnx.load(str(path), load_external_data=False)
    assert len(list(external_tensors(proto))) == 6  # five initializers and the Constant
    mod = tessera.compile(str(path), target)
    for n in (1, 3, 7):
        x = RNG.standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=x)["y"], _reference(path, x), rtol=1e-4,
                                   atol=1e-4)


def test_per_size_modules_read_the_data_files_too(tmp_path: Path) -> None:
    path = _save(tmp_path)
    mod = tessera.compile(str(path), "llvm", shape_mode="specialize")
    x = RNG.standard_normal((5, 64)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=x)["y"], _reference(path, x), rtol=1e-4, atol=1e-4)


def test_initializers_are_read_straight_into_aligned_arrays(tmp_path: Path) -> None:
    path = _save(tmp_path)
    proto = load_model(str(path))
    w1 = next(t for t in proto.graph.initializer if t.name == "W1")
    assert uses_external(w1) and not w1.raw_data  # the proto holds no weights
    array = read_initializer(w1)
    assert is_aligned(array) and array.shape == (64, 16)
    np.testing.assert_array_equal(array, numpy_helper.to_array(
        onnx.load(str(path)).graph.initializer[0]))


def test_a_missing_data_file_names_the_tensor_and_the_file(tmp_path: Path) -> None:
    path = _save(tmp_path)
    os.remove(tmp_path / "model.data")
    with pytest.raises(ModelImportError, match=r"tensor 'W1' keeps its data in '.*model\.data', "
                                               r"which does not exist"):
        tessera.compile(str(path), "llvm")


def test_a_missing_file_of_one_tensor_names_that_tensor(tmp_path: Path) -> None:
    path = _save(tmp_path, one_file=False)
    os.remove(tmp_path / "W2")
    with pytest.raises(ModelImportError, match=r"tensor 'W2' keeps its data in .*W2'"):
        tessera.compile(str(path), "llvm")


def test_a_short_data_file_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path)
    data = tmp_path / "model.data"
    size = data.stat().st_size
    with open(data, "r+b") as f:
        f.truncate(size - 8)
    with pytest.raises(ModelImportError, match=r"holds \d+: the data file is short"):
        tessera.compile(str(path), "llvm")


def test_a_location_outside_the_models_folder_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path / "a")
    proto = onnx.load(str(path), load_external_data=False)
    for t in external_tensors(proto):
        for e in t.external_data:
            if e.key == "location":
                e.value = "../model.data"
    onnx.save(proto, str(path))
    (tmp_path / "model.data").write_bytes((tmp_path / "a" / "model.data").read_bytes())
    with pytest.raises(ModelImportError, match=r"must be a path inside the model's folder"):
        tessera.compile(str(path), "llvm")


def test_a_length_that_disagrees_with_the_type_is_refused(tmp_path: Path) -> None:
    path = _save(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    w1 = next(t for t in proto.graph.initializer if t.name == "W1")
    for e in w1.external_data:
        if e.key == "length":
            e.value = str(int(e.value) - 4)
    onnx.save(proto, str(path))
    with pytest.raises(ModelImportError, match=r"tensor 'W1' of dims \[64, 16\] needs 4096 bytes"):
        tessera.compile(str(path), "llvm")


@pytest.mark.parametrize("given", ["proto", "bytes"])
def test_a_model_given_without_its_path_says_how_to_give_the_data(tmp_path: Path,
                                                                   given: str) -> None:
    path = _save(tmp_path)
    proto = onnx.load(str(path), load_external_data=False)
    model = proto if given == "proto" else proto.SerializeToString()
    with pytest.raises(ModelImportError, match=r"give tessera the model's path, or load it "
                                               r"with onnx.load\(path\)"):
        tessera.compile(model, "llvm")
    # onnx.load reads the external data into the proto: that works as any model does
    mod = tessera.compile(onnx.load(str(path)), "llvm")
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(mod.run(x=x)["y"], _reference(path, x), rtol=1e-4, atol=1e-4)


def test_a_dynamic_artifact_holds_the_data_and_runs_without_the_original_files(
        tmp_path: Path) -> None:
    path = _save(tmp_path / "src")
    weights = (tmp_path / "src" / "model.data").stat().st_size
    mod = tessera.compile(str(path), "llvm", shape_mode="specialize")
    x2 = RNG.standard_normal((2, 64)).astype(np.float32)
    want2 = _reference(path, x2)
    x6 = RNG.standard_normal((6, 64)).astype(np.float32)
    want6 = _reference(path, x6)
    np.testing.assert_allclose(mod.run(x=x2)["y"], want2, rtol=1e-4, atol=1e-4)
    artifact = mod.export(tmp_path / "model.tar")
    for f in (tmp_path / "src").iterdir():
        f.unlink()
    with tarfile.open(artifact) as tar:
        names = tar.getnames()
        data = tar.extractfile("model.data").read()
        stored = onnx.load_model_from_string(tar.extractfile("model.onnx").read())
    assert "model.data" in names and len(data) >= weights
    # the model the module compiles new sizes from holds no weights
    assert stored.ByteSize() < weights / 4
    for t in external_tensors(stored):  # relative to the artifact, nothing of this machine
        keys = {e.key: e.value for e in t.external_data}
        assert keys["location"] == "model.data" and PATH_KEY not in keys
    loaded = tessera.load(artifact)
    np.testing.assert_allclose(loaded.run(x=x2)["y"], want2, rtol=1e-4, atol=1e-4)
    # a size the artifact does not hold compiles from the weights inside the artifact
    np.testing.assert_allclose(loaded.run(x=x6)["y"], want6, rtol=1e-4, atol=1e-4)


def test_inline_external_data_gives_a_self_contained_copy(tmp_path: Path) -> None:
    path = _save(tmp_path)
    proto = load_model(str(path))
    inline = inline_external_data(proto)
    assert inline is not proto and not list(external_tensors(inline))
    assert list(external_tensors(proto))  # the loaded model is left as it was
    full = onnx.load(str(path))
    got = {t.name: numpy_helper.to_array(t) for t in inline.graph.initializer}
    for t in full.graph.initializer:
        np.testing.assert_array_equal(got[t.name], numpy_helper.to_array(t))
    plain = _model()
    assert inline_external_data(plain) is plain


@pytest.mark.parametrize("mapping", ["1", "0"])
def test_large_external_weights_are_mapped_from_their_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, mapping: str) -> None:
    monkeypatch.setenv("TESSERA_MAP_WEIGHTS", mapping)
    w = RNG.standard_normal((256, 128)).astype(np.float32)  # 128 KiB: mapped
    table = RNG.standard_normal((300, 64)).astype(np.float32)  # read as it is (Gather)
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("Reshape", ["e", "shape"], ["flat"], name="flat"),
         helper.make_node("MatMul", ["flat", "W"], ["y"], name="mm")], "big",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n", 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 128])],
        [numpy_helper.from_array(w, "W"), numpy_helper.from_array(table, "table"),
         numpy_helper.from_array(np.array([-1, 256], np.int64), "shape")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9)
    path = tmp_path / "big.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="big.data",
                    size_threshold=1024)
    proto = load_model(str(path))
    arrays = {t.name: read_initializer(t) for t in proto.graph.initializer}
    assert all(is_aligned(a) for a in arrays.values())
    assert (mapped_region(arrays["W"]) is not None) == (mapping == "1")
    assert mapped_region(arrays["shape"]) is None  # inline in the model
    np.testing.assert_array_equal(arrays["W"], w)
    mod = tessera.compile(str(path), "llvm")
    ids = RNG.integers(0, 300, (3, 4)).astype(np.int64)
    np.testing.assert_allclose(mod.run(ids=ids)["y"], table[ids].reshape(3, 256) @ w,
                               rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_a_weight_at_an_odd_byte_offset_is_read_where_it_is(tmp_path: Path,
                                                             dtype: str) -> None:
    """A weight mapped from its file at an offset no element alignment allows (as protobuf
    puts raw data in a plain .onnx) is read in place by the llvm kernels: no copy, right
    values."""
    table = (RNG.standard_normal((1024, 48)) * 100).astype(dtype)  # 192-384 KiB: mapped
    data = tmp_path / "odd.data"
    data.write_bytes(b"xyz" + table.tobytes())  # at offset 3
    init = numpy_helper.from_array(table, "table")
    onnx.external_data_helper.set_external_data(init, "odd.data", offset=3,
                                                length=table.nbytes)
    init.ClearField("raw_data")
    init.data_location = TensorProto.EXTERNAL
    graph = helper.make_graph(
        [helper.make_node("Gather", ["table", "ids"], ["e"], name="embed"),
         helper.make_node("Add", ["e", "e"], ["y"], name="twice")], "odd",
        [helper.make_tensor_value_info("ids", TensorProto.INT64, ["n"])],
        [helper.make_tensor_value_info("y", init.data_type, ["n", 48])], [init])
    path = tmp_path / "odd.onnx"
    onnx.save_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                      ir_version=9), str(path))
    mod = tessera.compile(str(path), "llvm", kernel_cache=False)
    held = [b for _, b in mod.plan.constants.values() if mapped_region(b) is not None]
    assert len(held) == 1 and held[0].ctypes.data % held[0].dtype.alignment != 0
    for n in (1, 7, 300):
        ids = RNG.integers(0, 1024, n).astype(np.int64)
        np.testing.assert_array_equal(mod.run(ids=ids)["y"], table[ids] + table[ids])


@pytest.mark.parametrize("count", [24, 80000], ids=["read", "mapped"])
@pytest.mark.parametrize("dtype", ["int8", "uint8", "float16", "int32", "int64", "bool",
                                   "float64"])
def test_every_element_type_reads_back_from_external_data(tmp_path: Path, dtype: str,
                                                          count: int) -> None:
    values = (RNG.standard_normal(count) * 50).astype(dtype)
    init = numpy_helper.from_array(values.reshape(4, -1), "c")
    graph = helper.make_graph([helper.make_node("Identity", ["c"], ["y"])], "types", [],
                              [helper.make_tensor_value_info("y", init.data_type, None)],
                              [init])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              ir_version=9)
    path = tmp_path / "types.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, location="types.data",
                    size_threshold=0)
    (t,) = load_model(str(path)).graph.initializer
    assert uses_external(t)
    got = read_initializer(t)
    assert got.dtype == values.dtype
    assert (mapped_region(got) is not None) == (values.nbytes >= MAP_MIN_BYTES)
    np.testing.assert_array_equal(got, values.reshape(4, -1))


@pytest.mark.filterwarnings("ignore:Ignoring unknown external data key")  # onnx.load's
def test_a_model_cannot_name_a_file_for_tessera_to_read(tmp_path: Path) -> None:
    """Tessera's own external-data entries are not believed from a model it did not load:
    a proto naming any file (through entries that look like Tessera's) is refused, not read."""
    secret = tmp_path / "secret.bin"
    secret.write_bytes(bytes(range(256)) * 64)
    path = _save(tmp_path / "m")
    proto = onnx.load(str(path), load_external_data=False)
    for t in external_tensors(proto):
        for key in ("tessera.path", "tessera.path.0123456789abcdef", "tessera.path.guess"):
            t.external_data.add(key=key, value=str(secret))
    assert PATH_KEY not in {e.key for t in external_tensors(proto) for e in t.external_data}
    for model in (proto, proto.SerializeToString()):
        with pytest.raises(ModelImportError, match="came without its path"):
            tessera.compile(model, "llvm")
    # from its path, the locations are the model's own (relative to its folder)
    onnx.save(proto, str(path))
    x = RNG.standard_normal((2, 64)).astype(np.float32)
    np.testing.assert_allclose(tessera.compile(str(path), "llvm").run(x=x)["y"],
                               _reference(path, x), rtol=1e-4, atol=1e-4)
