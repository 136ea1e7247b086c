"""Matrix products with a run-time extent ("compile once, serve any size"): the topi computes
take size expressions, the dense schedule keeps its register tile fixed and
:func:`~tessera_llvm.schedules.dense.specialize_tails` turns the guarded last tiles into exact
micro-kernels. One function per case of a transformer encoder (sequence length ``s``, hidden
512, 8 heads), built like the llvm lowering builds a group (TE -> schedule -> ``te.lower`` ->
tails -> TIR pipeline -> LLVM), runs at every ``s`` of :data:`SIZES` against numpy on random
data; the lowered loop nests are checked for vector code and for the absence of guards in the
reduction loops."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from plugins.llvm.tests.tile_reads import tile_reads_in_loops
from tessera import te, tir
from tessera.errors import OpError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.kernel.pad_matmul import pad_matmul
from tessera.ops.layout import pack_matmul_weight
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.functor import nodes_of
from tessera.tir.transform import lower_pipeline
from tessera.tir.transform.hoist_sizes import inline_size_lets
from tessera.topi.nn.dense import batch_matmul, matmul_general, matmul_packed
from tessera.topi.utils import broadcast_shape, dim_equal, dims_of
from tessera_llvm.build import build_module, size_spec
from tessera_llvm.lowering import lower_region, matmul_padding
from tessera_llvm.schedules import schedule_group
from tessera_llvm.schedules.common import CPUInfo
from tessera_llvm.schedules.dense import (
    PARALLEL_PRAGMA,
    TAIL_PRAGMA,
    dense_space,
    find_dense,
    specialize_tails,
)

RNG = np.random.default_rng(2024)
SIZES = [1, 2, 3, 5, 7, 8, 9, 11, 12, 13, 29, 64, 128, 200]
#: The CPU the schedules are made for: AVX-512's 16 lanes and 32 registers, 2 threads (the
#: code runs on any x86-64 host with AVX-512 or not: LLVM legalises the vectors).
CPU = CPUInfo(vector_lanes=16, num_threads=2, vector_registers=32)
HIDDEN, FFN, HEADS, HEAD = 512, 2048, 8, 64


def rand(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# -- the cases ---------------------------------------------------------------------------------

Case = tuple[list[te.Tensor], Callable[[int], list[np.ndarray]], Callable[..., np.ndarray]]


def ffn_in(s: Any) -> Case:
    """``X[s, 512] @ W[512, 2048] + bias`` with W packed in panels of 32 (MatMulPacked)."""
    x = te.placeholder((s, HIDDEN), name="X")
    wp = te.placeholder((FFN // 32, HIDDEN, 32), name="W")
    bias = te.placeholder((FFN,), name="bias")
    y = matmul_packed(x, wp, "float32")
    out = te.compute(y.shape, lambda i, j: y[i, j] + bias[j], name="out", tag="broadcast")

    def inputs(n: int) -> list[np.ndarray]:
        return [rand(n, HIDDEN), pack_matmul_weight(W_FFN, 32), B_FFN]

    return [x, wp, bias, out], inputs, lambda xs, _w, b: xs @ W_FFN + b


W_FFN = rand(HIDDEN, FFN) * 0.05
B_FFN = rand(FFN)


def scores(s: Any, heads: Any = HEADS) -> Case:
    """``Q[8, s, 64] @ K^T[8, 64, s]``: rows and columns of run-time size."""
    q = te.placeholder((heads, s, HEAD), name="Q")
    kt = te.placeholder((heads, HEAD, s), name="KT")
    y = batch_matmul(q, kt, out_dtype="float32")

    def inputs(n: int) -> list[np.ndarray]:
        return [rand(HEADS, n, HEAD), rand(HEADS, HEAD, n)]

    return [q, kt, y], inputs, lambda a, b: a @ b


def context(s: Any, heads: Any = HEADS) -> Case:
    """``P[h, s, s] @ V[h, s, 64]``: rows and the reduction of run-time size (and the heads,
    when ``heads`` is a size variable too)."""
    p = te.placeholder((heads, s, s), name="P")
    v = te.placeholder((heads, s, HEAD), name="V")
    y = batch_matmul(p, v, out_dtype="float32")

    def inputs(n: int, h: int = HEADS) -> list[np.ndarray]:
        return [rand(h, n, n), rand(h, n, HEAD)]

    return [p, v, y], inputs, lambda a, b: a @ b


def causal_scores(s: Any, heads: Any = HEADS) -> Case:
    """``Q @ K^T`` with a causal mask fused into its epilogue (``j <= i`` else -1e4): a
    condition on the tile's rows and columns that is not a bound check, so moving the last
    tiles must evaluate it at the moved rows and columns."""
    q = te.placeholder((heads, s, HEAD), name="Q")
    kt = te.placeholder((heads, HEAD, s), name="KT")
    y = batch_matmul(q, kt, out_dtype="float32")
    out = te.compute(y.shape, lambda h, i, j: tir.Select(
        j <= i, y[h, i, j], tir.const(-1e4, "float32")), name="masked", tag="broadcast")

    def inputs(n: int) -> list[np.ndarray]:
        return [rand(HEADS, n, HEAD), rand(HEADS, HEAD, n)]

    def ref(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        n = a.shape[1]
        return np.where(np.tril(np.ones((n, n), bool)), a @ b, np.float32(-1e4))

    return [q, kt, out], inputs, ref


def lowered(tensors: list[te.Tensor], name: str) -> tuple[S.PrimFunc, S.PrimFunc]:
    """The group's loop nest (``te.lower``) and the function the llvm lowering compiles."""
    sched = schedule_group([tensors[-1]], CPU)
    assert sched.template == "dense"
    nest = te.lower(sched.schedule, tensors, name)
    return nest, inline_size_lets(lower_pipeline(specialize_tails(nest)))


