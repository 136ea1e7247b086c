"""The llvm schedules of kernels with run-time extents ("compile once, serve any size"): a
transformer encoder's non-matmul kernels built from the topi computes on ``tir.Var("s")``-shaped
placeholders, scheduled by the llvm dispatch, lowered and compiled ONCE per case, then run at
many sizes against numpy; the generated loops are checked for vector stores (the main loops
of a symbolic axis split by the vector width and partitioned from their guarded tail) and a
parallel outer loop where the representative size is large enough; workload keys name a
run-time extent by its text."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest

import tessera.topi.nn  # noqa: F401 - the modules below, by name
from tessera import te, tir
from tessera.ir.graph import Node, Value
from tessera.ir.symbolic import dim_var
from tessera.ir.types import TensorType
from tessera.ops.elementwise import erf as np_erf
from tessera.tir import interpreter
from tessera.tir.functor import post_order_visit
from tessera.tir.transform import lower_pipeline
from tessera.topi import broadcast as B
from tessera.topi import elemwise as EW
from tessera.topi import reduction as R
from tessera.topi import transform as T
from tessera.topi.from_graph import build_te
from tessera.topi.utils import const_tensor
from tessera_llvm.build import build_module, size_spec
from tessera_llvm.schedules import schedule_group
from tessera_llvm.schedules.common import (
    REPRESENTATIVE_SIZE,
    CPUInfo,
    extents,
    injective_space,
    representative,
    representative_bounds,
    static_extents,
)

N = sys.modules["tessera.topi.nn.norm"]
SM = sys.modules["tessera.topi.nn.softmax"]

CPU = CPUInfo(vector_lanes=16, num_threads=2)
SIZES = [1, 7, 8, 9, 16, 29, 128]
RNG = np.random.default_rng(2024)
F = tir.ForKind


def rand(*shape: int, lo: float = -2.0, hi: float = 2.0) -> np.ndarray:
    return RNG.uniform(lo, hi, shape).astype(np.float32)


@dataclass
class Case:
    """A group: its placeholders, outputs, the numpy reference (arrays at size ``s`` ->
    outputs), random inputs for a size, and what its loops must show."""

    ins: list[te.Tensor]
    outs: list[te.Tensor]
    inputs: Callable[[int], list[np.ndarray]]
    want: Callable[..., list[np.ndarray]]
    parallel: bool = True
    vector_store: bool = True
    bound: int | None = None
    tol: float = 2e-5


class Built:
    """One case scheduled, lowered and compiled once."""

    def __init__(self, name: str, case: Case, s: tir.Var) -> None:
        bounds = {s: (0, case.bound)} if case.bound is not None else None
        self.case, self.s = case, s
        self.sched = schedule_group(case.outs, CPU, size_bounds=bounds)
        self.loop_nest = te.lower(self.sched.schedule, [*case.ins, *case.outs], name,
                                  size_bounds=bounds)
        self.func = lower_pipeline(self.loop_nest)
        lib = build_module([self.func], name,
                           size_specs={name: size_spec(self.loop_nest)}).load()
        self.kernel = lib.get(name)

    def __call__(self, n: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        arrays = self.case.inputs(n)
        outs = []
        for t in self.case.outs:
            shape = tuple(int(interpreter.eval_expr(tir.convert(d), {self.s: n}))
                          for d in t.shape)
            outs.append(np.full(shape, np.nan if "float" in t.dtype else 0, t.dtype))
        self.kernel([*arrays, *outs], sizes={"s": n})
        return outs, self.case.want(*arrays)


def stores(func: tir.PrimFunc) -> list[tir.BufferStore]:
    found: list[tir.BufferStore] = []
    post_order_visit(func.body, lambda n: found.append(n)
                     if isinstance(n, tir.BufferStore) else None)
    return found


def vector_stores_to(func: tir.PrimFunc, buffer: str) -> int:
    """Stores of whole vectors (a Ramp index) into the parameter named ``buffer``."""
    return sum(1 for st in stores(func) if st.buffer.name == buffer and
               any(isinstance(i, tir.Ramp) for i in st.indices))


def parallel_loops(func: tir.PrimFunc) -> list[tir.For]:
    found: list[tir.For] = []
    post_order_visit(func.body, lambda n: found.append(n)
                     if isinstance(n, tir.For) and n.kind == F.PARALLEL else None)
    return found


# -- the cases ----------------------------------------------------------------------------------

def _bias_gelu(s: tir.Var) -> Case:
    """Add (broadcast bias), Div, Erf, Mul, Sub, Pow, Sqrt over (2, s, 64)."""
    x, b = te.placeholder((2, s, 64), "float32", "x"), te.placeholder((64,), "float32", "b")
    half, two = const_tensor(np.array(0.5, np.float32)), const_tensor(np.array(2, np.float32))
    sq2 = const_tensor(np.array(np.sqrt(2), np.float32))
    h = B.add(x, b)
    gelu = B.multiply(B.multiply(h, half), B.add(EW.erf(B.divide(h, sq2)), two))
    y = B.subtract(EW.sqrt(B.add(B.power(gelu, two), two)), h)

    def want(xa: np.ndarray, ba: np.ndarray) -> list[np.ndarray]:
        ha = xa + ba
        g = ha * 0.5 * (np_erf(ha / np.sqrt(2)) + 2)
        return [np.sqrt(g * g + 2) - ha]

    return Case([x, b], [y], lambda n: [rand(2, n, 64), rand(64)], want, bound=128, tol=1e-4)


def _mask(s: tir.Var) -> Case:
    """Where(And(Not(IsNaN(x)), Equal(ids, 1)), Cast(x * 3 to int32 and back), -x)."""
    x = te.placeholder((2, s, 16), "float32", "x")
    ids = te.placeholder((2, s, 1), "int64", "ids")
    one = const_tensor(np.array(1, np.int64))
    keep = B.logical_and(EW.logical_not(EW.isnan(x)), B.equal(ids, one))
    rounded = EW.cast_to(EW.cast_to(B.multiply(x, const_tensor(np.array(3, np.float32))),
                                    "int32"), "float32")
    y = B.where(keep, rounded, EW.negative(x))

    def inputs(n: int) -> list[np.ndarray]:
        xa = rand(2, n, 16)
        xa[RNG.random(xa.shape) < 0.1] = np.nan
        return [xa, RNG.integers(0, 3, (2, n, 1)).astype(np.int64)]

    def want(xa: np.ndarray, ia: np.ndarray) -> list[np.ndarray]:
        k = ~np.isnan(xa) & (ia == 1)
        return [np.where(k, np.trunc(np.where(k, xa, 0) * 3), -xa)]

    return Case([x, ids], [y], inputs, want, parallel=False)


def _symbolic_last(s: tir.Var) -> Case:
    """(64, s) * (1, s) + 1: the last axis is a run-time size (split by the vector width,
    guarded)."""
    x, r = te.placeholder((64, s), "float32", "x"), te.placeholder((1, s), "float32", "r")
    y = B.add(B.multiply(x, r), const_tensor(np.array(1, np.float32)))
    return Case([x, r], [y], lambda n: [rand(64, n), rand(1, n)],
                lambda xa, ra: [xa * ra + 1], bound=1024)


def _flat(s: tir.Var) -> Case:
    """A 1-D run-time extent: the loop over its vectors is the parallel loop."""
    x = te.placeholder((s,), "float32", "x")
    y = EW.sqrt(EW.abs(x))
    return Case([x], [y], lambda n: [rand(n)], lambda xa: [np.sqrt(np.abs(xa))], bound=1 << 16)


def _embedding(s: tir.Var) -> Case:
    """Gather (token ids (2, s)) + positions Slice(table, ends=s) broadcast + Unsqueeze."""
    words = te.placeholder((50, 64), "float32", "words")
    table = te.placeholder((128, 64), "float32", "positions")
    ids = te.placeholder((2, s), "int64", "ids")
    pos = T.unsqueeze(T.slice_onnx(table, [0], [s], [0]), [0])  # (1, s, 64)
    y = B.add(T.take(words, ids, 0), pos)

    def inputs(n: int) -> list[np.ndarray]:
        return [rand(50, 64), rand(128, 64), RNG.integers(-50, 50, (2, n)).astype(np.int64)]

    return Case([words, table, ids], [y], inputs,
                lambda w, p, i: [w[i] + p[None, :i.shape[1]]], bound=128)


def _heads(s: tir.Var) -> Case:
    """Reshape (2, s, 128) -> (2, s, 4, 32), Transpose -> (2, 4, s, 32), Expand a scale."""
    x = te.placeholder((2, s, 128), "float32", "x")
    sc = te.placeholder((4, 1, 1), "float32", "sc")
    h = T.transpose(T.reshape(x, (2, s, 4, 32)), (0, 2, 1, 3))
    y = B.multiply(h, T.expand(sc, (2, 4, s, 1)))
    return Case([x, sc], [y], lambda n: [rand(2, n, 128), rand(4, 1, 1)],
                lambda xa, sa: [xa.reshape(2, -1, 4, 32).transpose(0, 2, 1, 3) * sa], bound=128)


def _pad_concat(s: tir.Var) -> Case:
    """Concat [x (s, 16), y (3, 16)] along the run-time axis, then Pad it to a multiple of 8
    rows (a run-time amount) with the value 0.5."""
    x, y = te.placeholder((s, 16), "float32", "x"), te.placeholder((3, 16), "float32", "y")
    c = T.concat([x, y], 0)
    p = T.pad(c, [0, 0], [(8 - (s + 3) % 8) % 8, 0], 0.5)

    def want(xa: np.ndarray, ya: np.ndarray) -> list[np.ndarray]:
        c = np.concatenate([xa, ya])
        return [np.pad(c, [(0, -len(c) % 8), (0, 0)], constant_values=0.5)]

    return Case([x, y], [p], lambda n: [rand(n, 16), rand(3, 16)], want, parallel=False)


def _reductions(s: tir.Var) -> Case:
    """ReduceMean / ReduceSum / ReduceMax over rows of (2, s, 48), ReduceMean over s."""
    x = te.placeholder((2, s, 48), "float32", "x")
    outs = [R.mean(x, [-1], True), R.sum(x, [-1], False), R.max(x, [2], True),
            R.mean(x, [1], True)]
    return Case([x], outs, lambda n: [rand(2, n, 48)],
                lambda xa: [xa.mean(-1, keepdims=True), xa.sum(-1), xa.max(2, keepdims=True),
                            xa.mean(1, keepdims=True)], vector_store=False, bound=256, tol=1e-4)


def _layer_norm(x: np.ndarray, g: np.ndarray, b: np.ndarray | None) -> np.ndarray:
    x64 = x.astype(np.float64)
    m = x64.mean(-1, keepdims=True)
    v = ((x64 - m) ** 2).mean(-1, keepdims=True)
    return (x64 - m) / np.sqrt(v + 1e-5) * g + (b if b is not None else 0)


def _layer_norm_rows(s: tir.Var) -> Case:
    """LayerNormalization over a constant row of 64, run-time rows."""
    x = te.placeholder((2, s, 64), "float32", "x")
    g, b = te.placeholder((64,), "float32", "g"), te.placeholder((64,), "float32", "b")
    y = N.layer_norm(x, g, b)[0]
    return Case([x, g, b], [y], lambda n: [rand(2, n, 64), rand(64), rand(64)],
                lambda xa, ga, ba: [_layer_norm(xa, ga, ba)], bound=128, tol=1e-4)


def _layer_norm_length(s: tir.Var) -> Case:
    """LayerNormalization over a row of run-time length (vector loop + guarded tail)."""
    x = te.placeholder((64, s), "float32", "x")
    g = te.placeholder((1,), "float32", "g")
    y = N.layer_norm(x, g, None)[0]
    # rows offset from 0 so a one-element row (x - mean = 0) compares well
    return Case([x, g], [y], lambda n: [rand(64, n) + 3, rand(1)],
                lambda xa, ga: [_layer_norm(xa, ga, None)], bound=512, tol=2e-3)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x.astype(np.float64) - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _softmax_rows(s: tir.Var) -> Case:
    """Row-form softmax (the softmax template), constant row length 48 (3 vectors)."""
    x = te.placeholder((2, s, 48), "float32", "x")
    y = SM.softmax(x, -1, lanes=16)
    return Case([x], [y], lambda n: [rand(2, n, 48, lo=-5, hi=5)], lambda xa: [_softmax(xa)],
                bound=256)


def _softmax_scores(s: tir.Var) -> Case:
    """Row-form softmax of attention scores (2, s, s): rows and row length run-time."""
    x = te.placeholder((2, s, s), "float32", "x")
    y = SM.softmax(x, -1, lanes=16)
    return Case([x], [y], lambda n: [rand(2, n, n, lo=-5, hi=5)], lambda xa: [_softmax(xa)],
                bound=128)


def _softmax_registry(s: tir.Var) -> Case:
    """The registry's softmax (statistics at root) over (s, 12) rows."""
    x = te.placeholder((s, 12), "float32", "x")
    y = SM.softmax(x, -1)
    return Case([x], [y], lambda n: [rand(n, 12, lo=-5, hi=5)], lambda xa: [_softmax(xa)],
                parallel=False, vector_store=False)


