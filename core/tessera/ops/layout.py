"""Ops: blocked ("NCHW{c}c") data layouts for CPU convolutions: ``LayoutTransform``,
``ConvNCHWc`` and ``PoolNCHWc``; column-panel weights for matrix products: ``MatMulPacked``.

A blocked tensor splits the channel axis of an NCHW tensor into ``C // c`` chunks of ``c``
channels and moves the chunk's channels innermost: NCHW ``(N, C, H, W)`` becomes NCHW{c}c
``(N, C // c, H, W, c)``, with ``blocked[n, k, h, w, j] == nchw[n, k * c + j, h, w]``. These ops
never come from a model; the layout pass (:mod:`tessera.kernel.alter_layout`) introduces them for
backends that vectorize over the channel block.

* ``LayoutTransform`` (``src_layout``, ``dst_layout`` in ``"NCHW"`` or ``"NCHW{c}c"``) converts
  between NCHW and a blocked layout, or between two block sizes. ``C % c == 0`` is required.
  From a blocked layout to NCHW, ``channels`` (0: all ``C1 * c``) keeps only the first
  ``channels`` channels: a blocked tensor with padding channels (a convolution whose output
  channels were padded to whole blocks) comes back with its real channel count.
* ``ConvNCHWc``: data ``(N, C // cd, H, W, cd)``, weight ``(OC // oc_bn, ICg // ic_bn, KH, KW,
  ic_bn, oc_bn)`` with ``ICg = C / group``, optional bias ``(OC // oc_bn, oc_bn)``; output
  ``(N, OC // oc_bn, OH, OW, oc_bn)``. Output channel ``o = oc_chunk * oc_bn + ob`` belongs to
  group ``g = o // (OC / group)`` and reads input channel ``ic = g * ICg + icc * ic_bn + ib``
  (``icc`` the weight's axis 1, ``ib`` its axis 4) at ``data[n, ic // cd, ih, iw, ic % cd]``.
  ``cd`` need not equal ``ic_bn``. Attributes as in ``Conv`` (2-D only): ``strides [sh, sw]``,
  ``pads [top, left, bottom, right]``, ``dilations [dh, dw]``, ``group``; ``None`` means the
  ONNX default (ones, zeros).
* ``PoolNCHWc``: a 5-D blocked input pooled over H and W, ``mode`` ``"max"`` or ``"avg"``, the
  attributes of ``MaxPool``/``AveragePool`` (``count_include_pad`` is used by ``avg`` only) and
  ``global_pool`` (1: pool the whole H x W, ``kernel_shape`` ignored); the output keeps the
  input's block size.

* ``MatMulPacked``: ``A (..., M, K)`` times a constant ``B (K, N)`` stored as column panels
  ``(N // nb, K, nb)``, which the CPU backend's GEMM micro-kernel streams contiguously.

The references unpack to NCHW, call the registry's NCHW reference and pack the result, so a
blocked graph computes exactly what its NCHW original does.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.aligned import aligned_empty
from tessera.ir.mapped import release_resident
from tessera.ir.types import TensorType
from tessera.ops.dtypes import check_float
from tessera.ops.registry import Attr, OpPattern, get_schema, register_op
from tessera.ops.spatial import conv_output_shape, spatial_params

_BLOCKED = re.compile(r"^NCHW(\d+)c$")


# -- layout names and (un)packing ----------------------------------------------------------------

def parse_layout(layout: str) -> int | None:
    """The block size of a layout name: ``None`` for ``"NCHW"``, ``c`` for ``"NCHW{c}c"``."""
    if layout == "NCHW":
        return None
    m = _BLOCKED.match(layout)
    if m is None or int(m.group(1)) <= 0:
        raise OpError(f"unknown layout {layout!r} (expected 'NCHW' or 'NCHW<c>c' with c > 0)")
    return int(m.group(1))


def layout_name(block: int | None) -> str:
    """The layout name for a block size (``None``: plain NCHW)."""
    return "NCHW" if block is None else f"NCHW{block}c"


def blocked_shape(shape: tuple[int, ...] | list[int], block: int,
                  op: str = "LayoutTransform") -> tuple[int, ...]:
    """``(N, C, H, W)`` -> ``(N, C // block, H, W, block)``; raises unless ``block`` divides C."""
    if len(shape) != 4:
        raise OpError(f"{op}: an NCHW tensor must be 4-D, got shape {list(shape)}")
    n, c, h, w = shape
    if c % block:
        raise OpError(f"{op}: {c} channels are not divisible by the block size {block}")
    return (n, c // block, h, w, block)


def unblocked_shape(shape: tuple[int, ...] | list[int],
                    op: str = "LayoutTransform") -> tuple[int, ...]:
    """``(N, C1, H, W, c)`` -> ``(N, C1 * c, H, W)``."""
    if len(shape) != 5:
        raise OpError(f"{op}: a blocked NCHWc tensor must be 5-D, got shape {list(shape)}")
    n, c1, h, w, c = shape
    return (n, c1 * c, h, w)


def pack_nchwc(x: np.ndarray, block: int) -> np.ndarray:
    """An NCHW array in the NCHW{block}c layout (a new contiguous array)."""
    n, c, h, w = blocked_shape(x.shape, block)[:4]
    return np.ascontiguousarray(x.reshape(n, c, block, h, w).transpose(0, 1, 3, 4, 2))


def unpack_nchwc(x: np.ndarray) -> np.ndarray:
    """A blocked NCHW{c}c array back in NCHW (a new contiguous array)."""
    shape = unblocked_shape(x.shape)
    return np.ascontiguousarray(x.transpose(0, 1, 4, 2, 3)).reshape(shape)


def pack_conv_weight(w: np.ndarray, ic_bn: int, oc_bn: int) -> np.ndarray:
    """An OIHW weight ``(OC, ICg, KH, KW)`` packed as ``(OC//oc_bn, ICg//ic_bn, KH, KW, ic_bn,
    oc_bn)``: ``packed[ocb, icb, kh, kw, ib, ob] == w[ocb*oc_bn + ob, icb*ic_bn + ib, kh, kw]``."""
    oc, icg, kh, kw = w.shape
    if oc % oc_bn or icg % ic_bn:
        raise OpError(f"ConvNCHWc: weight {list(w.shape)} does not split into ic_bn {ic_bn} and "
                      f"oc_bn {oc_bn} blocks")
    blocks = w.reshape(oc // oc_bn, oc_bn, icg // ic_bn, ic_bn, kh, kw)
    packed = np.ascontiguousarray(blocks.transpose(0, 2, 4, 5, 3, 1))
    release_resident(w)  # a weight mapped from its file: the packed copy is what stays
    return packed


def unpack_conv_weight(w: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_conv_weight`: OIHW ``(OC, ICg, KH, KW)``."""
    ocb, icb, kh, kw, ic_bn, oc_bn = w.shape
    return np.ascontiguousarray(w.transpose(0, 5, 1, 4, 2, 3)).reshape(
        ocb * oc_bn, icb * ic_bn, kh, kw)


# -- LayoutTransform -----------------------------------------------------------------------------

def check_kept_channels(shape: tuple[int, ...] | list[int], src: int | None, dst: int | None,
                        channels: int, op: str = "LayoutTransform") -> int:
    """The channel count a transform of a ``shape`` tensor from block ``src`` to ``dst`` keeps
    (``channels``, or all when 0); raises unless it is a blocked-to-NCHW transform and
    ``channels`` at most the input's."""
    total = shape[1] * (src or 1) if len(shape) >= 2 else 0
    if not channels:
        return total
    if src is None or dst is not None:
        raise OpError(f"{op}: channels={channels} applies only from a blocked layout to NCHW")
    if not 0 < channels <= total:
        raise OpError(f"{op}: channels={channels} must be between 1 and the input's {total} "
                      f"channels")
    return channels


def _layout_transform_infer(x: TensorType, *, src_layout: str, dst_layout: str,
                            channels: int) -> TensorType:
    op = "LayoutTransform"
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    nchw = x.shape if src is None else unblocked_shape(x.shape, op)
    if src is None and x.ndim != 4:
        raise OpError(f"{op}: an NCHW input must be 4-D, got {x}")
    if src is not None and x.shape[4] != src:
        raise OpError(f"{op}: input {x} is not in layout {src_layout} (block {x.shape[4]})")
    kept = check_kept_channels(x.shape, src, dst, channels, op)
    out = (nchw[0], kept, *nchw[2:]) if dst is None else blocked_shape(nchw, dst, op)
    return x.with_shape(tuple(out))


@register_op("LayoutTransform", attrs={"src_layout": Attr.str(), "dst_layout": Attr.str(),
                                       "channels": Attr.int(0)},
             infer=_layout_transform_infer, pattern=OpPattern.INJECTIVE)
def layout_transform(x: np.ndarray, *, src_layout: str, dst_layout: str,
                     channels: int = 0) -> np.ndarray:
    """Convert between NCHW and NCHW{c}c (or between two block sizes); ``channels`` keeps the
    first channels of a blocked-to-NCHW transform."""
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    nchw = x if src is None else unpack_nchwc(x)
    if dst is None:
        if channels:
            nchw = nchw[:, :channels]
        return np.ascontiguousarray(nchw)
    return pack_nchwc(nchw, dst)


# -- ConvNCHWc -----------------------------------------------------------------------------------

_CONV_ATTRS = {
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "group": Attr.int(1),
    # a code-generation hint, not semantics: 1 asks for the compute over flattened output
    # pixels (see tessera.topi.nn.conv2d_NCHWc), which a CPU backend sets for outputs whose
    # rows its register tiles do not divide
    "flat_spatial": Attr.int(0),
}


def _conv_nchwc_infer(x: TensorType, w: TensorType, b: TensorType | None = None, *,
                      strides: list[int] | None, pads: list[int] | None,
                      dilations: list[int] | None, group: int,
                      flat_spatial: int = 0) -> TensorType:
    op = "ConvNCHWc"
    check_float(x, op)
    if x.ndim != 5:
        raise OpError(f"{op}: data must be 5-D (N, C//c, H, W, c), got {x}")
    if w.ndim != 6:
        raise OpError(f"{op}: weight must be 6-D (OC//oc_bn, ICg//ic_bn, KH, KW, ic_bn, oc_bn), "
                      f"got {w}")
    _, s, p, d = spatial_params(2, None, strides, pads, dilations, op)
    n, c1, h, wd, cd = x.shape
    c = c1 * cd
    ocb, icb, kh, kw, ic_bn, oc_bn = w.shape
    oc, icg = ocb * oc_bn, icb * ic_bn
    if group <= 0 or c % group or oc % group:
        raise OpError(f"{op}: group {group} must divide input channels {c} and output channels "
                      f"{oc}")
    if icg * group != c:
        raise OpError(f"{op}: weight {w} expects {icg * group} input channels (group {group}), "
                      f"the data {x} has {c}")
    if b is not None and b.shape != (ocb, oc_bn):
        raise OpError(f"{op}: bias {b} must have shape [{ocb}, {oc_bn}]")
    oh, ow = conv_output_shape((h, wd), (kh, kw), s, p, d, op)
    return TensorType((n, ocb, oh, ow, oc_bn), x.dtype)


@register_op("ConvNCHWc", attrs=_CONV_ATTRS, inputs=(2, 3), infer=_conv_nchwc_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def conv_nchwc(x: np.ndarray, w: np.ndarray, b: np.ndarray | None = None, *,
               strides: list[int] | None, pads: list[int] | None, dilations: list[int] | None,
               group: int, flat_spatial: int = 0) -> np.ndarray:
    """2-D grouped convolution on blocked data with a packed weight (see the module doc);
    ``flat_spatial`` changes only how generated code is organised."""
    oc_bn = w.shape[5]
    y = get_schema("Conv").reference(
        unpack_nchwc(x), unpack_conv_weight(w), None if b is None else b.reshape(-1),
        kernel_shape=None, strides=strides, pads=pads, dilations=dilations, group=group)
    return pack_nchwc(y, oc_bn)


# -- PoolNCHWc -----------------------------------------------------------------------------------

_POOL_ATTRS = {
    "mode": Attr.str(),
    "kernel_shape": Attr.ints(None),
    "strides": Attr.ints(None),
    "pads": Attr.ints(None),
    "dilations": Attr.ints(None),
    "ceil_mode": Attr.int(0),
    "count_include_pad": Attr.int(0),
    "global_pool": Attr.int(0),
}


def _nchw_pool(mode: str, global_pool: int, kernel_shape: list[int] | None,
               strides: list[int] | None, pads: list[int] | None, dilations: list[int] | None,
               ceil_mode: int, count_include_pad: int) -> tuple[str, dict[str, Any]]:
    """The NCHW pooling op and attributes a PoolNCHWc stands for."""
    if mode not in ("max", "avg"):
        raise OpError(f"PoolNCHWc: mode must be 'max' or 'avg', got {mode!r}")
    if global_pool:
        return ("GlobalMaxPool" if mode == "max" else "GlobalAveragePool"), {}
    if kernel_shape is None:
        raise OpError("PoolNCHWc: kernel_shape is required unless global_pool is set")
    attrs: dict[str, Any] = {"kernel_shape": kernel_shape, "strides": strides, "pads": pads,
                             "dilations": dilations, "ceil_mode": ceil_mode}
    if mode == "max":
        return "MaxPool", {**attrs, "storage_order": 0}
    return "AveragePool", {**attrs, "count_include_pad": count_include_pad}


def _pool_nchwc_infer(x: TensorType, *, mode: str, global_pool: int, **attrs: Any) -> TensorType:
    op = "PoolNCHWc"
    if x.ndim != 5:
        raise OpError(f"{op}: input must be 5-D (N, C//c, H, W, c), got {x}")
    name, nchw_attrs = _nchw_pool(mode, global_pool, **attrs)
    if not global_pool and len(nchw_attrs["kernel_shape"]) != 2:
        raise OpError(f"{op}: kernel_shape {nchw_attrs['kernel_shape']} must be 2-D")
    block = x.shape[4]
    result = get_schema(name).infer(x.with_shape(unblocked_shape(x.shape, op)), **nchw_attrs)
    y = result[0] if isinstance(result, (tuple, list)) else result
    return y.with_shape(blocked_shape(y.shape, block, op))


@register_op("PoolNCHWc", attrs=_POOL_ATTRS, infer=_pool_nchwc_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def pool_nchwc(x: np.ndarray, *, mode: str, kernel_shape: list[int] | None,
               strides: list[int] | None, pads: list[int] | None, dilations: list[int] | None,
               ceil_mode: int, count_include_pad: int, global_pool: int) -> np.ndarray:
    """Max or average pooling (windowed or global) over H and W of a blocked tensor."""
    name, attrs = _nchw_pool(mode, global_pool, kernel_shape, strides, pads, dilations,
                             ceil_mode, count_include_pad)
    y = get_schema(name).evaluate([unpack_nchwc(x)], attrs)[0]
    return pack_nchwc(y, x.shape[4])


__all__ = [
    "blocked_shape", "layout_name", "pack_conv_weight", "pack_nchwc", "parse_layout",
    "unblocked_shape", "unpack_conv_weight", "unpack_nchwc",
]


# -- MatMulPacked ---------------------------------------------------------------------------------

def pack_matmul_weight(b: np.ndarray, nb: int) -> np.ndarray:
    """``(K, N)`` -> column panels ``(N // nb, K, nb)``: ``packed[p, k, j] == b[k, p*nb + j]``."""
    k, n = b.shape
    if nb <= 0 or n % nb:
        raise OpError(f"MatMulPacked: panel width {nb} does not divide {n} columns")
    out = aligned_empty((n // nb, k, nb), b.dtype)  # kept as it is by the llvm backend
    # a few MiB of rows at a time: of a weight mapped from its file (tessera.ir.mapped) only
    # the rows being packed are resident, the panels are what stays
    rows = max(1, (8 << 20) // max(1, n * b.dtype.itemsize))
    for k0 in range(0, k, rows):
        part = b[k0:k0 + rows]
        out[:, k0:k0 + rows, :] = part.reshape(part.shape[0], n // nb, nb).transpose(1, 0, 2)
        release_resident(part)
    return out


def pair_words(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """Integers that fit int16 with an even extent along ``axis``, as int32 words of two
    consecutive ones along it (the first in the low half), the layout
    :func:`tessera.tir.dot_product.pack_pair` builds: the extent along ``axis`` halves."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    if x.shape[-1] % 2:
        raise ValueError(f"pair_words: the extent {x.shape[-1]} is odd")
    words = np.ascontiguousarray(x.astype(np.int16)).view("<i4")
    return np.ascontiguousarray(np.moveaxis(words, -1, axis))


def unpair_words(w: np.ndarray, axis: int = -1) -> np.ndarray:
    """The inverse of :func:`pair_words`: int16 values, the extent along ``axis`` doubled."""
    w = np.ascontiguousarray(np.moveaxis(np.asarray(w, np.int32), axis, -1))
    return np.moveaxis(w.view("<i2"), -1, axis)


def quad_words(x: np.ndarray, axis: int = -1) -> np.ndarray:
    """8-bit integers with an extent along ``axis`` divisible by 4, as int32 words of four
    consecutive ones along it (the first in the low byte), the layout
    :func:`tessera.tir.dot_product.pack_bytes` builds: the extent along ``axis`` quarters."""
    x = np.moveaxis(np.asarray(x), axis, -1)
    if x.dtype not in (np.int8, np.uint8) or x.shape[-1] % 4:
        raise ValueError(f"quad_words: {x.dtype} with extent {x.shape[-1]}: 8-bit values whose "
                         "extent is a multiple of 4 expected")
    words = np.ascontiguousarray(x).view("<i4")
    return np.ascontiguousarray(np.moveaxis(words, -1, axis))


def unquad_words(w: np.ndarray, dtype: np.dtype | type, axis: int = -1) -> np.ndarray:
    """The inverse of :func:`quad_words`: ``dtype`` (int8 or uint8) values, the extent along
    ``axis`` four times as long."""
    w = np.ascontiguousarray(np.moveaxis(np.asarray(w, np.int32), axis, -1))
    return np.moveaxis(w.view(np.dtype(dtype)), -1, axis)


def unpack_matmul_weight(bp: np.ndarray) -> np.ndarray:
    """The inverse of :func:`pack_matmul_weight`: ``(K, N)``."""
    panels, k, nb = bp.shape
    return np.ascontiguousarray(bp.transpose(1, 0, 2)).reshape(k, panels * nb)


def check_packed_operands(a: TensorType, bp: TensorType, op: str) -> int:
    """Refuse an ``A`` and column panels ``bp`` (N//nb, K, nb) that do not multiply; the
    product's columns ``N``."""
    if a.ndim < 2 or bp.ndim != 3:
        raise OpError(f"{op}: A must be at least 2-D and the packed B 3-D (N//nb, K, nb), got "
                      f"{a} and {bp}")
    if a.shape[-1] != bp.shape[1]:
        raise OpError(f"{op}: A {a} has {a.shape[-1]} columns, packed B {bp} has K = "
                      f"{bp.shape[1]}")
    return int(bp.shape[0] * bp.shape[2])


def _matmul_packed_infer(a: TensorType, bp: TensorType) -> TensorType:
    op = "MatMulPacked"
    check_float(a, op)
    check_packed_operands(a, bp, op)
    if a.dtype != bp.dtype:
        raise OpError(f"{op}: A is {a.dtype}, B is {bp.dtype}")
    return TensorType((*a.shape[:-1], bp.shape[0] * bp.shape[2]), a.dtype)


@register_op("MatMulPacked", inputs=2, infer=_matmul_packed_infer,
             pattern=OpPattern.OUT_ELEMWISE_FUSABLE)
def matmul_packed(a: np.ndarray, bp: np.ndarray) -> np.ndarray:
    """``A (..., M, K) x B (K, N)`` with B stored as column panels ``(N // nb, K, nb)`` (a
    constant packed at compile time so a micro-kernel reads each panel contiguously)."""
    return np.matmul(a, unpack_matmul_weight(bp)).astype(a.dtype, copy=False)
