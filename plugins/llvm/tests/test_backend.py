"""The llvm backend as Tessera's partitioner and runtime see it: what it claims, its target
options, fused kernels, optimization levels, models that mix llvm with the reference fallback,
int8 QDQ models, the thread pool size, and the errors users get."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from backend_cases.support import (
    Case,
    compile_cases,
    conv_block_model,
    kernels_of,
    run_onnxruntime,
    x86_only,
)
from onnx import TensorProto, helper, numpy_helper
from tiers import SLOW, slow_except

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import CompileError, RunError, TargetError, TesseraError
from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.plugin.backend import CompileOptions
from tessera.plugin.manager import get_backend
from tessera.plugin.target import TargetKind
from tessera.topi.registry import has_compute, registered_ops
from tessera_llvm import parallel
from tessera_llvm.backend import LLVMBackend

ROOT = Path(__file__).resolve().parents[3]  # the repository root
RNG = np.random.default_rng(7)


def rand(*shape: int, dtype: str = "float32", lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    if np.dtype(dtype).kind in "iu":
        return RNG.integers(int(lo), int(hi) + 1, size=shape).astype(dtype)
    return RNG.uniform(lo, hi, shape).astype(dtype)


@pytest.fixture
def threads() -> Iterator[None]:
    """Restore the kernel pool's thread count after the test (compiling with -num-threads and
    set_num_threads change it for the whole process)."""
    before = parallel.get_num_threads()
    yield
    parallel.set_num_threads(before)


def small_cnn(seed: int = 3) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """Conv -> Relu -> MaxPool -> Flatten -> Gemm -> Softmax, big enough that the conv, pool
    and dense schedules run parallel loops."""
    rng = np.random.default_rng(seed)
    inits = {"w": rng.standard_normal((32, 16, 3, 3)) * 0.2, "b": rng.standard_normal(32) * 0.1,
             "fw": rng.standard_normal((64, 32 * 14 * 14)) * 0.02,
             "fb": rng.standard_normal(64) * 0.1}
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], name="conv", pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"], name="relu"),
        helper.make_node("MaxPool", ["r"], ["p"], name="pool", kernel_shape=[2, 2],
                         strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "fw", "fb"], ["g"], name="fc", transB=1),
        helper.make_node("Softmax", ["g"], ["y"], name="softmax", axis=-1),
    ]
    graph = helper.make_graph(
        nodes, "cnn", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 16, 28, 28])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 64])],
        [numpy_helper.from_array(a.astype(np.float32), n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": rng.standard_normal((2, 16, 28, 28)).astype(np.float32)}


# -- the backend and its claims -------------------------------------------------------------------

def test_backend_is_registered_and_available() -> None:
    backend = get_backend("llvm")
    assert isinstance(backend, LLVMBackend)
    assert backend.device == "cpu" and backend.available() is None
    assert {"mcpu", "mattr", "num-threads"} <= set(backend.options)


def test_claims_exactly_the_ops_with_computes() -> None:
    claimed = {p.op for p in get_backend("llvm").claims(TargetKind("llvm"))}
    computes = set(registered_ops()) - {"TestOnlyWrongType"}  # registered by a topi test
    assert computes - claimed == set()
    assert claimed <= set(registered_ops()) | {"Loop"}  # whole loops: test_native_loop.py
    assert "Loop" not in {p.op for p in get_backend("llvm").claims(
        TargetKind("llvm", fallback=True))}
    assert {"Conv", "ConvNCHWc", "PoolNCHWc", "LayoutTransform", "MatMul", "Softmax"} <= claimed
    for op in ("TopK", "LSTM", "BitwiseNot", "NonMaxSuppression"):
        assert op not in claimed and not has_compute(op)


#: Nodes whose op has a compute but whose attributes or types the compute does not handle:
#: (label, op, inputs, attrs, num_outputs, words of the reason).
UNSUPPORTED = [
    ("maxpool_indices", "MaxPool", [rand(1, 2, 6, 6)], {"kernel_shape": [2, 2]}, 2, "Indices"),
    ("bn_training", "BatchNormalization",
     [rand(2, 3, 4), rand(3), rand(3), rand(3), rand(3, lo=0.1, hi=1)], {"training_mode": 1},
     None, "training"),
    ("reduce_prod_long_axis", "ReduceProd", [rand(4, 100, lo=0.9, hi=1.1)],
     {"axes": [1], "keepdims": 0}, None, "unrolled"),
    ("integer_gemm_alpha", "Gemm", [rand(3, 4, dtype="int32", lo=-5, hi=5),
                                    rand(4, 2, dtype="int32", lo=-5, hi=5)],
     {"alpha": 2.0}, None, "alpha"),
]


@pytest.mark.parametrize("label,op,inputs,attrs,num_outputs,reason", UNSUPPORTED,
                         ids=[u[0] for u in UNSUPPORTED])
def test_unsupported_attributes_fall_back_to_ref(label: str, op: str, inputs: list,
                                                 attrs: dict, num_outputs: int | None,
                                                 reason: str) -> None:
    """The node is not claimed; it runs on ref, is listed in the report, and a CompileError
    names it when the region is handed to the backend anyway."""
    g = Function("f")
    x = g.add_input("x0", TensorType.of(inputs[0]))
    rest = [g.constant(a, f"c{i}") for i, a in enumerate(inputs[1:], 1)]
    node = g.add_node(op, [x, *rest], attrs, num_outputs=num_outputs)
    g.outputs = list(node.outputs)
    module = tessera.compile(g, target="llvm", disabled_passes=["SimplifyInference"])
    report = module.partition_report()
    assert [(op_, be) for _, op_, be in report.fallback] == [(op, "ref")]
    assert {r.backend for r in report.regions} == {"ref"}
    assert f"({op}) -> ref" in report.table()
    got = module.run(x0=inputs[0])
    want = evaluate_function(g, {"x0": inputs[0]})
    assert got is not None
    for v in g.outputs:
        np.testing.assert_allclose(got[v.name], want[v.name], rtol=1e-6)
    with pytest.raises(CompileError, match=f"{node.name}.*{reason}"):
        LLVMBackend().compile(g, TargetKind("llvm"), CompileOptions())


def test_onnx_max_pool_with_indices_falls_back_and_the_rest_stays_on_llvm() -> None:
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("MaxPool", ["r"], ["p", "idx"], name="pool", kernel_shape=[2, 2],
                              strides=[2, 2]),
             helper.make_node("Sigmoid", ["p"], ["y"], name="sigmoid")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 4, 4]),
         helper.make_tensor_value_info("idx", TensorProto.INT64, [1, 3, 4, 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    module = tessera.compile(model, target="llvm")
    report = module.partition_report()
    assert [(op, be) for _, op, be in report.fallback] == [("MaxPool", "ref")]
    assert [r.backend for r in report.regions] == ["llvm", "ref", "llvm"]
    x = rand(1, 3, 8, 8)
    got, want = module.run(x=x), run_onnxruntime(model, {"x": x})
    assert got is not None
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got["idx"], want["idx"])


def test_every_unclaimed_node_is_reported_at_once() -> None:
    g = Function("f")
    x = g.add_input("x", TensorType((3, 20), "float32"))
    r = g.op("Relu", x)
    top = g.add_node("TopK", [r], {"k": 4, "axis": -1}, num_outputs=2)
    i32 = g.op("Cast", top.outputs[1], to="int32")
    bits = g.op("BitwiseNot", i32)
    g.outputs = [top.outputs[0], bits]
    module = tessera.compile(g, target="llvm")
    fallback = module.partition_report().fallback
    assert sorted(op for _, op, _ in fallback) == ["BitwiseNot", "TopK"]
    xv = rand(3, 20)
    got = module.run(x=xv)
    want = evaluate_function(g, {"x": xv})
    assert got is not None
    for v in g.outputs:
        np.testing.assert_array_equal(got[v.name], want[v.name])


def test_model_mixing_llvm_and_ref_matches_onnxruntime() -> None:
    """Conv+Relu on llvm, TopK (no compute) on ref, the rest on llvm again."""
    w = rand(8, 3, 3, 3)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Reshape", ["r", "shape"], ["flat"], name="reshape"),
             helper.make_node("TopK", ["flat", "k"], ["v", "i"], name="topk", axis=-1),
             helper.make_node("Mul", ["v", "v"], ["sq"], name="square"),
             helper.make_node("ReduceSum", ["sq", "axes"], ["y"], name="sum", keepdims=1)]
    inits = [numpy_helper.from_array(w, "w"),
             numpy_helper.from_array(np.array([2, -1], np.int64), "shape"),
             numpy_helper.from_array(np.array([7], np.int64), "k"),
             numpy_helper.from_array(np.array([1], np.int64), "axes")]
    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 1]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [2, 7])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    module = tessera.compile(model, target="llvm")
    report = module.partition_report()
    assert [r.backend for r in report.regions] == ["llvm", "ref", "llvm"]
    assert [op for _, op, _ in report.fallback] == ["TopK"]
    # each llvm region runs as one native call, the ref kernel on its own
    assert [run[0].backend for run in module.executor.runs] == ["llvm", "ref", "llvm"]
    x = rand(2, 3, 6, 6)
    got, want = module.run(x=x), run_onnxruntime(model, {"x": x})
    assert got is not None
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-5)
    np.testing.assert_array_equal(got["i"], want["i"])


# -- target options -------------------------------------------------------------------------------

@x86_only
@pytest.mark.slow
def test_mcpu_generic_x86_64_v2_gives_the_same_numbers(tmp_path: Path) -> None:
    model, inputs = conv_block_model(seed=1)
    host = tessera.compile(model, target="llvm")
    v2 = tessera.compile(model, target="llvm -mcpu=x86-64-v2", dump_code="asm",
                         dump_dir=tmp_path)
    (cr,) = v2.compiled.values()
    assert cr.handle.mcpu == "x86-64-v2"
    asm = (tmp_path / f"{cr.region.name}.asm").read_text()
    assert "xmm" in asm and "ymm" not in asm and "zmm" not in asm  # SSE only
    want = run_onnxruntime(model, inputs)["y"]
    a, b = host.run(**inputs), v2.run(**inputs)
    assert a is not None and b is not None
    np.testing.assert_allclose(a["y"], want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(b["y"], a["y"], rtol=1e-5, atol=1e-5)


@x86_only
def test_mattr_switches_features_off(tmp_path: Path) -> None:
    model, inputs = conv_block_model(seed=2)
    mod = tessera.compile(model, target="llvm -mattr=-avx512f", dump_code="asm",
                          dump_dir=tmp_path)
    (cr,) = mod.compiled.values()
    assert "zmm" not in (tmp_path / f"{cr.region.name}.asm").read_text()
    got = mod.run(**inputs)
    assert got is not None
    np.testing.assert_allclose(got["y"], run_onnxruntime(model, inputs)["y"], rtol=1e-5,
                               atol=1e-5)


@pytest.mark.parametrize("value", ["0", "-2", "abc", "1.5"])
def test_bad_num_threads_is_a_clear_error(value: str, threads: None) -> None:
    model, _ = conv_block_model()
    with pytest.raises(TesseraError, match=f"-num-threads={value}: expected a positive integer"):
        tessera.compile(model, target=f"llvm -num-threads={value}")


def test_num_threads_option_sets_the_pool(threads: None) -> None:
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="llvm -num-threads=1")
    assert parallel.get_num_threads() == 1
    got = mod.run(**inputs)
    assert got is not None
    np.testing.assert_allclose(got["y"], run_onnxruntime(model, inputs)["y"], rtol=1e-5,
                               atol=1e-5)


def test_unknown_option_is_an_error_listing_the_known_ones() -> None:
    model, _ = conv_block_model()
    with pytest.raises(TargetError, match="-foo") as info:
        tessera.compile(model, target="llvm -foo=1")
    assert "-mcpu" in str(info.value) and "-num-threads" in str(info.value)


@x86_only
@pytest.mark.slow
def test_unknown_mcpu_is_an_error_not_a_crash() -> None:
    script = textwrap.dedent("""
        import sys
        sys.path.insert(0, "tests")
        import tessera
        from backend_cases.support import conv_block_model
        from tessera.errors import TesseraError
        model, _ = conv_block_model()
        try:
            tessera.compile(model, target="llvm -mcpu=no-such-cpu")
        except TesseraError as err:
            print("TesseraError:", err)
        """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "TesseraError:" in proc.stdout and "no-such-cpu" in proc.stdout


# -- fusion and optimization levels ---------------------------------------------------------------

def test_conv_bn_add_relu_is_one_kernel() -> None:
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="llvm")
    kernels = kernels_of(mod)
    fused = [op for _, op in kernels if "Conv" in op]
    assert fused == ["ConvNCHWc+Add+Relu"], kernels
    # the rest are the layout changes into and out of the blocked layout
    assert {op for _, op in kernels} - {"ConvNCHWc+Add+Relu"} == {"LayoutTransform"}
    (cr,) = mod.compiled.values()
    assert cr.info["kernels"] == len(kernels) == len(cr.kernels)
    templates = {s["template"] for s in cr.info["schedules"].values()}
    assert "conv2d_NCHWc" in templates
    got = mod.run(**inputs)
    assert got is not None
    np.testing.assert_allclose(got["y"], run_onnxruntime(model, inputs)["y"], rtol=1e-5,
                               atol=1e-5)
    profile = mod.profile(**inputs)
    ops = [k.op for k in profile.kernels]
    assert ops.count("ConvNCHWc+Add+Relu") == 1 and "Relu" not in ops
    assert {k.backend for k in profile.kernels} == {"llvm"}


@pytest.mark.parametrize("opt_level", [pytest.param(0, marks=SLOW), pytest.param(1, marks=SLOW),
                                       2])
def test_opt_levels_give_the_same_results(opt_level: int) -> None:
    model, inputs = small_cnn()
    want = run_onnxruntime(model, inputs)["y"]
    base = tessera.compile(model, target="llvm", opt_level=3)
    mod = tessera.compile(model, target="llvm", opt_level=opt_level)
    assert not mod.partition_report().fallback
    a, b = base.run(**inputs), mod.run(**inputs)
    assert a is not None and b is not None
    np.testing.assert_allclose(a["y"], want, rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(b["y"], a["y"], rtol=1e-4, atol=1e-6)
    ops = {op for _, op in kernels_of(mod)}
    blocked = any("ConvNCHWc" in op for op in ops)
    assert blocked == (opt_level >= 2)  # the blocked layout is an -O2 rewrite
    if opt_level == 0:  # no fusion: every node is its own kernel
        assert all("+" not in op for op in ops), ops


def test_thread_count_does_not_change_results(threads: None) -> None:
    model, inputs = small_cnn()
    mod = tessera.compile(model, target="llvm")
    assert any(s["template"] == "conv2d_NCHWc"
               for cr in mod.compiled.values() for s in cr.info["schedules"].values())
    results = []
    for n in (1, 2, 3):
        parallel.set_num_threads(n)
        assert parallel.get_num_threads() == n
        got = mod.run(**inputs)
        assert got is not None
        results.append(got["y"])
    np.testing.assert_array_equal(results[0], results[1])
    np.testing.assert_array_equal(results[0], results[2])
    np.testing.assert_allclose(results[0], run_onnxruntime(model, inputs)["y"], rtol=1e-4,
                               atol=1e-6)


@pytest.mark.slow
def test_tessera_num_threads_environment_variable() -> None:
    script = ("from tessera_llvm import parallel; "
              "print(parallel.get_num_threads())")
    for value, want in (("1", "1"), ("3", "3")):
        proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                              text=True, timeout=120,
                              env={**os.environ, "TESSERA_NUM_THREADS": value})
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.strip() == want


# -- the blocked layout next to other ops ---------------------------------------------------------

def _graph_model(nodes: list[onnx.NodeProto], inputs: dict[str, list[int]], outputs: list[str],
                 inits: dict[str, np.ndarray]) -> onnx.ModelProto:
    """A model of ``nodes``; output types from ONNX shape inference."""
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s)
                     for n, s in inputs.items()],
        [onnx.ValueInfoProto(name=n) for n in outputs],
        [numpy_helper.from_array(v, k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    inferred = onnx.shape_inference.infer_shapes(model)
    types = {v.name: v for v in [*inferred.graph.value_info, *inferred.graph.output]}
    for out in model.graph.output:
        out.CopyFrom(types[out.name])
    return model


def _conv(x: str, y: str, w: str, b: str | None = None, **attrs: object) -> onnx.NodeProto:
    attrs.setdefault("pads", [1, 1, 1, 1])
    return helper.make_node("Conv", [x, w] + ([b] if b else []), [y], **attrs)


N = helper.make_node
W24 = {"w": rand(24, 16, 3, 3) * 0.2, "b": rand(24)}
#: Graphs where a blocked (NCHWc) convolution meets ops that must see NCHW data or that fuse
#: into its epilogue: (nodes, extra inputs, outputs, initializers).
LAYOUT_GRAPHS = {
    "silu_epilogue": ([_conv("x", "c", "w", "b"), N("Sigmoid", ["c"], ["s"]),
                       N("Mul", ["c", "s"], ["y"])], {}, ["y"], W24),
    "clip_epilogue": ([_conv("x", "c", "w", "b"), N("Clip", ["c", "lo", "hi"], ["y"])], {},
                      ["y"], {**W24, "lo": np.array(0, np.float32),
                              "hi": np.array(0.5, np.float32)}),
    "add_per_channel_input": ([_conv("x", "c", "w"), N("Add", ["c", "s"], ["y"])],
                              {"s": [1, 24, 1, 1]}, ["y"], W24),
    "add_spatial_plane": ([_conv("x", "c", "w", "b"), N("Add", ["c", "p"], ["y"])],
                          {"p": [1, 1, 9, 11]}, ["y"], W24),
    "conv_output_used_twice": ([_conv("x", "c", "w", "b"), N("Relu", ["c"], ["y"])], {},
                               ["y", "c"], W24),
    "pool_then_conv": ([_conv("x", "c", "w", "b"),
                        N("MaxPool", ["c"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
                        _conv("p", "y", "w2")], {}, ["y"], {**W24, "w2": rand(8, 24, 3, 3)}),
    "concat_24_and_12_channels": ([_conv("x", "c1", "w", "b"), _conv("x", "c2", "w2"),
                                   N("Concat", ["c1", "c2"], ["cc"], axis=1),
                                   _conv("cc", "y", "w3")], {}, ["y"],
                                  {**W24, "w2": rand(12, 16, 3, 3), "w3": rand(8, 36, 3, 3)}),
    "reduce_and_softmax_over_channels": ([_conv("x", "c", "w", "b"),
                                          N("ReduceMean", ["c"], ["m"], axes=[1], keepdims=1),
                                          N("Softmax", ["c"], ["y"], axis=1)], {}, ["y", "m"],
                                         W24),
    "channel_shuffle": ([_conv("x", "c", "w", "b"), N("Reshape", ["c", "s1"], ["r"]),
                         N("Transpose", ["r"], ["t"], perm=[0, 2, 1, 3, 4]),
                         N("Reshape", ["t", "s2"], ["y"])], {}, ["y"],
                        {**W24, "s1": np.array([2, 3, 8, 9, 11], np.int64),
                         "s2": np.array([2, 24, 9, 11], np.int64)}),
    "split_channels": ([_conv("x", "c", "w", "b"), N("Split", ["c", "sp"], ["y1", "y2"], axis=1)],
                       {}, ["y1", "y2"], {**W24, "sp": np.array([10, 14], np.int64)}),
    "depthwise_then_pointwise": ([_conv("x", "d", "dw", group=16), N("Relu", ["d"], ["r"]),
                                  _conv("r", "y", "pw", pads=[0, 0, 0, 0])], {}, ["y"],
                                 {"dw": rand(16, 1, 3, 3), "pw": rand(24, 16, 1, 1)}),
    "residual": ([_conv("x", "c", "wa"), N("Relu", ["c"], ["r"]), _conv("r", "c2", "wb"),
                  N("Add", ["c2", "x"], ["y"])], {}, ["y"],
                 {"wa": rand(16, 16, 3, 3) * 0.2, "wb": rand(16, 16, 3, 3) * 0.2}),
    "seven_output_channels": ([_conv("x", "y", "w7", strides=[2, 2], pads=[0, 1, 1, 0])], {},
                              ["y"], {"w7": rand(7, 16, 3, 3)}),
    "gap_flatten_gemm": ([_conv("x", "c", "w", "b"), N("GlobalAveragePool", ["c"], ["g"]),
                          N("Flatten", ["g"], ["f"]), N("Gemm", ["f", "fw"], ["y"], transB=1)],
                         {}, ["y"], {**W24, "fw": rand(10, 24)}),
    # 72 and 1000 output channels: padded to whole 16-channel vectors on AVX-512
    "padded_head": ([_conv("x", "c", "w72", "b72", pads=[0, 0, 0, 0]), N("Relu", ["c"], ["r"]),
                     N("MaxPool", ["r"], ["m"], kernel_shape=[2, 2], strides=[2, 2]),
                     N("GlobalAveragePool", ["m"], ["g"]), N("Flatten", ["g"], ["f"]),
                     N("Softmax", ["f"], ["y"])], {}, ["y"],
                    {"w72": rand(72, 16, 1, 1), "b72": rand(72)}),
    "padded_meets_add_and_conv": ([_conv("x", "c", "w1000"), N("Add", ["c", "s"], ["a"]),
                                   _conv("a", "y", "w2"), N("Sigmoid", ["c"], ["z"])],
                                  {"s": [2, 1000, 9, 11]}, ["y", "z"],
                                  {"w1000": rand(1000, 16, 3, 3) * 0.1,
                                   "w2": rand(8, 1000, 1, 1) * 0.05}),
}


@pytest.mark.parametrize("name", slow_except(sorted(LAYOUT_GRAPHS), fast={
    "seven_output_channels", "clip_epilogue", "channel_shuffle", "depthwise_then_pointwise",
    "conv_output_used_twice"}))
def test_blocked_convolutions_meet_other_ops(name: str) -> None:
    nodes, extra, outputs, inits = LAYOUT_GRAPHS[name]
    inputs = {"x": [2, 16, 9, 11], **extra}
    model = _graph_model(nodes, inputs, outputs, inits)
    feeds = {k: rand(*s) for k, s in inputs.items()}
    mod = tessera.compile(model, target="llvm")
    report = mod.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"llvm"}
    got, want = mod.run(**feeds), run_onnxruntime(model, feeds)
    assert got is not None
    for out in outputs:
        np.testing.assert_allclose(got[out], want[out], rtol=1e-4, atol=1e-5, err_msg=out)


@pytest.mark.slow
def test_output_channels_padded_to_whole_vectors() -> None:
    """A conv with 1000 output channels gets full-width blocks with zero padding channels
    (1024 with 16 lanes: an even block count), which never reach the outputs."""
    from tessera_llvm.cpu import cpu_info

    lanes = cpu_info().vector_lanes
    nodes, extra, outputs, inits = LAYOUT_GRAPHS["padded_meets_add_and_conv"]
    model = _graph_model(nodes, {"x": [2, 16, 9, 11], **extra}, outputs, inits)
    mod = tessera.compile(model, target="llvm")
    (cr,) = mod.compiled.values()
    convs = {tuple(np.shape(v)) for v in cr.constants.values() if np.ndim(v) == 6}
    blocks = 1000 // lanes if 1000 % lanes == 0 else 1024 // lanes
    assert any(c[0] == blocks and c[5] == lanes for c in convs), convs
    assert mod.run(x=rand(2, 16, 9, 11), s=rand(2, 1000, 9, 11))["z"].shape == (2, 1000, 9, 11)


@pytest.mark.parametrize("hw, batch", [pytest.param((14, 14), 1, marks=SLOW),
                                       pytest.param((28, 28), 1, marks=SLOW), ((7, 7), 1),
                                       pytest.param((14, 14), 2, marks=SLOW)])
def test_grouped_pointwise_convs_with_narrow_groups(hw: tuple[int, int], batch: int) -> None:
    """ShuffleNet's grouped 1x1 convs (34 channels per group) run as batched matrix products
    vectorized over the pixels (196 padded to 208) unless padding would add too much (49)."""
    from tessera_llvm.cpu import cpu_info

    lanes = cpu_info().vector_lanes
    nodes = [_conv("x", "c", "wg", "bg", group=4, pads=[0, 0, 0, 0]), N("Relu", ["c"], ["r"]),
             _conv("r", "y", "wg2", group=4, pads=[0, 0, 0, 0])]
    inits = {"wg": rand(136, 34, 1, 1) * 0.2, "bg": rand(136), "wg2": rand(136, 34, 1, 1) * 0.2}
    model = _graph_model(nodes, {"x": [batch, 136, *hw]}, ["y"], inits)
    feeds = {"x": rand(batch, 136, *hw)}
    mod = tessera.compile(model, target="llvm")
    pixels = hw[0] * hw[1]
    cols = -(-pixels // lanes) * lanes
    as_matmul = 8 * (cols - pixels) <= pixels and 34 % lanes != 0
    ops = [op for _, op in kernels_of(mod)]
    assert any(op.startswith("MatMul") for op in ops) == as_matmul, ops
    np.testing.assert_allclose(mod.run(**feeds)["y"], run_onnxruntime(model, feeds)["y"],
                               rtol=1e-4, atol=1e-5)


@pytest.mark.slow
def test_fused_epilogues_of_blocked_convolutions() -> None:
    """The elementwise tails of a convolution run inside its kernel."""
    expected = {"silu_epilogue": "ConvNCHWc+Sigmoid+Mul", "clip_epilogue": "ConvNCHWc+Clip",
                "residual": "ConvNCHWc+Add"}
    for name, op in expected.items():
        nodes, extra, outputs, inits = LAYOUT_GRAPHS[name]
        model = _graph_model(nodes, {"x": [2, 16, 9, 11], **extra}, outputs, inits)
        ops = [k for _, k in kernels_of(tessera.compile(model, target="llvm"))]
        assert op in ops, (name, ops)


# -- inputs and modules ---------------------------------------------------------------------------

def test_strided_and_read_only_inputs(block_module: tessera.Module) -> None:
    x, skip = rand(1, 8, 10, 10), rand(1, 16, 10, 10)
    want = block_module.run(x=x, skip=skip)
    fortran = np.asfortranarray(x)
    reversed_view = skip[..., ::-1].copy()[..., ::-1]
    read_only = x.copy()
    read_only.flags.writeable = False
    for a, b in ((fortran, reversed_view), (read_only, skip)):
        got = block_module.run(x=a, skip=b)
        assert got is not None and want is not None
        np.testing.assert_array_equal(got["y"], want["y"])
    block_module.set_input("x", x)
    block_module.set_input("skip", skip)
    assert block_module.run() is None
    np.testing.assert_array_equal(block_module.get_output("y"), want["y"])  # type: ignore


def test_modules_with_the_same_kernel_names_coexist() -> None:
    """Kernels are looked up per module: equal names in two modules do not collide."""
    def relu(shape: tuple[int, ...]) -> Function:
        g = Function("f")
        g.outputs = [g.op("Relu", g.add_input("x", TensorType(shape, "float32")), name="act")]
        return g

    small, big, small2 = (tessera.compile(relu(s), target="llvm")
                          for s in [(3, 5), (70001,), (3, 5)])
    assert kernels_of(small) == kernels_of(big)
    xs, xb = rand(3, 5), rand(70001)
    for _ in range(2):
        for mod, x in ((small, xs), (big, xb), (small2, xs)):
            got = mod.run(x=x)
            assert got is not None
            np.testing.assert_array_equal(got["act"], np.maximum(x, 0))


# -- quantized models -----------------------------------------------------------------------------

@pytest.mark.slow
def test_int8_qdq_model_matches_ref_and_onnxruntime() -> None:
    from quantization.test_quantizer import float_cnn

    rng = np.random.default_rng(5)
    q = tessera.quantize(float_cnn(rng), rng.standard_normal((16, 3, 8, 8)).astype(np.float32))
    x = rng.standard_normal((4, 3, 8, 8)).astype(np.float32)
    shapes = {"x": [4, 3, 8, 8]}
    mod = tessera.compile(q, target="llvm", input_shapes=shapes)
    report = mod.partition_report()
    assert not report.fallback and {r.backend for r in report.regions} == {"llvm"}
    ops = {op for r in report.regions for op in r.ops}
    # the dense layer as an integer product (QDQToInteger); the convolutions dequantized
    assert {"QuantizeLinear", "DequantizeLinear", "Conv", "MatMulInteger"} <= ops
    got = mod.run(x=x)
    assert got is not None
    ref = tessera.compile(q, target="ref", input_shapes=shapes).run(x=x)
    assert ref is not None
    np.testing.assert_allclose(got["y"], ref["y"], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(got["y"], run_onnxruntime(q, {"x": x})["y"], rtol=1e-5,
                               atol=1e-4)


def test_integer_qlinear_ops_run_on_llvm() -> None:
    """A QLinearConv -> QLinearMatMul chain in int8, exactly as the reference computes it."""
    x = rand(1, 4, 6, 6, dtype="uint8", lo=0, hi=255)
    cases = [Case("QLinearConv", [x, np.array(0.02, np.float32), np.array(9, np.uint8),
                                  rand(8, 4, 3, 3, dtype="int8", lo=-128, hi=127),
                                  np.array(0.004, np.float32), np.array(0, np.int8),
                                  np.array(0.05, np.float32), np.array(120, np.uint8)],
                  {"pads": [1, 1, 1, 1]}, consts=(1, 2, 3, 4, 5, 6, 7))]
    built = compile_cases(cases)
    assert [op for _, op in kernels_of(built.module)] == ["QLinearConv"]
    got = built.module.run(**built.feeds)
    assert got is not None
    from tessera.ops.registry import get_schema

    want = get_schema("QLinearConv").evaluate(list(cases[0].inputs), built.nodes[0].attrs)[0]
    np.testing.assert_array_equal(got[built.outputs[0][0]], want)


# -- errors at run time ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def block_module() -> tessera.Module:
    model, _ = conv_block_model()
    return tessera.compile(model, target="llvm")


def test_wrong_input_shape_names_the_input(block_module: tessera.Module) -> None:
    x, skip = rand(1, 8, 10, 10), rand(1, 16, 10, 10)
    with pytest.raises(RunError, match=r"input 'skip': expected shape \[1, 16, 10, 10\], got "
                                       r"\[1, 16, 10, 9\]"):
        block_module.run(x=x, skip=rand(1, 16, 10, 9))
    with pytest.raises(RunError, match="input 'x': expected dtype float32, got float64"):
        block_module.run(x=x.astype(np.float64), skip=skip)
    with pytest.raises(RunError, match="missing input.*skip"):
        block_module.run(x=x)
    with pytest.raises(RunError, match="unknown input 'z'"):
        block_module.run(x=x, skip=skip, z=x)
    got = block_module.run(x=x, skip=skip)  # still runs after the errors
    assert got is not None and got["y"].shape == (1, 16, 10, 10)


def test_compile_error_names_the_node_without_compute() -> None:
    g = Function("f")
    x = g.add_input("x", TensorType((2, 3), "int32"))
    g.outputs = [g.op("BitwiseNot", x, name="flip")]
    with pytest.raises(CompileError, match="flip.*BitwiseNot"):
        LLVMBackend().compile(g, TargetKind("llvm"), CompileOptions())
