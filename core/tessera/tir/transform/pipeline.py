"""The TIR lowering pipeline: from a scheduled loop nest (``te.lower``) to what the LLVM code
generator takes (1-D buffers, vector ramps/broadcasts, serial/parallel loops, allocations,
lets, ifs, selects, casts and calls).

``simplify -> remove_redundant_checks -> flatten_buffers -> vectorize -> unroll -> simplify ->
storage_rewrite -> verify``
"""

from __future__ import annotations

from typing import Any

from tessera.tir import stmt as S
from tessera.tir.simplify import simplify
from tessera.tir.transform.flatten import flatten_buffers
from tessera.tir.transform.remove_checks import remove_redundant_checks
from tessera.tir.transform.storage_rewrite import storage_rewrite
from tessera.tir.transform.unroll import unroll
from tessera.tir.transform.vectorize import MAX_LANES, vectorize
from tessera.tir.verifier import verify

__all__ = ["lower_pipeline", "DEFAULT_OPTIONS"]

#: Options of :func:`lower_pipeline` and their defaults.
DEFAULT_OPTIONS: dict[str, Any] = {
    "remove_checks": True,       # drop if/select conditions decided by loop ranges
    "vectorize": True,           # False: VECTORIZED loops run serially
    "max_lanes": MAX_LANES,      # widest vector emitted
    "unroll": True,              # expand UNROLLED loops
    "auto_unroll_max_extent": 0,  # also unroll innermost serial loops up to this extent
    "storage_rewrite": True,     # hoist allocations, share memory
    "storage_reuse": True,       # share memory between disjoint lifetimes
    "verify": True,              # check the result (raises CompileError)
}


def lower_pipeline(func: S.PrimFunc, opts: dict[str, Any] | None = None) -> S.PrimFunc:
    """Run the lowering passes on ``func`` and return the lowered function; ``opts`` overrides
    entries of :data:`DEFAULT_OPTIONS` (an unknown key is an error)."""
    o = dict(DEFAULT_OPTIONS)
    unknown = set(opts or {}) - set(o)
    if unknown:
        raise ValueError(f"unknown TIR pipeline option(s) {sorted(unknown)}; known: "
                         f"{sorted(o)}")
    o.update(opts or {})
    func = simplify(func)
    if o["remove_checks"]:
        func = remove_redundant_checks(func)
    func = flatten_buffers(func)
    if o["vectorize"]:
        func = vectorize(func, max_lanes=o["max_lanes"])
    else:
        func = _devectorize(func)
    if o["unroll"]:
        func = unroll(func, auto_max_extent=o["auto_unroll_max_extent"])
    func = simplify(func)
    if o["storage_rewrite"]:
        func = storage_rewrite(func, reuse=o["storage_reuse"])
    if o["verify"]:
        verify(func, lowered=True)
    return func


def _devectorize(func: S.PrimFunc) -> S.PrimFunc:
    from tessera.tir.functor import IRMutator

    class _Serial(IRMutator):
        def visit_For(self, s: S.For) -> S.Stmt:
            body = self.visit(s.body)
            kind = S.ForKind.SERIAL if s.kind == S.ForKind.VECTORIZED else s.kind
            return S.For(s.loop_var, s.min, s.extent, kind, body, s.thread_tag,
                         s.annotations)

    return func.with_body(_Serial().visit(func.body))
