"""Small integer dot products inside one int32 word, as TIR intrinsics (``tir.Call`` names).

- ``dot2_s16(a, b, c)``: ``a`` and ``b`` each hold two int16 values (low half first); the
  result is ``c + a_lo * b_lo + a_hi * b_hi`` in int32. This is x86's ``pmaddwd`` lane (and,
  with the add, AVX-512 VNNI's / AVX-VNNI's ``vpdpwssd``, which LLVM forms from the pair);
  8-bit operands widened to 16 bits multiply exactly this way, two per lane.
- ``dp4a_<a sign><b sign>(a, b, c)``: ``a`` and ``b`` each hold four 8-bit values (little end
  first), read as unsigned (``u``) or signed (``s``) bytes; the result is ``c + sum of a_j *
  b_j``. NVIDIA's ``dp4a`` (the cuda backend's code generator emits it), x86's ``vpdpbusd``
  for ``us``, Arm's ``sdot``/``udot``.

Both wrap as int32 arithmetic does; their products and sums are exact for the values they take
(a pair of int16 products overflows only for ``-32768 * -32768`` twice, which 8-bit data never
gives). Backends map the names onto their instructions and compute them exactly from the parts
otherwise; the TIR interpreter evaluates them with numpy (:func:`dot2_s16`, :func:`dp4a`).

:func:`pack_pair` and :func:`pack_bytes` build the words from narrow values with plain
integer arithmetic every backend and the interpreter understand;
:func:`tessera.ops.layout.pair_words` packs constant arrays the same way.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tessera.tir import expr as E

#: The two-int16 dot product (module doc).
DOT2_S16 = "dot2_s16"

#: The four-byte dot products, ``dp4a_`` and the signs of ``a`` and ``b`` (module doc).
DP4A = ("dp4a_ss", "dp4a_uu", "dp4a_us", "dp4a_su")
#: Unsigned bytes by signed ones: x86's ``vpdpbusd`` lane.
DP4A_US = "dp4a_us"


def _bits16(v: E.PrimExpr) -> E.PrimExpr:
    """An integer expression of at most 16 bits as the int64 of its int16 bit pattern
    (0 .. 65535)."""
    if v.dtype != "int16":
        v = E.cast("int16", v)
    return E.cast("int64", E.cast("uint16", v))


def pack_pair(lo: E.PrimExpr, hi: E.PrimExpr) -> E.PrimExpr:
    """Two integer expressions that fit int16 (8-bit data, signed or not) as one int32 word
    for :data:`DOT2_S16`: ``lo`` in the low half, ``hi`` in the high half."""
    return E.cast("int32", _bits16(lo) + _bits16(hi) * E.const(1 << 16, "int64"))


def pack_bytes(byte: Callable[[int], E.PrimExpr]) -> E.PrimExpr:
    """Four 8-bit expressions ``byte(0..3)`` as one int32 word for the :data:`DP4A`
    intrinsics, ``byte(0)`` in the low bits."""
    word: E.PrimExpr | None = None
    for j in range(4):
        b = byte(j)
        u = E.cast("int64", b if E.is_unsigned(b.dtype) else E.cast("uint8", b))
        term = u * E.const(1 << (8 * j), "int64") if j else u
        word = term if word is None else word + term
    assert word is not None
    return E.cast("int32", word)


def _halves(word: np.ndarray) -> np.ndarray:
    w = np.array(word, dtype=np.int32, order="C")  # (ascontiguousarray makes 0-d 1-d)
    return w.reshape(*w.shape, 1).view("<i2").astype(np.int64)  # (..., 2) low half first


def _bytes(word: np.ndarray, signed: bool) -> np.ndarray:
    w = np.array(word, dtype=np.int32, order="C")  # (ascontiguousarray makes 0-d 1-d)
    return w.reshape(*w.shape, 1).view(np.int8 if signed else np.uint8).astype(np.int64)


def _wrap32(c: np.ndarray, dot: np.ndarray) -> np.ndarray:
    total = (c.astype(np.int64) + dot + (1 << 31)) % (1 << 32) - (1 << 31)
    return np.asarray(total, dtype=np.int32)


def _operands(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> list[np.ndarray]:
    return np.broadcast_arrays(np.asarray(a, np.int32), np.asarray(b, np.int32),
                               np.asarray(c, np.int32))


def dot2_s16(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """numpy semantics of :data:`DOT2_S16` on int32 arrays."""
    a, b, c = _operands(a, b, c)
    return _wrap32(c, (_halves(a) * _halves(b)).sum(axis=-1))


def dp4a(name: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    """numpy semantics of the intrinsic ``name`` (one of :data:`DP4A`) on int32 arrays."""
    if name not in DP4A:
        raise ValueError(f"unknown dot product intrinsic {name!r}")
    a, b, c = _operands(a, b, c)
    return _wrap32(c, (_bytes(a, name[5] == "s") * _bytes(b, name[6] == "s")).sum(axis=-1))
