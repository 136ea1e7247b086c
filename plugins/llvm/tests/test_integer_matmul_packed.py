"""MatMulInteger with constant 8-bit weights on the llvm backend: B packed in column panels of
int16 pairs (MatMulIntegerPacked, one ``pmaddwd``/``vpdpwssd`` lane per two products) and the
A zero point applied once per output as ``a_zp * colsum(B)``. Results equal exact integer
arithmetic on random data across shapes, signs and zero points (of A, and of B, per tensor or
per column), any K (the last word padded), narrow panels, and the case left unpacked (columns
that no vector of 4 lanes or more divides)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.frontend.onnx.importer import import_onnx
from tessera.ops.quant import matmul_integer, matmul_integer_packed, pack_integer_matmul_weight
from tessera_llvm import lowering
from tessera_llvm.cpu import cpu_info
from tessera_llvm.lowering import integer_word, pack_matmul_weights

NP = {TensorProto.UINT8: np.uint8, TensorProto.INT8: np.int8}


def _model(m: int, k: int, n: int, a_type: int, b: np.ndarray, a_zp: bool,
           b_zp: np.ndarray | None) -> onnx.ModelProto:
    inputs = [helper.make_tensor_value_info("a", a_type, [m, k])]
    names = ["a", "b"]
    inits = [numpy_helper.from_array(b, "b")]
    if a_zp or b_zp is not None:
        names.append("za" if a_zp else "")
        if a_zp:
            inputs.append(helper.make_tensor_value_info("za", a_type, []))
    if b_zp is not None:
        names.append("zb")
        inits.append(numpy_helper.from_array(b_zp, "zb"))
    graph = helper.make_graph([helper.make_node("MatMulInteger", names, ["y"])], "mmi", inputs,
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [m, n])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _ops(model: onnx.ModelProto) -> list[str]:
    func = import_onnx(model)
    pack_matmul_weights(func, cpu_info())
    return [node.op for node in func.nodes]


@pytest.mark.parametrize("m,k,n", [(1, 16, 32), (7, 40, 64), (33, 384, 48), (5, 12, 16),
                                   (3, 2, 16)])
@pytest.mark.parametrize("a_type,b_type", [(TensorProto.UINT8, TensorProto.INT8),
                                           (TensorProto.INT8, TensorProto.INT8),
                                           (TensorProto.UINT8, TensorProto.UINT8)])
@pytest.mark.parametrize("a_zp", [False, True])
def test_packed_integer_products_are_exact(m: int, k: int, n: int, a_type: int, b_type: int,
                                           a_zp: bool) -> None:
    rng = np.random.default_rng(m * 1000 + k + n)
    at, bt = NP[a_type], NP[b_type]
    info_b = np.iinfo(bt)
    b = rng.integers(info_b.min, info_b.max + 1, (k, n)).astype(bt)
    b[0, :2] = info_b.min  # the extremes in one pair
    b[1, :1] = info_b.min
    model = _model(m, k, n, a_type, b, a_zp, None)
    assert "MatMulIntegerPacked" in _ops(model)
    _check_exact(tessera.compile(model, "llvm"), rng, at, b, m, a_zp, word=2)


def _check_exact(mod: tessera.Module, rng: np.random.Generator, at: type, b: np.ndarray,
                 m: int, a_zp: bool, word: int) -> None:
    """Two runs of ``mod`` (``y = (a - za) @ b`` for ``a (m, K)`` of type ``at``) against exact
    integer arithmetic, with the extremes of ``at`` in A's first word of the first rows (one
    extreme per run, or both across two rows) and, with ``a_zp``, a random A zero point."""
    info = np.iinfo(at)
    for trial in range(2):
        a = rng.integers(info.min, info.max + 1, (m, b.shape[0])).astype(at)
        a[0, :word] = info.min if trial else info.max
        if word == 4:
            a[1, :word] = info.max if trial else info.min
        feeds = {"a": a}
        zero = 0
        if a_zp:
            zero = int(rng.integers(info.min, info.max + 1))
            feeds["za"] = np.array(zero, at)
        want = ((a.astype(np.int64) - zero) @ b.astype(np.int64)).astype(np.int32)
        np.testing.assert_array_equal(mod.run(**feeds)["y"], want, err_msg=f"trial {trial}")


def test_zero_points_any_k_and_narrow_panels_pack() -> None:
    rng = np.random.default_rng(1)
    b = rng.integers(-128, 128, (24, 32)).astype(np.int8)
    bu = rng.integers(0, 256, (24, 32)).astype(np.uint8)
    cases = [(_model(4, 24, 32, TensorProto.UINT8, b, True, np.array(0, np.int8)), b, 0),
             # a B zero point, per tensor or per column: B - zb packed (int16 pairs)
             (_model(4, 24, 32, TensorProto.UINT8, b, True, np.array(3, np.int8)), b, 3),
             (_model(4, 24, 32, TensorProto.UINT8, bu, True, np.array(200, np.uint8)), bu, 200),
             (_model(4, 24, 32, TensorProto.UINT8, bu, True,
                     np.arange(100, 132).astype(np.uint8)), bu, np.arange(100, 132)),
             # 20 columns: panels of 4; an odd K: the last pair padded
             (_model(4, 24, 20, TensorProto.UINT8, b[:, :20].copy(), True, None), b[:, :20], 0),
             (_model(4, 23, 32, TensorProto.UINT8, b[:23].copy(), True, None), b[:23], 0),
             (_model(5, 21, 32, TensorProto.INT8, b[:21].copy(), True, np.array(-7, np.int8)),
              b[:21], -7)]
    for model, weight, zb in cases:
        assert "MatMulIntegerPacked" in _ops(model)
        mod = tessera.compile(model, "llvm")
        k = weight.shape[0]
        rows = model.graph.input[0].type.tensor_type.shape.dim[0].dim_value
        at = NP[model.graph.input[0].type.tensor_type.elem_type]
        info = np.iinfo(at)
        a = rng.integers(info.min, info.max + 1, (rows, k)).astype(at)
        a[0, -3:] = info.max  # the last, padded word
        want = (a.astype(np.int64) - 9) @ (weight.astype(np.int64) - zb)
        got = mod.run(a=a, za=np.array(9, at))["y"]
        np.testing.assert_array_equal(got, want.astype(np.int32))
    # columns no vector of 4 or more lanes divides stay MatMulInteger
    assert "MatMulIntegerPacked" not in _ops(_model(4, 24, 10, TensorProto.UINT8,
                                                    b[:, :10].copy(), True, None))


def test_the_op_is_matmul_integer_with_packed_weights() -> None:
    rng = np.random.default_rng(2)
    a = rng.integers(0, 256, (3, 5, 20)).astype(np.uint8)
    b = rng.integers(-128, 128, (20, 32)).astype(np.int8)
    zp = np.array(17, np.uint8)
    colsum = b.astype(np.int64).sum(axis=0).astype(np.int32)
    np.testing.assert_array_equal(
        matmul_integer_packed(a, pack_integer_matmul_weight(b, 16), zp, colsum),
        matmul_integer(a, b, zp))
    np.testing.assert_array_equal(matmul_integer_packed(a, pack_integer_matmul_weight(b, 32)),
                                  matmul_integer(a, b))


def _dynamic_model(k: int, n: int, b: np.ndarray) -> onnx.ModelProto:
    """``MatMulInteger(DynamicQuantizeLinear(x))`` with ``x (m, k)``, ``m`` a run-time size:
    a dynamically quantized encoder's dense layer."""
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "s", "z"]),
             helper.make_node("MatMulInteger", ["q", "b", "z"], ["y"])]
    graph = helper.make_graph(
        nodes, "dyn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["m", k])],
        [helper.make_tensor_value_info("y", TensorProto.INT32, ["m", n]),
         helper.make_tensor_value_info("s", TensorProto.FLOAT, [])],
        [numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_run_time_rows_pairs_made_once_and_ranges_by_lanes(tmp_path) -> None:
    # A's int16 pairs are a stage of their own (computed once, not per column tile), the
    # quantization's range is reduced by rows and 16 lanes; both with a run-time row count,
    # exact against the numpy reference at rows below, at and past the register tile
    rng = np.random.default_rng(3)
    b = rng.integers(-128, 128, (96, 48)).astype(np.int8)
    model = _dynamic_model(96, 48, b)
    mod = tessera.compile(model, "llvm", config=tessera.CompileConfig(
        dump_code="tir", dump_dir=str(tmp_path)))
    ref = tessera.compile(model, "ref")
    tir_text = "".join(p.read_text() for p in tmp_path.glob("*.tir"))
    assert "a_pairs = allocate" in tir_text and "lane_max = allocate" in tir_text
    for m in (1, 3, 4, 7, 13, 64):
        x = rng.standard_normal((m, 96)).astype(np.float32)
        x[m - 1, 95], x[0, 17] = 6.5, -3.25  # the extremes in different rows and lanes
        got, want = mod.run(x=x), ref.run(x=x)
        np.testing.assert_array_equal(got["s"], want["s"], err_msg=f"m={m}")
        np.testing.assert_array_equal(got["y"], want["y"], err_msg=f"m={m}")


@pytest.mark.parametrize("mcpu,word,instruction", [
    ("x86-64-v3", 2, "vpmaddwd"), ("cascadelake", 4, "vpdpbusd"), ("alderlake", 4, "vpdpbusd")])
def test_cpus_with_a_four_byte_dot_product_pack_bytes_four_to_a_word(
        tmp_path, mcpu: str, word: int, instruction: str) -> None:
    # vpdpbusd (AVX-512 VNNI, AVX-VNNI) multiplies four bytes per int32 lane where pmaddwd
    # multiplies two int16s: CPUs that have it get B in words of four int8 values
    cpu = cpu_info(mcpu)
    assert integer_word(cpu) == word
    rng = np.random.default_rng(4)
    b = rng.integers(-128, 128, (64, 32)).astype(np.int8)
    for a_type in (TensorProto.UINT8, TensorProto.INT8):
        func = import_onnx(_model(6, 64, 32, a_type, b, False, None))
        pack_matmul_weights(func, cpu)
        (node,) = [n for n in func.nodes if n.op == "MatMulIntegerPacked"]
        assert node.attrs["word"] == word
        assert len(node.inputs) == (4 if word == 4 and a_type == TensorProto.INT8 else 2)
    tessera.compile(_model(6, 64, 32, TensorProto.UINT8, b, True, None), f"llvm -mcpu={mcpu}",
                    config=tessera.CompileConfig(dump_code="asm", dump_dir=str(tmp_path)))
    asm = "".join(p.read_text() for p in tmp_path.glob("*.asm"))
    assert instruction in asm


@pytest.mark.parametrize("a_type", [TensorProto.UINT8, TensorProto.INT8])
@pytest.mark.parametrize("a_zp", [False, True])
def test_four_byte_words_are_exact_on_any_cpu(monkeypatch, a_type: int, a_zp: bool) -> None:
    # packed as for a VNNI CPU, compiled for this one (whose code generator takes each
    # dp4a_us lane apart exactly where it has no vpdpbusd): exact integer arithmetic, the
    # extremes of A and B in one word, rows past the register tile
    monkeypatch.setattr(lowering, "integer_word", lambda cpu: 4)
    rng = np.random.default_rng(11 + a_type + a_zp)
    b = rng.integers(-128, 128, (96, 48)).astype(np.int8)
    b[:4, 0] = -128
    b[:4, 1] = 127
    model = _model(13, 96, 48, a_type, b, a_zp, None)
    func = import_onnx(model)
    lowering.pack_matmul_weights(func, cpu_info())
    assert [n.attrs.get("word") for n in func.nodes if n.op == "MatMulIntegerPacked"] == [4]
    _check_exact(tessera.compile(model, "llvm", kernel_cache=False), rng, NP[a_type], b, 13,
                 a_zp, word=4)
