"""tessera_llvm.build and tessera_llvm.loader: object code, target machines, loading, calling."""

from __future__ import annotations

import ctypes
import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tessera
from tessera import tir
from tessera.errors import ArtifactError, CompileError, RunError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera_llvm import loader
from tessera_llvm.build import (
    BuiltModule,
    build_module,
    host_cpu,
    missing_host_features,
    target_machine,
)
from tessera_llvm.loader import load_object, pack_pointers, undefined_symbols

F = tir.ForKind
X86 = platform.machine().lower() in ("x86_64", "amd64")
PLUGIN = str(Path(__file__).resolve().parents[1])


def _kernels() -> list[tir.PrimFunc]:
    n = 100
    A, B, C = (tir.Buffer(c, [n], "float32") for c in "ABC")
    i, j = tir.Var("i"), tir.Var("j")
    saxpy = tir.PrimFunc("saxpy", [A, B, C], tir.For(
        i, 0, n, F.SERIAL, tir.BufferStore(C, A[i] * 2.5 + B[i], [i])))
    ix = tir.Ramp(j * 4, 1, 4)
    act = tir.PrimFunc("act", [A, C], tir.For(j, 0, n // 4, F.PARALLEL, tir.BufferStore(
        C, tir.call("tanh", A[ix]) + tir.call("sigmoid", A[ix]), [ix])))
    return [saxpy, act]


def _check(lib: loader.Library, rng: np.random.Generator,
           names: tuple[str, str] = ("saxpy", "act")) -> None:
    """The two kernels of :func:`_kernels`, called by ``names`` (their symbols or aliases)."""
    a, b = rng.standard_normal(100).astype("float32"), rng.standard_normal(100).astype("float32")
    c = np.zeros(100, "float32")
    lib.get(names[0])([a, b, c])
    np.testing.assert_allclose(c, a * 2.5 + b, rtol=1e-6, atol=1e-6)
    lib.get(names[1])([a, c])
    np.testing.assert_allclose(c, np.tanh(a) + 1 / (1 + np.exp(-a)), rtol=2e-6, atol=1e-7)


def test_built_module_contents():
    built = build_module(_kernels(), "mod")
    assert isinstance(built, BuiltModule)
    assert built.function_names == ["saxpy", "act"]
    assert built.object_code[:4] == b"\x7fELF"
    assert 'define void @saxpy(ptr' in built.llvm_ir or 'define void @"saxpy"(ptr' in built.llvm_ir
    assert "tessera_parallel_for" in built.source_ir
    assert "saxpy:" in built.asm
    assert built.signatures["saxpy"] == [("float32", 100)] * 3
    assert "tessera_parallel_for" in undefined_symbols(built.object_code)


def test_serial_loop_is_vectorized_by_llvm():
    built = build_module([_kernels()[0]], "vec")
    assert "x float>" in built.llvm_ir  # the loop vectorizer made vector code of a scalar loop


def test_object_code_round_trip_in_fresh_library(rng):
    built = build_module(_kernels(), "mod")
    data = bytes(built.object_code)
    lib1 = load_object(data, built.function_names)
    lib2 = load_object(data, ["saxpy", "act"], signatures=built.signatures)
    _check(lib1, rng)
    _check(lib2, rng)
    assert lib1.address("saxpy") != lib2.address("saxpy")
    del lib1
    _check(lib2, rng)


@pytest.mark.slow
def test_object_code_round_trip_in_fresh_process(tmp_path):
    built = build_module(_kernels(), "mod")
    path = tmp_path / "mod.o"
    path.write_bytes(built.object_code)
    code = f"""
        import numpy as np
        from tessera_llvm.loader import load_object
        lib = load_object(open({str(path)!r}, "rb").read(), ["saxpy", "act"])
        a = np.linspace(-3, 3, 100, dtype="float32"); b = np.ones(100, "float32")
        c = np.zeros(100, "float32")
        lib.get("saxpy")([a, b, c])
        assert np.allclose(c, a * 2.5 + 1), c
        lib.get("act")([a, c])
        assert np.allclose(c, np.tanh(a) + 1 / (1 + np.exp(-a)), rtol=1e-5), c
        print("ok")
    """
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([PLUGIN, env.get("PYTHONPATH", "")])
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_target_machine_host_and_override():
    cpu, features = host_cpu()
    assert cpu
    tm = target_machine()
    assert tm.triple
    built = build_module(_kernels()[:1], "host")
    assert built.cpu_name == cpu and built.features == features
    assert missing_host_features(built.features) == []
    assert missing_host_features("+no-such-feature,-sse2") == ["no-such-feature"]
    if X86:
        assert target_machine("x86-64-v2") is not None


def _cpu_beyond_this_one() -> tuple[str, list[str]]:
    """An x86 CPU name implying features this host lacks (e.g. AVX-512 on an AVX2 machine),
    and those features; skips where the host has them all."""
    for name in ("x86-64-v3", "x86-64-v4", "znver4", "cascadelake", "alderlake"):
        missing = missing_host_features("", name)
        if missing:
            return name, missing
    pytest.skip("this CPU has every feature the named CPUs imply")