CASES: dict[str, Callable[[tir.Var], Case]] = {
    "bias_gelu": _bias_gelu, "mask": _mask, "symbolic_last": _symbolic_last, "flat": _flat,
    "embedding": _embedding, "heads": _heads, "pad_concat": _pad_concat,
    "reductions": _reductions, "layer_norm_rows": _layer_norm_rows,
    "layer_norm_length": _layer_norm_length, "softmax_rows": _softmax_rows,
    "softmax_scores": _softmax_scores, "softmax_registry": _softmax_registry,
}


@pytest.fixture(scope="module", params=sorted(CASES))
def built(request: pytest.FixtureRequest) -> Built:
    s = tir.Var("s")
    return Built(request.param, CASES[request.param](s), s)


def test_one_function_serves_every_size(built: Built) -> None:
    assert built.func.is_symbolic and [v.name for v in built.func.size_vars] == ["s"]
    for n in SIZES:
        if built.case.bound is not None and n > built.case.bound:
            continue
        got, want = built(n)
        for g, w in zip(got, want):
            assert g.shape == w.shape, (n, g.shape, w.shape)
            np.testing.assert_allclose(g, w, rtol=built.case.tol, atol=built.case.tol,
                                       err_msg=f"s={n}")


def test_loops_are_vectorized_and_parallel(built: Built) -> None:
    """The main loops store whole vectors into the output; the outer loop is parallel where
    the representative size makes the work large enough, and the schedule never asks a
    run-time axis to divide anything (the function serves every size, tested above)."""
    out = built.func.params[-1].name
    if built.case.vector_store:
        assert vector_stores_to(built.func, out) > 0, built.func
    assert bool(parallel_loops(built.loop_nest)) == built.case.parallel, built.loop_nest
    keys = [cfg.key() for cfg in built.sched.configs]
    for cfg in built.sched.configs:  # keys: JSON and hashable
        json.loads(cfg.key())
        hash(cfg.workload)
    # a run-time extent by its text
    assert any(isinstance(d, str) for cfg in built.sched.configs for dims in cfg.workload
               if isinstance(dims, tuple) for d in dims), keys


