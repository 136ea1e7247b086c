"""Identical fused groups compiled once: the layers of a model of N identical layers (their own
weights) share one machine-code function, the other layers' kernels being aliases of it in
the object file; the module computes what onnxruntime does, statically and symbolically, and
after export and load. Groups that differ in a constant compiled into the code (a one-element
multiplier) keep code of their own."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest
from backend_cases.support import run_onnxruntime
from onnx import ModelProto, TensorProto, helper, numpy_helper

import tessera
from plugins.llvm.tests.test_build import _check, _kernels
from plugins.llvm.tests.test_winograd import conv_task, with_config
from tessera.errors import CompileError
from tessera.frontend.onnx.importer import import_onnx
from tessera_llvm.build import build_module
from tessera_llvm.loader import load_object

H = 48  # not a multiple of the vector width: the column tails run too
LAYERS = 3
RNG = np.random.default_rng(7)


def _layers_model(rows: int | str, scales: list[float] | None = None) -> ModelProto:
    """``LAYERS`` residual layers ``x = LayerNorm(x + Relu(x @ W + B))`` with weights of their
    own; with ``scales``, ``x = Relu(x @ W) * scale`` per scale instead."""
    nodes, inits, cur = [], [], "x"
    for k in range(LAYERS if scales is None else len(scales)):
        w = (RNG.standard_normal((H, H)) * 0.2).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"W{k}"))
        nodes.append(helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]))
        if scales is not None:
            inits.append(numpy_helper.from_array(np.array(scales[k], np.float32), f"s{k}"))
            nodes += [helper.make_node("Relu", [f"m{k}"], [f"r{k}"]),
                      helper.make_node("Mul", [f"r{k}", f"s{k}"], [f"y{k}"])]
            cur = f"y{k}"
            continue
        for name in (f"B{k}", f"g{k}", f"b{k}"):
            inits.append(numpy_helper.from_array(RNG.standard_normal(H).astype(np.float32),
                                                 name))
        nodes += [helper.make_node("Add", [f"m{k}", f"B{k}"], [f"a{k}"]),
                  helper.make_node("Relu", [f"a{k}"], [f"r{k}"]),
                  helper.make_node("Add", [f"r{k}", cur], [f"s{k}"]),
                  helper.make_node("LayerNormalization", [f"s{k}", f"g{k}", f"b{k}"],
                                   [f"y{k}"], axis=-1)]
        cur = f"y{k}"
    nodes.append(helper.make_node("Identity", [cur], ["y"]))
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, H])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, H])
    graph = helper.make_graph(nodes, "layers", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _defined_functions(object_code: bytes) -> dict[str, tuple[int, int]]:
    """The global functions an ELF64 object file defines: name -> (section, address)."""
    endian = "<" if object_code[5] == 1 else ">"
    shoff, = struct.unpack_from(endian + "Q", object_code, 0x28)
    shentsize, shnum = struct.unpack_from(endian + "HH", object_code, 0x3A)
    sections = [struct.unpack_from(endian + "IIQQQQIIQQ", object_code, shoff + i * shentsize)
                for i in range(shnum)]
    out: dict[str, tuple[int, int]] = {}
    for sec in sections:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        offset, size, link, entsize = sec[4], sec[5], sec[6], sec[9]
        strings = sections[link][4]
        for pos in range(offset + entsize, offset + size, entsize):
            st_name, st_info, _, st_shndx, st_value = struct.unpack_from(endian + "IBBHQ",
                                                                         object_code, pos)
            if st_shndx == 0 or st_info >> 4 != 1 or st_info & 0xF != 2:  # GLOBAL FUNC
                continue
            end = object_code.index(b"\0", strings + st_name)
            out[object_code[strings + st_name:end].decode()] = (st_shndx, st_value)
    return out


def _region(module: tessera.Module):  # noqa: ANN202 - the one llvm CompiledRegion
    (region,) = [r for r in module.compiled.values() if r.backend == "llvm"]
    return region


def _check_shares_code(region) -> None:  # noqa: ANN001 - a CompiledRegion
    """Aliases in the kernel table, and fewer functions in the object than kernels."""
    table = region.handle.table
    assert region.info["shared_kernels"] > 0
    functions = _defined_functions(region.handle.object_code)
    assert all(k["name"] in functions for k in table)
    code = {functions[k["name"]] for k in table}
    assert len(code) == len(table) - region.info["shared_kernels"]


@pytest.fixture(scope="module")
def static() -> tuple[ModelProto, tessera.Module]:
    model = _layers_model(5)
    return model, tessera.compile(model, "llvm")


def test_identical_layers_share_their_code(static: tuple) -> None:
    _, module = static
    region = _region(module)
    # each layer: the product with its epilogue, the layer norm
    assert region.info["shared_kernels"] >= 2 * (LAYERS - 1)
    _check_shares_code(region)


def test_shared_kernels_compute_each_layer_with_its_own_weights(static: tuple) -> None:
    model, module = static
    x = RNG.standard_normal((5, H)).astype(np.float32)
    np.testing.assert_allclose(module.run({"x": x})["y"], run_onnxruntime(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_exported_module_loads_the_aliases(static: tuple, tmp_path: Path) -> None:
    model, module = static
    loaded = tessera.load(module.export(tmp_path / "layers.tar"))
    _check_shares_code(_region(loaded))
    x = RNG.standard_normal((5, H)).astype(np.float32)
    np.testing.assert_allclose(loaded.run({"x": x})["y"], run_onnxruntime(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_code_dumps_hold_each_function_once(tmp_path: Path) -> None:
    module = tessera.compile(_layers_model(3), "llvm", dump_code="ll,tir", dump_dir=tmp_path)
    region = _region(module)
    ll = (tmp_path / f"{region.region.name}.ll").read_text()
    tir = (tmp_path / f"{region.region.name}.tir").read_text()
    shared = region.info["shared_kernels"]
    assert shared > 0 and ll.count(" = alias void (ptr), ptr @") == shared
    own = [k["name"] for k in region.handle.table if "alias_of" not in k]
    assert [line.split("(")[0] for line in tir.splitlines()
            if line.startswith("def ")] == [f"def {name}" for name in own]


def test_symbolic_layers_share_their_code() -> None:
    model = _layers_model("n")
    fn = import_onnx(model, symbolic=True, dim_bounds={"n": (1, 64)})
    module = tessera.compile(fn, "llvm")
    region = _region(module)
    assert region.size_names == ["n"]
    _check_shares_code(region)
    for n in (3, 40):
        x = RNG.standard_normal((n, H)).astype(np.float32)
        np.testing.assert_allclose(module.run({"x": x})["y"],
                                   run_onnxruntime(model, {"x": x})["y"], rtol=1e-5, atol=1e-5)


def test_groups_differing_in_an_inlined_constant_keep_their_own_code() -> None:
    model = _layers_model(4, scales=[2.0, 3.0, 2.0])
    module = tessera.compile(model, "llvm")
    region = _region(module)
    assert region.info["shared_kernels"] == 1  # the third layer runs the first one's code
    _check_shares_code(region)
    x = RNG.standard_normal((4, H)).astype(np.float32)
    np.testing.assert_allclose(module.run({"x": x})["y"], run_onnxruntime(model, {"x": x})["y"],
                               rtol=1e-5, atol=1e-5)


def test_winograd_layers_share_code_and_read_their_own_transformed_weights(
        tmp_path: Path) -> None:
    nodes, inits, cur = [], [], "x"
    for k in range(2):
        w = (RNG.standard_normal((16, 16, 3, 3)) / 12).astype(np.float32)
        inits.append(numpy_helper.from_array(w, f"w{k}"))
        nodes += [helper.make_node("Conv", [cur, f"w{k}"], [f"c{k}"], pads=[1] * 4),
                  helper.make_node("Relu", [f"c{k}"], [f"r{k}"])]
        cur = f"r{k}"
    shape = [1, 16, 10, 10]
    graph = helper.make_graph(nodes, "convs", [helper.make_tensor_value_info(
        "x", TensorProto.FLOAT, shape)], [helper.make_tensor_value_info(
            cur, TensorProto.FLOAT, shape)], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    task = conv_task(tessera.compile(model, "llvm"))
    module = with_config(model, task, {"template": "winograd", "winograd_tile": 2},
                         tmp_path / "records.jsonl")
    region = _region(module)
    convs = [k for k in region.handle.table if "Conv" in k["op"]]
    assert [k.get("alias_of") for k in convs] == [None, convs[0]["name"]]
    weights = [[n for n in k["inputs"] if n.endswith("_winograd2")] for k in convs]
    assert len(weights[0]) == len(weights[1]) == 1 and weights[0] != weights[1]
    x = RNG.standard_normal(shape).astype(np.float32)
    np.testing.assert_allclose(module.run({"x": x})[cur], run_onnxruntime(model, {"x": x})[cur],
                               rtol=1e-4, atol=1e-5)


def test_build_module_exports_aliases() -> None:
    built = build_module(_kernels(), "mod", aliases={"saxpy_again": "saxpy", "act2": "act"})
    assert built.function_names == ["saxpy", "act", "saxpy_again", "act2"]
    assert built.signatures["saxpy_again"] == built.signatures["saxpy"]
    assert built.workspaces["act2"] == built.workspaces["act"]
    functions = _defined_functions(built.object_code)
    assert functions["saxpy_again"] == functions["saxpy"]
    lib = load_object(built.object_code, ["saxpy_again", "act2"],
                      signatures=built.signatures, workspaces=built.workspaces)
    rng = np.random.default_rng(3)
    _check(lib, rng, ("saxpy_again", "act2"))
    _check(built.load(), rng)


@pytest.mark.parametrize("aliases, message", [
    ({"other": "missing"}, "not a function defined"),
    ({"act": "saxpy"}, "already a name"),
])
def test_build_module_refuses_bad_aliases(aliases: dict[str, str], message: str) -> None:
    with pytest.raises(CompileError, match=message):
        build_module(_kernels(), "mod", aliases=aliases)
