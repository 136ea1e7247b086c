"""Every op the llvm backend claims, compiled by ``tessera.compile(..., target="llvm")`` and run
as native code, against the op's numpy reference (the registry's ``evaluate``).

The shapes and attributes come from the case tables of the topi tests (tests/topi), so the same
odd sizes, paddings, strides, dilations, groups, broadcasts, negative axes and dtypes that check
the computes on the numpy TE oracle run through the real code generator here, plus larger
convolution, pooling and matrix-product workloads that exercise the blocked (NCHWc) layout and
the register-tiled schedules. Each family of cases is one graph of independent nodes compiled at
once (:mod:`llvm.support`); every node must be claimed by llvm (no fallback to ``ref``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
from llvm.support import Case, check_cases
from topi.test_broadcast import SHAPE_PAIRS
from topi.test_conv import CONV_CASES, CONVT_CASES, NCHWC_CASES
from topi.test_dense import EINSUMS, GEMM_CASES, MATMUL_SHAPES
from topi.test_elemwise import CAST_TYPES, FLOAT_OPS, SHAPES
from topi.test_pooling import WINDOWS
from topi.test_quantized import CONV_CASES as QCONV_CASES
from topi.test_reduction import AXES, REDUCE_OPS
from topi.test_transform import RESHAPES, RESIZES, SLICES

from tessera.ops.layout import pack_conv_weight, pack_matmul_weight, pack_nchwc
from tessera.topi.registry import registered_ops

F32 = np.float32
RNG = np.random.default_rng(0)


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    """The same random data for a family whether it runs alone or with the others."""
    global RNG
    RNG = np.random.default_rng(20250611)
    yield


def rand(*shape: int, dtype: Any = "float32", lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Uniform random data (integers in [lo, hi] clipped to the dtype; bool: coin flips)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return RNG.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return RNG.integers(max(int(lo), info.min), min(int(hi), info.max) + 1,
                            size=shape).astype(dt)
    return RNG.uniform(lo, hi, shape).astype(dt)


def nonzero(a: np.ndarray, floor: float = 0.1) -> np.ndarray:
    """``a`` with entries near zero replaced (safe divisors)."""
    return np.where(np.abs(a) < floor, np.asarray(0.5, a.dtype), a).astype(a.dtype)


FAMILIES: dict[str, Callable[[], list[Case]]] = {}


def family(fn: Callable[[], list[Case]]) -> Callable[[], list[Case]]:
    FAMILIES[fn.__name__] = fn
    return fn


# -- elementwise ----------------------------------------------------------------------------------

@family
def unary_float32() -> list[Case]:
    """Every float unary op on the topi shapes plus a size with a vector tail."""
    cases = []
    for op, (attrs, lo, hi) in sorted(FLOAT_OPS.items()):
        for shape in [*SHAPES, (3, 37)]:
            cases.append(Case(op, [rand(*shape, lo=lo, hi=hi)], attrs, label=f"{op}{shape}"))
    return cases


@family
def unary_float16_float64() -> list[Case]:
    cases = []
    for op, (attrs, lo, hi) in sorted(FLOAT_OPS.items()):
        for dtype in ("float16", "float64"):
            shape = (2, 3, 5) if dtype == "float16" else (19,)
            cases.append(Case(op, [rand(*shape, dtype=dtype, lo=lo, hi=hi)], attrs,
                              label=f"{op} {dtype}"))
    return cases


@family
def unary_special_values() -> list[Case]:
    x = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -3.0, 2.5, -0.5], F32)
    cases = [Case("IsNaN", [x])]
    for neg, pos in itertools.product((0, 1), (0, 1)):
        cases.append(Case("IsInf", [x], {"detect_negative": neg, "detect_positive": pos},
                          label=f"IsInf neg={neg} pos={pos}"))
    cases.append(Case("Round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.49, -7.5], F32)],
                      label="Round half to even"))
    cases.append(Case("Gelu", [rand(3, 9, lo=-5, hi=5)], {"approximate": "tanh"},
                      label="Gelu tanh"))
    tails = np.array([-90.0, -40.0, -16.0, -10.0, -1e-3, 0.0, 1e-6, 15.0, 60.0], F32)
    cases.append(Case("Softplus", [tails], rtol=1e-5, atol=1e-7, label="Softplus tails"))
    cases.append(Case("Exp", [np.array([-100.0, -87.0, -20.0, 0.0, 20.0, 88.0], F32)],
                      label="Exp range"))
    cases.append(Case("Sigmoid", [np.array([-100.0, -30.0, 0.0, 30.0, 100.0], F32)],
                      label="Sigmoid saturation"))
    cases.append(Case("Tanh", [np.array([-50.0, -9.0, -1e-4, 0.0, 1e-4, 9.0, 50.0], F32)],
                      label="Tanh saturation"))
    return cases


@family
def unary_integer_and_bool() -> list[Case]:
    cases = []
    for dtype in ("int8", "int32", "int64", "uint8"):
        signed = dtype.startswith("int")
        x = rand(4, 37, dtype=dtype, lo=-9 if signed else 0, hi=9)
        for op in ("Abs", "Sign", "Relu", "Identity", "Erf"):
            cases.append(Case(op, [x], label=f"{op} {dtype}"))
        cases.append(Case("Shrink", [x], {"lambd": 1.5, "bias": 2.0}, label=f"Shrink {dtype}"))
        if signed:
            cases.append(Case("Neg", [x], label=f"Neg {dtype}"))
            info = np.iinfo(dtype)
            cases.append(Case("Abs", [np.array([info.min, -1, 0, info.max], dtype)],
                              label=f"Abs extremes {dtype}"))
    b = rand(3, 37, dtype=bool)
    cases += [Case("Not", [b]), Case("Identity", [b], label="Identity bool"),
              Case("Relu", [b], label="Relu bool")]
    return cases


@family
def clip() -> list[Case]:
    cases = []
    x = rand(3, 37, lo=-3, hi=3)
    lo, hi = np.array(-1.0, F32), np.array([0.5], F32)
    for consts in ((), (1, 2)):
        cases += [Case("Clip", [x, lo, hi], consts=consts, label=f"lo,hi {consts}"),
                  Case("Clip", [x, lo], consts=consts[:1], label=f"lo {consts}"),
                  Case("Clip", [x, None, hi], consts=consts[1:], label=f"hi {consts}"),
                  Case("Clip", [x, np.array(1.0, F32), np.array(-1.0, F32)], consts=consts,
                       label=f"lo>hi {consts}")]
        xi = rand(5, 9, dtype="int32", lo=-10, hi=10)
        cases.append(Case("Clip", [xi, np.array(-3, np.int32), np.array(4, np.int32)],
                          consts=consts, label=f"int32 {consts}"))
    cases.append(Case("Clip", [x], label="no bounds"))
    cases.append(Case("Clip", [rand(2, 8, dtype="float16", lo=-3, hi=3),
                               np.array(-1.0, np.float16), np.array(1.0, np.float16)],
                      consts=(1, 2), label="float16"))
    return cases


@family
def cast() -> list[Case]:
    cases = []
    for src in CAST_TYPES:
        if src == "bool":
            x = rand(3, 21, dtype=bool)
        elif src.startswith(("int", "uint")):
            x = rand(3, 21, dtype=src, lo=-100, hi=100)
        else:
            x = (rand(3, 21, lo=-100, hi=100) * np.array([[1], [0], [1]])).astype(src)
        for dst in CAST_TYPES:
            x_ = np.abs(x) if src.startswith("float") and dst.startswith("uint") else x
            cases.append(Case("Cast", [x_], {"to": dst}, label=f"Cast {src}->{dst}"))
    return cases


# -- broadcasting binary ops ----------------------------------------------------------------------

@family
def binary_arithmetic() -> list[Case]:
    cases = []
    pairs = [*SHAPE_PAIRS, ((4, 1, 33), (1, 5, 33))]
    for op in ("Add", "Sub", "Mul", "Div", "Max", "Min"):
        for dtype in ("float32", "float16", "int32", "int8"):
            chosen = pairs if dtype == "float32" else pairs[1:4]
            for sa, sb in chosen:
                a = rand(*sa, dtype=dtype, lo=-20, hi=20)
                b = rand(*sb, dtype=dtype, lo=-20, hi=20)
                if op == "Div" and dtype.startswith("float"):
                    b = nonzero(b)
                cases.append(Case(op, [a, b], label=f"{op} {dtype} {sa}x{sb}"))
    return cases


@family
def integer_division_and_modulo() -> list[Case]:
    cases = []
    for dtype in ("int32", "int8", "uint8", "int64"):
        signed = dtype.startswith("int")
        a = rand(6, 7, dtype=dtype, lo=-50 if signed else 0, hi=50)
        b = rand(7, dtype=dtype, lo=-6 if signed else 0, hi=6)
        b[0] = 0  # division by zero gives 0
        if signed:
            b[1] = -1
        cases += [Case("Div", [a, b], label=f"Div {dtype}"),
                  Case("Mod", [a, b], {"fmod": 0}, label=f"Mod {dtype}"),
                  Case("Mod", [a, b], {"fmod": 1}, label=f"fmod {dtype}")]
        if signed:
            info = np.iinfo(dtype)
            x = np.array([info.min, info.min, 7, -7], dtype)
            y = np.array([-1, 1, -2, 2], dtype)
            cases += [Case("Div", [x, y], label=f"Div extremes {dtype}"),
                      Case("Mod", [x, y], {"fmod": 1}, label=f"fmod extremes {dtype}")]
    for dtype in ("float32", "float16", "float64"):
        a = rand(4, 5, dtype=dtype, lo=-10, hi=10)
        b = nonzero(rand(5, dtype=dtype, lo=-3, hi=3), 0.2)
        for fmod in (0, 1):
            cases.append(Case("Mod", [a, b], {"fmod": fmod}, label=f"Mod {dtype} fmod={fmod}"))
    return cases


@family
def pow_compare_logic() -> list[Case]:
    cases = []
    x = rand(3, 20, lo=0.1, hi=3)
    for consts in ((), (1,)):
        for e in (2.0, 1.0, 0.5, -1.3, 3.0):
            cases.append(Case("Pow", [x, np.array(e, F32)], consts=consts,
                              label=f"Pow {e} {consts}"))
        cases.append(Case("Pow", [x.astype(np.float16), np.array(2.0, np.float16)],
                          consts=consts, label=f"Pow float16 {consts}"))
        cases.append(Case("Pow", [x, np.array(2, np.int64)], consts=consts,
                          label=f"Pow int exponent {consts}"))
        xi = rand(3, 4, dtype="int32", lo=-4, hi=4)
        cases.append(Case("Pow", [xi, np.array(3, np.int32)], consts=consts,
                          label=f"Pow int32 {consts}"))
    cases.append(Case("Pow", [x, rand(20, lo=-2, hi=2)], label="Pow broadcast"))
    for op in ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual"):
        for dtype in ("float32", "int32", "uint8"):
            for sa, sb in SHAPE_PAIRS[1:4]:
                cases.append(Case(op, [rand(*sa, dtype=dtype, lo=0, hi=3),
                                       rand(*sb, dtype=dtype, lo=0, hi=3)],
                                  label=f"{op} {dtype} {sa}x{sb}"))
    for op in ("And", "Or", "Xor", "Equal"):
        for sa, sb in SHAPE_PAIRS:
            cases.append(Case(op, [rand(*sa, dtype=bool), rand(*sb, dtype=bool)],
                              label=f"{op} bool {sa}x{sb}"))
    return cases


@family
def variadic_where_prelu() -> list[Case]:
    cases = []
    for op in ("Max", "Min", "Sum", "Mean"):
        cases += [Case(op, [rand(2, 3, 4), rand(3, 1), rand(4)], label=f"{op} three"),
                  Case(op, [rand(5)], label=f"{op} one"),
                  Case(op, [rand(2, 3, dtype="float16"), rand(2, 3, dtype="float16")],
                       label=f"{op} float16")]
        if op != "Mean":
            cases.append(Case(op, [rand(2, 3, dtype="int32", lo=-9, hi=9),
                                   rand(3, dtype="int32", lo=-9, hi=9)], label=f"{op} int32"))
    cases += [
        Case("Where", [rand(2, 1, 4, dtype=bool), rand(3, 1), rand(2, 3, 4)], label="Where"),
        Case("Where", [rand(5, dtype=bool), rand(5, dtype="int64"), rand(1, dtype="int64")],
             label="Where int64"),
        Case("Where", [np.array(True), rand(3), np.array(7.0, F32)], consts=(0, 2),
             label="Where consts"),
    ]
    x = rand(2, 3, 4, 5, lo=-2, hi=2)
    cases += [
        Case("PRelu", [x, rand(3, 1, 1)], label="PRelu channel"),
        Case("PRelu", [x, rand(5)], label="PRelu last"),
        Case("PRelu", [x, np.array([0.25], F32)], consts=(1,), label="PRelu scalar"),
        Case("PRelu", [rand(3, 4, dtype="int32", lo=-9, hi=9),
                       rand(4, dtype="int32", lo=1, hi=3)], label="PRelu int32"),
        Case("SwiGLU", [rand(3, 8, lo=-4, hi=4), rand(3, 8)], {"alpha": 1.7}),
    ]
    return cases


# -- convolutions ---------------------------------------------------------------------------------

#: Convolutions at sizes where the blocked schedule matters: (x, w, attrs).
BIG_CONVS = {
    "1x1": ((1, 32, 14, 14), (64, 32, 1, 1), {}),
    "3x3_pad1_stride2": ((1, 16, 15, 15), (32, 16, 3, 3), {"pads": [1, 1, 1, 1],
                                                           "strides": [2, 2]}),
    "7x7_stride2_first": ((1, 3, 32, 32), (16, 3, 7, 7), {"pads": [3, 3, 3, 3],
                                                          "strides": [2, 2]}),
    "channels_24_to_40": ((1, 24, 9, 9), (40, 24, 3, 3), {"pads": [1, 1, 1, 1]}),
    "channels_20_to_12": ((1, 20, 7, 11), (12, 20, 3, 3), {"pads": [0, 1, 1, 0]}),
    "odd_channels_3_to_5": ((1, 3, 9, 7), (5, 3, 3, 3), {"pads": [1, 1, 1, 1]}),
    "batch2": ((2, 16, 10, 10), (16, 16, 3, 3), {"pads": [1, 1, 1, 1]}),
    "depthwise_32": ((1, 32, 12, 12), (32, 1, 3, 3), {"group": 32, "pads": [1, 1, 1, 1]}),
    "depthwise_stride2": ((2, 24, 11, 11), (24, 1, 3, 3), {"group": 24, "pads": [1, 1, 1, 1],
                                                           "strides": [2, 2]}),
    "groups4": ((1, 32, 8, 8), (32, 8, 3, 3), {"group": 4, "pads": [1, 1, 1, 1]}),
    "dilation2": ((1, 16, 12, 12), (16, 16, 3, 3), {"dilations": [2, 2], "pads": [2, 2, 2, 2]}),
    "wide_row_37": ((1, 8, 5, 37), (16, 8, 3, 3), {"pads": [1, 1, 1, 1]}),
}


@family
def conv_topi_cases() -> list[Case]:
    cases = []
    for name, (xs, ws, attrs) in sorted(CONV_CASES.items()):
        for bias in (False, True):
            inputs = [rand(*xs), rand(*ws)] + ([rand(ws[0])] if bias else [])
            cases.append(Case("Conv", inputs, attrs, consts=(1, 2), label=f"{name} bias={bias}"))
    xs, ws, attrs = CONV_CASES["3x3_pad1"]
    cases.append(Case("Conv", [rand(*xs, dtype="float16"), rand(*ws, dtype="float16"),
                               rand(ws[0], dtype="float16")], attrs, consts=(1, 2),
                      label="float16"))
    cases.append(Case("Conv", [rand(*xs), rand(*ws)], attrs, label="weights as inputs"))
    return cases


@family
def conv_blocked_workloads() -> list[Case]:
    cases = []
    for name, (xs, ws, attrs) in sorted(BIG_CONVS.items()):
        cases.append(Case("Conv", [rand(*xs), rand(*ws), rand(ws[0])], attrs, consts=(1, 2),
                          label=name))
    return cases


@family
def conv_transpose() -> list[Case]:
    cases = []
    for name, (xs, ws, attrs) in sorted(CONVT_CASES.items()):
        m = ws[1] * attrs.get("group", 1)
        cases += [Case("ConvTranspose", [rand(*xs), rand(*ws)], attrs, consts=(1,),
                       label=name),
                  Case("ConvTranspose", [rand(*xs), rand(*ws), rand(m)], attrs,
                       label=f"{name} bias, weights as inputs")]
    return cases


@family
def nchwc_layout_ops() -> list[Case]:
    """ConvNCHWc, PoolNCHWc and LayoutTransform given directly (the graph already blocked)."""
    cases = []
    for name, (xs, ws, group, cd, ic_bn, oc_bn, attrs) in sorted(NCHWC_CASES.items()):
        for bias in (False, True):
            inputs = [pack_nchwc(rand(*xs), cd), pack_conv_weight(rand(*ws), ic_bn, oc_bn)]
            if bias:
                inputs.append(rand(ws[0] // oc_bn, oc_bn))
            cases.append(Case("ConvNCHWc", inputs, {**attrs, "group": group}, consts=(1, 2),
                              label=f"ConvNCHWc {name} bias={bias}"))
    cases.append(Case("ConvNCHWc", [pack_nchwc(rand(1, 32, 9, 9), 16),
                                    pack_conv_weight(rand(32, 32, 3, 3), 16, 16), rand(2, 16)],
                      {"pads": [1, 1, 1, 1], "strides": [2, 2]}, consts=(1, 2),
                      label="ConvNCHWc 16-lane blocks stride 2"))
    cases.append(Case("ConvNCHWc", [pack_nchwc(rand(1, 4, 5, 5, dtype="float16"), 4),
                                    pack_conv_weight(rand(4, 4, 3, 3, dtype="float16"), 2, 2)],
                      {}, consts=(1,), label="ConvNCHWc float16"))
    for case in ("2x2_s2", "3x3_pad", "asym_pads_stride", "ceil_pads", "dilation"):
        shape, attrs = WINDOWS[case]
        x = pack_nchwc(rand(shape[0], 8, *shape[2:]), 4)
        for mode in ("max", "avg"):
            for include_pad in (0, 1):
                if mode == "max" and include_pad:
                    continue
                cases.append(Case("PoolNCHWc", [x], {**attrs, "mode": mode,
                                                     "count_include_pad": include_pad},
                                  label=f"PoolNCHWc {case} {mode} pad={include_pad}"))
    x16 = pack_nchwc(rand(2, 32, 7, 7), 16)
    for mode in ("max", "avg"):
        cases.append(Case("PoolNCHWc", [x16], {"mode": mode, "global_pool": 1},
                          label=f"PoolNCHWc global {mode}"))
        cases.append(Case("PoolNCHWc", [x16.astype(np.float16)],
                          {"mode": mode, "kernel_shape": [3, 3], "strides": [2, 2]},
                          label=f"PoolNCHWc float16 {mode}"))
    for src, dst in [("NCHW", "NCHW4c"), ("NCHW8c", "NCHW"), ("NCHW4c", "NCHW2c"),
                     ("NCHW2c", "NCHW8c"), ("NCHW4c", "NCHW4c"), ("NCHW", "NCHW16c"),
                     ("NCHW16c", "NCHW")]:
        x = rand(2, 16, 3, 5)
        s = None if src == "NCHW" else int(src[4:-1])
        xin = x if s is None else pack_nchwc(x, s)
        cases.append(Case("LayoutTransform", [xin], {"src_layout": src, "dst_layout": dst},
                          label=f"LayoutTransform {src}->{dst}"))
    for block, channels in [(16, 24), (8, 13)]:
        cases.append(Case("LayoutTransform", [pack_nchwc(rand(1, 32, 3, 5), block)],
                          {"src_layout": f"NCHW{block}c", "dst_layout": "NCHW",
                           "channels": channels},
                          label=f"LayoutTransform NCHW{block}c->NCHW keeping {channels}"))
    # column-panel matrix products (what a MatMul with constant weights becomes)
    for a_shape, n, nb in [((5, 24), 64, 32), ((2, 3, 7, 24), 48, 16), ((1, 13), 16, 16),
                           ((128, 40), 96, 32)]:
        b = rand(a_shape[-1], n)
        cases.append(Case("MatMulPacked", [rand(*a_shape), pack_matmul_weight(b, nb)], {},
                          consts=(1,), label=f"MatMulPacked {a_shape} x {n} panels {nb}"))
    return cases


# -- matrix products ------------------------------------------------------------------------------

@family
def matmul() -> list[Case]:
    cases = [Case("MatMul", [rand(*sa), rand(*sb)], label=f"{sa}x{sb}")
             for sa, sb in MATMUL_SHAPES]
    for dtype in ("float16", "float64", "int32", "int64"):
        cases.append(Case("MatMul", [rand(2, 3, 5, dtype=dtype, lo=-9, hi=9),
                                     rand(5, 4, dtype=dtype, lo=-9, hi=9)], label=dtype))
    for sa, sb in [((33, 65), (65, 47)), ((2, 17, 64), (64, 48)), ((1, 512), (512, 100)),
                   ((2, 4, 16, 32), (2, 4, 32, 16)), ((64, 64), (64, 64))]:
        cases.append(Case("MatMul", [rand(*sa), rand(*sb)], consts=(1,),
                          label=f"large {sa}x{sb}"))
    return cases


@family
def gemm_and_einsum() -> list[Case]:
    cases = []
    for attrs, sa, sb, sc in GEMM_CASES:
        inputs = [rand(*sa), rand(*sb)] + ([rand(*sc)] if sc is not None else [])
        cases += [Case("Gemm", inputs, attrs, consts=(1, 2), label=f"{attrs} {sa} {sb} {sc}"),
                  Case("Gemm", [a.astype(np.float16) for a in inputs], attrs,
                       label=f"float16 {attrs} {sa} {sb} {sc}")]
    cases.append(Case("Gemm", [rand(3, 4, dtype="int32", lo=-5, hi=5),
                               rand(4, 2, dtype="int32", lo=-5, hi=5),
                               rand(2, dtype="int32", lo=-5, hi=5)], label="int32"))
    for attrs, m, k, n in [({"transB": 1}, 1, 512, 1000), ({"transB": 1}, 2, 100, 37),
                           ({}, 7, 96, 80), ({"transA": 1, "alpha": 0.7, "beta": 0.3}, 9, 31, 17)]:
        a = rand(k, m) if attrs.get("transA") else rand(m, k)
        b = rand(n, k) if attrs.get("transB") else rand(k, n)
        cases.append(Case("Gemm", [a, b, rand(n)], attrs, consts=(1, 2),
                          label=f"large {attrs} m={m} k={k} n={n}"))
    for equation, shapes in EINSUMS:
        cases.append(Case("Einsum", [rand(*s) for s in shapes], {"equation": equation},
                          label=f"Einsum {equation}"))
    cases.append(Case("Einsum", [rand(2, 3, 4, dtype="float16"), rand(2, 4, 5, dtype="float16")],
                      {"equation": "bij,bjk->bik"}, label="Einsum float16"))
    return cases


# -- pooling --------------------------------------------------------------------------------------

@family
def pooling() -> list[Case]:
    cases = []
    for name, (shape, attrs) in sorted(WINDOWS.items()):
        cases += [
            Case("MaxPool", [rand(*shape)], attrs, num_outputs=1, label=f"MaxPool {name}"),
            Case("MaxPool", [rand(*shape, dtype="int8", lo=-128, hi=127)], attrs,
                 num_outputs=1, label=f"MaxPool int8 {name}"),
            Case("MaxPool", [rand(*shape, dtype="uint8", lo=0, hi=255)], attrs,
                 num_outputs=1, label=f"MaxPool uint8 {name}"),
        ]
        for include_pad in (0, 1):
            cases.append(Case("AveragePool", [rand(*shape)],
                              {**attrs, "count_include_pad": include_pad},
                              label=f"AveragePool {name} pad={include_pad}"))
        cases.append(Case("AveragePool", [rand(*shape, dtype="float16")], attrs,
                          label=f"AveragePool float16 {name}"))
    for name in ("2x2_s2", "3x3_pad", "ceil_mode", "dilation"):
        shape, attrs = WINDOWS[name]
        for p in (1, 2, 3):
            cases.append(Case("LpPool", [rand(*shape)], {**attrs, "p": p}, rtol=1e-4,
                              label=f"LpPool {name} p={p}"))
    for dtype in ("float32", "float16"):
        for shape in [(2, 3, 5, 4), (1, 4, 7), (1, 2, 3, 2, 2), (2, 3, 1, 1), (1, 40, 7, 7)]:
            x = rand(*shape, dtype=dtype)
            cases += [Case("GlobalMaxPool", [x], label=f"GlobalMaxPool {dtype} {shape}"),
                      Case("GlobalAveragePool", [x], label=f"GlobalAveragePool {dtype} {shape}"),
                      Case("GlobalLpPool", [x], {"p": 2}, label=f"GlobalLpPool {dtype} {shape}")]
    return cases


@family
def pooling_blocked_workloads() -> list[Case]:
    """Float NCHW pools after convolutions are turned into PoolNCHWc by the layout pass; here
    they stand alone at sizes like a network's."""
    cases = []
    for shape, attrs in [((1, 64, 28, 28), {"kernel_shape": [3, 3], "strides": [2, 2],
                                            "pads": [1, 1, 1, 1]}),
                         ((2, 24, 15, 15), {"kernel_shape": [3, 3], "strides": [2, 2]}),
                         ((1, 40, 14, 14), {"kernel_shape": [2, 2], "strides": [2, 2]}),
                         ((1, 16, 13, 13), {"kernel_shape": [3, 3], "strides": [2, 2],
                                            "ceil_mode": 1})]:
        cases.append(Case("MaxPool", [rand(*shape)], attrs, num_outputs=1,
                          label=f"MaxPool {shape}"))
        cases.append(Case("AveragePool", [rand(*shape)], {**attrs, "count_include_pad": 1},
                          label=f"AveragePool {shape}"))
    return cases


