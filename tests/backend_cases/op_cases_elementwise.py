"""llvm op cases: elementwise and broadcasting ops, data movement, quantized ops."""

from __future__ import annotations

import itertools

import numpy as np
from backend_cases.op_cases import F32, family, nonzero, rand
from backend_cases.support import Case
from topi.test_broadcast import INT_DIV_TYPES, SHAPE_PAIRS, integer_division_operands
from topi.test_elemwise import CAST_TYPES, FLOAT_OPS, SHAPES
from topi.test_quantized import CONV_CASES as QCONV_CASES
from topi.test_transform import RESHAPES, RESIZES, SLICES

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
    cases.append(Case("Binarizer", [np.array([np.nan, -1.0, 0.25, 0.5, 0.75, np.inf], F32)],
                      {"threshold": 0.5}, label="Binarizer NaN and ties"))
    cases.append(Case("Binarizer", [rand(4, 7, dtype="float64", lo=-2, hi=2)],
                      {"threshold": -0.5}, label="Binarizer float64"))
    cases.append(Case("Binarizer", [np.arange(-6, 6, dtype=np.int32).reshape(3, 4)],
                      {"threshold": 1.5}, label="Binarizer int32"))
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
        if dtype.startswith("int"):
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
    for src, dst in (("int32", "uint32"), ("uint8", "int8"), ("uint64", "int64"),
                     ("int16", "uint16"), ("bool", "uint8")):  # the bit casts llvm claims
        x = rand(3, 21, dtype=bool) if src == "bool" else rand(3, 21, dtype=src, lo=-100, hi=100)
        cases.append(Case("BitCast", [x], {"to": dst}, label=f"BitCast {src}->{dst}"))
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
    for dtype in INT_DIV_TYPES:
        a, b = integer_division_operands(dtype)
        cases += [Case("Div", [a, b], label=f"Div {dtype}"),
                  Case("Mod", [a, b], {"fmod": 0}, label=f"Mod {dtype}"),
                  Case("Mod", [a, b], {"fmod": 1}, label=f"fmod {dtype}")]
        if dtype.startswith("int"):
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
