"""Data layouts of VTA tensors in DRAM: NCHW <-> NCHW{b}n{16}c and OIHW <-> OIHW16o16i.

Channel counts are padded with zeros to multiples of the block size and the batch to a multiple
of the configuration's batch; a packed activation is ``(N/b, C/16, H, W, b, 16)`` and a packed
weight ``(O/16, I/16, KH, KW, 16, 16)``, so that one DRAM element (an input or output row, a
weight block) is contiguous.
"""

from __future__ import annotations

import numpy as np


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


def round_up(a: int, b: int) -> int:
    return ceil_div(a, b) * b


def pack_activation(x: np.ndarray, batch: int, block: int) -> np.ndarray:
    """NCHW -> (N/b, C/block, H, W, b, block), zero-padding N and C."""
    n, c, h, w = x.shape
    padded = np.zeros((round_up(n, batch), round_up(c, block), h, w), dtype=x.dtype)
    padded[:n, :c] = x
    nb, cb = padded.shape[0] // batch, padded.shape[1] // block
    return padded.reshape(nb, batch, cb, block, h, w).transpose(0, 2, 4, 5, 1, 3).copy()


def unpack_activation(packed: np.ndarray, n: int, c: int) -> np.ndarray:
    """(N/b, C/block, H, W, b, block) -> NCHW, dropping the padding."""
    nb, cb, h, w, batch, block = packed.shape
    x = packed.transpose(0, 4, 1, 5, 2, 3).reshape(nb * batch, cb * block, h, w)
    return x[:n, :c].copy()


def pack_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """OIHW -> (O/block, I/block, KH, KW, block_o, block_i), zero-padding O and I."""
    o, i, kh, kw = weight.shape
    padded = np.zeros((round_up(o, block), round_up(i, block), kh, kw), dtype=weight.dtype)
    padded[:o, :i] = weight
    ob, ib = padded.shape[0] // block, padded.shape[1] // block
    return padded.reshape(ob, block, ib, block, kh, kw).transpose(0, 2, 4, 5, 1, 3).copy()


def pack_bias(bias: np.ndarray, batch: int, block: int) -> np.ndarray:
    """(O,) -> (O/block, b, block) int32: one accumulator row per output block, repeated over
    the batch rows so that one ALU ADD adds it to a whole accumulator row."""
    padded = np.zeros(round_up(bias.shape[0], block), dtype=np.int32)
    padded[: bias.shape[0]] = bias
    rows = padded.reshape(-1, 1, block)
    return np.repeat(rows, batch, axis=1).copy()
