"""tessera_llvm.intrinsics: each intrinsic, scalar and 16-lane vector, against numpy/math."""

from __future__ import annotations

import math

import numpy as np
import pytest

from tessera import tir
from tessera.errors import CompileError
from tessera_llvm.codegen import generate_module

F = tir.ForKind
LANES = 16


def _unary_func(name: str, dtype: str, n: int, lanes: int) -> tir.PrimFunc:
    A, B = tir.Buffer("A", [n], dtype), tir.Buffer("B", [n], dtype)
    i = tir.Var("i")
    ix = tir.Ramp(i * lanes, 1, lanes) if lanes > 1 else i
    body = tir.For(i, 0, n // lanes, F.SERIAL,
                   tir.BufferStore(B, tir.call(name, A[ix]), [ix]))
    return tir.PrimFunc(f"{name}_{dtype}_{lanes}", [A, B], body)


def _run_unary(run_tir, name: str, x: np.ndarray, lanes: int) -> np.ndarray:
    n = len(x) - len(x) % LANES
    x = np.ascontiguousarray(x[:n])
    out = np.full(n, 12345, x.dtype)
    run_tir(_unary_func(name, str(x.dtype), n, lanes), [x, out])
    return out


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x.astype(np.float64)))


def _erf(x: np.ndarray) -> np.ndarray:
    return np.array([math.erf(float(v)) if not math.isnan(v) else math.nan for v in x])


def _inputs(name: str, rng: np.random.Generator) -> np.ndarray:
    """Wide-range float32 inputs for ``name``, with the special values."""
    specials = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0]
    if name == "exp":
        x = np.concatenate([rng.uniform(-110, 90, 3000), rng.uniform(-1, 1, 500),
                            [88.72, 88.73, -87.3, -103.0, -104.5]])
    elif name == "log":
        x = np.concatenate([np.exp(rng.uniform(-87, 88, 3000)), rng.uniform(0.5, 2, 500),
                            [1e-40, 3e-45, 1.17e-38, -1.0, np.finfo(np.float32).max]])
    elif name in ("tanh", "sigmoid"):
        x = np.concatenate([rng.uniform(-30, 30, 2000), rng.uniform(-1, 1, 1000),
                            10.0 ** rng.uniform(-8, -2, 500), [0.6249, 0.6251, 9.0, -9.0]])
    elif name == "erf":
        x = np.concatenate([rng.uniform(-6, 6, 3000), 10.0 ** rng.uniform(-8, 0, 500)])
    else:
        x = rng.standard_normal(3000) * 10
    x = np.concatenate([x, -x[:200] if name != "log" else x[:200], specials])
    return x.astype(np.float32)


_REFERENCES = {
    "exp": lambda x: np.exp(x.astype(np.float64)),
    "log": lambda x: np.log(x.astype(np.float64)),
    "tanh": lambda x: np.tanh(x.astype(np.float64)),
    "sigmoid": _sigmoid,
    "erf": _erf,
    "sqrt": lambda x: np.sqrt(x.astype(np.float64)),
    "fabs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": np.round,
}


@pytest.mark.parametrize("lanes", [1, LANES])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "sqrt"])
def test_transcendental_float32_accuracy(run_tir, rng, name, lanes):
    x = _inputs(name, rng)
    with np.errstate(all="ignore"):
        got = _run_unary(run_tir, name, x, lanes)
        ref = _REFERENCES[name](x[:len(got)]).astype(np.float32)
    # About 1e-6 relative; results below float32's normal range are compared absolutely.
    np.testing.assert_allclose(got, ref, rtol=1.5e-6, atol=2e-38, equal_nan=True,
                               err_msg=f"{name} with {lanes} lanes")


def test_vector_transcendentals_do_not_call_libm():
    for name in ("exp", "log", "tanh", "sigmoid", "erf"):
        text = str(generate_module([_unary_func(name, "float32", 64, LANES)], "m"))
        for libm in ("@expf", "@logf", "@tanhf", "@erff", "@exp\"", "@\"expf\""):
            assert libm not in text, (name, libm)
        assert "call float" not in text


@pytest.mark.parametrize("lanes", [1, LANES])
@pytest.mark.parametrize("name", ["fabs", "floor", "ceil", "round"])
def test_exact_rounding_functions(run_tir, rng, name, lanes):
    x = np.concatenate([rng.standard_normal(500) * 20,
                        np.arange(-8, 8) + 0.5,  # halves: round to even
                        [0.0, -0.0, np.inf, -np.inf, np.nan, 2.0**23 + 1, -(2.0**24)]])
    x = x.astype(np.float32)
    got = _run_unary(run_tir, name, x, lanes)
    np.testing.assert_array_equal(got, _REFERENCES[name](x[:len(got)]))


@pytest.mark.parametrize("dtype", ["float64", "float16"])
@pytest.mark.parametrize("name", ["exp", "log", "tanh", "sigmoid", "erf", "sqrt", "round"])
def test_other_float_widths(run_tir, rng, dtype, name):
    x = _inputs(name, rng).astype(np.float64)
    if dtype == "float16":
        x = x[np.abs(x) < 60000]
    x = x.astype(dtype)
    for lanes in (1, LANES):
        with np.errstate(all="ignore"):
            got = _run_unary(run_tir, name, x, lanes)
            ref = _REFERENCES[name](x[:len(got)].astype(np.float64))
        if dtype == "float64":
            np.testing.assert_allclose(got, ref, rtol=1e-13, atol=1e-300, equal_nan=True)
        else:  # computed in float32, rounded once to float16
            with np.errstate(over="ignore"):
                ref16 = ref.astype(np.float16)
            np.testing.assert_allclose(got.astype(np.float64), ref16, rtol=1e-3, atol=1e-7,
                                       equal_nan=True)


