"""Lowering a schedule to a TIR function (TVM's ``te.lower``).

Each compute stage becomes a loop nest over its leaf iteration variables, outermost first, each
loop running from 0 over the extent bound inference gave it, with the kind the schedule chose
(serial, parallel, vectorized, unrolled, thread-bound; pragmas go to ``For.annotations``). A
loop bound to a thread axis that a loop around it already binds (a ``shared`` stage fetched
cooperatively inside the block's ``threadIdx`` loops) is not a loop: its variable is the
enclosing thread index, under ``IfThenElse(index < extent)`` when it is shorter. Root
iteration variables are rebuilt from the loops (``outer * factor + inner`` for a split,
``//``/``%`` for a fuse) and a split that does not divide its extent guards the body with
``IfThenElse(outer * factor + inner < extent)``.

A reduction stores its identity at the level just outside its outermost reduce loop (in a copy
of the data loops that are inside that level) and accumulates ``out = combine(out, source)``
inside, under ``IfThenElse`` when the reduction has a ``where`` condition. A reduction whose
reduce loop is bound to ``threadIdx.*`` is a cross-thread reduction (TVM's allreduce): each
thread combines its share in a ``local`` register, the block folds the shares in a ``shared``
buffer, and thread 0 stores the result (``_Lowering.emit_allreduce``; the barriers come from
the ``thread_sync`` pass).

Stages passed in ``args`` write the parameter buffers. Every other stage gets an ``Allocate``:
of its whole shape at the top of the function for a stage computed at root, of its inferred
region inside its attach loop for a stage computed with ``compute_at`` (indices then count from
the region's minimum). Inlined stages are substituted into their readers, and loads of tensors
become loads of buffers, so the function holds only TIR nodes.

Shapes and reduce axes may use run-time sizes (``n = tir.Var("n")``; see
:mod:`tessera.te.bound` for how loops over them are split and guarded). Loops then have
expression extents, allocations of a region whose extent is not constant have variable sizes,
and the function's ``size_vars`` are every free integer variable it uses: those of the
parameters' shapes first (in parameter order, what the caller's arrays give), then the others
(a size that only bounds a reduction), in order of first use. ``size_bounds`` (a range per size
variable) is passed on to the :class:`~tessera.tir.PrimFunc`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera.te.bound import (
    Bounds,
    Extent,
    StageBound,
    extent_expr,
    infer_bound,
    simplify_index,
    substitute_vars,
)
from tessera.te.schedule import ROOT, SCOPE, Schedule, Stage
from tessera.te.tensor import ComputeOp, IterVar, Tensor
from tessera.tir import expr as E
from tessera.tir.buffer import Buffer
from tessera.tir.functor import IRMutator, post_order_visit
from tessera.tir.heavy import heavy_work
from tessera.tir.stmt import (
    Allocate,
    BufferStore,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Stmt,
    seq,
    shape_vars,
)

__all__ = ["lower"]


class _NameSupply:
    """Unique names: the first use of a name keeps it, later ones get ``_1``, ``_2``, ..."""

    def __init__(self) -> None:
        self.used: set[str] = set()

    def fresh(self, name: str) -> str:
        candidate, k = name, 0
        while candidate in self.used:
            k += 1
            candidate = f"{name}_{k}"
        self.used.add(candidate)
        return candidate


class _LoadLowering(IRMutator):
    """``tensor[indices]`` -> ``buffer[indices - region min]``."""

    def __init__(self, owner: _Lowering) -> None:
        self.owner = owner

    def visit_ProducerLoad(self, node: E.ProducerLoad) -> E.PrimExpr:
        idx = [self.visit(i) for i in node.indices]
        buf, base = self.owner.buffer_of(node.producer)
        # a region's minimum may itself read a tensor (a gather index)
        base = [self.visit(b) for b in base]
        return E.BufferLoad(buf, [simplify_index(i - b) if not _is_zero(b) else simplify_index(i)
                                  for i, b in zip(idx, base)])


def _is_zero(e: E.PrimExpr) -> bool:
    return isinstance(e, E.IntImm) and e.value == 0


def _combine(combiner: str, acc: E.PrimExpr, value: E.PrimExpr) -> E.PrimExpr:
    if combiner == "sum":
        return acc + value
    if combiner == "max":
        return E.max_(acc, value)
    return E.min_(acc, value)


class _Lowering:
    def __init__(self, sch: Schedule, args: Sequence[Tensor]) -> None:
        self.sch = sch
        self.names = _NameSupply()
        self.params: list[Buffer] = []
        self.buffers: dict[Stage, Buffer] = {}
        self.loose: dict[int, Buffer] = {}  # args that are not stages of the schedule
        for t in args:
            self.add_param(t)
        self.bounds: Bounds = infer_bound(sch)
        self.live = [s for s in sch.compute_stages() if s in self.bounds.stages]
        for stage in self.live:
            if stage not in self.buffers:
                self.buffers[stage] = self.allocated_buffer(stage)
        self.loop_vars: dict[E.Var, E.Var] = {}
        for stage in self.live:
            for iv in stage.leaf_iter_vars:
                self.loop_vars[iv] = E.Var(self.names.fresh(iv.name), iv.dtype)

    # -- buffers ----------------------------------------------------------------------------
    def add_param(self, t: Any) -> None:
        if not isinstance(t, Tensor):
            raise TypeError(f"lower: argument {t!r} is not a te.Tensor")
        stage = self.sch.stage_of(t)
        if stage is not None and stage in self.buffers or id(t.op) in self.loose:
            raise ValueError(f"lower: tensor {t.name} appears twice in the arguments")
        if stage is not None and stage.attach_type != ROOT and not stage.is_placeholder:
            where = "inlined"
            if stage.attach_type == SCOPE:
                assert stage.attach_stage is not None and stage.attach_ivar is not None
                where = f"computed at {stage.attach_stage.name}.{stage.attach_ivar.name}"
            raise ValueError(f"lower: argument {t.name} must be computed at root, but it is "
                             f"{where}")
        buf = Buffer(self.names.fresh(t.name), t.shape, t.dtype)
        self.params.append(buf)
        if stage is None:
            self.loose[id(t.op)] = buf
        else:
            self.buffers[stage] = buf

    def allocated_buffer(self, stage: Stage) -> Buffer:
        sb = self.bounds[stage]
        shape = [ext for _, ext in sb.region()]
        return Buffer(self.names.fresh(stage.name), shape, stage.output(0).dtype,
                      scope=stage.scope)

    def buffer_of(self, tensor: Tensor) -> tuple[Buffer, list[E.PrimExpr]]:
        """The buffer holding ``tensor`` and the index of its first element."""
        stage = self.sch.stage_of(tensor)
        if stage is None or stage not in self.buffers:
            if stage is not None and stage.is_placeholder:
                raise ValueError(f"lower: placeholder {tensor.name} is read but is not in args")
            raise ValueError(f"lower: tensor {tensor.name} is read but has no buffer")
        buf = self.buffers[stage]
        if stage.is_placeholder:
            return buf, [E.IntImm(0)] * len(tensor.shape)
        return buf, [m for m, _ in self.bounds[stage].region()]

    # -- statements -------------------------------------------------------------------------
    def finish(self, node: Any, override: dict[E.Var, E.Var] | None = None) -> Any:
        """Replace leaf iteration variables by loop variables."""
        vmap = dict(self.loop_vars)
        if override:
            vmap.update(override)
        return substitute_vars(node, vmap)

    def enclosing_threads(self, stage: Stage) -> dict[str, tuple[E.Var, Extent]]:
        """The thread axes bound by loops around ``stage`` (of the stages it is attached
        inside): tag -> (loop variable, extent)."""
        out: dict[str, tuple[E.Var, Extent]] = {}
        cur = stage
        while cur.attach_type == SCOPE:
            parent, at = cur.attach_stage, cur.attach_ivar
            assert parent is not None and at is not None
            for v in parent.leaf_iter_vars:
                attr = parent.iter_var_attrs.get(v)
                if attr is not None and attr.thread_tag and attr.thread_tag not in out:
                    out[attr.thread_tag] = (self.loop_vars[v], self.bounds[parent].extent[v])
                if v is at:
                    break
            cur = parent
        return out

    def loop(self, stage: Stage, iv: IterVar, var: E.Var, extent: Extent, body: Stmt) -> Stmt:
        attr = stage.iter_var_attrs.get(iv)
        if attr is None:
            return For(var, 0, extent, ForKind.SERIAL, body)
        outer = self.enclosing_threads(stage).get(attr.thread_tag) if attr.thread_tag else None
        if outer is None:
            return For(var, 0, extent, attr.kind, body, attr.thread_tag, attr.pragmas)
        # bound to a thread axis an enclosing loop already binds (a cooperative fetch): the
        # same thread index, guarded where this loop is shorter
        thread_var, thread_extent = outer
        if isinstance(extent, int) and isinstance(thread_extent, int):
            slack: int | None = thread_extent - extent
        else:
            d = simplify_index(extent_expr(thread_extent) - extent_expr(extent))
            slack = d.value if isinstance(d, E.IntImm) else None
        if slack is None or slack < 0:
            raise ValueError(
                f"lower: stage {stage.name} binds loop {iv.name} (extent {extent}) to "
                f"{attr.thread_tag}, which an enclosing loop binds with extent {thread_extent}; "
                f"split {iv.name} by {thread_extent} and bind the inner loop")
        body = substitute_vars(body, {var: thread_var})
        if slack > 0:
            body = IfThenElse(E.LT(thread_var, extent_expr(extent, thread_var.dtype)), body)
        return body

    def attached(self, stage: Stage, iv: IterVar, rest: Stmt) -> Stmt:
        """``rest`` preceded by the stages computed at ``stage.iv``, each in its allocation."""
        children = [s for s in self.live if s.attach_type == SCOPE and
                    s.attach_stage is stage and s.attach_ivar is iv]
        for child in reversed(children):
            rest = Allocate(self.buffers[child], seq(self.emit(child), rest))
        return rest

    def emit(self, stage: Stage) -> Stmt:
        """The loop nest of one stage, with the stages attached to its loops inside."""
        sb = self.bounds[stage]
        op = stage.op
        assert isinstance(op, ComputeOp)
        buf = self.buffers[stage]
        body = substitute_vars(self.bounds.bodies[stage], sb.root_values())
        body = simplify_index(_LoadLowering(self).visit(body))
        out_idx = [sb.offset[a] for a in op.axis]
        leaves = stage.leaf_iter_vars
        guards = [cond for _, cond in sb.guards]
        if isinstance(body, E.Reduce) and self.thread_reduce_leaf(stage) is not None:
            return self.emit_allreduce(stage, sb, body, out_idx)
        if isinstance(body, E.Reduce):
            acc = E.BufferLoad(buf, out_idx)
            inner: Stmt = BufferStore(buf, _combine(body.combiner, acc, body.source), out_idx)
            conds = guards + ([body.condition] if body.condition is not None else [])
            first_reduce = next(k for k, iv in enumerate(leaves) if iv.kind == "reduce")
            init = self.init_nest(stage, sb, body, out_idx, leaves[first_reduce:])
        else:
            inner = BufferStore(buf, body, out_idx)
            conds = guards
            first_reduce, init = -1, None
        if conds:
            inner = IfThenElse(E.all_of(*conds), inner)
        stmt = self.finish(inner)
        for k in reversed(range(len(leaves))):
            if k == first_reduce - 1:
                stmt = seq(init, stmt)
            iv = leaves[k]
            stmt = self.attached(stage, iv, stmt)
            stmt = self.loop(stage, iv, self.loop_vars[iv], sb.extent[iv], stmt)
        if first_reduce == 0:
            stmt = seq(init, stmt)
        return stmt

    def thread_reduce_leaf(self, stage: Stage) -> IterVar | None:
        """The reduce loop of ``stage`` bound to a thread axis (a cross-thread reduction)."""
        for iv in stage.leaf_iter_vars:
            attr = stage.iter_var_attrs.get(iv)
            if iv.kind == "reduce" and attr is not None and attr.thread_tag:
                return iv
        return None

    def emit_allreduce(self, stage: Stage, sb: StageBound, red: E.Reduce,
                       out_idx: list[E.PrimExpr]) -> Stmt:
        """A reduction whose reduce loop ``k`` is bound to ``threadIdx.*`` (extent ``T``):
        per output element, each thread of the block combines its share of the reduction (its
        other reduce loops, serial) in a register, stores it at ``red[k]`` in shared memory,
        and the block folds ``red`` in halves (``red[k] = combine(red[k], red[k + s])`` for
        ``k < s``; a first fold brings a ``T`` that is not a power of two down to one);
        thread 0 stores ``red[0]``. ``thread_sync`` later puts the barriers between those
        steps."""
        tiv = self.thread_reduce_leaf(stage)
        assert tiv is not None
        attr = stage.iter_var_attrs[tiv]
        leaves = stage.leaf_iter_vars
        where = f"lower: stage {stage.name} reduces across {attr.thread_tag} (loop {tiv.name})"
        if not attr.thread_tag.startswith("threadIdx."):
            raise ValueError(f"{where}: only threadIdx axes can reduce across threads")
        first = next(k for k, iv in enumerate(leaves) if iv.kind == "reduce")
        if any(iv.kind != "reduce" for iv in leaves[first:]):
            raise ValueError(f"{where}: its data loops must all be outside its reduce loops")
        bound = [iv.name for iv in leaves[first:]
                 if getattr(stage.iter_var_attrs.get(iv), "thread_tag", None)]
        if len(bound) > 1:
            raise ValueError(f"{where}: only one reduce loop can be bound to a thread axis, "
                             f"not {', '.join(bound)}")
        for iv in leaves[:first]:
            tag = getattr(stage.iter_var_attrs.get(iv), "thread_tag", None)
            if tag and tag.startswith("threadIdx."):
                raise ValueError(f"{where}: data loop {iv.name} is bound to {tag}; a "
                                 f"cross-thread reduction computes one element per block step")
        if stage.attach_type != ROOT or any(s.attach_stage is stage for s in self.live
                                            if s.attach_type == SCOPE):
            raise ValueError(f"{where}: a cross-thread reduction must be computed at root, "
                             f"with no stage computed at its loops")
        t = sb.extent[tiv]
        if not isinstance(t, int):
            raise ValueError(f"{where}: the thread-bound reduce loop has the symbolic extent "
                             f"{t}; split it by a constant and bind the inner loop")
        buf = self.buffers[stage]
        part = Buffer(self.names.fresh(f"{stage.name}_part"), [1], buf.dtype, scope="local")
        shared = Buffer(self.names.fresh(f"{stage.name}_red"), [t], buf.dtype, scope="shared")
        k = self.loop_vars[tiv]
        zero = [E.IntImm(0)]
        update: Stmt = BufferStore(
            part, _combine(red.combiner, E.BufferLoad(part, zero), red.source), zero)
        conds = [c for _, c in sb.guards] + ([red.condition] if red.condition is not None
                                             else [])
        if conds:
            update = IfThenElse(E.all_of(*conds), update)
        update = self.finish(update)
        for iv in reversed(leaves[first:]):
            if iv is not tiv:
                update = self.loop(stage, iv, self.loop_vars[iv], sb.extent[iv], update)
        steps: list[Stmt] = [BufferStore(part, E.cast(buf.dtype, red.identity()), zero), update,
                             BufferStore(shared, E.BufferLoad(part, zero), [k])]
        def fold(active: int, offset: int) -> Stmt:
            """``red[k] = combine(red[k], red[k + offset])`` for ``k < active``."""
            mine = E.BufferLoad(shared, [k])
            theirs = E.BufferLoad(shared, [k + E.IntImm(offset, k.dtype)])
            return IfThenElse(E.LT(k, E.IntImm(active, k.dtype)),
                              BufferStore(shared, _combine(red.combiner, mine, theirs), [k]))

        half = 1 << (t.bit_length() - 1)  # the largest power of two <= t
        if half < t:
            steps.append(fold(t - half, half))
        half //= 2
        while half:
            steps.append(fold(half, half))
            half //= 2
        data_conds = [c for parent, c in sb.guards if parent.kind != "reduce"]
        first_thread = E.EQ(k, E.IntImm(0, k.dtype))
        store: Stmt = IfThenElse(
            E.all_of(first_thread, *[self.finish(c) for c in data_conds]),
            self.finish(BufferStore(buf, E.BufferLoad(shared, zero), out_idx)))
        steps.append(store)
        stmt: Stmt = Allocate(shared, self.loop(stage, tiv, k, t, Allocate(part, seq(*steps))))
        for iv in reversed(leaves[:first]):
            stmt = self.attached(stage, iv, stmt)
            stmt = self.loop(stage, iv, self.loop_vars[iv], sb.extent[iv], stmt)
        return stmt

    def init_nest(self, stage: Stage, sb: StageBound, red: E.Reduce,
                  out_idx: list[E.PrimExpr], inner_leaves: list[IterVar]) -> Stmt:
        """The identity store of a reduction, looping over the data loops that are inside
        its outermost reduce loop."""
        buf = self.buffers[stage]
        data = [iv for iv in inner_leaves if iv.kind != "reduce"]
        override = {iv: E.Var(self.names.fresh(f"{iv.name}_init"), iv.dtype) for iv in data}
        store: Stmt = BufferStore(buf, E.cast(buf.dtype, red.identity()), out_idx)
        conds = [cond for parent, cond in sb.guards if parent.kind != "reduce"]
        if conds:
            store = IfThenElse(E.all_of(*conds), store)
        stmt = self.finish(store, override)
        for iv in reversed(data):
            stmt = self.loop(stage, iv, override[iv], sb.extent[iv], stmt)
        return stmt

    def run(self, name: str, attrs: dict[str, Any] | None,
            size_bounds: dict[E.Var, tuple[int | None, int | None]] | None = None) -> PrimFunc:
        roots = [s for s in self.live if s.attach_type == ROOT]
        body = seq(*[self.emit(s) for s in roots])
        params = set(map(id, self.params))
        for stage in reversed(roots):
            if id(self.buffers[stage]) not in params:
                body = Allocate(self.buffers[stage], body)
        _check_lowered(body)
        used = size_vars(self.params, body)
        bounds = {v: b for v, b in (size_bounds or {}).items() if v in used}
        return PrimFunc(name, self.params, body, attrs, used, bounds)


def size_vars(params: Sequence[Buffer], body: Stmt) -> list[E.Var]:
    """The run-time sizes of a function: the variables of the parameters' shapes (in order of
    first appearance, PrimFunc's default), then every other free integer variable of ``body``
    (not a loop or let variable; in allocation shapes, loop extents, indices) in order of
    first use."""
    found = shape_vars(params)
    seen = set(map(id, found))
    bound: set[int] = set()

    def binders(n: Any) -> None:
        if isinstance(n, For | LetStmt | E.Let):
            bound.add(id(n.loop_var if isinstance(n, For) else n.var))

    post_order_visit(body, binders)

    def visit(n: Any) -> None:
        if isinstance(n, Allocate):
            for d in n.buffer.shape:
                post_order_visit(d, visit)
        elif isinstance(n, E.Var) and id(n) not in seen and id(n) not in bound and \
                E.is_int(n.dtype):
            seen.add(id(n))
            found.append(n)

    post_order_visit(body, visit)
    return found


def _check_lowered(body: Stmt) -> None:
    def f(n: Any) -> None:
        if isinstance(n, E.ProducerLoad | E.Reduce | IterVar):
            raise AssertionError(f"lower: {type(n).__name__} {n} left in the lowered function")

    post_order_visit(body, f)


@heavy_work
def lower(sch: Schedule, args: Sequence[Tensor], name: str = "main",
          attrs: dict[str, Any] | None = None,
          size_bounds: dict[E.Var, tuple[int | None, int | None]] | None = None) -> PrimFunc:
    """Lower schedule ``sch`` to a :class:`~tessera.tir.PrimFunc` named ``name``.

    ``args`` are the tensors the caller passes (placeholders and outputs, in the order the
    function takes them); each becomes a global, multi-dimensional parameter buffer of the
    tensor's name. ``attrs`` become the function's attributes. Shapes may use run-time sizes
    (``tir.Var``): they become the function's ``size_vars`` (see :func:`size_vars`), and
    ``size_bounds`` gives some of them a ``(low, high)`` range (None for an open side; the
    bounds of variables the function does not use are left out)."""
    if not isinstance(sch, Schedule):
        raise TypeError(f"lower: expected a Schedule, got {type(sch).__name__}")
    return _Lowering(sch, list(args)).run(name, dict(attrs or {}), size_bounds)
