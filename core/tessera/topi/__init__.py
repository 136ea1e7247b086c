"""Operator compute definitions (TVM's ``topi``): tensor expressions for each graph op, shared by
the code-generating backends.

``tessera.topi.nn`` holds the network layers (``topi.nn.conv2d_nchw``, ``topi.nn.dense``, ...),
the other modules the elementwise, broadcast, reduction and data-movement computes;
:mod:`~tessera.topi.registry` binds graph ops to them and :func:`build_te` turns a group of graph
nodes into one TE graph. Computes carry tags (:mod:`~tessera.topi.tag`) and schedule facts in
their attrs; they contain no schedules.
"""

from tessera.topi import (
    bitcast,
    broadcast,
    elemwise,
    image,
    layout,
    nn,
    reduction,
    registry,
    size_values,
    tag,
    transform,
)
from tessera.topi.from_graph import GroupTE, build_te
from tessera.topi.registry import (
    compute_for,
    has_compute,
    register_compute,
    registered_ops,
    unsupported_reason,
)

__all__ = [
    "GroupTE", "bitcast", "broadcast", "build_te", "compute_for", "elemwise", "has_compute",
    "image", "layout",
    "nn", "reduction", "register_compute", "registered_ops", "registry", "size_values", "tag",
    "transform",
    "unsupported_reason",
]