# -- reductions, softmax, normalization -----------------------------------------------------------

@family
def reductions() -> list[Case]:
    cases = []
    for op in REDUCE_OPS:
        for dtype in ("float32", "float16", "int32"):
            if op == "ReduceLogSum":
                x = rand(3, 4, 5, dtype=dtype, lo=0.1 if dtype != "int32" else 1, hi=3)
            elif op == "ReduceProd":
                x = (rand(3, 4, 5, dtype=dtype, lo=0.5, hi=1.5) if dtype != "int32"
                     else rand(3, 4, 5, dtype=dtype, lo=-2, hi=2))
            else:
                x = rand(3, 4, 5, dtype=dtype, lo=-5, hi=5)
            axes_list = AXES if dtype == "float32" else [None, [1, -1]]
            for axes in axes_list:
                for keepdims in (0, 1):
                    if dtype != "float32" and keepdims != (axes is None):
                        continue
                    cases.append(Case(op, [x], {"axes": axes, "keepdims": keepdims},
                                      label=f"{op} {dtype} axes={axes} keepdims={keepdims}"))
    cases.append(Case("ReduceSum", [rand(7, 1000)], {"axes": [1], "keepdims": 0},
                      label="ReduceSum long rows"))
    cases.append(Case("ReduceMean", [rand(2, 64, 12, 12)], {"axes": [2, 3], "keepdims": 1},
                      label="ReduceMean spatial"))
    cases.append(Case("ReduceMax", [np.array(2.5, F32)], {"axes": None, "keepdims": 1},
                      label="ReduceMax rank 0"))
    cases.append(Case("ReduceLogSumExp",
                      [np.array([[-np.inf, -np.inf], [1.0, 2.0]], F32)],
                      {"axes": [1], "keepdims": 1}, label="ReduceLogSumExp -inf"))
    b = rand(3, 4, 5, dtype=bool)
    b[0] = True
    for op in ("ReduceMax", "ReduceMin"):
        cases.append(Case(op, [b], {"axes": [1], "keepdims": 1}, label=f"{op} bool"))
    cases.append(Case("ReduceMean", [np.array([[-3, -4, 0], [5, 1, 2]], np.int32)],
                      {"axes": [1], "keepdims": 0}, label="ReduceMean int floors"))
    return cases


