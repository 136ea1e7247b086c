"""tessera_llvm.compile_pool and tessera_llvm.llvm_worker: a large module optimised in parts,
in worker processes at once, linked into one object; the same kernels as one piece; a worker
that fails only moves its part back into this process."""

from __future__ import annotations

import io
import json
import re
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import tir
from tessera.errors import CompileError
from tessera_llvm import compile_pool, llvm_worker
from tessera_llvm.build import build_module, machine_spec, target_machine

F = tir.ForKind
RNG = np.random.default_rng(11)


def _kernels(count: int = 5) -> list[tir.PrimFunc]:
    """``count`` kernels over 64 floats, each another function of its input (one parallel, one
    calls tanh), of growing size."""
    out = []
    for k in range(count):
        A, C = tir.Buffer("A", [64], "float32"), tir.Buffer("C", [64], "float32")
        i = tir.Var("i")
        value = A[i] * float(k + 1)
        for _ in range(k):
            value = value * 0.5 + A[i]
        if k == 1:
            value = tir.call("tanh", value)
        kind = F.PARALLEL if k == 2 else F.SERIAL
        out.append(tir.PrimFunc(f"k{k}", [A, C], tir.For(i, 0, 64, kind,
                                                         tir.BufferStore(C, value, [i]))))
    return out


def _expected(k: int, a: np.ndarray) -> np.ndarray:
    v = a * np.float32(k + 1)
    for _ in range(k):
        v = v * np.float32(0.5) + a
    return np.tanh(v) if k == 1 else v


def _run_all(built, count: int = 5) -> None:
    lib = built.load()
    a = RNG.standard_normal(64).astype(np.float32)
    for k in range(count):
        c = np.empty(64, np.float32)
        lib.get(f"k{k}")([a, c])
        np.testing.assert_allclose(c, _expected(k, a), rtol=2e-6, atol=1e-6)


def test_parts_are_balanced_and_keep_the_functions_order() -> None:
    funcs = _kernels(6)
    assert compile_pool.split_parts(funcs, jobs=1, min_nodes=0) == [funcs]
    assert compile_pool.split_parts(funcs, jobs=4, min_nodes=10**9) == [funcs]
    parts = compile_pool.split_parts(funcs, jobs=3, min_nodes=0)
    assert len(parts) == 3 and sorted(f.name for p in parts for f in p) == \
        sorted(f.name for f in funcs)
    for p in parts:
        assert [f.name for f in p] == sorted(f.name for f in p)  # k0 < k1 < ... in order
    assert len(compile_pool.split_parts(funcs[:2], jobs=8, min_nodes=0)) == 2


def test_a_module_in_parts_runs_the_same_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    here = []
    real = compile_pool.compile_ir
    monkeypatch.setattr(compile_pool, "compile_ir",
                        lambda text, *a, **k: here.append(text) or real(text, *a, **k))
    monkeypatch.setattr(compile_pool, "MIN_PARALLEL_NODES", 0)
    whole = build_module(_kernels(), "whole", jobs=1)
    parts = build_module(_kernels(), "parts", jobs=3)
    assert len(here) == 1  # one part here, two in workers
    assert whole.function_names == parts.function_names
    assert parts.object_code[:4] == b"\x7fELF"
    for name in whole.function_names:
        assert re.search(rf'^define .*@"?{name}"?\(', parts.llvm_ir, re.M)
    _run_all(whole)
    _run_all(parts)
    again = build_module(_kernels(), "parts", jobs=3)  # the workers are kept
    assert again.object_code == parts.object_code


def test_a_failing_worker_only_moves_its_part_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(compile_pool, "MIN_PARALLEL_NODES", 0)

    def fail(self, header: bytes, text: bytes) -> bytes:
        raise RuntimeError("worker gone")

    monkeypatch.setattr(compile_pool._Worker, "optimize", fail)
    _run_all(build_module(_kernels(), "fallback", jobs=2))


def test_invalid_ir_in_a_part_is_the_same_compile_error() -> None:
    tm_spec, tm = machine_spec(), target_machine()
    good = 'define void @"ok"() {\nentry:\n  ret void\n}\n'
    bad = 'define void @"bad"() {\nentry:\n  ret i32 0\n}\n'
    with pytest.raises(CompileError, match="invalid"):
        compile_pool.optimize_parts([good, bad], tm_spec, tm)