S_VAR, H_VAR = tir.Var("s"), tir.Var("h")
CASES: dict[str, Case] = {"ffn_in": ffn_in(S_VAR), "scores": scores(S_VAR),
                          "causal": causal_scores(S_VAR),
                          "context": context(S_VAR), "context_heads": context(S_VAR, H_VAR)}


@pytest.fixture(scope="module")
def funcs() -> dict[str, tuple[S.PrimFunc, S.PrimFunc]]:
    return {name: lowered(case[0], name) for name, case in CASES.items()}


@pytest.fixture(scope="module")
def lib(funcs):  # noqa: ANN001, ANN201 - a Library
    specs = {name: size_spec(nest) for name, (nest, _) in funcs.items()}
    return build_module([f for _, f in funcs.values()], "symbolic_matmul",
                        size_specs=specs).load()


# -- numbers -----------------------------------------------------------------------------------


def check(got: np.ndarray, want: np.ndarray, what: str) -> None:
    assert not np.isnan(got).any(), f"{what}: elements not written"
    scale = float(np.abs(want).max()) if want.size else 1.0
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * scale, err_msg=what)


@pytest.mark.parametrize("name", ["ffn_in", "scores", "causal", "context"])
def test_one_function_serves_every_length(lib, name: str) -> None:
    _, inputs, ref = CASES[name]
    fn = lib.get(name)
    assert fn.is_symbolic
    for s in SIZES:
        arrays = inputs(s)
        want = ref(*arrays)
        out = np.full(want.shape, np.nan, np.float32)
        fn([*arrays, out])
        check(out, want, f"{name} s={s}")


def test_heads_and_length_both_run_time(lib) -> None:
    fn = lib.get("context_heads")
    _, inputs, ref = CASES["context_heads"]
    for heads, s in [(1, 7), (3, 29), (8, 64), (2, 130)]:
        arrays = inputs(s, heads)
        want = ref(*arrays)
        out = np.full(want.shape, np.nan, np.float32)
        fn([*arrays, out])
        check(out, want, f"context h={heads} s={s}")


