"""tessera_llvm.compile_pool and tessera_llvm.llvm_worker: a large module optimised in parts,
in worker processes at once (each part as soon as it is complete: ModuleBuilder), linked into
one object; the same kernels as one piece; a worker that fails only moves its part back into
this process."""

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
from tessera.tir.transform._util import stmt_count
from tessera_llvm import compile_pool, llvm_worker
from tessera_llvm.build import ModuleBuilder, build_module, machine_spec, target_machine

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


def _submitted(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The IR texts handed to any PartOptimizer from now on, in order."""
    texts: list[str] = []
    real = compile_pool.PartOptimizer.submit
    monkeypatch.setattr(compile_pool.PartOptimizer, "submit",
                        lambda self, text, *a: texts.append(text) or real(self, text, *a))
    return texts


def test_a_module_in_parts_runs_the_same_kernels(monkeypatch: pytest.MonkeyPatch) -> None:
    here = []
    real = compile_pool.compile_ir
    monkeypatch.setattr(compile_pool, "compile_ir",
                        lambda text, *a, **k: here.append(text) or real(text, *a, **k))
    monkeypatch.setattr(compile_pool, "MIN_PARALLEL_NODES", 0)
    texts = _submitted(monkeypatch)
    whole = build_module(_kernels(), "whole", jobs=1)
    assert not texts and not here  # one part, optimised by build_module itself
    parts = build_module(_kernels(), "parts", jobs=3)
    # parts of at least a third of the nodes each (at most three), in the functions' order
    assert 1 < len(texts) <= 3 and parts.source_ir == "".join(texts)
    defined = [re.findall(r'^define .*@"?(k\d)"?\(', t, re.M) for t in texts]
    assert [name for names in defined for name in names] == whole.function_names
    assert len(here) <= 3  # those no worker had started when the last part was done
    assert whole.function_names == parts.function_names
    assert parts.object_code[:4] == b"\x7fELF"
    for name in whole.function_names:
        assert re.search(rf'^define .*@"?{name}"?\(', parts.llvm_ir, re.M)
    _run_all(whole)
    _run_all(parts)
    again = build_module(_kernels(), "parts", jobs=3)  # the workers are kept
    assert again.object_code == parts.object_code


def test_a_part_goes_to_a_worker_while_the_next_functions_come(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """ModuleBuilder: a part is handed over when the next function starts another (so a
    worker optimises it while the caller makes the rest); an alias joins its function's
    part; the object is the one build_module makes of the same functions."""
    texts = _submitted(monkeypatch)
    funcs = _kernels()
    nodes = stmt_count(funcs[0].body) + stmt_count(funcs[1].body)
    builder = ModuleBuilder("streamed", jobs=2, part_nodes=nodes)
    builder.add(funcs[0])
    builder.add(funcs[1])
    builder.alias("k1_again", "k1")
    assert not texts
    builder.add(funcs[2])  # k0 and k1 hold part_nodes: their part goes
    assert len(texts) == 1 and '@"k1_again" = alias' in texts[0] and '"k2"' not in texts[0]
    for f in funcs[3:]:
        builder.add(f)
    built = builder.finish()
    assert len(texts) >= 2 and built.source_ir == "".join(texts)
    assert built.function_names == [f.name for f in funcs] + ["k1_again"]
    _run_all(built)
    lib = built.load()
    a = RNG.standard_normal(64).astype(np.float32)
    c = np.empty(64, np.float32)
    lib.get("k1_again")([a, c])
    np.testing.assert_allclose(c, _expected(1, a), rtol=2e-6, atol=1e-6)
    with pytest.raises(CompileError, match="after finish"):
        builder.add(funcs[0])


def test_an_alias_must_follow_its_function_into_its_part(
        monkeypatch: pytest.MonkeyPatch) -> None:
    funcs = _kernels(3)
    builder = ModuleBuilder("late", jobs=2, part_nodes=1)
    builder.add(funcs[0])
    builder.add(funcs[1])  # k0's part is closed
    builder.alias("k0_again", "k0")
    workers = list(builder._optimizer._workers)
    with pytest.raises(CompileError, match="not a function defined"):
        builder.finish()
    assert workers and all(w in compile_pool._idle for w in workers)  # given back


def test_a_cancelled_build_gives_its_workers_back() -> None:
    funcs = _kernels(4)
    builder = ModuleBuilder("given-up", jobs=2, part_nodes=1)
    for f in funcs:
        builder.add(f)
    workers = list(builder._optimizer._workers)
    builder.cancel()
    assert workers and all(w in compile_pool._idle for w in workers)
    with pytest.raises(RuntimeError, match="after collect or cancel"):
        builder._optimizer.submit("", True)


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
    optimizer = compile_pool.PartOptimizer(tm_spec, tm, 1)
    workers = list(optimizer._workers)
    optimizer.submit(good)
    optimizer.submit(bad)
    with pytest.raises(CompileError, match="invalid"):
        optimizer.collect()
    assert all(w in compile_pool._idle for w in workers)


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
    monkeypatch.setattr(compile_pool, "PART_NODES", 1)  # every kernel a part of its own
    texts = _submitted(monkeypatch)
    two = tessera.compile(model, "llvm", kernel_cache=False)
    assert len(texts) >= 2  # its own kernels (the layers share one) went as they were lowered
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
