"""llvm op cases: convolutions, matrix products, pooling, reductions and normalization,
sizes above the parallel thresholds, empty tensors."""

from __future__ import annotations

import numpy as np
from backend_cases.op_cases import F32, family, rand
from backend_cases.support import Case
from topi.test_conv import CONV_CASES, CONVT_CASES, NCHWC_CASES
from topi.test_dense import EINSUMS, GEMM_CASES, MATMUL_SHAPES
from topi.test_pooling import WINDOWS
from topi.test_reduction import AXES, REDUCE_OPS

from tessera.ops.layout import pack_conv_weight, pack_matmul_weight, pack_nchwc
from tessera.ops.quant import pack_integer_matmul_weight

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
        # 8-bit weights (MatMulInteger with constant weights) in panels of int16 pairs, with
        # an A zero point applied as a_zp * colsum(B) (an odd K: the last pair padded)
        bi = rand(a_shape[-1], n, dtype="int8", lo=-128, hi=127)
        colsum = bi.astype(np.int64).sum(axis=0).astype(np.int32)
        for adt, lo, hi in (("uint8", 0, 255), ("int8", -128, 127)):
            cases.append(Case("MatMulIntegerPacked",
                              [rand(*a_shape, dtype=adt, lo=lo, hi=hi),
                               pack_integer_matmul_weight(bi, nb), np.array(7, adt), colsum], {},
                              consts=(1, 3), label=f"MatMulIntegerPacked {adt} {a_shape} x {n}"))
            # four bytes a word (vpdpbusd's form)
            cases.append(Case("MatMulIntegerPacked",
                              [rand(*a_shape, dtype=adt, lo=lo, hi=hi),
                               pack_integer_matmul_weight(bi, nb, word=4), np.array(7, adt),
                               colsum], {"word": 4}, consts=(1, 3),
                              label=f"MatMulIntegerPacked quads {adt} {a_shape} x {n}"))
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
    # constant weights with 16k columns: packed into panels, C an Add fused after the product
    for attrs, m, k, n, c in [({"transB": 1}, 3, 40, 48, (3, 48)), ({}, 4, 24, 32, (4, 1)),
                              ({"transB": 1}, 1, 64, 32, ()), ({}, 5, 16, 64, None),
                              ({"beta": 1.0, "transB": 1}, 2, 19, 16, (1, 16))]:
        b = rand(n, k) if attrs.get("transB") else rand(k, n)
        cases.append(Case("Gemm", [rand(m, k), b] + ([rand(*c)] if c is not None else []),
                          attrs, consts=(1, 2), label=f"Gemm packed {attrs} {m}x{k}x{n} C {c}"))
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
    # the pow form (a base that may not be positive) and a wide LRN with its 55-column rows
    cases.append(Case("LRN", [x], {"size": 3, "alpha": -1e-2, "beta": 0.75, "bias": 2.0},
                      label="LRN negative alpha"))
    cases.append(Case("LRN", [rand(1, 12, 7, 55) * 3], {"size": 5, "alpha": 1e-4, "beta": 0.75,
                                                         "bias": 1.0}, label="LRN 55 columns"))
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


# -- sizes above the parallel thresholds ----------------------------------------------------------

def with_special_values(x: np.ndarray) -> np.ndarray:
    """``x`` with NaN, +inf and -inf spread through it (every 97th, 89th, 83rd element)."""
    flat = x.reshape(-1)
    flat[::97], flat[1::89], flat[2::83] = np.nan, np.inf, -np.inf
    return x


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
        # Out of range (and NaN/±inf): saturating, as the reference defines (tessera.ir.cast).
        Case("Cast", [with_special_values(rand(*big, lo=-300, hi=300))], {"to": "int8"},
             label="Cast float->int8"),
        Case("Cast", [with_special_values(rand(*big, lo=-1e10, hi=1e10))], {"to": "uint32"},
             label="Cast float->uint32"),
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
