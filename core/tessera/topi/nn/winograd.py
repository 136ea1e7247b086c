"""Winograd convolution F(m x m, 3 x 3) in the blocked NCHWc layout (TVM's
``conv2d_NCHWc_winograd``; Lavin and Gray, "Fast Algorithms for Convolutional Neural
Networks", 2016).

A 3x3, stride-1, dilation-1, group-1 convolution computes each ``m x m`` output tile from an
``alpha x alpha`` input tile (``alpha = m + 2``) as ``Y = A^T [(G g G^T) * (B^T d B)] A``: the
kernel ``g`` transformed once (:func:`winograd_weight_transform`, done at compile time on the
constant weights), the input tile ``d`` transformed per tile, an element-wise product summed
over input channels (for each of the ``alpha^2`` positions a matrix product ``tiles x in
channels x out channels``: the hot part), and the output transform. F(2x2, 3x3) does 2.25 times
fewer multiplications than the direct convolution, F(4x4, 3x3) 4 times fewer; both round
differently from the direct sum (see :data:`WINOGRAD_TILES`).

Stages of :func:`conv2d_winograd_NCHWc` (tags in quotes; the schedule finds them by tag):

* ``data_pad`` (``"injective,pad"``): the input padded to whole tiles, ``(N, ICC, tH*m + 2,
  tW*m + 2, ib)``; absent when no padding is needed;
* ``"winograd_input_rows"`` ``(ICC, P, alpha, alpha, ib)``: ``B^T d`` per tile (rows);
* ``"winograd_input"`` ``V (alpha, alpha, ICC, P, ib)``: ``(B^T d) B``;
* ``"winograd_gemm"`` ``M (alpha, alpha, OCC, P, ob)``: the sum over ``icc, ib`` of ``V * U``
  with ``U (alpha, alpha, OCC, ICC, ib, ob)`` the transformed weights;
* ``"winograd_output_rows"`` ``(N, OCC, tH, tW, m, alpha, ob)``: ``A^T M`` per tile;
* ``"conv2d_NCHWc_winograd"`` ``(N, OCC, OH, OW, ob)``: ``(A^T M) A``, the convolution's
  output (the epilogue reads it).

The tiles ``p = (n * tH + th) * tW + tw`` are numbered over the batch and both spatial tile
axes, rounded up to ``P`` (a multiple of ``tile_multiple``, so a schedule's register tile over
tiles needs no tail); the extra tiles repeat the last one and are never read. Over a run-time
batch, height or width the tile rows, columns and count are expressions of the sizes (the
count not rounded up: a schedule's register tile over it has a run-time tail) and the input is
padded ``m - 1`` rows and columns past the convolution's own padding (enough for the partial
last tiles); the output stage covers exactly the output. Every transform
is written out term by term from the matrices (no multiplication by 0 or 1): the element a
stage computes is picked by a ``select`` on its transform index, which folds away once the
schedule unrolls that index.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera import te, tir
from tessera.ir.types import DType
from tessera.ops.spatial import conv_output_shape
from tessera.topi.nn.conv2d import conv_output_dims, expand_pads
from tessera.topi.transform import pad
from tessera.topi.utils import (
    Dim,
    add,
    as_dim,
    cast,
    compute_dtype,
    dim_prod,
    dims_of,
    is_static,
    mul,
    named_axes,
    read,
    shape_of,
)

Expr = tir.PrimExpr

#: Output tile sizes with their matrices. Observed float32 error against a float64 reference,
#: as ``max |y - y64| / max |y64|`` (random normal data, 64 to 512 input channels;
#: plugins/llvm/tests/test_winograd.py): F(2x2, 3x3) 3e-7 to 9e-7, below the direct convolution's
#: 7e-7 to 2.4e-6 (its sums are 9 times shorter); F(4x4, 3x3) (points 0, +-1, +-2) 4e-6 to
#: 2.3e-5, about 5 to 10 times the direct convolution's.
WINOGRAD_TILES = (2, 4)

_F2 = (
    # A^T (m x alpha), G (alpha x 3), B^T (alpha x alpha)
    [[1, 1, 1, 0],
     [0, 1, -1, -1]],
    [[1, 0, 0],
     [0.5, 0.5, 0.5],
     [0.5, -0.5, 0.5],
     [0, 0, 1]],
    [[1, 0, -1, 0],
     [0, 1, 1, 0],
     [0, -1, 1, 0],
     [0, 1, 0, -1]],
)

_F4 = (
    [[1, 1, 1, 1, 1, 0],
     [0, 1, -1, 2, -2, 0],
     [0, 1, 1, 4, 4, 0],
     [0, 1, -1, 8, -8, 1]],
    [[1 / 4, 0, 0],
     [-1 / 6, -1 / 6, -1 / 6],
     [-1 / 6, 1 / 6, -1 / 6],
     [1 / 24, 1 / 12, 1 / 6],
     [1 / 24, -1 / 12, 1 / 6],
     [0, 0, 1]],
    [[4, 0, -5, 0, 1, 0],
     [0, -4, -4, 1, 1, 0],
     [0, 4, -4, -1, 1, 0],
     [0, -2, -1, 2, 1, 0],
     [0, 2, -1, -2, 1, 0],
     [0, 4, 0, -5, 0, 1]],
)


def winograd_matrices(m: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(A^T, G, B^T)`` of F(m x m, 3 x 3) in float64: ``A^T`` is ``m x alpha``, ``G``
    ``alpha x 3`` and ``B^T`` ``alpha x alpha`` with ``alpha = m + 2``."""
    table = {2: _F2, 4: _F4}
    if m not in table:
        raise ValueError(f"winograd: output tile {m} not supported (one of {WINOGRAD_TILES})")
    return tuple(np.array(x, dtype=np.float64) for x in table[m])  # type: ignore[return-value]