@family
def arg_reductions_and_cumsum() -> list[Case]:
    cases = []
    for op in ("ArgMax", "ArgMin"):
        for dtype in ("float32", "int8", "uint8"):
            x = (rand(3, 5, 4, dtype=dtype, lo=0, hi=3) if dtype != "float32"
                 else np.round(rand(3, 5, 4, lo=0, hi=3)))
            for axis, keepdims, last in [(0, 1, 0), (1, 0, 1), (-1, 1, 1), (-1, 0, 0)]:
                cases.append(Case(op, [x], {"axis": axis, "keepdims": keepdims,
                                            "select_last_index": last},
                                  label=f"{op} {dtype} axis={axis} last={last}"))
    for dtype in ("float32", "float16", "int32"):
        x = rand(3, 6, dtype=dtype, lo=-5, hi=5)
        for axis, exclusive, reverse in [(0, 0, 0), (1, 1, 0), (-1, 0, 1), (-1, 1, 1)]:
            cases.append(Case("CumSum", [x], {"axis": axis, "exclusive": exclusive,
                                              "reverse": reverse},
                              label=f"CumSum {dtype} {axis} {exclusive} {reverse}"))
    return cases


@family
def softmax_family() -> list[Case]:
    cases = []
    for op in ("Softmax", "LogSoftmax", "Hardmax"):
        for dtype in ("float32", "float16", "float64"):
            x = rand(2, 3, 5, dtype=dtype, lo=-30, hi=30)
            for axis in (-1, 0, 1):
                cases.append(Case(op, [x], {"axis": axis}, label=f"{op} {dtype} axis={axis}"))
        cases.append(Case(op, [rand(4, 12, 128, lo=-8, hi=8)], {"axis": -1},
                          label=f"{op} attention rows"))
    stable = np.array([[1000.0, 1001.0, 999.0], [-1000.0, -1e4, -999.0]], F32)
    cases += [Case("Softmax", [stable], {"axis": 1}, label="Softmax stable"),
              Case("LogSoftmax", [stable], {"axis": 1}, label="LogSoftmax stable"),
              Case("Hardmax", [np.array([[1, 3, 3, 0], [2, 2, 2, 2]], F32)], {"axis": 1},
                   label="Hardmax ties")]
    return cases