def test_the_worker_answers_errors_and_stops_at_the_end_of_its_input() -> None:
    header = json.dumps({"machine": machine_spec().as_dict(), "speed_level": 3,
                         "loop_unrolling": True}).encode()
    inp = io.BytesIO()
    for text in ('define i32 @"f"() {\nentry:\n  ret i32 7\n}\n', "not IR"):
        llvm_worker.write_frame(inp, header)
        llvm_worker.write_frame(inp, text.encode())
    llvm_worker.write_frame(inp, header)  # a job cut short: the end
    inp.seek(0)
    out = io.BytesIO()
    llvm_worker.serve(inp, out)
    out.seek(0)
    assert llvm_worker.read_frame(out) == b"ok"
    assert llvm_worker.read_frame(out)[:2] == b"BC"  # bitcode
    assert llvm_worker.read_frame(out) == b"error"
    assert b"RuntimeError" in llvm_worker.read_frame(out)
    assert llvm_worker.read_frame(out) is None


@pytest.mark.parametrize("setting,jobs", [("3", 3), ("1", 1), ("0", None), ("two", None)])
def test_the_jobs_setting(monkeypatch: pytest.MonkeyPatch, setting: str,
                          jobs: int | None) -> None:
    monkeypatch.setenv(compile_pool.JOBS_ENV, setting)
    if jobs is None:
        with pytest.raises(CompileError, match=compile_pool.JOBS_ENV):
            compile_pool.compile_jobs()
    else:
        assert compile_pool.compile_jobs() == jobs
    monkeypatch.delenv(compile_pool.JOBS_ENV)
    assert 1 <= compile_pool.compile_jobs() <= compile_pool.MAX_JOBS


def _mlp() -> onnx.ModelProto:
    """x[n, 32] -> three MatMul + Add + Gelu-ish layers -> y[n, 32]; symbolic n."""
    nodes, inits, cur = [], [], "x"
    for k in range(3):
        inits += [numpy_helper.from_array(RNG.standard_normal((32, 32)).astype(np.float32) / 6,
                                          f"W{k}"),
                  numpy_helper.from_array(RNG.standard_normal(32).astype(np.float32), f"B{k}")]
        nodes += [helper.make_node("MatMul", [cur, f"W{k}"], [f"m{k}"]),
                  helper.make_node("Add", [f"m{k}", f"B{k}"], [f"a{k}"]),
                  helper.make_node("Tanh", [f"a{k}"], [f"h{k}"])]
        cur = f"h{k}"
    nodes.append(helper.make_node("Softmax", [cur], ["y"], axis=-1))
    graph = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 32])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def test_a_model_compiled_in_parts_gives_the_same_results(
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = _mlp()
    monkeypatch.setenv(compile_pool.JOBS_ENV, "1")
    one = tessera.compile(model, "llvm", kernel_cache=False)
    monkeypatch.setenv(compile_pool.JOBS_ENV, "2")
    monkeypatch.setattr(compile_pool, "MIN_PARALLEL_NODES", 0)
    split = []
    real = compile_pool.optimize_parts
    monkeypatch.setattr(compile_pool, "optimize_parts",
                        lambda texts, *a, **k: split.append(len(texts)) or real(texts, *a, **k))
    two = tessera.compile(model, "llvm", kernel_cache=False)
    assert split and all(n == 2 for n in split)
    for n in (1, 5, 33):
        x = RNG.standard_normal((n, 32)).astype(np.float32)
        np.testing.assert_array_equal(one.run(x=x)["y"], two.run(x=x)["y"])


@pytest.mark.parametrize("program", ["#!/bin/sh\nsleep 30\n", "#!/bin/sh\necho hello\n"],
                         ids=["silent", "not-a-worker"])
def test_a_worker_that_is_not_one_is_not_used(monkeypatch: pytest.MonkeyPatch, tmp_path,
                                              program: str) -> None:
    """``sys.executable`` that is not this Python (an embedded interpreter): the worker never
    says hello, or says something else; its part is optimised here, without waiting long."""
    fake = tmp_path / "python"
    fake.write_text(program)
    fake.chmod(0o755)
    compile_pool.shutdown()
    monkeypatch.setattr(compile_pool, "MIN_PARALLEL_NODES", 0)
    monkeypatch.setattr(compile_pool, "START_TIMEOUT_S", 0.5)
    monkeypatch.setattr(sys, "executable", str(fake))
    try:
        _run_all(build_module(_kernels(), "impostor", jobs=2))
        assert not compile_pool._idle  # not given back for later compiles
    finally:
        compile_pool.shutdown()
