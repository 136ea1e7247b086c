"""Compute of ``BitCast`` where it is a plain integer conversion, for code-generating backends.

Between integer types of one width (``int32`` <-> ``uint32``, ...) and from ``bool`` to an
8-bit integer, reinterpreting the bits is what ``Cast`` does (same-width integer conversion
wraps; a bool's byte is 0 or 1), so those bit casts use ``Cast``'s compute. Bit casts that
involve a float, or that make a ``bool`` from an arbitrary byte, have no compute: the backends
leave them to the reference backend.
"""

from __future__ import annotations

from tessera.ir.graph import Node
from tessera.ir.types import DType
from tessera.te import tensor as te
from tessera.topi.elemwise import cast_to
from tessera.topi.registry import register_compute


def bitcast_supported(node: Node) -> str | None:
    """None when the node's bit cast is an integer conversion, else why it has no compute."""
    src, dst = node.inputs[0].type.dtype, node.outputs[0].type.dtype
    if dst == DType.bool or not dst.is_int or not (src.is_int or src == DType.bool):
        return f"BitCast from {src} to {dst} is not an integer conversion"
    return None


@register_compute("BitCast", supports=bitcast_supported)
def _bitcast(inputs: list, attrs: dict, out_types: list) -> list[te.Tensor]:
    return [cast_to(inputs[0], out_types[0].dtype.value)]


__all__ = ["bitcast_supported"]