@pytest.mark.skipif(not X86, reason="x86 CPU names")
def test_code_for_a_cpu_with_features_this_one_lacks_is_refused_not_run(tmp_path):
    """Code built for a CPU whose features this one lacks would die of an illegal instruction:
    linking the built module is refused, a compiled model's kernels raise RunError when run
    (it is still exported), and loading the artifact names the missing features."""
    name, missing = _cpu_beyond_this_one()
    assert missing_host_features("", host_cpu()[0]) == []
    built = build_module(_kernels()[:1], "beyond", mcpu=name)
    with pytest.raises(RunError, match=missing[0]):
        built.load()
    fn = Function("f")
    x = fn.add_input("x", TensorType((4, 16), DType.float32))
    fn.outputs = [fn.op("Relu", x)]
    mod = tessera.compile(fn, f"llvm -mcpu={name}")
    with pytest.raises(RunError, match=f"built for CPU '{name}'"):
        mod.run(x=np.ones((4, 16), np.float32))
    mod.export(tmp_path / "m.tar")
    with pytest.raises(ArtifactError, match=missing[0]):
        tessera.load(tmp_path / "m.tar")


@pytest.mark.skipif(not X86, reason="x86 CPU names")
@pytest.mark.parametrize("mcpu", ["x86-64-v2", "x86-64"])
def test_mcpu_override_generic_code(rng, mcpu):
    built = build_module(_kernels(), f"generic_{mcpu}", mcpu=mcpu)
    assert "zmm" not in built.asm and "ymm" not in built.asm
    _check(built.load(), rng)


@pytest.mark.skipif(not X86, reason="x86 CPU names")
def test_float16_without_f16c_matches_numpy_exhaustively():
    """On a CPU without F16C, LLVM converts float16 with library calls that the runtime
    provides: every float16 value converts to float32 and back exactly as numpy does."""
    n = 1 << 16
    H, Fb, H2 = tir.Buffer("H", [n], "float16"), tir.Buffer("F", [n], "float32"), tir.Buffer(
        "H2", [n], "float16")
    i = tir.Var("i")
    body = tir.For(i, 0, n, F.SERIAL, tir.seq(
        tir.BufferStore(Fb, tir.cast("float32", H[i]), [i]),
        tir.BufferStore(H2, tir.cast("float16", Fb[i] * 1.0009765625), [i])))
    lib = build_module([tir.PrimFunc("halves", [H, Fb, H2], body)], "h",
                       mcpu="x86-64-v2").load()
    h = np.arange(n, dtype=np.uint16).view(np.float16)
    f, h2 = np.zeros(n, np.float32), np.zeros(n, np.float16)
    lib.get("halves")([h, f, h2])
    np.testing.assert_array_equal(f, h.astype(np.float32))
    with np.errstate(over="ignore", invalid="ignore"):
        expected = (h.astype(np.float32) * np.float32(1.0009765625)).astype(np.float16)
    np.testing.assert_array_equal(h2.view(np.uint16)[~np.isnan(expected)],
                                  expected.view(np.uint16)[~np.isnan(expected)])
    assert np.isnan(h2[np.isnan(expected)]).all()


def test_calling_conventions(rng):
    lib = build_module(_kernels(), "mod").load()
    fn = lib.get("saxpy")
    a, b = rng.standard_normal(100).astype("float32"), rng.standard_normal(100).astype("float32")
    c = np.zeros(100, "float32")
    fn.call_addresses([a.ctypes.data, b.ctypes.data, c.ctypes.data])
    np.testing.assert_allclose(c, a * 2.5 + b, rtol=1e-6, atol=1e-6)
    c[:] = 0
    packed = pack_pointers([a, b.ctypes.data, ctypes.c_void_p(c.ctypes.data)])
    lib.get_raw("saxpy")(packed)
    np.testing.assert_allclose(c, a * 2.5 + b, rtol=1e-6, atol=1e-6)
    assert "saxpy" in lib and "nope" not in lib
    with pytest.raises(KeyError):
        lib.get("nope")


def test_argument_checks_with_signatures():
    built = build_module(_kernels(), "mod")
    fn = built.load().get("saxpy")
    good = np.zeros(100, "float32")
    with pytest.raises(RunError, match="dtype"):
        fn([good, good, np.zeros(100, "float64")])
    with pytest.raises(RunError, match="elements"):
        fn([good, good, np.zeros(99, "float32")])
    with pytest.raises(RunError, match="3 buffers"):
        fn([good, good])
    with pytest.raises(RunError, match="contiguous"):
        fn([good, good, np.zeros(200, "float32")[::2]])


def test_missing_function_and_missing_symbol_are_errors():
    built = build_module(_kernels(), "mod")
    with pytest.raises(CompileError, match="not in the object code"):
        load_object(built.object_code, ["saxpy", "absent"])
    # The same object with its import of the pool renamed to a symbol nobody defines.
    broken = built.object_code.replace(b"tessera_parallel_for", b"tessera_parallel_fox")
    assert "tessera_parallel_fox" in undefined_symbols(broken)
    with pytest.raises(CompileError, match="tessera_parallel_fox"):
        load_object(broken, ["act"])


def test_tir_compile_errors_name_the_function():
    B = tir.Buffer("B", [2, 2], "float32")
    f = tir.PrimFunc("bad_kernel", [B], tir.BufferStore(B, tir.const(0.0, "float32"), [0, 0]))
    with pytest.raises(CompileError, match="bad_kernel"):
        build_module([f], "m")