def test_softmax_template_takes_run_time_rows() -> None:
    s = tir.Var("s")
    for make in (_softmax_rows, _softmax_scores):
        case = make(s)
        sched = schedule_group(case.outs, CPU)
        assert sched.template == "softmax_rows"
    # statistics computed per row: one row's scratch (a run-time row length at most)
    b = Built("scores", _softmax_scores(s), s)
    allocs: list[Any] = []
    post_order_visit(b.loop_nest.body, lambda n: allocs.append(n)
                     if isinstance(n, tir.Allocate) else None)
    for a in allocs:
        dims = [d for d in a.buffer.shape if not isinstance(d, tir.IntImm)]
        assert len(dims) <= 1, a.buffer  # never the whole (2, s, s) tensor per row


# -- representative sizes ----------------------------------------------------------------------

def _elementwise(s: tir.Var, width: int) -> tuple[te.Tensor, te.Tensor]:
    x = te.placeholder((s, width), "float32", "x")
    return x, EW.exp(x)


@pytest.mark.parametrize("bound, parallel", [(None, False), (8, False), (4096, True)])
def test_parallel_decided_at_the_representative_size(bound: int | None,
                                                      parallel: bool) -> None:
    """(s, 64): 128 x 64 = 8192 elements by default (below the 16384 of a parallel launch),
    8 x 64 with s <= 8, 4096 x 64 with s <= 4096."""
    s = tir.Var("s")
    x, y = _elementwise(s, 64)
    bounds = {s: (0, bound)} if bound is not None else None
    sched = schedule_group([y], CPU, size_bounds=bounds)
    f = te.lower(sched.schedule, [x, y], "e", size_bounds=bounds)
    assert bool(parallel_loops(f)) == parallel


