"""The TIR lowering pipeline: from a scheduled loop nest (``te.lower``) to what the LLVM code
generator takes (1-D buffers, vector ramps/broadcasts, serial/parallel loops, allocations,
lets, ifs, selects, casts and calls).

``name_size_quotients -> simplify -> remove_redundant_checks -> flatten_buffers ->
name_size_quotients_flat -> vectorize -> hoist_sizes -> unroll -> simplify -> storage_rewrite ->
verify``

``name_size_quotients`` (option of the same name; it changes only symbolic kernels) binds each
quotient of run-time sizes that a buffer's shape holds (``((height + 1) // 2 + 1) // 2``, a
deep CNN layer's rows) to a variable at the top
(:func:`~tessera.tir.transform.size_quotients.bind_size_quotients`), before the simplifier and
again after flattening, whose strides come from the shapes: the passes in between reason
with a variable of known range and value instead of re-deriving the chain in every index.

The ``vectorize`` step (``devectorize`` without vectorization) first runs
:func:`~tessera.tir.transform.loop_partition.loop_partition` (option ``loop_partition``): loops
guarded by run-time extents are split into unguarded main parts, which vectorize, and guarded
tails; static kernels are left as they are. (It is part of that step, not a pass of its own,
so that the pass names backends edit pipelines by stay the same.) ``hoist_sizes`` (option of
the same name) then binds the expressions of a symbolic kernel's run-time sizes once, at the
top (:func:`~tessera.tir.transform.hoist_sizes.hoist_size_exprs`): the passes after it no
longer read their structure, and unrolling would copy them into every statement (a symbolic
Winograd convolution's unrolled transforms carried 4 KB index expressions).

Each backend chooses its pipeline (:class:`Pipeline`): the CPU backend runs
:func:`default_pipeline`; a GPU backend composes its own from these passes and its own.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

from tessera.tir import stmt as S
from tessera.tir.functor import IRMutator
from tessera.tir.heavy import heavy_work
from tessera.tir.simplify import simplify
from tessera.tir.transform.flatten import flatten_buffers
from tessera.tir.transform.hoist_sizes import hoist_size_exprs
from tessera.tir.transform.loop_partition import loop_partition
from tessera.tir.transform.remove_checks import remove_redundant_checks
from tessera.tir.transform.size_quotients import bind_size_quotients
from tessera.tir.transform.storage_rewrite import storage_rewrite
from tessera.tir.transform.unroll import unroll
from tessera.tir.transform.vectorize import MAX_LANES, vectorize
from tessera.tir.verifier import verify

__all__ = ["DEFAULT_OPTIONS", "Pass", "Pipeline", "default_pipeline", "lower_pipeline"]

#: Options of :func:`lower_pipeline` and their defaults.
DEFAULT_OPTIONS: dict[str, Any] = {
    "remove_checks": True,       # drop if/select conditions decided by loop ranges
    "loop_partition": True,      # split loops at the guards of symbolic extents
    "partition_static": False,   # loop_partition: also at guards with constant bounds
    "vectorize": True,           # False: VECTORIZED loops run serially
    "max_lanes": MAX_LANES,      # widest vector emitted
    "predicate_tails": False,    # vectorize partial vectors' guards as masks (masked_load/
                                 # masked_store: for code generators that take them)
    "name_size_quotients": True,  # bind quotients of run-time sizes in shapes once
    "hoist_sizes": True,         # bind expressions of run-time sizes once (before unroll)
    "unroll": True,              # expand UNROLLED loops
    "auto_unroll_max_extent": 0,  # also unroll innermost serial loops up to this extent
    "storage_rewrite": True,     # hoist allocations, share memory
    "storage_reuse": True,       # share memory between disjoint lifetimes
    "verify": True,              # check the result (raises CompileError)
}


#: A TIR pass: a function from a PrimFunc to a PrimFunc.
Pass = Callable[[S.PrimFunc], S.PrimFunc]


@dataclass(frozen=True)
class Pipeline:
    """An ordered list of named TIR passes: what a backend runs to lower its loop nests.

    Each backend chooses its own: the CPU one is :func:`default_pipeline`; a GPU backend
    builds another (no vectorization into CPU vectors, its own verifier) from the same passes
    and its own. Pipelines are values: the editing methods return a new one.
    """

    passes: tuple[tuple[str, Pass], ...]

    def __post_init__(self) -> None:
        names = [n for n, _ in self.passes]
        if len(set(names)) != len(names):
            raise ValueError(f"pipeline pass names must be unique: {names}")

    @property
    def names(self) -> list[str]:
        return [n for n, _ in self.passes]

    @heavy_work
    def run(self, func: S.PrimFunc) -> S.PrimFunc:
        for _name, fn in self.passes:
            func = fn(func)
        return func

    def _index(self, name: str) -> int:
        if name not in self.names:
            raise KeyError(f"no pass {name!r} in the pipeline {self.names}")
        return self.names.index(name)

    def insert_after(self, anchor: str, name: str, fn: Pass) -> Pipeline:
        i = self._index(anchor) + 1
        return Pipeline(self.passes[:i] + ((name, fn),) + self.passes[i:])

    def insert_before(self, anchor: str, name: str, fn: Pass) -> Pipeline:
        i = self._index(anchor)
        return Pipeline(self.passes[:i] + ((name, fn),) + self.passes[i:])

    def append(self, name: str, fn: Pass) -> Pipeline:
        return Pipeline(self.passes + ((name, fn),))

    def replace(self, name: str, fn: Pass) -> Pipeline:
        i = self._index(name)
        return Pipeline(self.passes[:i] + ((name, fn),) + self.passes[i + 1:])

    def without(self, *names: str) -> Pipeline:
        for n in names:
            self._index(n)
        return Pipeline(tuple(p for p in self.passes if p[0] not in names))


def _options(opts: dict[str, Any] | None) -> dict[str, Any]:
    o = dict(DEFAULT_OPTIONS)
    unknown = set(opts or {}) - set(o)
    if unknown:
        raise ValueError(f"unknown TIR pipeline option(s) {sorted(unknown)}; known: "
                         f"{sorted(o)}")
    o.update(opts or {})
    return o


def default_pipeline(opts: dict[str, Any] | None = None) -> Pipeline:
    """The CPU lowering pipeline (the module docstring's order); ``opts`` overrides entries of
    :data:`DEFAULT_OPTIONS` (an unknown key is an error)."""
    o = _options(opts)
    passes: list[tuple[str, Pass]] = []
    if o["name_size_quotients"]:
        passes.append(("name_size_quotients", bind_size_quotients))
    passes.append(("simplify", simplify))
    if o["remove_checks"]:
        passes.append(("remove_redundant_checks", remove_redundant_checks))
    passes.append(("flatten_buffers", flatten_buffers))
    if o["name_size_quotients"]:  # again: the flat indices' strides come from the shapes
        passes.append(("name_size_quotients_flat", bind_size_quotients))
    partition = o["partition_static"] if o["loop_partition"] else None
    if o["vectorize"]:
        passes.append(("vectorize", partial(_partition_then, partial(
            vectorize, max_lanes=o["max_lanes"], predicate=o["predicate_tails"]), partition)))
    else:
        passes.append(("devectorize", partial(_partition_then, _devectorize, partition)))
    if o["hoist_sizes"]:
        # the passes after partitioning and vectorization no longer need these expressions'
        # structure; unrolling copies them into every statement
        passes.append(("hoist_sizes", partial(hoist_size_exprs, sizes_only=False)))
    if o["unroll"]:
        passes.append(("unroll", partial(unroll, auto_max_extent=o["auto_unroll_max_extent"])))
    passes.append(("simplify_again", simplify))
    if o["storage_rewrite"]:
        passes.append(("storage_rewrite", partial(storage_rewrite, reuse=o["storage_reuse"])))
    if o["verify"]:
        passes.append(("verify", _verify_lowered))
    return Pipeline(tuple(passes))


def _partition_then(then: Pass, partition_static: bool | None,
                    func: S.PrimFunc) -> S.PrimFunc:
    """``then(loop_partition(func))``; ``partition_static`` None: no partitioning."""
    if partition_static is not None:
        func = loop_partition(func, partition_static=partition_static)
    return then(func)


def _verify_lowered(func: S.PrimFunc) -> S.PrimFunc:
    verify(func, lowered=True)
    return func


def lower_pipeline(func: S.PrimFunc, opts: dict[str, Any] | None = None,
                   pipeline: Pipeline | None = None) -> S.PrimFunc:
    """Lower ``func`` with ``pipeline`` (the backend's choice), or the default pipeline built
    from ``opts`` (entries of :data:`DEFAULT_OPTIONS`)."""
    if pipeline is not None and opts:
        raise ValueError("lower_pipeline takes options or a pipeline, not both")
    return (pipeline or default_pipeline(opts)).run(func)


def _devectorize(func: S.PrimFunc) -> S.PrimFunc:
    class _Serial(IRMutator):
        def visit_For(self, s: S.For) -> S.Stmt:
            body = self.visit(s.body)
            kind = S.ForKind.SERIAL if s.kind == S.ForKind.VECTORIZED else s.kind
            return S.For(s.loop_var, s.min, s.extent, kind, body, s.thread_tag,
                         s.annotations)

    return func.with_body(_Serial().visit(func.body))
