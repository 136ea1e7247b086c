"""The word dot-product intrinsics (``dot2_s16``, ``dp4a_*``: :mod:`tessera.tir.dot_product`) in
llvm code: exact against the TIR interpreter at every vector width (scalars, 4, 8 and 16 lanes,
accumulating or not) on random words that include the extreme parts, and the instructions each
CPU gets (``pmaddwd``, ``vpdpwssd`` and ``vpdpbusd`` with VNNI, the AVX-VNNI forms; shifts and
multiplies elsewhere), read from the assembly of CPUs named by ``-mcpu`` (only this machine's
code runs)."""

from __future__ import annotations

import re

import numpy as np
import pytest

from tessera import tir
from tessera.tir import interpreter
from tessera.tir.dot_product import DOT2_S16, DP4A, dot2_s16, dp4a, pack_bytes, pack_pair
from tessera_llvm.build import build_module
from tessera_llvm.machine import enabled_features

F = tir.ForKind
NAMES = (DOT2_S16, *DP4A)


def _words(rng: np.random.Generator, n: int) -> np.ndarray:
    w = rng.integers(-(2 ** 31), 2 ** 31, n, dtype=np.int64).astype(np.int32)
    # the extreme parts: int16 -32768 pairs, bytes 0x80 and 0xFF
    w[:4] = np.array([0x80008000, 0x7FFF8000, 0x80808080, 0xFFFFFFFF],
                     dtype=np.uint32).view(np.int32)
    return w


def _dot_func(name: str, n: int, lanes: int, accumulate: bool) -> tir.PrimFunc:
    """``C[i] = (C[i] if accumulate) + name(A[i], B[i], 0)`` over ``n`` words, ``lanes`` at a
    time (a scalar loop for 1)."""
    A, B, C = (tir.Buffer(x, [n], "int32") for x in "ABC")
    i = tir.Var("i")
    ix = tir.Ramp(i * lanes, 1, lanes) if lanes > 1 else i
    zero = tir.const(0, "int32")
    dot = tir.Call(name, [A[ix], B[ix], zero], "int32")
    body = tir.For(i, 0, n // lanes, F.SERIAL,
                   tir.BufferStore(C, C[ix] + dot if accumulate else dot, [ix]))
    return tir.PrimFunc(f"{name}_{lanes}", [A, B, C], body)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("lanes", [1, 4, 8, 16])
@pytest.mark.parametrize("accumulate", [False, True])
def test_exact_against_the_interpreter(rng: np.random.Generator, name: str, lanes: int,
                                       accumulate: bool) -> None:
    n = 64
    f = _dot_func(name, n, lanes, accumulate)
    a, b, c = _words(rng, n), _words(rng, n)[::-1].copy(), _words(rng, n)
    want = c.copy()
    interpreter.run(f, {"A": a, "B": b, "C": want})
    ref = dot2_s16(a, b, c if accumulate else 0) if name == DOT2_S16 else dp4a(
        name, a, b, c if accumulate else 0)
    np.testing.assert_array_equal(want, ref)  # the interpreter is the numpy semantics
    got = c.copy()
    build_module([f], f.name).load().get(f.name)([a, b, got])
    np.testing.assert_array_equal(got, want)


def test_packed_parts_round_trip(rng: np.random.Generator) -> None:
    """``pack_pair``/``pack_bytes`` of signed and unsigned parts, multiplied: the dot products
    of the parts themselves."""
    n = 32
    X = tir.Buffer("X", [4 * n], "int8")
    Y = tir.Buffer("Y", [4 * n], "uint8")
    C = tir.Buffer("C", [2 * n], "int32")
    i = tir.Var("i")
    pair = tir.Call(DOT2_S16, [pack_pair(X[2 * i], X[2 * i + 1]),
                               pack_pair(Y[2 * i], Y[2 * i + 1]), tir.const(0, "int32")], "int32")
    quad = tir.Call("dp4a_us", [pack_bytes(lambda j: Y[4 * i + j]),
                                pack_bytes(lambda j: X[4 * i + j]), tir.const(0, "int32")],
                    "int32")
    body = tir.seq(tir.For(i, 0, 2 * n, F.SERIAL, tir.BufferStore(C, pair, [i])),
                   tir.For(i, 0, n, F.SERIAL, tir.BufferStore(C, C[i] + quad, [i])))
    f = tir.PrimFunc("packed_parts", [X, Y, C], body)
    x = rng.integers(-128, 128, 4 * n).astype(np.int8)
    y = rng.integers(0, 256, 4 * n).astype(np.uint8)
    x[:4], y[:4] = -128, 255
    xi, yi = x.astype(np.int64), y.astype(np.int64)
    want = (xi * yi).reshape(-1, 2).sum(axis=1)
    want[:n] += (yi * xi).reshape(-1, 4).sum(axis=1)
    for run in ("interpreter", "llvm"):
        c = np.zeros(2 * n, np.int32)
        if run == "llvm":
            build_module([f], f.name).load().get(f.name)([x, y, c])
        else:
            interpreter.run(f, {"X": x, "Y": y, "C": c})
        np.testing.assert_array_equal(c, want, err_msg=run)


def _asm(name: str, lanes: int, mcpu: str) -> str:
    f = _dot_func(name, 64, lanes, True)
    return build_module([f], f.name, mcpu=mcpu).asm


@pytest.mark.parametrize("mcpu,lanes,name,instruction", [
    ("x86-64-v3", 8, DOT2_S16, r"\tvpmaddwd\t.*%ymm"),
    ("skylake-avx512", 16, DOT2_S16, r"\tvpmaddwd\t.*%zmm"),
    ("cascadelake", 16, DOT2_S16, r"\tvpdpwssd\t.*%zmm"),
    ("cascadelake", 16, "dp4a_us", r"\tvpdpbusd\t.*%zmm"),
    ("cascadelake", 16, "dp4a_su", r"\tvpdpbusd\t.*%zmm"),
    ("cascadelake", 8, "dp4a_us", r"\tvpdpbusd\t.*%ymm"),
    ("alderlake", 8, DOT2_S16, r"\{vex\}\tvpdpwssd\t.*%ymm"),
    ("alderlake", 8, "dp4a_us", r"\{vex\}\tvpdpbusd\t.*%ymm"),
])
def test_instructions_per_cpu(name: str, lanes: int, mcpu: str, instruction: str) -> None:
    assert re.search(instruction, _asm(name, lanes, mcpu))


def test_no_vnni_means_no_vnni_instructions() -> None:
    asm = _asm("dp4a_us", 8, "x86-64-v3")  # the bytes widened (LLVM uses vpmaddwd for them)
    assert "vpdpbusd" not in asm and "vpdpwssd" not in asm
    assert "avx512vnni" not in enabled_features("x86-64-v3", None)
    assert "avx512vnni" not in enabled_features("cascadelake", "-avx512vnni")