def _binary_intrinsic(name: str, n: int, lanes: int, const_y: float | None = None,
                      args: int = 2) -> tir.PrimFunc:
    bufs = [tir.Buffer(c, [n], "float32") for c in "XYZ"[:args]]
    out = tir.Buffer("O", [n], "float32")
    i = tir.Var("i")
    ix = tir.Ramp(i * lanes, 1, lanes) if lanes > 1 else i
    operands = [b[ix] for b in bufs]
    if const_y is not None:
        y = tir.const(const_y, "float32")
        operands[1] = tir.Broadcast(y, lanes) if lanes > 1 else y
    body = tir.For(i, 0, n // lanes, F.SERIAL,
                   tir.BufferStore(out, tir.call(name, *operands), [ix]))
    return tir.PrimFunc(f"{name}_{lanes}", [*bufs, out], body)


@pytest.mark.parametrize("lanes", [1, LANES])
def test_pow_general_and_constant_exponents(run_tir, rng, lanes):
    n = 256
    x = rng.uniform(0.01, 20, n).astype(np.float32)
    y = rng.uniform(-3, 3, n).astype(np.float32)
    out = np.zeros(n, np.float32)
    run_tir(_binary_intrinsic("pow", n, lanes), [x, y, out])
    np.testing.assert_allclose(out, np.power(x.astype(np.float64), y), rtol=2e-6)
    xs = (rng.standard_normal(n) * 4).astype(np.float32)
    for e in (0.0, 1.0, 2.0, 3.0, 4.0, 0.5, -0.5, -1.0):
        base = np.abs(xs) + 0.1 if e in (0.5, -0.5) else xs
        run_tir(_binary_intrinsic("pow", n, lanes, const_y=e), [base, y, out])
        np.testing.assert_allclose(out, np.power(base.astype(np.float64), e), rtol=2e-6,
                                   err_msg=f"pow(x, {e})")


@pytest.mark.parametrize("lanes", [1, LANES])
def test_fma(run_tir, rng, lanes):
    n = 128
    x, y, z = (rng.standard_normal(n).astype(np.float32) for _ in range(3))
    out = np.zeros(n, np.float32)
    run_tir(_binary_intrinsic("fma", n, lanes, args=3), [x, y, z, out])
    exact = x.astype(np.float64) * y + z
    np.testing.assert_array_equal(out, exact.astype(np.float32))


def test_integer_intrinsics(run_tir, rng):
    n = 32
    A, B = tir.Buffer("A", [n], "int32"), tir.Buffer("B", [n], "int32")
    i = tir.Var("i")
    ix = tir.Ramp(i * 16, 1, 16)
    body = tir.For(i, 0, n // 16, F.SERIAL, tir.BufferStore(
        B, tir.call("fabs", tir.call("floor", A[ix])), [ix]))
    a, b = rng.integers(-1000, 1000, n).astype(np.int32), np.zeros(n, np.int32)
    run_tir(tir.PrimFunc("iabs", [A, B], body), [a, b])
    np.testing.assert_array_equal(b, np.abs(a))
    bad = tir.PrimFunc("iexp", [A, B], tir.BufferStore(B, tir.call("exp", A[0]), [0]))
    with pytest.raises(CompileError, match="float"):
        generate_module([bad], "m")


_LIBM_REFERENCES = {
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "asin": np.arcsin, "acos": np.arccos,
    "atan": np.arctan, "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh,
    "acosh": np.arccosh, "atanh": np.arctanh, "log2": np.log2, "log10": np.log10,
    "exp2": np.exp2,
}


@pytest.mark.parametrize("dtype", ["float32", pytest.param("float64", marks=pytest.mark.slow),
                                   pytest.param("float16", marks=pytest.mark.slow)])
def test_libm_functions(run_tir, rng, dtype):
    for name, ref_fn in _LIBM_REFERENCES.items():
        if name in ("asin", "acos", "atanh"):
            x = rng.uniform(-0.99, 0.99, 64)
        elif name == "acosh":
            x = rng.uniform(1, 50, 64)
        elif name in ("log2", "log10"):
            x = rng.uniform(0.01, 100, 64)
        else:
            x = rng.uniform(-5, 5, 64)
        x = x.astype(dtype)
        for lanes in (1, LANES):
            got = _run_unary(run_tir, name, x, lanes)
            ref = ref_fn(x.astype(np.float64)).astype(dtype)
            rtol = {"float16": 2e-3, "float32": 2e-6, "float64": 1e-13}[dtype]
            np.testing.assert_allclose(got, ref, rtol=rtol, atol=rtol, err_msg=name)


@pytest.mark.parametrize("lanes", [1, LANES])
def test_fmod_and_atan2(run_tir, rng, lanes):
    n = 64
    x = (rng.standard_normal(n) * 10).astype(np.float32)
    y = (rng.standard_normal(n) * 3).astype(np.float32)
    out = np.zeros(n, np.float32)
    run_tir(_binary_intrinsic("fmod", n, lanes), [x, y, out])
    np.testing.assert_array_equal(out, np.fmod(x, y))
    run_tir(_binary_intrinsic("atan2", n, lanes), [x, y, out])
    np.testing.assert_allclose(out, np.arctan2(x, y), rtol=2e-6, atol=1e-7)
