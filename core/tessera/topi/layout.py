"""Layout transforms between NCHW and the channel-blocked NCHW[x]c layout.

``NCHW{c}c`` holds a 4-D (N, C, H, W) tensor as 5-D (N, C // c, H, W, c): channel ``ch`` lives
at ``[n, ch // c, h, w, ch % c]``. :func:`layout_transform` converts between ``"NCHW"`` and
any ``"NCHW{c}c"`` (also between two block sizes); the channel count must be a multiple of
every block size, except that a blocked-to-NCHW transform may keep only the first ``channels``
(dropping a padded last block's tail). Tag ``"injective,layout_transform"``, attrs
``src_layout``, ``dst_layout``.
"""

from __future__ import annotations

from typing import Any

from tessera import te, tir
from tessera.errors import OpError
from tessera.ops.layout import check_kept_channels, parse_layout
from tessera.topi.registry import register_compute
from tessera.topi.utils import add, dims_of, mul


def layout_transform(x: te.Tensor, src_layout: str, dst_layout: str,
                     channels: int = 0) -> te.Tensor:
    """``x`` (in ``src_layout``) rearranged into ``dst_layout``; to NCHW, ``channels`` (when
    not 0) keeps that many leading channels."""
    src, dst = parse_layout(src_layout), parse_layout(dst_layout)
    shape = dims_of(x)  # the channels are static; batch, height and width may be run-time
    if (src is None) != (len(shape) == 4) or len(shape) not in (4, 5):
        raise ValueError(f"layout_transform: input {list(shape)} does not have layout "
                         f"{src_layout}")
    n, c_outer, h, w = shape[:4]
    total = c_outer * (src or 1)
    if dst is not None and total % dst:
        raise ValueError(f"layout_transform: {total} channels are not a multiple of {dst}")
    try:
        kept = check_kept_channels(shape, src, dst, channels)
    except OpError as e:
        raise ValueError(str(e)) from e
    out_shape = (n, kept, h, w) if dst is None else (n, total // dst, h, w, dst)

    def body(*i: Any) -> tir.PrimExpr:
        if dst is None:
            ch = i[1]
        elif src == dst:
            return x[i]
        else:
            ch = add(mul(i[1], dst), i[4])
        if src is None:
            return x[i[0], ch, i[2], i[3]]
        if dst is None or src != dst:
            return x[i[0], ch // src, i[2], i[3], ch % src]
        raise AssertionError("unreachable")

    return te.compute(out_shape, body, name="layout_transform", tag="injective,layout_transform",
                      attrs={"src_layout": src_layout, "dst_layout": dst_layout,
                             "channels": kept if dst is None else 0})


def _supports(node: Any) -> str | None:
    try:
        src = parse_layout(node.attrs["src_layout"])
        dst = parse_layout(node.attrs["dst_layout"])
    except (KeyError, ValueError) as e:
        return str(e)
    shape = node.inputs[0].type.shape
    channels = shape[1] * (src or 1) if len(shape) >= 2 else 0
    if dst is not None and channels % dst:
        return f"{channels} channels are not a multiple of the block {dst}"
    try:
        check_kept_channels(shape, src, dst, int(node.attrs.get("channels") or 0))
    except OpError as e:
        return str(e)
    return None


@register_compute("LayoutTransform", supports=_supports)
def _layout_transform(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [layout_transform(inputs[0], attrs["src_layout"], attrs["dst_layout"],
                             int(attrs.get("channels") or 0))]


__all__ = ["layout_transform", "parse_layout"]