@family
def normalization() -> list[Case]:
    cases = []
    for dtype in ("float32", "float16"):
        for shape in [(2, 3, 4, 5), (2, 3), (1, 3, 7), (1, 24, 9, 9)]:
            c = shape[1]
            params = [rand(c, dtype=dtype), rand(c, dtype=dtype), rand(c, dtype=dtype),
                      rand(c, dtype=dtype, lo=0.1, hi=2)]
            cases.append(Case("BatchNormalization", [rand(*shape, dtype=dtype), *params],
                              {"epsilon": 1e-3}, consts=(1, 2, 3, 4),
                              label=f"BatchNormalization {dtype} {shape}"))
        x = rand(2, 6, 4, 3, dtype=dtype, lo=-3, hi=3)
        cases.append(Case("InstanceNormalization", [x, rand(6, dtype=dtype),
                                                    rand(6, dtype=dtype)], {"epsilon": 1e-4},
                          label=f"InstanceNormalization {dtype}"))
        for groups in (1, 2, 3, 6):
            cases.append(Case("GroupNormalization", [x, rand(6, dtype=dtype),
                                                     rand(6, dtype=dtype)],
                              {"num_groups": groups}, label=f"GroupNormalization {dtype} {groups}"))
        y = rand(2, 3, 8, dtype=dtype, lo=-3, hi=3)
        for axis in (-1, -2, 0):
            norm = y.shape[axis:]
            cases.append(Case("LayerNormalization", [y, rand(*norm, dtype=dtype),
                                                     rand(*norm, dtype=dtype)],
                              {"axis": axis}, num_outputs=3,
                              label=f"LayerNormalization {dtype} axis={axis}"))
        cases.append(Case("LayerNormalization", [y, rand(8, dtype=dtype)],
                          {"axis": -1, "epsilon": 1e-3}, label=f"LayerNormalization {dtype} "
                                                               "no bias"))
    cases.append(Case("BatchNormalization", [rand(2, 3, 4), rand(3, 4), rand(3, 4), rand(3, 4),
                                             rand(3, 4, lo=0.1, hi=2)],
                      label="BatchNormalization per activation"))
    cases.append(Case("LayerNormalization", [rand(4, 16, 768, lo=-3, hi=3), rand(768),
                                             rand(768)], {"axis": -1}, consts=(1, 2),
                      label="LayerNormalization BERT rows"))
    x = rand(2, 5, 3, 4, lo=-2, hi=2)
    for axis in (-1, 1):
        cases.append(Case("RMSNormalization", [x, rand(*x.shape[axis:])], {"axis": axis},
                          label=f"RMSNormalization axis={axis}"))
    for size in (1, 2, 3, 5):
        cases.append(Case("LRN", [x], {"size": size, "alpha": 1e-2, "beta": 0.6, "bias": 1.5},
                          label=f"LRN size={size}"))
    for axes in ([0, 2, 3], [1], [-1, 0]):
        cases.append(Case("MeanVarianceNormalization", [x], {"axes": axes},
                          label=f"MeanVarianceNormalization {axes}"))
    z = x.copy()
    z[0, :, 0, 0] = 0
    for p in (1, 2):
        for axis in (-1, 1):
            cases.append(Case("LpNormalization", [z], {"axis": axis, "p": p},
                              label=f"LpNormalization p={p} axis={axis}"))
    return cases