def test_representative_values() -> None:
    s, b = tir.Var("s"), tir.Var("b")
    assert representative(s) == REPRESENTATIVE_SIZE and representative(tir.IntImm(7)) == 7
    with representative_bounds({s: (0, 512), b: (4, None)}):
        assert representative(s * 2 + 1) == 1025
        assert representative(b) == REPRESENTATIVE_SIZE
        assert representative((s + 15) // 16) == 32
    with representative_bounds({b: (300, None)}):
        assert representative(b) == 300
    x = te.placeholder((s, 100), "float32", "x")
    y = EW.exp(x)
    assert extents(y.op) == [REPRESENTATIVE_SIZE, 100] and static_extents(y.op) == [None, 100]


def test_workload_keys() -> None:
    s = tir.Var("s")
    x = te.placeholder((2, s * 4, 64), "float32", "x")
    space = injective_space(EW.exp(x).op, CPU)
    key = space.default_config().key()
    assert json.loads(key) == ["injective", [[2, str(EW.exp(x).op.axis[1].dom.extent), 64],
                                             "float32"]]
    # static workloads keep their int keys
    st = injective_space(EW.exp(te.placeholder((2, 8, 64), "float32", "x")).op, CPU)
    assert json.loads(st.default_config().key()) == ["injective", [[2, 8, 64], "float32"]]
    # a run-time last axis offers vector widths that need not divide it
    xs = te.placeholder((3, s), "float32", "x")
    knob = injective_space(EW.exp(xs).op, CPU).knobs["vector_width"]
    assert knob.default == 16 and 8 in knob.candidates


def _static_vs_symbolic_ir(shape: Sequence[int]) -> str:
    x = te.placeholder(tuple(shape), "float32", "x")
    y = EW.exp(x)
    sched = schedule_group([y], CPU)
    return repr(lower_pipeline(te.lower(sched.schedule, [x, y], "st")))


def test_static_kernels_unchanged() -> None:
    """A static group lowers as it did before run-time sizes: ints everywhere, the last axis
    vectorized by a dividing width, the leading axes fused and parallel."""
    text = _static_vs_symbolic_ir((64, 512))
    assert "parallel" in text and "ramp" in text and "//" not in text


# -- from graph nodes ---------------------------------------------------------------------------

def test_graph_group_with_run_time_types() -> None:
    """An encoder's embedding block as graph nodes whose types hold ``seq`` (Gather, Slice with
    ``ends = seq``, Add, LayerNormalization, Softmax in the row form), built with ``build_te``,
    scheduled by the llvm dispatch, compiled once and run at several sizes."""
    seq = dim_var("seq")
    words, table = rand(30, 64), rand(128, 64)
    gamma, beta = rand(64), rand(64)
    ids = Value("ids", TensorType((2, seq), "int64"))
    w = Value("words", TensorType((30, 64), "float32"), data=words)
    p = Value("pos_table", TensorType((128, 64), "float32"), data=table)
    g = Value("gamma", TensorType((64,), "float32"), data=gamma)
    b = Value("beta", TensorType((64,), "float32"), data=beta)
    emb = Value("emb", TensorType((2, seq, 64), "float32"))
    pos = Value("pos", TensorType((seq, 64), "float32"))
    summed = Value("summed", TensorType((2, seq, 64), "float32"))
    normed = Value("normed", TensorType((2, seq, 64), "float32"))
    probs = Value("probs", TensorType((2, seq, 64), "float32"))
    nodes = [Node("Gather", "gather", [w, ids], [emb], {"axis": 0}),
             Node("Slice", "slice", [p], [pos], {"starts": [0], "ends": [seq], "axes": [0]}),
             Node("Add", "add", [emb, pos], [summed], {}),
             Node("LayerNormalization", "ln", [summed, g, b], [normed], {"axis": -1}),
             Node("Softmax", "softmax", [normed], [probs], {"axis": -1})]
    gte = build_te(nodes, [ids], [probs], computes=SM.row_softmax_computes(16, 32))
    bounds = {seq: (1, 128)}
    sched = schedule_group(list(gte.outputs), CPU, size_bounds=bounds)
    args = [*gte.placeholders, *gte.outputs]
    nest = te.lower(sched.schedule, args, "embed", size_bounds=bounds)
    func = lower_pipeline(nest)
    kernel = build_module([func], "embed", size_specs={"embed": size_spec(nest)}).load().get(
        "embed")
    assert parallel_loops(nest) and vector_stores_to(func, func.params[-1].name)
    consts = [np.asarray(v.data) for v in gte.constants]
    for n in (1, 8, 9, 29, 128):
        ia = RNG.integers(-30, 30, (2, n)).astype(np.int64)
        out = np.full((2, n, 64), np.nan, np.float32)
        kernel([ia, *consts, out], sizes={"seq": n})
        h = _layer_norm(words[ia] + table[:n], gamma, beta)
        np.testing.assert_allclose(out, _softmax(h), rtol=1e-4, atol=1e-5, err_msg=f"seq={n}")