def test_bound_call_changes_only_the_length(lib) -> None:
    """Pack once at the largest length, then change only the size: each call computes the
    first ``s`` rows and leaves the rest alone."""
    fn = lib.get("ffn_in")
    x, w, b = CASES["ffn_in"][1](200)
    out = np.full((200, FFN), np.nan, np.float32)
    call = fn.bind([x, w, b, out])
    for s in (13, 1, 200, 24):
        out[:] = np.nan
        call([s])
        check(out[:s], x[:s] @ W_FFN + b, f"bound s={s}")
        assert np.isnan(out[s:]).all()


# -- the loop nests ----------------------------------------------------------------------------




def k_loops(func: S.PrimFunc) -> list[S.For]:
    return [f for f in nodes_of(func.body, S.For) if f.loop_var.name == "k"]


def vector_stores(node: Any, lanes: int = 16) -> list[S.BufferStore]:
    return [s for s in nodes_of(node, S.BufferStore)
            if isinstance(s.indices[-1], E.Ramp) and s.indices[-1].lanes == lanes]


def vector_loads(node: Any, name: str, lanes: int = 16) -> list[E.BufferLoad]:
    return [x for x in nodes_of(node, E.BufferLoad) if x.buffer.name == name
            and isinstance(x.indices[-1], E.Ramp) and x.indices[-1].lanes == lanes]


def remainders(func: S.PrimFunc, tile: int) -> list[int]:
    """The ``r`` of every ``n % tile == r`` the function switches on."""
    out = []
    for c in nodes_of(func.body, E.EQ):
        if isinstance(c.a, E.FloorMod) and isinstance(c.a.b, E.IntImm) and \
                c.a.b.value == tile and isinstance(c.b, E.IntImm):
            out.append(c.b.value)
    return sorted(out)