# -- data movement --------------------------------------------------------------------------------

@family
def reshape_like() -> list[Case]:
    cases = [Case("Reshape", [rand(*shape)], {"shape": target}, label=f"Reshape {shape}->{target}")
             for shape, target in RESHAPES]
    x = rand(2, 1, 3, 1)
    for axis in (0, 1, 2, -1, 4):
        cases.append(Case("Flatten", [x], {"axis": axis}, label=f"Flatten {axis}"))
    cases += [Case("Squeeze", [x], {"axes": None}, label="Squeeze all"),
              Case("Squeeze", [x], {"axes": [-1]}, label="Squeeze -1"),
              Case("Unsqueeze", [x], {"axes": [0, -1]}, label="Unsqueeze 0,-1"),
              Case("Unsqueeze", [np.array(3.0, F32)], {"axes": [0]}, label="Unsqueeze scalar")]
    y = rand(2, 3, 4, 5)
    for perm in [(0, 1, 2, 3), (3, 2, 1, 0), (0, 2, 3, 1), (0, 3, 1, 2), (1, 0, 3, 2),
                 (2, 0, 1, 3)]:
        cases.append(Case("Transpose", [y], {"perm": list(perm)}, label=f"Transpose {perm}"))
    cases += [Case("Transpose", [y], {"perm": None}, label="Transpose reverse"),
              Case("Transpose", [rand(3, 5, dtype="int8", lo=-9, hi=9)], {"perm": [1, 0]},
                   label="Transpose int8"),
              Case("Transpose", [rand(1, 12, 128, 64)], {"perm": [0, 2, 1, 3]},
                   label="Transpose attention heads")]
    return cases


