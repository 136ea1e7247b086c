"""Tuning records per size bucket: a kernel with run-time extents compiled once per tuned size.

One symbolic kernel serves every size, and one config cannot be the best at all of them: a
matrix product of 7 rows wants another register tile and parallel split than one of 4096.
Tuning measures static sizes (``tessera tune --input-shapes``, once per representative size,
all into one records file). Compiled symbolically with those records, a group whose config
has run-time extents finds the records of its template tuned at some of its sizes
(:meth:`~tessera.plugin.records.ScheduleOverrides.buckets`); the group is then lowered once
per bucket (at most :data:`MAX_BUCKETS`), with that bucket's knob values, and the kernel's
entry picks a version by the sizes of each call (code generation's ``variants``): the
product of the config's run-time extents (its rows, for a matrix product) against the
geometric means between consecutive buckets' sizes. The largest bucket's version is the
kernel's function; the others come with the condition that selects them.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from tessera.plugin.records import ScheduleOverrides, SizeBucket
from tessera.tir import expr as E
from tessera.tir.stmt import PrimFunc

#: Most versions of one kernel (each is another copy of its code).
MAX_BUCKETS = 4


@dataclass
class Bucketed:
    """A kernel compiled per size bucket: ``func`` (the largest bucket's) and, smallest
    first, ``(condition, function)`` for the others; ``buckets`` as the records gave them."""

    func: PrimFunc
    variants: list[tuple[E.PrimExpr, PrimFunc]]
    buckets: list[SizeBucket]
    #: What the largest bucket's lowering returned besides its function (its facts).
    rest: Any


def buckets_of(overrides: Any, cfg: Any) -> list[SizeBucket]:
    """The size buckets the records in ``overrides`` give config ``cfg`` (a
    :class:`~tessera.plugin.space.ScheduleConfig` whose space names its run-time extents),
    at most :data:`MAX_BUCKETS` spread over the sizes tuned; [] when there are none."""
    find = getattr(overrides, "buckets", None)
    space = getattr(cfg, "space", None)
    if find is None or space is None or not space.extents:
        return []
    found = [b for b in find(cfg.key()) if all(t in space.extents for t, _ in b.sizes)]
    if len(found) > MAX_BUCKETS:
        step = (len(found) - 1) / (MAX_BUCKETS - 1)
        found = [found[round(i * step)] for i in range(MAX_BUCKETS)]
    return found


def measure(cfg: Any, bucket: SizeBucket) -> E.PrimExpr:
    """The product of the bucket's run-time extents, as an int64 expression of the sizes."""
    out: E.PrimExpr = E.IntImm(1, "int64")
    for text, _ in bucket.sizes:
        e = cfg.space.extents[text]
        out = out * (E.cast("int64", e) if e.dtype != "int64" else e)
    return out


def same_params(a: PrimFunc, b: PrimFunc) -> bool:
    """Whether two lowerings of a group take the same parameters (count, names, dtypes,
    shapes): versions of one kernel must, as they are called with the same arguments (a
    config that changes what the kernel reads, a Winograd convolution's transformed weights
    at another tile, makes another kernel, left out)."""
    return len(a.params) == len(b.params) and all(
        x.name == y.name and x.dtype == y.dtype and repr(x.shape) == repr(y.shape)
        for x, y in zip(a.params, b.params))


def bucketed(cfg: Any, buckets: list[SizeBucket],
             lower: Callable[[dict[str, dict[str, Any]]], tuple[PrimFunc, Any]],
             overrides: Any = None) -> Bucketed | None:
    """The group lowered once per bucket (``lower(overrides)`` returns the function and the
    rest of what the lowering made) and the conditions between them; None with fewer than
    one usable bucket. A bucket whose lowering takes other parameters is left out. Knob
    values a bucket gives that the template does not offer are noted in ``overrides``'
    ``ignored`` (the compile warns once about them, as for any record)."""
    ignored = getattr(overrides, "ignored", None)
    made: list[tuple[SizeBucket, PrimFunc, Any]] = []
    for b in buckets:
        func, rest = lower(ScheduleOverrides({cfg.key(): dict(b.knobs)}, ignored=ignored))
        if made and not same_params(made[0][1], func):
            continue
        made.append((b, func, rest))
    if not made:
        return None
    variants: list[tuple[E.PrimExpr, PrimFunc]] = []
    for (b, func, _), (nxt, _, _) in zip(made, made[1:]):
        limit = math.isqrt(b.size() * nxt.size())
        cond = E.LE(measure(cfg, b), E.IntImm(limit, "int64"))
        variants.append((cond, func))
    last = made[-1]
    return Bucketed(last[1], variants, [b for b, _, _ in made], last[2])