def winograd_weight_transform(kernel: np.ndarray, m: int) -> np.ndarray:
    """The packed 3x3 weights ``(OCC, ICC, 3, 3, ib, ob)`` (:func:`tessera.ops.layout.
    pack_conv_weight`) transformed to ``U = G g G^T`` as ``(alpha, alpha, OCC, ICC, ib, ob)``,
    computed in float64 and stored in the weights' dtype."""
    k = np.asarray(kernel)
    if k.ndim != 6 or k.shape[2:4] != (3, 3):
        raise ValueError(f"winograd: weights {list(k.shape)} are not packed 3x3 weights")
    _, g, _ = winograd_matrices(m)
    u = np.einsum("er,abrsio,ns->enabio", g, k.astype(np.float64), g, optimize=True)
    return np.ascontiguousarray(u.astype(k.dtype))


def _combination(coeffs: Sequence[float], terms: Sequence[Expr], dtype: str) -> Expr:
    """``sum(c * t)`` without the zero terms, ``1 * t`` and ``-1 * t`` as plain adds and
    subtractions."""
    out: Expr | None = None
    # positive terms first, so that no sum starts with a negation
    pairs = sorted(((c, t) for c, t in zip(coeffs, terms) if c != 0), key=lambda ct: ct[0] < 0)
    for c, t in pairs:
        negative = c < 0
        mag = abs(float(c))
        val = t if mag == 1.0 else t * tir.FloatImm(mag, dtype)
        if out is None:
            out = -val if negative else val  # type: ignore[operator]
        else:
            out = out - val if negative else out + val
    return out if out is not None else tir.FloatImm(0.0, dtype)


def _pick(index: Any, values: list[Expr]) -> Expr:
    """``values[index]`` as a chain of selects on the index (folds once it is a constant)."""
    out = values[-1]
    for k in range(len(values) - 2, -1, -1):
        out = tir.select(tir.eq(index, k), values[k], out)
    return out