@family
def concat_split_slice() -> list[Case]:
    cases = []
    for axis in (0, 1, -1):
        shapes = [[2, 3, 4], [2, 3, 4], [2, 3, 4]]
        for s, n in zip(shapes, (1, 3, 2)):
            s[axis % 3] = n
        cases.append(Case("Concat", [rand(*s) for s in shapes], {"axis": axis},
                          label=f"Concat axis={axis}"))
    cases += [Case("Concat", [rand(3), rand(0), rand(2)], {"axis": 0}, label="Concat empty"),
              Case("Concat", [rand(3, dtype=bool)], {"axis": 0}, label="Concat bool"),
              Case("Concat", [rand(1, 16, 7, 7), rand(1, 24, 7, 7), rand(1, 8, 7, 7)],
                   {"axis": 1}, label="Concat channels")]
    x = rand(4, 9)
    cases += [Case("Split", [x], {"axis": 1, "split": [2, 3, 4]}, num_outputs=3,
                   label="Split 3"),
              Case("Split", [x], {"axis": -2, "split": [1, 3]}, num_outputs=2,
                   label="Split axis -2"),
              Case("Split", [x], {"axis": 1, "split": [2, 3, 4]}, num_outputs=2,
                   label="Split fewer outputs")]
    for starts, ends, axes, steps in SLICES:
        cases.append(Case("Slice", [rand(3, 4, 6)], {"starts": starts, "ends": ends,
                                                     "axes": axes, "steps": steps},
                          label=f"Slice {starts} {ends} {axes} {steps}"))
    return cases


@family
def gathers() -> list[Case]:
    cases = []
    data = rand(5, 4, 3)
    for idx in ("int64", "int32"):
        cases += [
            Case("Gather", [data, np.array([0, -1, 2, 4], idx)], {"axis": 0},
                 label=f"Gather {idx} axis 0"),
            Case("Gather", [data, np.array([[1, -2], [0, 3]], idx)], {"axis": 1},
                 label=f"Gather {idx} axis 1"),
            Case("Gather", [data, np.array(-1, idx)], {"axis": -1},
                 label=f"Gather {idx} scalar"),
            Case("Gather", [data, np.array(2, idx)], {"axis": 0}, consts=(1,),
                 label=f"Gather {idx} const"),
            Case("GatherElements", [data, rand(5, 2, 3, dtype=idx, lo=-4, hi=3)], {"axis": 1},
                 label=f"GatherElements {idx} axis 1"),
            Case("GatherElements", [data, rand(2, 4, 3, dtype=idx, lo=-5, hi=4)], {"axis": 0},
                 label=f"GatherElements {idx} axis 0"),
        ]
    cases.append(Case("Gather", [rand(1000, 64), rand(2, 16, dtype="int64", lo=0, hi=999)],
                      {"axis": 0}, consts=(0,), label="Gather embedding table"))
    d = rand(2, 3, 4)
    cases += [
        Case("GatherND", [d, np.array([[0, 1], [1, -1]], np.int64)], {"batch_dims": 0},
             label="GatherND pairs"),
        Case("GatherND", [d, np.array([[1], [0]], np.int64)], {"batch_dims": 0},
             label="GatherND rows"),
        Case("GatherND", [d, np.array([[[0, 1]], [[2, 3]]], np.int64)], {"batch_dims": 1},
             label="GatherND batch 1"),
        Case("GatherND", [d, np.array([[2], [0]], np.int64)], {"batch_dims": 1},
             label="GatherND batch 1 rows"),
    ]
    return cases


@family
def expand_tile_pad() -> list[Case]:
    cases = [Case("Expand", [rand(3, 1)], {"shape": [2, 3, 4]}, label="Expand 3"),
             Case("Expand", [rand(1, 4)], {"shape": [3, 1]}, label="Expand 2"),
             Case("Expand", [np.array(1.5, F32)], {"shape": [2, 2]}, label="Expand scalar"),
             Case("Tile", [rand(2, 3)], {"repeats": [2, 3]}, label="Tile 2"),
             Case("Tile", [rand(1, 3, 2)], {"repeats": [3, 1, 2]}, label="Tile 3")]
    x = rand(3, 5)
    for mode in ("constant", "reflect", "edge", "wrap"):
        for pads in ([1, 2, 2, 1], [0, 0, 0, 3], [2, 4, 2, 4], [-1, 1, 1, -2]):
            cases.append(Case("Pad", [x], {"pads": pads, "mode": mode},
                              label=f"Pad {mode} {pads}"))
    cases += [
        Case("Pad", [x, np.array(-7.5, F32)], {"pads": [1, 1, 1, 1], "mode": "constant"},
             label="Pad value input"),
        Case("Pad", [x, np.array(2.5, F32)], {"pads": [1, 0, 0, 2], "mode": "constant"},
             consts=(1,), label="Pad value const"),
        Case("Pad", [rand(2, 3, dtype="int8", lo=-9, hi=9)], {"pads": [1, 1, 0, 2],
                                                              "mode": "constant"},
             label="Pad int8"),
        Case("Pad", [rand(1, 3, 17, 17)], {"pads": [0, 0, 1, 1, 0, 0, 2, 2], "mode": "constant"},
             label="Pad image"),
    ]
    return cases


@family
def index_patterns() -> list[Case]:
    cases = []
    x = rand(2, 4, 5)
    for upper in (0, 1):
        for k in (-2, 0, 1, 6):
            cases.append(Case("Trilu", [x], {"upper": upper, "k": k},
                              label=f"Trilu upper={upper} k={k}"))
    cases += [
        Case("OneHot", [np.array([[0, 2], [-1, 5]], np.int64), np.array([0.5, 3.0], F32)],
             {"depth": 4, "axis": -1}, label="OneHot int"),
        Case("OneHot", [np.array([1.7, 0.0, -2.0], F32), np.array([0, 1], np.int32)],
             {"depth": 3, "axis": 0}, label="OneHot float indices"),
        Case("ReverseSequence", [rand(5, 3, 2), np.array([5, 1, 3], np.int64)],
             {"batch_axis": 1, "time_axis": 0}, label="ReverseSequence time 0"),
        Case("ReverseSequence", [rand(3, 5, 2), np.array([2, 5, 0], np.int32)],
             {"batch_axis": 0, "time_axis": 1}, label="ReverseSequence time 1"),
    ]
    for mode in ("DCR", "CRD"):
        cases += [Case("DepthToSpace", [rand(2, 8, 3, 2)], {"blocksize": 2, "mode": mode},
                       label=f"DepthToSpace 2 {mode}"),
                  Case("DepthToSpace", [rand(1, 9, 2, 2)], {"blocksize": 3, "mode": mode},
                       label=f"DepthToSpace 3 {mode}")]
    cases.append(Case("SpaceToDepth", [rand(2, 3, 4, 6)], {"blocksize": 2}, label="SpaceToDepth"))
    return cases


