"""Schedules: how the computes of a tensor-expression graph become loop nests (TVM's
``te.create_schedule``).

A :class:`Schedule` holds one :class:`Stage` per operation reachable from the outputs,
producers first (placeholders are stages too, but they are inputs and never scheduled). A
stage starts with one loop per data axis followed by one loop per reduce axis; its primitives
rewrite that loop structure::

    s = te.create_schedule(C.op)
    i, j = s[C].op.axis
    (k,) = s[C].op.reduce_axis
    io, ii = s[C].split(i, factor=8)
    s[C].reorder(io, k, ii, j)
    s[C].vectorize(j)
    s[C].parallel(io)

Loop transformations are recorded as relations between iteration variables (:class:`Split`,
:class:`Fuse`); the stage's ``leaf_iter_vars`` are the loops it will have, outermost first.
Extents are only final after bound inference (:mod:`tessera.te.bound`), which knows how much of
a stage is needed where it is attached; :func:`tessera.te.lower` then builds the TIR.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.te.tensor import ComputeOp, IterVar, Operation, PlaceholderOp, Range, Tensor, compute
from tessera.tir.expr import IntImm, ProducerLoad
from tessera.tir.functor import IRMutator
from tessera.tir.stmt import ForKind

__all__ = [
    "Fuse", "IterVarAttr", "Schedule", "Split", "Stage", "create_schedule", "thread_axis",
]

#: Where a stage is computed.
ROOT, INLINE, SCOPE = "root", "inline", "scope"

#: Storage scopes a stage may live in.
SCOPES = ("global", "local", "shared")


class Split:
    """``parent`` = ``outer * factor + inner`` (``factor`` or ``nparts`` given)."""

    def __init__(self, parent: IterVar, outer: IterVar, inner: IterVar, factor: int | None,
                 nparts: int | None) -> None:
        self.parent, self.outer, self.inner = parent, outer, inner
        self.factor, self.nparts = factor, nparts

    def __repr__(self) -> str:
        how = f"factor={self.factor}" if self.factor is not None else f"nparts={self.nparts}"
        return f"split({self.parent.name} -> {self.outer.name}, {self.inner.name}, {how})"


class Fuse:
    """``fused`` runs over ``outer`` x ``inner`` (``outer = fused // extent(inner)``)."""

    def __init__(self, outer: IterVar, inner: IterVar, fused: IterVar) -> None:
        self.outer, self.inner, self.fused = outer, inner, fused

    def __repr__(self) -> str:
        return f"fuse({self.outer.name}, {self.inner.name} -> {self.fused.name})"


class IterVarAttr:
    """How one loop runs: its :class:`ForKind`, the GPU thread it is bound to, pragmas."""

    def __init__(self) -> None:
        self.kind = ForKind.SERIAL
        self.thread_tag = ""
        self.pragmas: dict[str, Any] = {}

    def __repr__(self) -> str:
        parts = [str(self.kind)]
        if self.thread_tag:
            parts.append(self.thread_tag)
        if self.pragmas:
            parts.append(repr(self.pragmas))
        return " ".join(parts)


def thread_axis(dom: Any = None, tag: str = "", name: str = "") -> IterVar:
    """A GPU thread axis to :meth:`Stage.bind` a loop to: ``thread_axis("threadIdx.x")``
    (TVM also accepts ``thread_axis((0, n), "threadIdx.x")``)."""
    if isinstance(dom, str):
        dom, tag = None, dom
    if not tag:
        raise ValueError("thread_axis needs a tag such as 'threadIdx.x' or 'blockIdx.x'")
    rng = None
    if dom is not None:
        rng = dom if isinstance(dom, Range) else Range(dom[0], dom[1] - dom[0])
    return IterVar(rng, name or tag, "thread", thread_tag=tag)


def _as_int(value: Any, what: str) -> int:
    if isinstance(value, IntImm):
        value = value.value
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{what} must be a constant int, got {value!r}")
    if value <= 0:
        raise ValueError(f"{what} must be positive, got {value}")
    return value


def _dom_extent(iv: IterVar) -> Any:
    """The extent of ``iv``'s domain: an ``int`` when constant, an index expression when it
    depends on run-time sizes, None when unknown."""
    if iv.dom is None:
        return None
    return bound.as_extent(iv.dom.extent)


class Stage:
    """The schedule of one operation: its loops (``leaf_iter_vars``), their kinds, where it
    is computed (root, inlined into its readers, or at a loop of another stage) and in which
    storage scope its result lives."""

    def __init__(self, op: Operation, schedule: Schedule) -> None:
        self.op = op
        self.origin_op = op
        self.schedule = schedule
        self.relations: list[Split | Fuse] = []
        self.iter_var_attrs: dict[IterVar, IterVarAttr] = {}
        self.attach_type = ROOT
        self.attach_stage: Stage | None = None
        self.attach_ivar: IterVar | None = None
        self.scope = "global"
        self.is_output = False
        self._reset_axes()

    def _reset_axes(self) -> None:
        if isinstance(self.op, ComputeOp):
            roots = list(self.op.axis) + list(self.op.reduce_axis)
        else:
            roots = []
        self.all_iter_vars: list[IterVar] = list(roots)
        self.leaf_iter_vars: list[IterVar] = list(roots)

    # -- facts ----------------------------------------------------------------------------
    @property
    def name(self) -> str:
        return self.op.name

    @property
    def is_placeholder(self) -> bool:
        return isinstance(self.op, PlaceholderOp)

    @property
    def root_iter_vars(self) -> list[IterVar]:
        """The op's data axes then its reduce axes."""
        if not isinstance(self.op, ComputeOp):
            return []
        return list(self.op.axis) + list(self.op.reduce_axis)

    def output(self, index: int = 0) -> Tensor:
        return self.op.output(index)

    def attr(self, iv: IterVar) -> IterVarAttr:
        """The loop attributes of ``iv`` (serial and untagged unless set)."""
        if iv not in self.iter_var_attrs:
            self.iter_var_attrs[iv] = IterVarAttr()
        return self.iter_var_attrs[iv]

    def _check_compute(self, what: str) -> ComputeOp:
        if not isinstance(self.op, ComputeOp):
            raise TypeError(f"{what}: {self.name} is a placeholder, not a compute")
        return self.op

    def _leaf_pos(self, iv: Any, what: str) -> int:
        if not isinstance(iv, IterVar):
            raise TypeError(f"{what} on stage {self.name}: {iv!r} is not an IterVar")
        for pos, leaf in enumerate(self.leaf_iter_vars):
            if leaf is iv:
                return pos
        if any(v is iv for v in self.all_iter_vars):
            raise ValueError(f"{what} on stage {self.name}: {iv.name} was already split or "
                             f"fused; use the iteration variables that replaced it")
        raise ValueError(f"{what} on stage {self.name}: {iv.name} is not a loop of this stage "
                         f"(loops: {', '.join(v.name for v in self.leaf_iter_vars)})")

    # -- loop structure -------------------------------------------------------------------
    def split(self, parent: IterVar, factor: Any = None,
              nparts: Any = None) -> tuple[IterVar, IterVar]:
        """Split loop ``parent`` into ``(outer, inner)``, ``inner`` running over ``factor``
        iterations (or ``outer`` over ``nparts``). A split that does not divide the extent
        gets a bounds guard when lowered; a factor (or nparts) above the extent is reduced to
        it. Extents are final only after bound inference (a stage computed at another stage's
        loop splits the extent of its region)."""
        self._check_compute("split")
        pos = self._leaf_pos(parent, "split")
        if (factor is None) == (nparts is None):
            raise ValueError(f"split of {parent.name}: give exactly one of factor and nparts")
        f = _as_int(factor, "split factor") if factor is not None else None
        p = _as_int(nparts, "split nparts") if nparts is not None else None
        ext = _dom_extent(parent)
        if ext is not None:
            # a symbolic extent n (a run-time size) gives outer floordiv(n + f - 1, f)
            outer_ext, inner_ext = bound.split_extents(ext, f, p)
        else:
            inner_ext = outer_ext = None
        outer = IterVar(Range(0, outer_ext) if outer_ext is not None else None,
                        f"{parent.name}_outer", parent.kind)
        inner = IterVar(Range(0, inner_ext) if inner_ext is not None else None,
                        f"{parent.name}_inner", parent.kind)
        self.relations.append(Split(parent, outer, inner, f, p))
        self.all_iter_vars += [outer, inner]
        self.leaf_iter_vars[pos:pos + 1] = [outer, inner]
        return outer, inner

    def tile(self, x_parent: IterVar, y_parent: IterVar, x_factor: Any,
             y_factor: Any) -> tuple[IterVar, IterVar, IterVar, IterVar]:
        """Split two loops and order them ``(x_outer, y_outer, x_inner, y_inner)``."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def fuse(self, *ivs: IterVar) -> IterVar:
        """Fuse adjacent loops (given outermost first) into one loop over their product."""
        self._check_compute("fuse")
        if len(ivs) == 1 and isinstance(ivs[0], list | tuple):
            ivs = tuple(ivs[0])
        if not ivs:
            raise ValueError(f"fuse on stage {self.name} needs at least one loop")
        positions = [self._leaf_pos(iv, "fuse") for iv in ivs]
        if positions != list(range(positions[0], positions[0] + len(ivs))):
            raise ValueError(f"fuse on stage {self.name}: loops "
                             f"{', '.join(iv.name for iv in ivs)} must be adjacent and given "
                             f"outermost first (current order: "
                             f"{', '.join(v.name for v in self.leaf_iter_vars)})")
        kinds = {iv.kind for iv in ivs}
        if len(kinds) > 1:
            raise ValueError(f"fuse on stage {self.name}: cannot fuse data-parallel and reduce "
                             f"loops ({', '.join(iv.name for iv in ivs)})")
        if len(ivs) == 1:
            return ivs[0]
        fused = ivs[0]
        names = [ivs[0].name]
        for inner in ivs[1:]:
            names.append(inner.name)
            eo, ei = _dom_extent(fused), _dom_extent(inner)
            dom = Range(0, bound._mul_extents(eo, ei)) \
                if eo is not None and ei is not None else None
            new = IterVar(dom, "_".join(names) + "_fused", inner.kind)
            self.relations.append(Fuse(fused, inner, new))
            self.all_iter_vars.append(new)
            fused = new
        start = positions[0]
        self.leaf_iter_vars[start:start + len(ivs)] = [fused]
        return fused

    def reorder(self, *ivs: IterVar) -> None:
        """Put the given loops in this order, in the positions they occupy now (loops not
        named stay where they are)."""
        self._check_compute("reorder")
        if len(ivs) == 1 and isinstance(ivs[0], list | tuple):
            ivs = tuple(ivs[0])
        positions = [self._leaf_pos(iv, "reorder") for iv in ivs]
        if len(set(positions)) != len(positions):
            raise ValueError(f"reorder on stage {self.name}: a loop is named twice")
        for pos, iv in zip(sorted(positions), ivs):
            self.leaf_iter_vars[pos] = iv

    def _set_kind(self, iv: IterVar, kind: ForKind, what: str) -> None:
        self._check_compute(what)
        self._leaf_pos(iv, what)
        self.attr(iv).kind = kind

    def vectorize(self, iv: IterVar) -> None:
        """Run loop ``iv`` as one vector operation."""
        self._set_kind(iv, ForKind.VECTORIZED, "vectorize")

    def parallel(self, iv: IterVar) -> None:
        """Run the iterations of loop ``iv`` on several threads."""
        self._set_kind(iv, ForKind.PARALLEL, "parallel")

    def unroll(self, iv: IterVar) -> None:
        """Unroll loop ``iv`` completely."""
        self._set_kind(iv, ForKind.UNROLLED, "unroll")

    def bind(self, iv: IterVar, thread_ivar: IterVar) -> None:
        """Bind loop ``iv`` to a GPU thread axis made by :func:`thread_axis`."""
        if not isinstance(thread_ivar, IterVar) or not thread_ivar.thread_tag:
            raise TypeError(f"bind on stage {self.name}: {thread_ivar!r} is not a thread axis "
                            f"(use te.thread_axis('threadIdx.x'))")
        self._set_kind(iv, ForKind.THREAD_BINDING, "bind")
        self.attr(iv).thread_tag = thread_ivar.thread_tag

    def pragma(self, iv: IterVar, key: str, value: Any = True) -> None:
        """Annotate loop ``iv`` with ``key: value`` (``For.annotations``), e.g.
        ``pragma(io, "parallel_grain", 4)``."""
        self._check_compute("pragma")
        self._leaf_pos(iv, "pragma")
        self.attr(iv).pragmas[key] = value

    # -- where the stage is computed ---------------------------------------------------------
    def compute_at(self, parent: Stage, iv: IterVar) -> None:
        """Compute this stage inside loop ``iv`` of stage ``parent``: only the region that
        one iteration of ``iv`` reads is computed there (see :mod:`tessera.te.bound`)."""
        self._check_compute("compute_at")
        if not isinstance(parent, Stage):
            raise TypeError(f"compute_at of {self.name}: the parent must be a Stage (s[tensor])")
        if parent is self:
            raise ValueError(f"compute_at of {self.name}: a stage cannot be computed at itself")
        if not any(v is iv for v in parent.all_iter_vars):
            raise ValueError(f"compute_at of {self.name}: {getattr(iv, 'name', iv)!r} is not a "
                             f"loop of stage {parent.name}")
        self.attach_type = SCOPE
        self.attach_stage = parent
        self.attach_ivar = iv

    def compute_inline(self) -> None:
        """Substitute this stage's expression into every reader (no buffer, no loops)."""
        op = self._check_compute("compute_inline")
        if op.reduce_axis:
            raise ValueError(f"compute_inline: {self.name} is a reduction and cannot be inlined")
        self.attach_type = INLINE
        self.attach_stage = self.attach_ivar = None

    def compute_root(self) -> None:
        """Compute this stage in full at the top level of the function (the default)."""
        self._check_compute("compute_root")
        self.attach_type = ROOT
        self.attach_stage = self.attach_ivar = None

    def set_scope(self, scope: str) -> None:
        """Keep this stage's result in ``scope``: "global", "local" or "shared"."""
        if scope not in SCOPES:
            raise ValueError(f"set_scope of {self.name}: unknown scope {scope!r}; expected one "
                             f"of {', '.join(SCOPES)}")
        self.scope = scope

    # -- printing -------------------------------------------------------------------------
    def __repr__(self) -> str:
        if self.is_placeholder:
            return f"stage {self.name}: placeholder"
        if self.attach_type == INLINE:
            where = "inline"
        elif self.attach_type == SCOPE:
            assert self.attach_stage is not None and self.attach_ivar is not None
            where = f"at {self.attach_stage.name}.{self.attach_ivar.name}"
        else:
            where = "root"
        loops = []
        for iv in self.leaf_iter_vars:
            ext = _dom_extent(iv)
            text = f"{iv.name}({ext if ext is not None else '?'})"
            attr = self.iter_var_attrs.get(iv)
            if attr is not None and (attr.kind != ForKind.SERIAL or attr.pragmas):
                text += f"[{attr}]"
            if iv.kind == "reduce":
                text = "~" + text
            loops.append(text)
        head = f"stage {self.name}: {where}, scope {self.scope}"
        if self.is_output:
            head += ", output"
        rel = "".join(f"\n    {r}" for r in self.relations)
        return f"{head}\n  loops: {', '.join(loops) or '(none)'}{rel}"


class _ReplaceLoads(IRMutator):
    """Redirect loads of the tensors of one stage to another tensor."""

    def __init__(self, schedule: Schedule, source: Stage, target: Tensor) -> None:
        self.schedule, self.source, self.target = schedule, source, target

    def visit_ProducerLoad(self, node: ProducerLoad) -> Any:
        idx = [self.visit(i) for i in node.indices]
        if self.schedule.stage_of(node.producer) is self.source:
            return ProducerLoad(self.target, idx)
        if all(a is b for a, b in zip(idx, node.indices)):
            return node
        return ProducerLoad(node.producer, idx)


class Schedule:
    """The stages of a tensor-expression graph (producers first) and their schedules.

    ``s[t]`` is the stage of tensor (or operation) ``t``; it keeps working after
    :meth:`cache_read` / :meth:`cache_write` replaced the stage's operation."""

    def __init__(self, outputs: Sequence[Operation]) -> None:
        self.outputs = list(outputs)
        self.stages: list[Stage] = []
        self.stage_map: dict[Operation, Stage] = {}
        seen: set[int] = set()

        def visit(op: Operation) -> None:
            if id(op) in seen:
                return
            seen.add(id(op))
            for t in op.input_tensors():
                visit(t.op)
            stage = Stage(op, self)
            self.stages.append(stage)
            self.stage_map[op] = stage

        for op in self.outputs:
            visit(op)
        for op in self.outputs:
            self.stage_map[op].is_output = True

    def __getitem__(self, key: Any) -> Stage:
        stage = self.stage_of(key)
        if stage is None:
            name = getattr(key, "name", repr(key))
            raise KeyError(f"{name} is not an operation of this schedule")
        return stage

    def __contains__(self, key: Any) -> bool:
        return self.stage_of(key) is not None

    def stage_of(self, key: Any) -> Stage | None:
        """The stage of a tensor, an operation or a stage of this schedule (None if absent)."""
        if isinstance(key, Stage):
            return key if key.schedule is self else None
        if isinstance(key, Tensor):
            key = key.op
        return self.stage_map.get(key)

    def compute_stages(self) -> list[Stage]:
        """The stages of compute operations, producers first."""
        return [s for s in self.stages if not s.is_placeholder]

    def _insert_before(self, new: Stage, anchor: Stage) -> None:
        self.stages.insert(self.stages.index(anchor), new)
        self.stage_map[new.op] = new

    def cache_read(self, tensor: Tensor, scope: str, readers: Sequence[Any]) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` (tensors, operations or stages)
        read instead of ``tensor``; schedule it like any stage (usually ``compute_at`` a
        reader's loop). Returns the copy."""
        src = self[tensor]
        if scope not in SCOPES:
            raise ValueError(f"cache_read of {src.name}: unknown scope {scope!r}")
        reader_stages = [self[r] for r in readers]
        if not reader_stages:
            raise ValueError(f"cache_read of {src.name}: no readers given")
        out = src.op.output(0)
        name = f"{src.name}_{scope}"
        cache = compute(out.shape, lambda *i: out[i], name=name)
        for stage in reader_stages:
            op = stage._check_compute("cache_read reader")
            body = _ReplaceLoads(self, src, cache).visit(op.body)
            if body is op.body:
                raise ValueError(f"cache_read of {src.name}: stage {stage.name} does not read it")
            self._replace_op(stage, ComputeOp(op.name, op.tag, op.attrs, list(op.axis), body,
                                              op.output(0).dtype))
        first = min(self.stages.index(s) for s in reader_stages)
        new = Stage(cache.op, self)
        new.scope = scope
        self._insert_before(new, self.stages[first])
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a new stage in ``scope`` (returned); the original stage then
        only copies the cache out, so an epilogue can be computed at it. A reduction moves into
        the cache stage with its reduce axes; the original stage keeps its data axes (so
        ``tensor.op.axis`` still names its loops)."""
        stage = self[tensor]
        op = stage._check_compute("cache_write")
        if scope not in SCOPES:
            raise ValueError(f"cache_write of {stage.name}: unknown scope {scope!r}")
        if stage.relations or stage.iter_var_attrs or stage.attach_type != ROOT or \
                stage.leaf_iter_vars != stage.all_iter_vars:
            raise ValueError(f"cache_write of {stage.name}: call it before scheduling the stage")
        axis = [IterVar(Range(a.dom.min, a.dom.extent), a.name, "data")  # type: ignore[union-attr]
                for a in op.axis]
        body = bound.substitute_vars(op.body, dict(zip(op.axis, axis)))
        dtype = op.output(0).dtype
        cache_op = ComputeOp(f"{stage.name}_{scope}", "", op.attrs, axis, body, dtype)
        cache = cache_op.output(0)
        copy_body = ProducerLoad(cache, list(op.axis))
        self._replace_op(stage, ComputeOp(op.name, op.tag, op.attrs, list(op.axis), copy_body,
                                          dtype))
        new = Stage(cache_op, self)
        new.scope = scope
        self._insert_before(new, stage)
        return cache

    def _replace_op(self, stage: Stage, op: ComputeOp) -> None:
        """Make ``op`` the stage's operation (the old one keeps mapping to the stage)."""
        same_roots = [id(iv) for iv in stage.root_iter_vars] == \
            [id(iv) for iv in list(op.axis) + list(op.reduce_axis)]
        stage.op = op
        self.stage_map[op] = stage
        if not same_roots:
            stage._reset_axes()

    def __repr__(self) -> str:
        outs = ", ".join(op.name for op in self.outputs)
        body = "\n".join(repr(s) for s in self.stages)
        return f"Schedule(outputs: {outs})\n{body}"


def create_schedule(ops: Any) -> Schedule:
    """A schedule of the graph computing ``ops`` (an operation or tensor, or a list of them);
    every compute reachable from them gets a stage, computed at root."""
    items = list(ops) if isinstance(ops, list | tuple) else [ops]
    out_ops: list[Operation] = []
    for item in items:
        op = item.op if isinstance(item, Tensor) else item
        if not isinstance(op, Operation):
            raise TypeError(f"create_schedule: {item!r} is not a tensor or an operation")
        if op not in out_ops:
            out_ops.append(op)
    return Schedule(out_ops)


# Last, not first: bound inference imports this module's names, all defined by now; this module
# uses it only when called (cache_write).
from tessera.te import bound  # noqa: E402
