"""Tags: what kind of compute a TE operation is, read by schedules.

Every compute in :mod:`tessera.topi` carries a tag. The part before the first comma is the
*kind*; what follows refines it (``"injective,pad"`` is an injective compute that pads). The
injective kinds, easiest to fuse first, are :data:`ELEMWISE` (same shape, one point in, one
point out), :data:`BROADCAST` (numpy broadcasting of several inputs) and :data:`INJECTIVE`
(any one-to-one index map: transpose, reshape, concat, pad, ...). The other kinds name the
anchor computes a schedule is written for:

========================== ===================================================================
``reduce``                  a plain reduction (sums, max/min, means' sums, argmax stages)
``conv2d_nchw``             2-D convolution, group 1 (also ``conv1d_ncw``, ``conv3d_ncdhw``)
``group_conv2d_nchw``       2-D convolution with 1 < group < channels
``depthwise_conv2d_nchw``   2-D convolution with one input channel per group
``conv2d_NCHWc``            blocked-layout 2-D convolution (``depthwise_conv2d_NCHWc`` too)
``conv2d_transpose_nchw``   transposed convolution (``conv1d_transpose_ncw``, ...)
``dense``                   ``data (M, K) x weight (N, K) -> (M, N)``
``matmul``                  2-D matrix product with transpose flags
``batch_matmul``            matrix products over broadcast batch dimensions
``matvec``                  numpy ``matmul`` with a 1-D operand (no row or no column axis)
``einsum``                  ``reduce,einsum`` / ``injective,einsum``: a general contraction
``pool_max`` ``pool_sum``   window reductions of pooling (``pool_avg`` divides ``pool_sum``)
``softmax_*``               the stages of softmax / log-softmax (``softmax_output`` last)
``norm_*``                  statistics and outputs of normalizations
``constant``                a small graph constant inlined as an immediate
========================== ===================================================================

``attrs`` on the operations carry the facts a schedule needs (strides, kernel sizes, the padded
input tensor, the reduced axes, ...); each compute's docstring lists them.
"""

from __future__ import annotations

ELEMWISE = "elemwise"
BROADCAST = "broadcast"
INJECTIVE = "injective"
PAD = "injective,pad"
#: 8-bit values as int32 words of int16 pairs along their last axis (the integer matrix
#: products' left operand, :func:`tessera.topi.nn.quantized.a_pairs`)
A_PAIRS = "injective,a_pairs"
REDUCE = "reduce"
CONSTANT = "constant"

CONV2D_NCHW = "conv2d_nchw"
GROUP_CONV2D_NCHW = "group_conv2d_nchw"
DEPTHWISE_CONV2D_NCHW = "depthwise_conv2d_nchw"
CONV2D_NCHWC = "conv2d_NCHWc"
DEPTHWISE_CONV2D_NCHWC = "depthwise_conv2d_NCHWc"
DENSE = "dense"
MATMUL = "matmul"
BATCH_MATMUL = "batch_matmul"
MATVEC = "matvec"
POOL_MAX = "pool_max"
POOL_SUM = "pool_sum"
POOL_AVG = "pool_avg"

_INJECTIVE_KINDS = (ELEMWISE, BROADCAST, INJECTIVE)


def kind(tag: str) -> str:
    """The kind part of a tag (before the first comma)."""
    return tag.split(",", 1)[0]


def is_injective(tag: str) -> bool:
    """Whether a compute with ``tag`` is elementwise, broadcast or injective (inlinable)."""
    return kind(tag) in _INJECTIVE_KINDS


def is_broadcast(tag: str) -> bool:
    """Whether ``tag`` is elementwise or broadcast."""
    return kind(tag) in (ELEMWISE, BROADCAST)


__all__ = [
    "BATCH_MATMUL", "BROADCAST", "CONSTANT", "CONV2D_NCHW", "CONV2D_NCHWC", "DENSE",
    "DEPTHWISE_CONV2D_NCHW", "DEPTHWISE_CONV2D_NCHWC", "ELEMWISE", "GROUP_CONV2D_NCHW",
    "INJECTIVE", "MATMUL", "MATVEC", "PAD", "POOL_AVG", "POOL_MAX", "POOL_SUM", "REDUCE",
    "is_broadcast", "is_injective", "kind",
]