@family
def resize() -> list[Case]:
    cases = []
    for k, (shape, sizes, scales) in enumerate(RESIZES):
        x = rand(*shape, lo=-5, hi=5)
        for coord in ("half_pixel", "align_corners", "asymmetric", "pytorch_half_pixel"):
            base = {"sizes": sizes, "scales": scales, "coordinate_transformation_mode": coord}
            cases += [
                Case("Resize", [x], {**base, "mode": "nearest",
                                     "nearest_mode": "round_prefer_floor"},
                     label=f"Resize {k} {coord} nearest"),
                Case("Resize", [x], {**base, "mode": "linear"},
                     label=f"Resize {k} {coord} linear"),
                Case("Resize", [x], {**base, "mode": "cubic", "cubic_coeff_a": -0.5},
                     label=f"Resize {k} {coord} cubic"),
            ]
        base = {"sizes": sizes, "scales": scales,
                "coordinate_transformation_mode": "half_pixel_symmetric"}
        cases += [
            Case("Resize", [x], {**base, "mode": "nearest", "nearest_mode": "ceil"},
                 label=f"Resize {k} nearest ceil"),
            Case("Resize", [x], {**base, "mode": "linear", "antialias": 1},
                 label=f"Resize {k} antialias"),
            Case("Resize", [x], {**base, "mode": "cubic", "exclude_outside": 1},
                 label=f"Resize {k} exclude outside"),
            Case("Resize", [rand(*shape, dtype="uint8", lo=0, hi=255)], {**base, "mode": "cubic"},
                 label=f"Resize {k} uint8 cubic"),
        ]
    return cases


# -- quantized ops --------------------------------------------------------------------------------

@family
def quantize_dequantize() -> list[Case]:
    cases = []
    x = rand(2, 3, 4, lo=-60, hi=60)
    x[0, 0, :3] = [0.5, 1.5, -2.5]  # ties round to even
    for out in ("int8", "uint8", "int16", "int32"):
        zp = np.array(3 if out != "uint8" else 128, out)
        for consts in ((), (1, 2)):
            cases.append(Case("QuantizeLinear", [x, np.array(0.25, F32), zp], consts=consts,
                              label=f"QuantizeLinear {out} {consts}"))
        cases.append(Case("QuantizeLinear", [x, rand(3, lo=0.1, hi=1),
                                             rand(3, dtype=out, lo=0, hi=9)], {"axis": 1},
                          consts=(1, 2), label=f"QuantizeLinear {out} per axis"))
        cases.append(Case("QuantizeLinear", [x, rand(2, 3, 2, lo=0.1, hi=1),
                                             rand(2, 3, 2, dtype=out, lo=0, hi=9)],
                          {"axis": -1, "block_size": 2}, label=f"QuantizeLinear {out} blocked"))
    cases.append(Case("QuantizeLinear", [np.array([-1e6, -300.0, 300.0, 1e6, 0.0, 127.5], F32),
                                         np.array(1.0, F32), np.array(0, np.int8)],
                      label="QuantizeLinear saturates"))
    for src in ("int8", "uint8", "int32"):
        q = rand(2, 3, 4, dtype=src, lo=-128, hi=255)
        cases += [
            Case("DequantizeLinear", [q, np.array(0.1, F32), np.array(5, src)], consts=(1, 2),
                 label=f"DequantizeLinear {src}"),
            Case("DequantizeLinear", [q, np.array(0.1, F32)], label=f"DequantizeLinear {src} "
                                                                    "no zero point"),
            Case("DequantizeLinear", [q, rand(4, lo=0.1, hi=1), rand(4, dtype=src, lo=0, hi=9)],
                 {"axis": -1}, label=f"DequantizeLinear {src} per axis"),
            Case("DequantizeLinear", [q, np.array(0.5, np.float16)],
                 label=f"DequantizeLinear {src} float16 scale"),
        ]
    for data in (rand(3, 7, lo=-2, hi=5), rand(10, lo=0.5, hi=3), rand(2, 2, lo=-4, hi=-1)):
        cases.append(Case("DynamicQuantizeLinear", [data], num_outputs=3,
                          label=f"DynamicQuantizeLinear {data.shape} [{data.min():.1f}, "
                                f"{data.max():.1f}]"))
    return cases


@family
def quantized_conv_matmul() -> list[Case]:
    cases = []
    for k, (xs, ws, attrs) in enumerate(QCONV_CASES):
        for xt in ("uint8", "int8"):
            x = rand(*xs, dtype=xt, lo=-128, hi=255)
            w = rand(*ws, dtype="int8", lo=-128, hi=127)
            cases += [
                Case("ConvInteger", [x, w], attrs, consts=(1,), label=f"ConvInteger {k} {xt}"),
                Case("ConvInteger", [x, w, np.array(7, xt), np.array(-3, np.int8)], attrs,
                     consts=(1, 2, 3), label=f"ConvInteger {k} {xt} zero points"),
            ]
            m = ws[0]
            for per_channel in (False, True):
                w_scale = rand(m, lo=0.001, hi=0.01) if per_channel else np.array(0.004, F32)
                w_zp = np.zeros(m, np.int8) if per_channel else np.array(0, np.int8)
                inputs = [x, np.array(0.02, F32), np.array(9, xt), w, w_scale, w_zp,
                          np.array(0.05, F32), np.array(-5 if xt == "int8" else 120, xt),
                          rand(m, dtype="int32", lo=-500, hi=500)]
                cases.append(Case("QLinearConv", inputs, attrs, consts=(1, 2, 3, 4, 5, 6, 7, 8),
                                  label=f"QLinearConv {k} {xt} per_channel={per_channel}"))
    for sa, sb in [((3, 5), (5, 4)), ((2, 3, 5), (5, 4)), ((5,), (5, 4)), ((3, 5), (2, 5, 4)),
                   ((16, 64), (64, 48))]:
        a = rand(*sa, dtype="uint8", lo=0, hi=255)
        b = rand(*sb, dtype="int8", lo=-128, hi=127)
        cases += [Case("MatMulInteger", [a, b], label=f"MatMulInteger {sa}x{sb}"),
                  Case("MatMulInteger", [a, b, np.array(12, np.uint8), np.array(-3, np.int8)],
                       consts=(2, 3), label=f"MatMulInteger {sa}x{sb} zero points")]
    for at, yt in (("uint8", "uint8"), ("int8", "int8"), ("uint8", "int8")):
        a = rand(2, 3, 6, dtype=at, lo=-128, hi=255)
        b = rand(6, 4, dtype="int8", lo=-128, hi=127)
        cases += [
            Case("QLinearMatMul", [a, np.array(0.03, F32), np.array(4, at), b,
                                   np.array(0.01, F32), np.array(-2, np.int8),
                                   np.array(0.07, F32), np.array(3, yt)],
                 consts=(1, 2, 4, 5, 6, 7), label=f"QLinearMatMul {at}->{yt}"),
            Case("QLinearMatMul", [a, np.array(0.03, F32), np.array(4, at), b,
                                   rand(4, lo=0.005, hi=0.02), rand(4, dtype="int8", lo=-3, hi=3),
                                   np.array(0.07, F32), np.array(3, yt)],
                 consts=(4,), label=f"QLinearMatMul {at}->{yt} per column"),
        ]
    return cases


