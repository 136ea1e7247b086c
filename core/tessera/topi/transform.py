"""Injective computes: data movement and indexing (reshape, transpose, concat, slice, gather,
pad, tile, ...).

Every compute here is an index map (tag ``"injective"``, ``"broadcast"`` for expand,
``"injective,pad"`` for pad). Reads are always in bounds, also on the side of a ``select`` that
is not taken (generated code may evaluate both): indices that could leave the input are clamped
(pad, concat) and gathered indices are wrapped (negative) and clamped.

``reshape`` maps indices group by group: the dimensions of the input and output are cut where
their running products agree, so only dimensions that are really merged or split pay a
division or modulo (squeeze/unsqueeze/flatten of trailing dims need none).

Run-time sizes. Reshape, flatten, (un)squeeze, transpose, concat, split, slice, gather, expand
and pad take shapes whose dimensions are run-time sizes (:data:`~tessera.topi.utils.Dim`), and
their shape parameters may be index expressions (Reshape to ``(b, s, 8, 64)``, Slice ``ends =
s``, Pad ``after = (8 - s % 8) % 8``). Reshape cuts its groups where the running products are
provably equal (as polynomials of the size variables) and refuses sizes it cannot prove equal.
A run-time Slice bound is a position in ``[0, dim]`` (an int bound counts from the end when
negative, as ONNX; a huge one means the end); the read index is clamped into the axis where the
axis is static and a bound is not, so a size past the axis cannot read out of bounds; steps
must be positive there. Run-time pad amounts are growths (non-negative).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tessera import te, tir
from tessera.errors import OpError
from tessera.ops.tensor import slice_tuple
from tessera.tir.functor import post_order_visit
from tessera.topi import tag
from tessera.topi.registry import register_compute
from tessera.topi.utils import (
    Dim,
    add,
    as_dim,
    broadcast_read,
    broadcast_shape,
    cast,
    clamp,
    const,
    dim_add,
    dim_equal,
    dim_prod,
    dim_sub,
    dims_of,
    is_const_dim,
    is_static,
    mul,
    normalize_axis,
    prod,
    ravel,
    read,
    scalar,
    shape_of,
    shape_text,
    unravel,
)

Expr = tir.PrimExpr
#: A Slice bound at least this large means "to the end of the axis" (ONNX exporters write
#: INT64_MAX, INT32_MAX, ...).
_TO_THE_END = 1 << 30


def _is_zero(d: Dim) -> bool:
    return is_const_dim(d, 0)


def _shift(i: Any, k: Dim) -> Any:
    """``i + k`` for an index and a dimension (``i`` itself when ``k`` is 0)."""
    if isinstance(k, int):
        return add(i, k)
    return i + k


# -- reshape family -------------------------------------------------------------------------------

def _reshape_groups(src: Sequence[int], dst: Sequence[int]
                    ) -> list[tuple[list[int], list[int]]]:
    """Pairs (input dims, output dims) of the non-1 dimensions, cut where the running products
    of both shapes agree (the shapes have the same non-zero size)."""
    si = [k for k, d in enumerate(src) if d != 1]
    di = [k for k, d in enumerate(dst) if d != 1]
    groups: list[tuple[list[int], list[int]]] = []
    a = b = 0
    while a < len(si) or b < len(di):
        gs: list[int] = []
        gd: list[int] = []
        ps = pd = 1
        while not (gs and gd and ps == pd):
            if ps <= pd:
                gs.append(si[a])
                ps *= src[si[a]]
                a += 1
            else:
                gd.append(di[b])
                pd *= dst[di[b]]
                b += 1
        groups.append((gs, gd))
    return groups


def _reshape_groups_dims(src: Sequence[Dim], dst: Sequence[Dim]
                         ) -> list[tuple[list[int], list[int]]]:
    """:func:`_reshape_groups` of shapes with run-time dimensions: the cuts are the running
    products (of the dimensions that are not a static 1) that both shapes have, compared as
    polynomials. When the whole products are not provably equal (``[n] -> [n // 4, 4]``),
    the dimensions after the last common cut form one group: a flat index over them, valid
    when the sizes agree, which the module checks per call (the importer's relations)."""
    si = [k for k, d in enumerate(src) if not is_const_dim(d, 1)]
    di = [k for k, d in enumerate(dst) if not is_const_dim(d, 1)]

    def prefixes(shape: Sequence[Dim], idx: list[int]) -> list[Dim]:
        out: list[Dim] = []
        acc: Dim = 1
        for k in idx:
            acc = dim_prod([acc, shape[k]])
            out.append(acc)
        return out

    ps, pd = prefixes(src, si), prefixes(dst, di)
    groups: list[tuple[list[int], list[int]]] = []
    a = b = 0
    for p in range(len(ps)):
        q = next((q for q in range(b, len(pd)) if dim_equal(ps[p], pd[q])), None)
        if q is None:
            continue
        groups.append((si[a:p + 1], di[b:q + 1]))
        a, b = p + 1, q + 1
    if a != len(si) or b != len(di):
        rest_src, rest_dst = [src[k] for k in si[a:]], [dst[k] for k in di[b:]]
        names_src, names_dst = _var_names(rest_src), _var_names(rest_dst)
        if not rest_src or not rest_dst or not names_src or names_src != names_dst:
            raise ValueError(f"reshape: cannot reshape {shape_text(src)} to "
                             f"{shape_text(dst)} (sizes not provably equal)")
        groups.append((si[a:], di[b:]))  # the same variables on both sides: n -> [n // 4, 4]
    return groups


def _var_names(dims: Sequence[Dim]) -> set[str]:
    """The size variables the dimensions read."""
    names: set[str] = set()
    for d in dims:
        if isinstance(d, tir.PrimExpr):
            post_order_visit(d, lambda e: names.add(e.name)
                                 if isinstance(e, tir.Var) else None)
    return names


def reshape(x: te.Tensor, shape: Sequence[Dim]) -> te.Tensor:
    """``x`` with a new shape of the same size (row-major order); dimensions may be run-time
    sizes (index expressions) on either side."""
    src = dims_of(x)
    dst = tuple(as_dim(d) for d in shape)
    if not (is_static(src) and is_static(dst)):
        return _reshape_dims(x, src, dst)
    if prod(src) != prod(dst):  # type: ignore[arg-type]
        raise ValueError(f"reshape: cannot reshape {list(src)} to {list(dst)}")
    if prod(src) == 0:  # type: ignore[arg-type]
        return te.compute(dst, lambda *i: const(0, x.dtype), name="reshape", tag=tag.INJECTIVE)
    groups = _reshape_groups(src, dst)  # type: ignore[arg-type]
    return _reshape_by_groups(x, src, dst, groups)


def _reshape_dims(x: te.Tensor, src: Sequence[Dim], dst: Sequence[Dim]) -> te.Tensor:
    if any(_is_zero(d) for d in (*src, *dst)):
        if not dim_equal(dim_prod(src), dim_prod(dst)):
            raise ValueError(f"reshape: cannot reshape {shape_text(src)} to {shape_text(dst)}")
        return te.compute(dst, lambda *i: const(0, x.dtype), name="reshape", tag=tag.INJECTIVE)
    return _reshape_by_groups(x, src, dst, _reshape_groups_dims(src, dst))


def _reshape_by_groups(x: te.Tensor, src: Sequence[Dim], dst: Sequence[Dim],
                       groups: list[tuple[list[int], list[int]]]) -> te.Tensor:
    """The reshape compute: each group of output indices raveled, then unraveled into the
    group's input dimensions."""
    def body(*oi: Any) -> Expr:
        idx: list[Any] = [0] * len(src)
        for gs, gd in groups:
            if len(gs) == 1 and len(gd) == 1:
                idx[gs[0]] = oi[gd[0]]
                continue
            flat = ravel([oi[k] for k in gd], [dst[k] for k in gd])
            for k, v in zip(gs, unravel(flat, [src[k] for k in gs])):
                idx[k] = v
        return read(x, idx)

    return te.compute(dst, body, name="reshape", tag=tag.INJECTIVE)


def flatten(x: te.Tensor, axis: int = 1) -> te.Tensor:
    """2-D: the dimensions before ``axis`` and from ``axis`` on."""
    shape = dims_of(x)
    a = axis + len(shape) if axis < 0 else axis
    return reshape(x, (dim_prod(shape[:a]), dim_prod(shape[a:])))


def squeeze(x: te.Tensor, axes: Sequence[int] | None = None) -> te.Tensor:
    """``x`` without the size-1 axes ``axes`` (all the static 1s when None)."""
    shape = dims_of(x)
    drop = ({normalize_axis(a, len(shape)) for a in axes} if axes is not None
            else {k for k, d in enumerate(shape) if is_const_dim(d, 1)})
    for k in drop:
        if not is_static(shape[k]):
            raise OpError(f"squeeze: axis {k} is a run-time size ({shape[k]}), not a static 1")
    return reshape(x, [d for k, d in enumerate(shape) if k not in drop])


def unsqueeze(x: te.Tensor, axes: Sequence[int]) -> te.Tensor:
    """``x`` with size-1 axes inserted at ``axes`` (positions in the output)."""
    shape = dims_of(x)
    rank = len(shape) + len(axes)
    new = {normalize_axis(a, rank) for a in axes}
    it = iter(shape)
    return reshape(x, [1 if k in new else next(it) for k in range(rank)])


def transpose(x: te.Tensor, perm: Sequence[int] | None = None) -> te.Tensor:
    """Axes permuted: output axis ``k`` is input axis ``perm[k]`` (reversed when None)."""
    src = dims_of(x)
    p = ([normalize_axis(a, len(src)) for a in perm] if perm is not None
         else list(range(len(src)))[::-1])

    def body(*oi: Any) -> Expr:
        idx: list[Any] = [0] * len(src)
        for k, a in enumerate(p):
            idx[a] = oi[k]
        return read(x, idx)

    return te.compute([src[a] for a in p], body, name="transpose", tag=tag.INJECTIVE,
                      attrs={"perm": tuple(p)})


# -- concat, split, slice -------------------------------------------------------------------------

def concat(xs: Sequence[te.Tensor], axis: int = 0) -> te.Tensor:
    """Join tensors along ``axis`` (a select chain; every branch reads in bounds). Sizes along
    ``axis`` may be run-time sizes (a part of run-time size is taken as possibly non-empty);
    the other dimensions must be provably equal."""
    shapes = [dims_of(t) for t in xs]
    a = normalize_axis(axis, len(shapes[0]))
    for s in shapes[1:]:
        if len(s) != len(shapes[0]) or not all(
                dim_equal(d, e) for k, (d, e) in enumerate(zip(s, shapes[0])) if k != a):
            raise OpError(f"concat: shapes {[shape_text(s) for s in shapes]} differ off axis "
                          f"{a}")
    parts = [(t, s[a]) for t, s in zip(xs, shapes) if not is_static(s[a]) or s[a] > 0]
    if not parts:
        parts = [(xs[0], 0)]
    out_shape = list(shapes[0])
    total: Dim = 0
    for s in shapes:
        total = dim_add(total, s[a])
    out_shape[a] = total
    offsets: list[Dim] = []
    acc: Dim = 0
    for _, n in parts:
        offsets.append(acc)
        acc = dim_add(acc, n)

    def body(*oi: Any) -> Expr:
        i = oi[a]
        result: Expr | None = None
        for k, ((t, n), off) in reversed(list(enumerate(zip(parts, offsets)))):
            idx = list(oi)
            if _is_zero(off):
                local = i
            else:
                local = add(i, -off) if isinstance(off, int) else i - off
            lo = 0 if not _is_zero(off) else None
            hi = dim_sub(n, 1) if k < len(parts) - 1 else None
            idx[a] = clamp(local, lo, hi)
            value = read(t, idx)
            result = value if result is None else tir.select(i < dim_add(off, n), value, result)
        assert result is not None
        return result

    return te.compute(out_shape, body, name="concat", tag=tag.INJECTIVE,
                      attrs={"axis": a, "sizes": tuple(s[a] for s in shapes)})


def strided_slice(x: te.Tensor, begin: Sequence[Dim], step: Sequence[int],
                  out_shape: Sequence[Dim], name: str = "slice",
                  clamp_axes: Sequence[int] = ()) -> te.Tensor:
    """``out[i] = x[begin + i * step]`` per axis (normalized, in-range parameters; ``begin``
    may hold run-time positions). The index on each of ``clamp_axes`` is clamped into the
    axis (a bound the compiler cannot check)."""
    dims = dims_of(x)

    def body(*oi: Any) -> Expr:
        idx = [_shift(mul(i, s), b) for i, b, s in zip(oi, begin, step)]
        for k in clamp_axes:
            idx[k] = clamp(idx[k], 0, dim_sub(dims[k], 1))
        return read(x, idx)

    return te.compute(tuple(out_shape), body, name=name, tag=tag.INJECTIVE,
                      attrs={"begin": tuple(begin), "step": tuple(step)})


def _slice_bound(v: Any, dim: Dim, is_end: bool) -> Dim:
    """A positive-step Slice bound on an axis of ``dim`` where the bound or the axis is a
    run-time size: as a position in ``[0, dim]`` (module doc)."""
    v = as_dim(v)
    if not isinstance(v, int):
        return v
    if is_end and v >= _TO_THE_END:
        return dim
    if v < 0:
        v = dim_add(dim, v) if not isinstance(dim, int) else max(v + dim, 0)
    return min(v, dim) if isinstance(dim, int) and isinstance(v, int) else v


def _slice_dims(x: te.Tensor, starts: Sequence[Any], ends: Sequence[Any],
                axes: Sequence[int] | None, steps: Sequence[int] | None) -> te.Tensor:
    """:func:`slice_onnx` where a bound or a sliced axis is a run-time size."""
    shape = dims_of(x)
    n = len(starts)
    if len(ends) != n:
        raise OpError(f"slice: starts and ends differ in length ({n}, {len(ends)})")
    ax = list(range(n)) if axes is None else [normalize_axis(a, len(shape)) for a in axes]
    st = [1] * n if steps is None else [int(v) for v in steps]
    begin: list[Dim] = [0] * len(shape)
    step = [1] * len(shape)
    out: list[Dim] = list(shape)
    clamped: list[int] = []
    for start, end, a, sp in zip(starts, ends, ax, st):
        dim = shape[a]
        if is_static([as_dim(start), as_dim(end), dim]):
            sl = slice_tuple((dim,), [int(as_dim(start))], [int(as_dim(end))], None, [sp])[0]
            b, e, sp2 = sl.indices(dim)  # type: ignore[arg-type]
            length = len(range(b, e, sp2))
            begin[a], step[a], out[a] = (b if length else 0), sp2, length
            continue
        if sp <= 0:
            raise OpError(f"slice: axis {a} has run-time bounds and step {sp}; only positive "
                          f"steps are supported there")
        b0 = _slice_bound(start, dim, False)
        e0 = _slice_bound(end, dim, True)
        length = dim_sub(e0, b0)
        if sp > 1:
            length = as_dim((tir.convert(length, "int64") + (sp - 1)) // sp)
        begin[a], step[a], out[a] = b0, sp, length
        if is_static(dim) and not is_static([as_dim(start), as_dim(end)]):
            clamped.append(a)
    return strided_slice(x, begin, step, out, clamp_axes=clamped)


def slice_onnx(x: te.Tensor, starts: Sequence[Any], ends: Sequence[Any],
               axes: Sequence[int] | None = None, steps: Sequence[int] | None = None
               ) -> te.Tensor:
    """ONNX Slice (negative indices count from the end, clamping, negative steps); run-time
    bounds and axes as the module doc says."""
    if not (is_static(dims_of(x)) and is_static([as_dim(v) for v in (*starts, *ends)])):
        return _slice_dims(x, starts, ends, axes, steps)
    shape = shape_of(x)
    sls = slice_tuple(shape, list(starts), list(ends), list(axes) if axes is not None else None,
                      list(steps) if steps is not None else None)
    begin, step, out = [], [], []
    for sl, d in zip(sls, shape):
        b, e, s = sl.indices(d)
        n = len(range(b, e, s))
        begin.append(b if n else 0)
        step.append(s)
        out.append(n)
    return strided_slice(x, begin, step, out)


def split(x: te.Tensor, sizes: Sequence[Dim], axis: int = 0) -> list[te.Tensor]:
    """Pieces of the given sizes along ``axis`` (sizes may be run-time expressions)."""
    shape = dims_of(x)
    a = normalize_axis(axis, len(shape))
    outs: list[te.Tensor] = []
    off: Dim = 0
    for n in sizes:
        n = as_dim(n)
        begin: list[Dim] = [0] * len(shape)
        begin[a] = off
        out_shape = list(shape)
        out_shape[a] = n
        outs.append(strided_slice(x, begin, [1] * len(shape), out_shape, name="split"))
        off = dim_add(off, n)
    return outs


# -- gathers -------------------------------------------------------------------------------------

def _wrap_index(v: Expr, dim: Dim) -> Expr:
    """A gathered index as int64, negative values counted from the end, clamped into range
    (``dim`` may be a run-time size)."""
    v = cast(v, "int64")
    v = tir.select(v < 0, v + dim, v)
    if isinstance(dim, int):
        return clamp(v, 0, max(dim - 1, 0))
    return clamp(v, 0, tir.max_(dim - 1, tir.const(0, "int64")))


def take(data: te.Tensor, indices: te.Tensor, axis: int = 0) -> te.Tensor:
    """ONNX Gather: entries of ``data`` along ``axis`` at ``indices`` (an embedding lookup:
    ``indices`` of shape ``(b, s)``; either shape may hold run-time sizes)."""
    dshape, ishape = dims_of(data), dims_of(indices)
    a = normalize_axis(axis, len(dshape))
    q = len(ishape)

    def body(*oi: Any) -> Expr:
        sel = _wrap_index(read(indices, oi[a:a + q]), dshape[a])
        return data[tuple([*oi[:a], sel, *oi[a + q:]])]

    return te.compute(dshape[:a] + ishape + dshape[a + 1:], body, name="gather",
                      tag=tag.INJECTIVE, attrs={"axis": a})


def gather_elements(data: te.Tensor, indices: te.Tensor, axis: int = 0) -> te.Tensor:
    """``out[i] = data[i with axis replaced by indices[i]]``."""
    dshape = dims_of(data)
    a = normalize_axis(axis, len(dshape))

    def body(*oi: Any) -> Expr:
        idx = list(oi)
        idx[a] = _wrap_index(read(indices, oi), dshape[a])
        return data[tuple(idx)]

    return te.compute(dims_of(indices), body, name="gather_elements", tag=tag.INJECTIVE,
                      attrs={"axis": a})


def gather_nd(data: te.Tensor, indices: te.Tensor, batch_dims: int = 0) -> te.Tensor:
    """Slices of ``data`` addressed by the last axis of ``indices`` (after ``batch_dims``)."""
    dshape, ishape = dims_of(data), dims_of(indices)
    b = batch_dims
    m = ishape[-1]
    if not isinstance(m, int):
        raise OpError(f"gather_nd: the index depth {m} must be static")
    q = len(ishape)
    out_shape = ishape[:-1] + dshape[b + m:]

    def body(*oi: Any) -> Expr:
        lead = list(oi[:q - 1])
        picked = [_wrap_index(read(indices, [*lead, j]), dshape[b + j]) for j in range(m)]
        return data[tuple([*oi[:b], *picked, *oi[q - 1:]])]

    return te.compute(out_shape, body, name="gather_nd", tag=tag.INJECTIVE,
                      attrs={"batch_dims": b})


# -- expand, tile, pad ----------------------------------------------------------------------------

def expand(x: te.Tensor, shape: Sequence[Dim]) -> te.Tensor:
    """``x`` broadcast (two-way, numpy rules) against ``shape`` (which may hold run-time
    sizes)."""
    out = broadcast_shape(dims_of(x), tuple(as_dim(d) for d in shape))
    return te.compute(out, lambda *i: broadcast_read(x, i), name="expand", tag=tag.BROADCAST)


def tile(x: te.Tensor, repeats: Sequence[int]) -> te.Tensor:
    """``x`` repeated ``repeats[i]`` times along each axis."""
    shape = shape_of(x)

    def body(*oi: Any) -> Expr:
        idx = []
        for i, d, r in zip(oi, shape, repeats):
            idx.append(0 if d == 1 else (i if r == 1 else i % d))
        return read(x, idx)

    return te.compute([d * r for d, r in zip(shape, repeats)], body, name="tile",
                      tag=tag.INJECTIVE)


def _reflect(src: Expr, n: Dim) -> Expr:
    if not isinstance(n, int):
        period = tir.max_(2 * (n - 1), tir.const(1, "int64"))  # n == 1: period 1, index 0
        m = src % period
        return tir.select(m < n, m, period - m)
    if n == 1:
        return tir.const(0)
    period = 2 * (n - 1)
    m = src % period
    return tir.select(m < n, m, period - m)


def _pad_parts(b: Dim, a: Dim) -> tuple[Dim, Dim, Dim, Dim]:
    """(crop before, crop after, growth before, growth after) of pad amounts (a run-time
    amount is a growth)."""
    crop_b = max(-b, 0) if isinstance(b, int) else 0
    crop_a = max(-a, 0) if isinstance(a, int) else 0
    grow_b = max(b, 0) if isinstance(b, int) else b
    grow_a = max(a, 0) if isinstance(a, int) else a
    return crop_b, crop_a, grow_b, grow_a


def pad(x: te.Tensor, pad_before: Sequence[int], pad_after: Sequence[int] | None = None,
        pad_value: Any = 0, mode: str = "constant", name: str = "pad") -> te.Tensor:
    """``x`` padded by ``pad_before``/``pad_after`` per axis (negative amounts crop).

    ``mode``: ``constant`` (``pad_value``, a number or an expression), ``reflect``, ``edge`` or
    ``wrap`` (numpy's modes; reflect and wrap repeat periodically for wide pads). Tag
    ``"injective,pad"``, attrs ``pad_before``, ``pad_after``, ``mode``."""
    shape = dims_of(x)
    pb = [as_dim(p) for p in pad_before]
    pa = [as_dim(p) for p in (pad_after if pad_after is not None else pad_before)]
    out_shape = [dim_add(dim_add(d, b), a) for d, b, a in zip(shape, pb, pa)]
    value = pad_value if isinstance(pad_value, tir.PrimExpr) else const(pad_value, x.dtype)

    def body(*oi: Any) -> Expr:
        idx: list[Any] = []
        conds: list[Expr] = []
        for i, d, b, a in zip(oi, shape, pb, pa):
            crop_b, crop_a, grow_b, grow_a = _pad_parts(b, a)
            n = dim_sub(dim_sub(d, crop_b), crop_a)  # size after cropping
            # index into the cropped input
            local = add(i, -grow_b) if isinstance(grow_b, int) else i - grow_b
            grows_b, grows_a = not _is_zero(grow_b), not _is_zero(grow_a)
            if not grows_b and not grows_a:
                idx.append(_shift(local, crop_b))
                continue
            if mode == "constant":
                if grows_b:
                    conds.append(local >= 0)
                if grows_a:
                    conds.append(local < n)
                src = clamp(local, 0 if grows_b else None, dim_sub(n, 1) if grows_a else None)
            elif mode == "edge":
                src = clamp(local, 0 if grows_b else None, dim_sub(n, 1) if grows_a else None)
            elif mode == "reflect":
                src = _reflect(local, n)
            elif mode == "wrap":
                src = local % n
            else:
                raise ValueError(f"pad: unknown mode {mode!r}")
            idx.append(_shift(src, crop_b))
        v = read(x, idx)
        if conds:
            return tir.select(tir.all_of(*conds), v, value)
        return v

    return te.compute(out_shape, body, name=name, tag=tag.PAD,
                      attrs={"pad_before": tuple(pb), "pad_after": tuple(pa), "mode": mode})


# -- other index maps -----------------------------------------------------------------------------

def trilu(x: te.Tensor, upper: bool = True, k: int = 0) -> te.Tensor:
    """The upper (or lower) triangle of the last two axes from diagonal ``k``; 0 elsewhere."""
    def body(*oi: Any) -> Expr:
        i, j = oi[-2], oi[-1]
        keep = (j - i >= k) if upper else (j - i <= k)
        return tir.select(keep, read(x, oi), const(0, x.dtype))

    return te.compute(x.shape, body, name="trilu", tag=tag.INJECTIVE)


def one_hot(indices: te.Tensor, values: te.Tensor, depth: int, axis: int = -1) -> te.Tensor:
    """``values[1]`` where the index equals the position along the new ``axis``, else
    ``values[0]``."""
    ishape = shape_of(indices)
    a = normalize_axis(axis, len(ishape) + 1)
    vshape = shape_of(values)

    def body(*oi: Any) -> Expr:
        pos = oi[a]
        v = cast(read(indices, [*oi[:a], *oi[a + 1:]]), "int64")
        v = tir.select(v < 0, v + depth, v)
        off = read(values, unravel(tir.const(0), vshape))
        on = read(values, unravel(tir.const(1), vshape))
        return tir.select(tir.eq(v, pos), on, off)

    out = list(ishape)
    out.insert(a, depth)
    return te.compute(out, body, name="one_hot", tag=tag.INJECTIVE)


def reverse_sequence(x: te.Tensor, lens: te.Tensor, batch_axis: int = 1,
                     time_axis: int = 0) -> te.Tensor:
    """The first ``lens[b]`` steps along ``time_axis`` reversed for every batch entry ``b``."""
    steps = shape_of(x)[time_axis]

    def body(*oi: Any) -> Expr:
        t = oi[time_axis]
        n = cast(read(lens, [oi[batch_axis]]), "int64")
        src = tir.select(t < n, n - 1 - t, t)
        idx = list(oi)
        idx[time_axis] = clamp(src, 0, steps - 1)
        return x[tuple(idx)]

    return te.compute(x.shape, body, name="reverse_sequence", tag=tag.INJECTIVE)


def depth_to_space(x: te.Tensor, blocksize: int, mode: str = "DCR") -> te.Tensor:
    """Channel blocks moved into spatial blocks (DCR or CRD order)."""
    b, c, h, w = shape_of(x)
    bs = blocksize
    oc = c // (bs * bs)

    def body(n: Any, ch: Any, y: Any, xx: Any) -> Expr:
        i, j = y % bs, xx % bs
        if mode == "DCR":
            src = (i * bs + j) * oc + ch
        else:
            src = ch * (bs * bs) + i * bs + j
        return read(x, [n, src, y // bs, xx // bs])

    return te.compute((b, oc, h * bs, w * bs), body, name="depth_to_space", tag=tag.INJECTIVE)


def space_to_depth(x: te.Tensor, blocksize: int, mode: str = "DCR") -> te.Tensor:
    """Spatial blocks moved into channels (the inverse of depth_to_space in the same mode)."""
    b, c, h, w = shape_of(x)
    bs = blocksize

    def body(n: Any, ch: Any, y: Any, xx: Any) -> Expr:
        if mode == "DCR":
            i, j, cc = ch // (bs * c), (ch // c) % bs, ch % c
        else:
            cc, i, j = ch // (bs * bs), (ch // bs) % bs, ch % bs
        return read(x, [n, cc, y * bs + i, xx * bs + j])

    return te.compute((b, c * bs * bs, h // bs, w // bs), body, name="space_to_depth",
                      tag=tag.INJECTIVE)


# -- graph ops ----------------------------------------------------------------------------------

@register_compute("Reshape")
def _reshape(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [reshape(inputs[0], out_types[0].shape)]


@register_compute("Flatten")
def _flatten(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [flatten(inputs[0], attrs["axis"])]


@register_compute("Squeeze")
def _squeeze(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [squeeze(inputs[0], attrs["axes"])]


@register_compute("Unsqueeze")
def _unsqueeze(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [unsqueeze(inputs[0], attrs["axes"])]


@register_compute("Transpose")
def _transpose(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [transpose(inputs[0], attrs["perm"])]


@register_compute("Concat")
def _concat(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [concat([t for t in inputs if t is not None], attrs["axis"])]


@register_compute("Split")
def _split(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return split(inputs[0], attrs["split"], attrs["axis"])[:len(out_types)]


@register_compute("Slice")
def _slice(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [slice_onnx(inputs[0], attrs["starts"], attrs["ends"], attrs["axes"], attrs["steps"])]


@register_compute("Gather")
def _gather(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [take(inputs[0], inputs[1], attrs["axis"])]


@register_compute("GatherElements")
def _gather_elements(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [gather_elements(inputs[0], inputs[1], attrs["axis"])]


@register_compute("GatherND")
def _gather_nd(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [gather_nd(inputs[0], inputs[1], attrs["batch_dims"])]


@register_compute("Expand")
def _expand(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [expand(inputs[0], attrs["shape"])]


@register_compute("Tile")
def _tile(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [tile(inputs[0], attrs["repeats"])]


@register_compute("Pad")
def _pad(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    x = inputs[0]
    r = x.ndim
    pads = attrs["pads"]
    value: Any = 0
    if len(inputs) > 1 and inputs[1] is not None and prod(shape_of(inputs[1])) > 0:
        value = scalar(inputs[1]) if prod(shape_of(inputs[1])) == 1 else \
            read(inputs[1], [0] * inputs[1].ndim)
    return [pad(x, pads[:r], pads[r:], value, attrs["mode"])]


@register_compute("Trilu")
def _trilu(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [trilu(inputs[0], bool(attrs["upper"]), attrs["k"])]


@register_compute("OneHot")
def _one_hot(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [one_hot(inputs[0], inputs[1], attrs["depth"], attrs["axis"])]


@register_compute("ReverseSequence")
def _reverse_sequence(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [reverse_sequence(inputs[0], inputs[1], attrs["batch_axis"], attrs["time_axis"])]


@register_compute("DepthToSpace")
def _depth_to_space(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [depth_to_space(inputs[0], attrs["blocksize"], attrs["mode"])]


@register_compute("SpaceToDepth")
def _space_to_depth(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [space_to_depth(inputs[0], attrs["blocksize"], attrs["mode"])]


__all__ = [
    "concat", "depth_to_space", "expand", "flatten", "gather_elements", "gather_nd", "one_hot",
    "pad", "reshape", "reverse_sequence", "slice_onnx", "space_to_depth", "split", "squeeze",
    "strided_slice", "take", "tile", "transpose", "trilu", "unsqueeze",
]