def winograd_tiles(batch: int, oh: int, ow: int, m: int, multiple: int = 1) -> tuple[int, int, int]:
    """``(tH, tW, P)``: tile rows and columns and the tile count, rounded up to ``multiple``."""
    th, tw = -(-oh // m), -(-ow // m)
    count = batch * th * tw
    return th, tw, -(-count // multiple) * multiple


def conv2d_winograd_NCHWc(data: te.Tensor, weight: te.Tensor,  # noqa: N802
                          pads: int | Sequence[int] = 0, m: int = 2,
                          tile_multiple: int = 1, out_dtype: str | None = None,
                          attrs: dict[str, Any] | None = None) -> te.Tensor:
    """A 3x3, stride-1 convolution of blocked ``data (N, ICC, H, W, ib)`` with transformed
    weights ``weight (alpha, alpha, OCC, ICC, ib, ob)`` (:func:`winograd_weight_transform`):
    output ``(N, OCC, OH, OW, ob)``. See the module doc for the stages; ``attrs`` are added to
    the output stage's attrs (a backend's facts about the direct convolution it replaces), on
    top of ``pads``, ``tile`` (m), ``tiles`` ``(tH, tW, P)``, ``out_hw``, ``out_dtype``."""
    if not is_static(dims_of(data)):
        return _conv2d_winograd_runtime(data, weight, pads, m, out_dtype, attrs)
    dshape, wshape = shape_of(data), shape_of(weight)
    alpha = m + 2
    if len(dshape) != 5 or len(wshape) != 6 or wshape[:2] != (alpha, alpha):
        raise ValueError(f"conv2d_winograd_NCHWc: data {list(dshape)} must be 5-D and weight "
                         f"{list(wshape)} ({alpha}, {alpha}, OCC, ICC, ib, ob)")
    batch, icc_n, h, w, ib_n = dshape
    _, _, occ_n, wicc, wib, ob_n = wshape
    if (wicc, wib) != (icc_n, ib_n):
        raise ValueError(f"conv2d_winograd_NCHWc: weight {list(wshape)} does not fit data "
                         f"{list(dshape)}")
    acc = out_dtype or data.dtype
    p = expand_pads(pads, 2)
    oh, ow = conv_output_shape([h, w], [3, 3], [1, 1], p, [1, 1])
    t_h, t_w, tiles = winograd_tiles(batch, oh, ow, m, tile_multiple)
    real = batch * t_h * t_w
    # pad to whole tiles: (tH - 1) * m + alpha rows and columns
    ph, pw = t_h * m + 2, t_w * m + 2
    after_h, after_w = ph - h - p[0], pw - w - p[1]
    padded = data
    if any(p[:2]) or after_h or after_w:
        padded = pad(data, [0, 0, p[0], p[1], 0], [0, 0, after_h, after_w, 0], 0,
                     name="data_pad")

    def tile_origin(tile: Any) -> tuple[Expr, Expr, Expr]:
        t = tir.min_(tile, real - 1) if tiles > real else tile
        n = t // (t_h * t_w) if batch > 1 else tir.const(0)
        return n, (t // t_w) % t_h, t % t_w

    info = {"pads": tuple(p), "tile": m, "tiles": (t_h, t_w, tiles), "out_hw": (oh, ow),
            "out_dtype": acc, "data": data, "data_pad": padded if padded is not data else None,
            "kernel": weight, "strides": (1, 1), "dilation": (1, 1), "kernel_size": (3, 3),
            "groups": 1, **(attrs or {})}
    return _winograd_stages(padded, weight, tile_origin,
                            (batch, icc_n, ib_n, occ_n, ob_n, t_h, t_w, tiles, oh, ow), m, acc,
                            info)


def _winograd_stages(padded: te.Tensor, weight: te.Tensor,
                     tile_origin: Callable[[Any], tuple[Expr, Expr, Expr]],
                     dims: tuple[Dim, ...], m: int, acc: str,
                     info: dict[str, Any]) -> te.Tensor:
    """The stages after the padding, shared by the static and the run-time forms: the input
    transform (rows, then columns) of each tile of ``padded`` (``tile_origin``: a tile's image,
    tile row and tile column), the batched product with ``weight``, the output transform;
    ``dims`` are ``(batch, ICC, ib, OCC, ob, tH, tW, P, OH, OW)``; ``info`` the output
    stage's attrs."""
    batch, icc_n, ib_n, occ_n, ob_n, t_h, t_w, tiles, oh, ow = dims
    alpha = m + 2
    at, _, bt = winograd_matrices(m)

    def rows_body(icc: Any, tile: Any, eps: Any, s: Any, ib: Any) -> Expr:
        n, th, tw = tile_origin(tile)
        col = add(mul(tw, m), s)
        terms = [cast(padded[n, icc, add(mul(th, m), r), col, ib], acc) for r in range(alpha)]
        return _pick(eps, [_combination(bt[e], terms, acc) for e in range(alpha)])

    rows = te.compute((icc_n, tiles, alpha, alpha, ib_n),
                      named_axes(rows_body, ["icc", "tile", "eps", "s", "ib"]),
                      name="winograd_input_rows", tag="winograd_input_rows")

    def input_body(eps: Any, nu: Any, icc: Any, tile: Any, ib: Any) -> Expr:
        terms = [rows[icc, tile, eps, s, ib] for s in range(alpha)]
        return _pick(nu, [_combination(bt[k], terms, acc) for k in range(alpha)])

    v = te.compute((alpha, alpha, icc_n, tiles, ib_n),
                   named_axes(input_body, ["eps", "nu", "icc", "tile", "ib"]),
                   name="winograd_input", tag="winograd_input")
    rc = te.reduce_axis((0, icc_n), name="icc")
    rb = te.reduce_axis((0, ib_n), name="ib")

    def gemm_body(eps: Any, nu: Any, occ: Any, tile: Any, ob: Any) -> Expr:
        return te.sum(v[eps, nu, rc, tile, rb] * cast(weight[eps, nu, occ, rc, rb, ob], acc),
                      axis=[rc, rb])

    prod = te.compute((alpha, alpha, occ_n, tiles, ob_n),
                      named_axes(gemm_body, ["eps", "nu", "occ", "tile", "ob"]),
                      name="winograd_gemm", tag="winograd_gemm",
                      attrs={"tile": m, "reduce_roles": ("icc", "ib")})

    def out_rows_body(n: Any, occ: Any, th: Any, tw: Any, mh: Any, nu: Any, ob: Any) -> Expr:
        tile = add(mul(add(mul(n, t_h), th), t_w), tw)
        terms = [prod[e, nu, occ, tile, ob] for e in range(alpha)]
        return _pick(mh, [_combination(at[k], terms, acc) for k in range(m)])

    out_rows = te.compute((batch, occ_n, t_h, t_w, m, alpha, ob_n),
                          named_axes(out_rows_body, ["n", "occ", "th", "tw", "mh", "nu", "ob"]),
                          name="winograd_output_rows", tag="winograd_output_rows")

    def out_body(n: Any, occ: Any, y: Any, x: Any, ob: Any) -> Expr:
        terms = [out_rows[n, occ, y // m, x // m, y % m, nu, ob] for nu in range(alpha)]
        return _pick(x % m, [_combination(at[k], terms, acc) for k in range(m)])

    return te.compute((batch, occ_n, oh, ow, ob_n),
                      named_axes(out_body, ["n", "oc_chunk", "oh", "ow", "oc_block"]),
                      name="conv2d_NCHWc_winograd", tag="conv2d_NCHWc_winograd", attrs=info)


def _ceil_dim(d: Dim, f: int) -> Dim:
    """``ceil(d / f)`` of a dimension (an int when ``d`` is)."""
    if isinstance(d, int):
        return -(-d // f)
    return as_dim((tir.convert(d, "int64") + (f - 1)) // f)


def _conv2d_winograd_runtime(data: te.Tensor, weight: te.Tensor, pads: int | Sequence[int],
                             m: int, out_dtype: str | None,
                             attrs: dict[str, Any] | None) -> te.Tensor:
    """:func:`conv2d_winograd_NCHWc` over run-time batch, height or width (index
    expressions): the tile rows and columns are ceil-divisions of the output's size
    expressions, the input is padded past whole tiles (the partial last tiles read zeros), the
    tile count ``P`` is the real one (``tile_multiple`` unused), and the output stage covers
    exactly the output, so a schedule that splits it into ``m x m`` tiles stores only the
    pixels inside."""
    dshape, wshape = dims_of(data), shape_of(weight)
    alpha = m + 2
    if len(dshape) != 5 or len(wshape) != 6 or wshape[:2] != (alpha, alpha):
        raise ValueError(f"conv2d_winograd_NCHWc: data {list(dshape)} must be 5-D and weight "
                         f"{list(wshape)} ({alpha}, {alpha}, OCC, ICC, ib, ob)")
    batch, icc_n, h, w, ib_n = dshape
    _, _, occ_n, wicc, wib, ob_n = wshape
    if (wicc, wib) != (icc_n, ib_n):
        raise ValueError(f"conv2d_winograd_NCHWc: weight {list(wshape)} does not fit data "
                         f"{list(dshape)}")
    acc = out_dtype or data.dtype
    p = expand_pads(pads, 2)
    oh, ow = conv_output_dims([h, w], [3, 3], [1, 1], p, [1, 1])
    t_h, t_w = _ceil_dim(oh, m), _ceil_dim(ow, m)
    # the tiles are not rounded up (``tile_multiple`` unused): a schedule's register tile
    # over them has a run-time tail (tessera_llvm's winograd schedule specialises it)
    tiles = dim_prod([batch, t_h, t_w])
    # padded to at least whole tiles, (tH - 1) * m + alpha rows: the last tile reaches
    # ``tH * m - OH <= m - 1`` rows past the output, so a constant ``m - 1`` more than the
    # convolution's own padding after suffices (and keeps the extents free of ceil-divisions)
    padded = pad(data, [0, 0, p[0], p[1], 0], [0, 0, p[2] + m - 1, p[3] + m - 1, 0], 0,
                 name="data_pad")
    per_image = dim_prod([t_h, t_w])

    def tile_origin(tile: Any) -> tuple[Expr, Expr, Expr]:
        n = tile // per_image if not (isinstance(batch, int) and batch == 1) else tir.const(0)
        return n, (tile // t_w) % t_h, tile % t_w

    info = {"pads": tuple(p), "tile": m, "tiles": (t_h, t_w, tiles), "out_hw": (oh, ow),
            "out_dtype": acc, "data": data, "data_pad": padded, "kernel": weight,
            "strides": (1, 1), "dilation": (1, 1), "kernel_size": (3, 3), "groups": 1,
            **(attrs or {})}
    return _winograd_stages(padded, weight, tile_origin,
                            (batch, icc_n, ib_n, occ_n, ob_n, t_h, t_w, tiles, oh, ow), m, acc,
                            info)


def conv_nchwc_winograd(inputs: list[Any], attrs: dict[str, Any],
                        out_types: list[Any]) -> list[te.Tensor] | None:
    """A backend's compute of ``ConvNCHWc`` (``build_te(computes=...)``) for nodes whose
    weight a backend replaced by :func:`winograd_weight_transform`'s and whose attrs say
    ``winograd_tile`` (m) and ``winograd_multiple`` (the tile count's rounding); None for
    other nodes. The bias is added by a following ``"broadcast"`` stage, as for the direct
    convolution. The output stage's attrs also carry the direct convolution's facts a
    schedule's config space reads: ``reduce_extents`` ``(ICC, 3, 3, ib)``,
    ``block_weight_bytes`` (one output block's untransformed weights), ``flat_spatial``,
    ``ic_bn``, ``oc_bn``, ``data_block``."""
    m = attrs.get("winograd_tile")
    if not m:
        return None
    x, w = inputs[0], inputs[1]
    b = inputs[2] if len(inputs) > 2 else None
    acc = compute_dtype(x.dtype)
    _, _, _, icc, ib, ob = shape_of(w)
    facts = {"reduce_extents": (icc, 3, 3, ib),
             "block_weight_bytes": icc * 9 * ib * ob * DType(w.dtype).itemsize,
             "flat_spatial": bool(attrs.get("flat_spatial", False)),
             "ic_bn": ib, "oc_bn": ob, "data_block": dims_of(x)[4], "layout": f"NCHW{ib}c"}
    y = conv2d_winograd_NCHWc(x, w, attrs.get("pads") or 0, int(m),
                              int(attrs.get("winograd_multiple", 1)), acc, facts)
    out = out_types[0].dtype.value
    if b is not None:
        def body(n: Any, c: Any, h: Any, ww: Any, cb: Any) -> Expr:
            return cast(y[n, c, h, ww, cb] + cast(read(b, [c, cb]), acc), out)

        return [te.compute(y.shape, body, name="bias_add", tag="broadcast")]
    if y.dtype != out:
        return [te.compute(y.shape, lambda *i: cast(y[i], out), name="conv_cast",
                           tag="elemwise")]
    return [y]


__all__ = ["WINOGRAD_TILES", "conv2d_winograd_NCHWc", "conv_nchwc_winograd", "winograd_matrices",
           "winograd_tiles", "winograd_weight_transform"]
