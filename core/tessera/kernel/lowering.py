"""The lowering chain every code-generating backend runs, with its backend-specific steps
passed in.

    region --prepare--> graph (the backend's layout rewrites, or a copy)
           --fuse_ops--> fused groups (:mod:`tessera.kernel.fuse_ops`)
           --group_te--> each group's tensor expression (topi computes, the backend's own
                         for some ops)
           --schedule--> the group's schedule (the backend's :class:`~.schedule.ScheduleTable`)
           --loop_nest--> its TIR loop nest (``te.lower``), then the backend's TIR pipeline
                          and code generator

:func:`lower_groups` walks the groups in execution order, names their kernels, reports each
one to the compile's progress and collects the constants the kernels read; a failure names
the group (:func:`lowering_errors`). A backend that passes ``share`` lowers each set of
structurally identical groups (:mod:`tessera.kernel.group_key`: the layers of a transformer)
once and makes the others' kernels from the first one's. :func:`group_facts` is what every
lowered group reports (inputs, outputs, ops, flops, schedule template and configs).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

from tessera import te
from tessera.errors import CompileError
from tessera.ir.graph import Function, Value
from tessera.ir.symbolic import dim_var
from tessera.kernel.flops import group_flops
from tessera.kernel.fuse_ops import FusedGroup, fuse_ops
from tessera.kernel.group_key import group_key
from tessera.progress import Progress
from tessera.tir import expr as E
from tessera.tir.heavy import heavy_work
from tessera.tir.stmt import PrimFunc
from tessera.topi.from_graph import build_te, group_error, kernel_names

__all__ = ["LOWER_PHASE", "Made", "Share", "group_facts", "group_te", "group_text", "loop_nest",
           "lower_groups", "lowering_errors", "prepare_region"]

#: The progress phase of :func:`lower_groups`: one unit per fused group lowered to TIR.
LOWER_PHASE = "lowering fused groups"

K = TypeVar("K")


def prepare_region(region: Function, opt_level: int = 3,
                   rewrite: Callable[[Function], Function] | None = None
                   ) -> tuple[Function, list[FusedGroup]]:
    """The region after the backend's graph rewrites (``rewrite`` returns a new function;
    without one, a copy) and its fused groups in execution order."""
    func = rewrite(region) if rewrite is not None else region.copy()
    return func, fuse_ops(func, opt_level=opt_level)


def group_te(group: FusedGroup, computes: dict[str, Any] | None = None) -> Any:
    """The group's tensor expression from the topi computes (``computes``: the backend's own
    for some ops); its constants are appended by ``build_te`` (one-element ones inlined as
    immediates)."""
    inputs = [v for v in group.inputs if not v.is_constant]
    return build_te(group.nodes, inputs, group.outputs, computes=computes)


def loop_nest(schedule: Any, gte: Any, name: str,
              size_bounds: dict[Any, tuple[int | None, int | None]] | None = None) -> PrimFunc:
    """The loop nest ``te.lower`` makes of a group's schedule (before any TIR pipeline), as a
    function ``name`` of the group's placeholders and outputs; ``size_bounds`` (size variable
    -> (low, high)) bounds the run-time sizes of a symbolic group."""
    return te.lower(schedule, list(gte.placeholders) + list(gte.outputs), name,
                    size_bounds=size_bounds)


@contextmanager
def lowering_errors(backend: str, group: FusedGroup,
                    keep: tuple[type[BaseException], ...] = ()) -> Iterator[None]:
    """Re-raise an error lowering ``group`` as the CompileError that names it (its ops and
    anchor); errors of the types ``keep`` pass unchanged."""
    try:
        yield
    except keep:
        raise
    except Exception as err:  # noqa: BLE001 - name the group that failed
        raise group_error(backend, group, err) from err


def group_facts(group: FusedGroup, gte: Any, sched: Any) -> dict[str, Any]:
    """What a lowered group reports: the graph values its function takes (inputs, with
    constants, then outputs), its ops, flops, schedule template, the first config's knob
    values and workload key, and every config its schedule read."""
    cfg = sched.configs[0] if sched.configs else None
    return {"inputs": [v.name for v in gte.inputs], "outputs": [v.name for v in group.outputs],
            "op": "+".join(n.op for n in group.nodes), "flops": group_flops(group.nodes),
            "template": sched.template, "config": dict(cfg.values) if cfg else {},
            "key": cfg.key() if cfg else "", "configs": list(sched.configs)}


def group_text(item: tuple[FusedGroup, str]) -> str:
    """``fused_n36 (Conv+Add+Relu)``: a group under way, for progress reports."""
    ops = "+".join(n.op for n in item[0].nodes)
    return f"{item[0].name} ({ops if len(ops) <= 40 else ops[:37] + '...'})"


#: ``share(first, group, name)``: the kernel ``name`` of ``group`` made from the kernel
#: ``first`` of an identical group (equal :func:`~tessera.kernel.group_key.group_key`), with
#: the constants it reads (as ``lower`` returns them); None to lower ``group`` after all.
Share = Callable[[K, FusedGroup, str], "tuple[K, list[Value]] | None"]


#: ``made(kernel)``: told of each kernel as :func:`lower_groups` makes it (a backend that
#: compiles while the rest is lowered); a shared kernel comes right after its first one.
Made = Callable[[K], None]


@heavy_work
def lower_groups(groups: list[FusedGroup], lower: Callable[[FusedGroup, str],
                                                           tuple[K, list[Value]]],
                 prefix: str = "", progress: Progress | None = None,
                 describe: Callable[[tuple[FusedGroup, str]], str] = group_text,
                 share: Share[K] | None = None,
                 made: Made[K] | None = None) -> tuple[list[K], dict[str, Value]]:
    """Each group lowered by ``lower(group, kernel_name)`` (which returns the kernel and the
    constants it reads), in order, reported to ``progress`` (phase :data:`LOWER_PHASE`,
    ``describe`` naming the group under way); the kernels (in the groups' order) and the
    constants by name.

    With ``share``, a group structurally identical to an earlier one (the same
    :func:`~tessera.kernel.group_key.group_key`, never None) is not lowered: ``share(first
    kernel, group, name)`` makes its kernel from the first one's (a backend's alias of the
    same code), unless it returns None. The shares are made as soon as the first kernel is,
    so that ``made`` (called with each kernel as it is made: a first one, then the kernels
    that share its code, before any later group is lowered) hears of every kernel that uses
    a function while that function is the last one made."""
    named = list(zip(groups, kernel_names(groups, prefix)))
    results: list[tuple[K, list[Value]] | None] = [None] * len(named)
    later: dict[str, list[int]] = {}  # key -> the indices of its groups, in order
    keys: list[str | None] = [None] * len(named)
    if share is not None:
        for i, (group, _) in enumerate(named):
            keys[i] = key = group_key(group)
            if key is not None:
                later.setdefault(key, []).append(i)
    tracked = (progress or Progress()).track(list(enumerate(named)), LOWER_PHASE,
                                             lambda item: describe(item[1]))
    for i, (group, name) in tracked:
        if results[i] is not None:
            continue  # made with the first group of its kind
        results[i] = lower(group, name)
        if made is not None:
            made(results[i][0])
        key = keys[i]
        if share is None or key is None:
            continue
        for j in later.pop(key, [])[1:]:  # none made yet: only this loop makes shares
            shared = share(results[i][0], named[j][0], named[j][1])
            if shared is not None:
                results[j] = shared
                if made is not None:
                    made(shared[0])
    kernels: list[K] = []
    constants: dict[str, Value] = {}
    for result in results:
        assert result is not None
        kernel, consts = result
        kernels.append(kernel)
        constants.update((v.name, v) for v in consts)
    return kernels, constants


#: Size variable -> (low, high): the ranges of a symbolic region's run-time sizes.
SizeBounds = dict[E.Var, tuple[int | None, int | None]]


def region_sizes(region: Function) -> tuple[list[E.Var], SizeBounds]:
    """A symbolic region's size variables (``Function.used_size_variables``, as TIR
    variables) and their ranges (the graph's ``dim_bounds``); ``([], {})`` for a static one.
    Every kernel of the region takes them in this order (one sizes array serves them all)."""
    if not region.is_symbolic:
        return [], {}
    order = [dim_var(n) for n in region.used_size_variables]
    declared = region.attrs.get("dim_bounds") or {}
    bounds: SizeBounds = {}
    for v in order:
        lo, hi = declared.get(v.name, (None, None))
        bounds[v] = (None if lo is None else int(lo), None if hi is None else int(hi))
    return order, bounds


def with_region_sizes(prim: PrimFunc, order: list[E.Var], bounds: SizeBounds,
                      backend: str) -> PrimFunc:
    """``prim`` taking all of its region's size variables, in the region's order (one sizes
    array serves every kernel of the region); a CompileError naming ``backend``'s kernel when
    its loops use a size variable the region's types do not name."""
    extra = [v.name for v in prim.size_vars if v not in order]
    if extra:
        raise CompileError(f"{backend} kernel {prim.name}: its loops use size variables "
                           f"{', '.join(extra)} that its region's types do not name")
    return PrimFunc(prim.name, prim.params, prim.body, prim.attrs, order,
                    {v: b for v, b in bounds.items() if v in order})