def test_dense_tiles_are_vector_micro_kernels(funcs) -> None:
    """The whole 12-row tiles, then the s % 12 rows left in tiles of 4 rows (the last
    shifted back to end at s), or, where s < 4, one tile of 4 rows whose rows past s - 1
    repeat the last (min(row, s - 1)): a reduction loop over k
    of 2 vector loads of W and one vector FMA per row and vector, without a guard; the
    parallel loop over the 64 column panels is never gated (even one row is 2 MFLOP)."""
    nest, func = funcs["ffn_in"]
    assert [v.name for v in func.size_vars] == ["s"]
    assert any(TAIL_PRAGMA in f.annotations for f in nodes_of(nest.body, S.For))
    assert remainders(func, 12) == []  # no copy per remainder
    loops = k_loops(func)
    assert len(loops) == 3
    rows = [len(vector_stores(k)) // 2 for k in loops]
    assert rows == [12, 4, 4]
    # the last copy's rows are clamped to the last row: four accumulator chains at any s
    clamped = [x for x in nodes_of(loops[2], E.BufferLoad) if x.buffer.name != "W"
               and x.buffer.scope != "local"]
    assert clamped and any(nodes_of(x.indices[0], E.Min) for x in clamped)
    assert all("s" in str(x.indices[0]) for x in clamped)  # rows min(i, s - 1)
    for k in loops:
        assert not nodes_of(k, S.IfThenElse) and not nodes_of(k, E.Select)
        assert len({str(x.indices[-1]) for x in vector_loads(k, "W")}) == 2
        assert isinstance(k.extent, E.IntImm) and k.extent.value == HIDDEN
    par = [f for f in nodes_of(func.body, S.For) if f.kind == S.ForKind.PARALLEL]
    assert len(par) == 1 and isinstance(par[0].extent, E.IntImm) and par[0].extent.value == 64
    # not gated: no grain of the parallel loop chosen at run time
    assert not isinstance(par[0].annotations.get("parallel_grain"), E.PrimExpr)
    assert not any(TAIL_PRAGMA in f.annotations or PARALLEL_PRAGMA in f.annotations
                   for f in nodes_of(func.body, S.For))


def test_each_tail_tile_zeroes_only_its_own_rows(funcs) -> None:
    """The accumulator's zeroing is cut to the rows each copy computes (12, 4, 4 rows of two
    vectors): zeroing rows a copy never reads kept the accumulator in memory for LLVM."""
    _, func = funcs["ffn_in"]
    zeros = [st for st in vector_stores(func.body) if st.buffer.scope == "local"
             and isinstance(st.value, E.Broadcast) and isinstance(st.value.value, E.FloatImm)
             and st.value.value.value == 0.0]
    assert len(zeros) == 2 * (12 + 4 + 4)


@pytest.mark.parametrize("name", sorted(CASES))
def test_tiles_are_written_out_in_straight_line_code(funcs, name: str) -> None:
    """Each register tile is read out row by row and vector by vector without a loop (a loop
    would read the accumulator at a variable offset, which keeps it in memory: with a GELU
    epilogue, whisper's feed-forward ran at 2.5x its static time)."""
    assert tile_reads_in_loops(funcs[name][1]) == []


def test_scores_tiles_shift_columns_back(funcs) -> None:
    """Run-time rows and columns: every register tile is vector code without a guard in its
    reduction: the whole column tiles, the last tile's two vectors shifted back to end at s
    (the first at 0 where s < 32), and, for a matrix narrower than a vector (s < 16),
    one vector reading a zero-padded local copy of K^T's s columns. Rows as for a dense
    layer: whole tiles, then tiles of 4 rows (below 4 rows one, its rows clamped to the
    last) for the rest, each with the column forms."""
    _, func = funcs["scores"]
    assert remainders(func, 12) == []
    tiles = [k for k in k_loops(func)
             if any(s.buffer.name.endswith("_local") for s in nodes_of(k, S.BufferStore))]
    # the 12-row tiles and the 4-row ones: 3 column forms each (whole, the last shifted
    # back, padded); the clamped tile runs only where s < 4, so only in the padded form (the
    # others' conditions are simplified away)
    assert len(tiles) == 3 * 2 + 1
    for k in tiles:
        assert vector_stores(k) and not nodes_of(k, S.IfThenElse)
    padded = [k for k in tiles if vector_loads(k, "KT_panel")]
    assert len(padded) == 3 and all(not vector_loads(k, "KT") for k in padded)
    assert sorted(len(vector_stores(k)) for k in padded) == [4, 4, 12]
    # two vectors in the whole tiles and in the last one (shifted back)
    vectors = sorted(len({str(x.indices[-1]) for x in vector_loads(k, "KT")}) for k in tiles
                     if k not in padded)
    assert vectors == [2] * 4
    # the copy into the panel: s columns, k inside (no vector lane loop around a scalar)
    copies = [s for s in nodes_of(func.body, S.BufferStore) if s.buffer.name == "KT_panel"
              and not isinstance(s.indices[-1], E.Ramp)]
    assert copies


def test_context_reduction_of_run_time_length(funcs) -> None:
    """P @ V: the reduction runs over s (a run-time loop around the vector tile); the
    parallel loop over heads x column tiles runs in the caller when the product is small."""
    _, func = funcs["context"]
    for k in k_loops(func):
        assert isinstance(k.extent, E.Var) and k.extent.name == "s"
        assert vector_stores(k) and not nodes_of(k, S.IfThenElse)
    # the parallel loop over its 16 tiles keeps its extent; its grain is chosen at run time:
    # 1, or every tile in one chunk (run by the caller) when the product is small
    (par,) = [f for f in nodes_of(func.body, S.For) if f.kind == S.ForKind.PARALLEL]
    assert isinstance(par.extent, E.IntImm) and par.extent.value == HEADS * (HEAD // 32)
    grain = par.annotations["parallel_grain"]
    assert isinstance(grain, E.Select) and "s" in str(grain.condition)
    assert grain.true_value.value == 1 and grain.false_value.value >= par.extent.value


def test_static_products_are_unchanged() -> None:
    """A static product: no marks, specialize_tails returns the very function; the compute's
    shape stays ints."""
    tensors = ffn_in(24)[0]
    assert dims_of(tensors[-1]) == (24, FFN)
    nest, _ = lowered(tensors, "static")
    assert specialize_tails(nest) is nest
    assert not any(f.annotations for f in nodes_of(nest.body, S.For))


# -- computes and knobs ------------------------------------------------------------------------


def test_computes_take_size_expressions() -> None:
    s, h = tir.Var("s"), tir.Var("h")
    assert dims_of(te.placeholder((s, 3), name="A")) == (s, 3)
    assert dim_equal(s, s) and not dim_equal(s, h) and not dim_equal(s, 3) and dim_equal(4, 4)
    assert broadcast_shape((1, s, 4), (h, 1, 4)) == (h, s, 4)
    assert broadcast_shape((2, 3), (3,)) == (2, 3)
    with pytest.raises(OpError, match="broadcast"):
        broadcast_shape((s,), (h,))
    a, b = te.placeholder((1, s, 8), name="A"), te.placeholder((h, 8, s), name="B")
    y = matmul_general(a, b)
    assert dims_of(y) == (h, s, s) and y.op.tag == "batch_matmul"
    assert y.op.reduce_axis[0].dom.extent.value == 8
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_general(te.placeholder((s, h), name="A"), te.placeholder((s, 4), name="B"))
    with pytest.raises(ValueError, match="inner dimensions"):
        matmul_packed(te.placeholder((s, 8), name="A"),
                      te.placeholder((2, 16, 32), name="W"))


def test_symbolic_dense_space() -> None:
    """The register tile from the register file: 12 rows of 2 vectors with 32 registers, 6
    with AVX2's 16; the workload names the run-time sizes."""
    y = CASES["ffn_in"][0][-1]
    mm = find_dense(te.compute_ops([y]))
    assert mm is not None
    space = dense_space(mm, CPU)
    cfg = space.default_config()
    assert (cfg["mr"], cfg["nr"], cfg["vector_width"]) == (12, 32, 16)
    assert cfg["cols_outer"] and not cfg["parallel_rows"]
    assert space.workload == (("s", FFN), HIDDEN)
    avx2 = CPUInfo(vector_lanes=8, num_threads=8, vector_registers=16)
    cfg2 = dense_space(mm, avx2).default_config()
    assert (cfg2["mr"], cfg2["nr"], cfg2["vector_width"]) == (6, 16, 8)
    # scores with one head on 8 threads: too few static tiles, the rows are parallel
    q = scores(tir.Var("s"), heads=1)[0][-1]
    cfg3 = dense_space(find_dense(te.compute_ops([q])), avx2).default_config()
    assert cfg3["parallel_rows"]


def test_parallel_rows_schedule() -> None:
    """With ``parallel_rows`` the loop over row tiles is the parallel one (a run-time
    extent, ``s // 12``): the whole tiles run in parallel, the rows left after them."""
    tensors, inputs, ref = scores(tir.Var("s"), heads=1)
    cpu = CPUInfo(vector_lanes=16, num_threads=8, vector_registers=32)
    sched = schedule_group([tensors[-1]], cpu)
    assert sched.configs[0]["parallel_rows"]
    nest = te.lower(sched.schedule, tensors, "rows_parallel")
    func = inline_size_lets(lower_pipeline(specialize_tails(nest)))
    (par,) = [f for f in nodes_of(func.body, S.For) if f.kind == S.ForKind.PARALLEL]
    assert isinstance(par.extent, E.FloorDiv) and "s" in str(par.extent.a)
    fn = build_module([func], "rows_parallel", size_specs={"rows_parallel": size_spec(nest)}
                      ).load().get("rows_parallel")
    for s in (1, 5, 11, 12, 13, 40, 77):
        q, kt = rand(1, s, HEAD), rand(1, HEAD, s)
        out = np.full((1, s, s), np.nan, np.float32)
        fn([q, kt, out])
        check(out, q @ kt, f"rows parallel s={s}")


# -- the graph rewrites ------------------------------------------------------------------------


def test_pad_matmul_leaves_run_time_rows_alone() -> None:
    fn = Function("g")
    a = fn.add_input("a", TensorType(("s", 24), DType.float32))
    b = fn.constant(rand(24, 197), "b")
    fn.outputs = [fn.op("MatMul", a, b, name="mm")]
    # the CPU's choice: the rows are the kernel's, the 197 constant columns padded to 208
    assert matmul_padding(CPU)(fn.nodes[0]) == (fn.inputs[0].type.shape[0], 208)
    new = pad_matmul(fn, lambda node: (48, 208))
    verify(new)
    ops = {n.op: n for n in new.nodes}
    assert set(ops) == {"MatMul", "Slice"}
    assert ops["MatMul"].inputs[0] is new.inputs[0]  # no Pad of the rows
    assert ops["Slice"].attrs["axes"] == [1] and ops["Slice"].attrs["ends"] == [197]
    assert new.outputs[0].type == fn.outputs[0].type
    # run-time columns (attention scores): nothing padded
    g = Function("h")
    q = g.add_input("q", TensorType((8, "s", 64), DType.float32))
    kt = g.add_input("kt", TensorType((8, 64, "s"), DType.float32))
    g.outputs = [g.op("MatMul", q, kt, name="mm")]
    assert matmul_padding(CPU)(g.nodes[0]) is None
    assert [n.op for n in pad_matmul(g, lambda node: (16, 16)).nodes] == ["MatMul"]


def test_graph_lowering_of_a_dense_layer() -> None:
    """A MatMul with a constant weight and a bias over ``s`` tokens, lowered by the llvm
    lowering: one symbolic MatMulPacked+Add kernel, which runs at any ``s``."""
    fn = Function("g")
    x = fn.add_input("x", TensorType(("s", HIDDEN), DType.float32))
    w = fn.constant(W_FFN, "w")
    b = fn.constant(B_FFN, "b")
    fn.outputs = [fn.op("Add", fn.op("MatMul", x, w, name="mm"), b, name="bias")]
    region = lower_region(fn, CPU)
    (kernel,) = region.kernels
    assert kernel.op == "MatMulPacked+Add" and kernel.template == "dense"
    assert [v.name for v in kernel.func.size_vars] == ["s"]
    lib = build_module([kernel.func], "graph").load()
    consts = {k: np.asarray(v.data) for k, v in region.constants.items()}
    for s in (1, 7, 29, 64):
        xs = rand(s, HIDDEN)
        out = np.full((s, FFN), np.nan, np.float32)
        args = [xs if n == "x" else consts[n] for n in kernel.inputs]
        lib.get(kernel.name)([*args, out])
        check(out, xs @ W_FFN + B_FFN, f"graph s={s}")


def test_rows_that_are_an_expression_of_sizes() -> None:
    """Rows ``h * s`` (a batch of sequences flattened): the last tile is still unguarded
    micro-kernels (tiles of 4 rows, the last shifted back, or one whose rows are clamped)."""
    h, s = tir.Var("h"), tir.Var("s")
    x = te.placeholder((h * s, 64), name="X")
    w = te.placeholder((2, 64, 32), name="W")
    tensors = [x, w, matmul_packed(x, w, "float32")]
    nest, func = lowered(tensors, "flat_rows")
    assert [len(vector_stores(k)) // 2 for k in k_loops(func)] == [12, 4, 4]
    for k in k_loops(func):
        assert vector_stores(k) and not nodes_of(k, S.IfThenElse)
    fn = build_module([func], "flat_rows", size_specs={"flat_rows": size_spec(nest)}
                      ).load().get("flat_rows")
    wd = rand(64, 64)
    for heads, length in [(1, 1), (1, 2), (2, 7), (3, 5), (4, 31), (1, 11), (5, 5)]:
        xs = rand(heads * length, 64)
        out = np.full((heads * length, 64), np.nan, np.float32)
        fn([xs, pack_matmul_weight(wd, 32), out], sizes={"h": heads, "s": length})
        check(out, xs @ wd, f"rows h={heads} s={length}")