# -- sizes above the parallel thresholds ----------------------------------------------------------

@family
def large_parallel() -> list[Case]:
    """Sizes where the schedules use parallel loops, vector bodies and odd tails at once."""
    big = (5, 67, 131)  # 43,885 elements, last dimension prime
    cases = []
    for op, lo, hi in [("Relu", -4, 4), ("Sigmoid", -8, 8), ("Tanh", -4, 4), ("Exp", -5, 5),
                       ("Erf", -3, 3), ("Gelu", -4, 4), ("Sqrt", 0, 5), ("Log", 0.01, 5)]:
        cases.append(Case(op, [rand(*big, lo=lo, hi=hi)], label=f"{op} {big}"))
        cases.append(Case(op, [rand(*big, dtype="float16", lo=lo, hi=hi)],
                          label=f"{op} float16 {big}"))
    for dtype, lo, hi in [("int8", -128, 127), ("uint8", 0, 255), ("int32", -1000, 1000),
                          ("float16", -10, 10)]:
        a = rand(*big, dtype=dtype, lo=lo, hi=hi)
        cases += [
            Case("Add", [a, rand(131, dtype=dtype, lo=lo, hi=hi)], label=f"Add {dtype} (wraps)"),
            Case("Sub", [a, rand(67, 1, dtype=dtype, lo=lo, hi=hi)], label=f"Sub {dtype}"),
            Case("Mul", [a, rand(1, dtype=dtype, lo=lo, hi=hi)], label=f"Mul {dtype}"),
        ]
    cases += [
        Case("Cast", [rand(*big, lo=-300, hi=300)], {"to": "int8"}, label="Cast float->int8"),
        Case("Cast", [rand(*big, lo=-300, hi=300)], {"to": "float16"}, label="Cast ->float16"),
        Case("Greater", [rand(*big), rand(131)], label="Greater"),
        Case("Where", [rand(*big, dtype=bool), rand(*big), rand(131)], label="Where"),
        Case("Softmax", [rand(17, 1000, lo=-5, hi=5)], {"axis": -1}, label="Softmax 17x1000"),
        Case("Softmax", [rand(2, 12, 77, 77, lo=-5, hi=5)], {"axis": -1}, label="Softmax 77"),
        Case("LayerNormalization", [rand(3, 77, 768), rand(768), rand(768)], {"axis": -1},
             consts=(1, 2), label="LayerNormalization 3x77x768"),
        Case("ArgMax", [rand(37, 53, 29)], {"axis": 1, "keepdims": 0}, label="ArgMax"),
        Case("CumSum", [rand(37, 531)], {"axis": 1}, label="CumSum"),
        Case("Transpose", [rand(7, 33, 65, 3)], {"perm": [0, 3, 1, 2]}, label="Transpose"),
        Case("Concat", [rand(2, 37, 41, 19), rand(2, 13, 41, 19)], {"axis": 1},
             label="Concat"),
        Case("Gather", [rand(5000, 77), rand(3, 131, dtype="int64", lo=-5000, hi=4999)],
             {"axis": 0}, label="Gather"),
        Case("Pad", [rand(2, 3, 67, 131)], {"pads": [0, 0, 3, 1, 0, 0, 2, 5], "mode": "reflect"},
             label="Pad reflect"),
        Case("Resize", [rand(1, 3, 37, 41)], {"sizes": [1, 3, 74, 82], "scales": [1, 1, 2, 2],
                                              "mode": "linear"}, label="Resize linear"),
        Case("BatchNormalization", [rand(2, 37, 29, 31), rand(37), rand(37), rand(37),
                                    rand(37, lo=0.1, hi=2)], consts=(1, 2, 3, 4),
             label="BatchNormalization"),
        Case("GroupNormalization", [rand(2, 32, 29, 31), rand(32), rand(32)], {"num_groups": 8},
             label="GroupNormalization"),
        Case("GlobalAveragePool", [rand(2, 37, 29, 31)], label="GlobalAveragePool"),
        Case("MatMul", [rand(3, 37, 129), rand(3, 129, 67)], label="batched MatMul odd"),
        Case("MatMul", [rand(2, 12, 77, 64), rand(2, 12, 64, 77)], label="attention scores"),
        Case("Gemm", [rand(129, 37), rand(129, 67), rand(37, 67)],
             {"transA": 1, "alpha": 0.3, "beta": 1.7}, label="Gemm transA"),
        Case("MatMulInteger", [rand(37, 129, dtype="uint8", lo=0, hi=255),
                               rand(129, 67, dtype="int8", lo=-128, hi=127)],
             label="MatMulInteger"),
        Case("QuantizeLinear", [rand(*big, lo=-50, hi=50), np.array(0.37, F32),
                                np.array(3, np.int8)], consts=(1, 2), label="QuantizeLinear"),
    ]
    for op in ("ReduceSum", "ReduceMax", "ReduceMean", "ReduceL2", "ReduceLogSumExp"):
        cases += [Case(op, [rand(37, 53, 29)], {"axes": [1], "keepdims": 0},
                       label=f"{op} middle axis"),
                  Case(op, [rand(37, 53, 29)], {"axes": [0, 2], "keepdims": 1},
                       label=f"{op} outer axes"),
                  Case(op, [rand(5, 40000)], {"axes": [1], "keepdims": 1},
                       label=f"{op} long rows")]
    return cases


@family
def empty_tensors() -> list[Case]:
    z = np.zeros((0, 5), F32)
    return [Case("Relu", [z], label="Relu (0, 5)"),
            Case("Add", [np.zeros((0, 3), F32), rand(3)], label="Add (0, 3)"),
            Case("ReduceSum", [np.zeros((0, 4), F32)], {"axes": [0], "keepdims": 0},
                 label="ReduceSum over 0 elements"),
            Case("MatMul", [np.zeros((3, 0), F32), np.zeros((0, 4), F32)], label="MatMul k=0"),
            Case("Transpose", [np.zeros((2, 0, 3), F32)], {"perm": [2, 0, 1]},
                 label="Transpose"),
            Case("Slice", [rand(3, 4)], {"starts": [2], "ends": [2], "axes": [0]},
                 label="empty Slice"),
            Case("Gather", [rand(3, 4), np.zeros((0,), np.int64)], {"axis": 0},
                 label="Gather no indices")]


# -- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_reference(name: str) -> None:
    check_cases(FAMILIES[name]())


def test_every_claimed_op_is_covered() -> None:
    """Each op with a topi compute (what the backend claims) is in some family above."""
    covered: set[str] = set()
    for make in FAMILIES.values():
        covered |= {c.op for c in make()}
    missing = sorted(set(registered_ops()) - covered - {"TestOnlyWrongType"})
    assert not missing, missing
