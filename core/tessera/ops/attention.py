"""Ops: attention and the blocks of recent sequence models: ``Attention`` (ONNX opset 23-25:
masks, KV cache, causal and sliding-window masking, soft-capping, grouped-query heads, 3D and 4D
layouts), ``RotaryEmbedding``, ``LinearAttention``, ``CausalConvWithState``, ``TensorScatter``
(KV-cache updates) and ``SwiGLU``.

The numerics follow the ONNX specification and its reference implementation (order of
operations, dtype of intermediate results), so the conformance expectations are met.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.dtypes import float_compute_dtype
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op


def _split_heads(x: np.ndarray, heads: int) -> np.ndarray:
    """(B, S, H*D) -> (B, H, S, D)."""
    b, s, hd = x.shape
    return x.reshape(b, s, heads, hd // heads).transpose(0, 2, 1, 3)


def _attention_shapes(q: TensorType, k: TensorType, v: TensorType,
                      past_key: TensorType | None, q_num_heads: int | None,
                      kv_num_heads: int | None) -> dict[str, int]:
    if not (q.ndim == k.ndim == v.ndim) or q.ndim not in (3, 4):
        raise OpError(f"Attention: Q, K and V must all be rank 3 or all rank 4, got {q}, {k}, {v}")
    if q.ndim == 3:
        if not q_num_heads or not kv_num_heads:
            raise OpError("Attention: 3D Q/K/V need the q_num_heads and kv_num_heads attributes")
        for name, t, heads in (("Q", q, q_num_heads), ("K", k, kv_num_heads),
                               ("V", v, kv_num_heads)):
            if t.shape[2] % heads:
                raise OpError(f"Attention: {name} hidden size {t.shape[2]} is not a multiple of "
                              f"{heads} heads")
        dims = {"b": q.shape[0], "hq": q_num_heads, "sq": q.shape[1],
                "d": q.shape[2] // q_num_heads,
                "hkv": kv_num_heads, "skv": k.shape[1], "dk": k.shape[2] // kv_num_heads,
                "dv": v.shape[2] // kv_num_heads}
    else:
        dims = {"b": q.shape[0], "hq": q.shape[1], "sq": q.shape[2], "d": q.shape[3],
                "hkv": k.shape[1], "skv": k.shape[2], "dk": k.shape[3], "dv": v.shape[3]}
        if v.shape[1] != k.shape[1] or v.shape[2] != k.shape[2]:
            raise OpError(f"Attention: K {list(k.shape)} and V {list(v.shape)} disagree")
    if dims["d"] != dims["dk"]:
        raise OpError(f"Attention: Q head size {dims['d']} differs from K head size {dims['dk']}")
    if dims["hq"] % dims["hkv"]:
        raise OpError(f"Attention: q_num_heads {dims['hq']} is not a multiple of kv_num_heads "
                      f"{dims['hkv']}")
    past = 0
    if past_key is not None:
        if past_key.ndim != 4 or past_key.shape[1] != dims["hkv"] or past_key.shape[3] != dims["d"]:
            raise OpError(f"Attention: past_key must be (batch, {dims['hkv']}, past, {dims['d']}), "
                          f"got {list(past_key.shape)}")
        past = past_key.shape[2]
    dims["total"] = past + dims["skv"]
    return dims


def _attention_infer(q: TensorType, k: TensorType, v: TensorType,
                     attn_mask: TensorType | None = None, past_key: TensorType | None = None,
                     past_value: TensorType | None = None,
                     nonpad_kv_seqlen: TensorType | None = None, *, q_num_heads: int | None,
                     kv_num_heads: int | None, **attrs: Any) -> tuple[TensorType, ...]:
    if (past_key is None) != (past_value is None):
        raise OpError("Attention: past_key and past_value must be given together")
    if nonpad_kv_seqlen is not None and past_key is not None:
        raise OpError("Attention: nonpad_kv_seqlen cannot be combined with past_key/past_value")
    d = _attention_shapes(q, k, v, past_key, q_num_heads, kv_num_heads)
    if attn_mask is not None:
        if attn_mask.shape[-1] > d["total"]:
            raise OpError(f"Attention: attn_mask's last dimension {attn_mask.shape[-1]} exceeds "
                          f"the total sequence length {d['total']}")
        target = (d["b"], d["hq"], d["sq"], d["total"])
        lead = attn_mask.shape[:-1]
        try:
            np.broadcast_shapes(lead + (d["total"],), target)
        except ValueError:
            raise OpError(f"Attention: attn_mask {list(attn_mask.shape)} does not broadcast to "
                          f"{list(target)}") from None
    if q.ndim == 3:
        y = (d["b"], d["sq"], d["hq"] * d["dv"])
    else:
        y = (d["b"], d["hq"], d["sq"], d["dv"])
    dt = q.dtype
    return (TensorType(y, dt), TensorType((d["b"], d["hkv"], d["total"], d["d"]), dt),
            TensorType((d["b"], d["hkv"], d["total"], d["dv"]), dt),
            TensorType((d["b"], d["hq"], d["sq"], d["total"]), dt))


def _allowed_bias(allowed: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.where(allowed, dtype.type(0), dtype.type(-np.inf))


def _position_bias(sq: int, skv: int, offset: int | np.ndarray, dtype: np.dtype,
                   allowed_fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """An additive bias from a rule on ``diff = (i + offset) - j`` (query i, key j).

    A scalar offset gives a (sq, skv) bias; a per-batch offset a (batch, 1, sq, skv) one.
    """
    i = np.arange(sq).reshape(sq, 1)
    j = np.arange(skv).reshape(1, skv)
    if np.ndim(offset) > 0:
        off = np.asarray(offset, dtype=np.int64).reshape(-1, 1, 1)
        return _allowed_bias(allowed_fn(i + off - j), dtype)[:, None]
    return _allowed_bias(allowed_fn(i + int(offset) - j), dtype)


def _safe_softmax(x: np.ndarray) -> np.ndarray:
    """Softmax over the last axis; a row that is entirely -inf gives zeros, not NaN."""
    x_max = np.max(x, axis=-1, keepdims=True)
    zero = np.zeros((), x.dtype)
    e = np.exp(x - np.where(np.isneginf(x_max), zero, x_max))
    s = np.sum(e, axis=-1, keepdims=True)
    return e / np.where(s == zero, np.ones((), x.dtype), s)


@register_op("Attention", attrs={
    "is_causal": Attr.int(0),
    "scale": Attr.float(None),
    "q_num_heads": Attr.int(None),
    "kv_num_heads": Attr.int(None),
    "softcap": Attr.float(0.0),
    "softmax_precision": Attr.dtype(None),
    "qk_matmul_output_mode": Attr.int(0),
    "left_window_size": Attr.int(-1),
    "right_window_size": Attr.int(-1),
}, inputs=(3, 7), infer=_attention_infer)
def attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, attn_mask: np.ndarray | None = None,
              past_key: np.ndarray | None = None, past_value: np.ndarray | None = None,
              nonpad_kv_seqlen: np.ndarray | None = None, *, is_causal: int,
              scale: float | None, q_num_heads: int | None, kv_num_heads: int | None,
              softcap: float, softmax_precision: DType | None, qk_matmul_output_mode: int,
              left_window_size: int, right_window_size: int) -> tuple[np.ndarray, ...]:
    """Scaled dot-product attention (ONNX ``Attention``); outputs ``(Y, present_key,
    present_value, qk_matmul_output)``. ``qk_matmul_output`` is, by ``qk_matmul_output_mode``:
    0 the raw scaled QK product, 1 after soft-capping, 2 plus the mask bias, 3 the softmax.

    The additive bias combines the mask (boolean: False -> -inf; float: added), the
    offset-aware causal mask, the sliding window and the ``nonpad_kv_seqlen`` padding; query
    rows with no attendable key produce zeros.
    """
    dtype = q.dtype
    is_3d = q.ndim == 3
    if is_3d:
        q = _split_heads(q, q_num_heads)
        k = _split_heads(k, kv_num_heads)
        v = _split_heads(v, kv_num_heads)
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[3])
    root = dtype.type(np.sqrt(scale))
    if past_key is not None:
        k = np.concatenate([past_key, k], axis=2)
        v = np.concatenate([past_value, v], axis=2)
    present_key, present_value = k, v
    batch, sq, skv = q.shape[0], q.shape[2], k.shape[2]

    # The additive bias, broadcastable to (batch, heads, sq, skv).
    bias = np.zeros((sq, skv), dtype=dtype)
    if attn_mask is not None:
        mask = attn_mask
        pad = skv - mask.shape[-1]
        if pad > 0:
            fill = False if mask.dtype == np.bool_ else -np.inf
            mask = np.pad(mask, [(0, 0)] * (mask.ndim - 1) + [(0, pad)], constant_values=fill)
        if mask.dtype == np.bool_:
            mask = _allowed_bias(mask, dtype)
        bias = bias + mask.astype(dtype, copy=False)
    if past_key is not None:
        offset: int | np.ndarray = past_key.shape[2]
    elif nonpad_kv_seqlen is not None:
        offset = np.asarray(nonpad_kv_seqlen, dtype=np.int64).reshape(-1) - sq
    else:
        offset = 0
    if is_causal:
        bias = bias + _position_bias(sq, skv, offset, dtype, lambda diff: diff >= 0)
    if left_window_size >= 0 or right_window_size >= 0:
        def in_window(diff: np.ndarray) -> np.ndarray:
            ok = np.ones(diff.shape, dtype=bool)
            if left_window_size >= 0:
                ok &= diff <= left_window_size
            if right_window_size >= 0:
                ok &= -diff <= right_window_size
            return ok

        bias = bias + _position_bias(sq, skv, offset, dtype, in_window)
    if nonpad_kv_seqlen is not None:
        valid = np.arange(skv) < np.asarray(nonpad_kv_seqlen).reshape(-1, 1)
        bias = bias + _allowed_bias(valid, dtype).reshape(batch, 1, 1, skv)

    # Grouped-query attention: each KV head serves a contiguous group of query heads.
    hq, hkv = q.shape[1], k.shape[1]
    if hq != hkv:
        k = np.repeat(k, hq // hkv, axis=1)
        v = np.repeat(v, hq // hkv, axis=1)

    qk = np.matmul(q * root, np.swapaxes(k, 2, 3) * root)
    raw = qk
    if softcap > 0:
        qk = np.tanh(qk / dtype.type(softcap)) * dtype.type(softcap)
    scores = qk + bias
    qk_out = {0: raw, 1: qk}.get(qk_matmul_output_mode, scores)
    if softmax_precision is not None:
        scores = scores.astype(softmax_precision.numpy)
    probs = _safe_softmax(scores)
    fully_masked = np.isneginf(np.max(bias, axis=-1, keepdims=True))
    probs = np.where(fully_masked, np.zeros((), probs.dtype), probs)
    if qk_matmul_output_mode == 3:
        qk_out = probs
    qk_out = np.broadcast_to(qk_out, (batch, hq, sq, skv)).astype(dtype)
    y = np.matmul(probs.astype(dtype), v)
    if is_3d:
        y = y.transpose(0, 2, 1, 3).reshape(batch, sq, -1)
    return y.astype(dtype, copy=False), present_key, present_value, qk_out


def _rotary_infer(x: TensorType, cos: TensorType, sin: TensorType,
                  position_ids: TensorType | None = None, *, num_heads: int | None,
                  rotary_embedding_dim: int, interleaved: int) -> TensorType:
    if x.ndim == 4:
        head = x.shape[3]
    elif x.ndim == 3:
        if not num_heads or x.shape[2] % num_heads:
            raise OpError(f"RotaryEmbedding: a 3D input needs num_heads dividing its hidden size "
                          f"{x.shape[2]}, got num_heads={num_heads}")
        head = x.shape[2] // num_heads
    else:
        raise OpError(f"RotaryEmbedding: input must be rank 3 or 4, got {x}")
    rot = rotary_embedding_dim or head
    if rot > head or rot % 2:
        raise OpError(f"RotaryEmbedding: rotary_embedding_dim {rot} must be even and at most "
                      f"the head size {head}")
    if cos.shape[-1] != rot // 2 or sin.shape != cos.shape:
        raise OpError(f"RotaryEmbedding: cos/sin caches must end in rotary_dim/2 = {rot // 2}, "
                      f"got {list(cos.shape)} and {list(sin.shape)}")
    return x


@register_op("RotaryEmbedding", attrs={"interleaved": Attr.int(0),
                                       "rotary_embedding_dim": Attr.int(0),
                                       "num_heads": Attr.int(None)},
             inputs=(3, 4), infer=_rotary_infer)
def rotary_embedding(x: np.ndarray, cos_cache: np.ndarray, sin_cache: np.ndarray,
                     position_ids: np.ndarray | None = None, *, interleaved: int,
                     rotary_embedding_dim: int, num_heads: int | None) -> np.ndarray:
    """Rotary position embedding of the first ``rotary_embedding_dim`` features of each head,
    rotating halves (default) or interleaved pairs."""
    shape = x.shape
    if x.ndim == 4:  # (B, H, S, D) -> (B, S, H, D)
        xs = np.transpose(x, (0, 2, 1, 3))
    else:
        xs = x.reshape(shape[0], shape[1], num_heads, shape[2] // num_heads)
    rot = rotary_embedding_dim or xs.shape[3]
    if position_ids is not None:
        cos_cache = cos_cache[position_ids]
        sin_cache = sin_cache[position_ids]
    cos = cos_cache[:, :, None, :]  # (B, S, 1, rot/2)
    sin = sin_cache[:, :, None, :]
    part = xs[..., :rot]
    if interleaved:
        x1, x2 = part[..., 0::2], part[..., 1::2]
    else:
        x1, x2 = part[..., :rot // 2], part[..., rot // 2:]
    real = cos * x1 - sin * x2
    imag = sin * x1 + cos * x2
    if interleaved:
        rotated = np.stack([real, imag], axis=-1).reshape(part.shape)
    else:
        rotated = np.concatenate([real, imag], axis=-1)
    out = np.concatenate([rotated, xs[..., rot:]], axis=-1).astype(x.dtype, copy=False)
    if x.ndim == 4:
        return np.ascontiguousarray(np.transpose(out, (0, 2, 1, 3)))
    return out.reshape(shape)


def _linear_attention_infer(q: TensorType, k: TensorType, v: TensorType,
                            past_state: TensorType | None = None,
                            decay: TensorType | None = None, beta: TensorType | None = None, *,
                            q_num_heads: int, kv_num_heads: int, update_rule: str,
                            **attrs: Any) -> tuple[TensorType, TensorType]:
    if update_rule not in ("linear", "gated", "delta", "gated_delta"):
        raise OpError(f"LinearAttention: unknown update_rule {update_rule!r}; expected linear, "
                      f"gated, delta or gated_delta")
    gating = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    if gating != (decay is not None):
        raise OpError(f"LinearAttention: update_rule {update_rule!r} "
                      f"{'needs' if gating else 'forbids'} the decay input")
    if delta != (beta is not None):
        raise OpError(f"LinearAttention: update_rule {update_rule!r} "
                      f"{'needs' if delta else 'forbids'} the beta input")
    if q.ndim != 3 or k.ndim != 3 or v.ndim != 3:
        raise OpError(f"LinearAttention: query, key and value must be rank 3, got {q}, {k}, {v}")
    if q_num_heads <= 0 or kv_num_heads <= 0 or q_num_heads % kv_num_heads:
        raise OpError(f"LinearAttention: q_num_heads {q_num_heads} must be a positive multiple "
                      f"of kv_num_heads {kv_num_heads}")
    dk = q.shape[2] // q_num_heads
    dv = v.shape[2] // kv_num_heads
    if k.shape[2] != kv_num_heads * dk:
        raise OpError(f"LinearAttention: key hidden size {k.shape[2]} != kv_num_heads*d_k "
                      f"({kv_num_heads}*{dk})")
    state = (q.shape[0], kv_num_heads, dk, dv)
    if past_state is not None and past_state.shape != state:
        raise OpError(f"LinearAttention: past_state must have shape {list(state)}, got "
                      f"{list(past_state.shape)}")
    if decay is not None and decay.shape[-1] not in (kv_num_heads, kv_num_heads * dk):
        raise OpError(f"LinearAttention: decay's last dimension must be {kv_num_heads} or "
                      f"{kv_num_heads * dk}, got {decay.shape[-1]}")
    if beta is not None and beta.shape[-1] not in (kv_num_heads, 1):
        raise OpError(f"LinearAttention: beta's last dimension must be {kv_num_heads} or 1, "
                      f"got {beta.shape[-1]}")
    state_dtype = past_state.dtype if past_state is not None else q.dtype
    return (TensorType((q.shape[0], q.shape[1], q_num_heads * dv), q.dtype),
            TensorType(state, state_dtype))


@register_op("LinearAttention", attrs={"q_num_heads": Attr.int(), "kv_num_heads": Attr.int(),
                                       "update_rule": Attr.str("gated_delta"),
                                       "scale": Attr.float(0.0), "chunk_size": Attr.int(None)},
             inputs=(3, 6), infer=_linear_attention_infer)
def linear_attention(query: np.ndarray, key: np.ndarray, value: np.ndarray,
                     past_state: np.ndarray | None = None, decay: np.ndarray | None = None,
                     beta: np.ndarray | None = None, *, q_num_heads: int, kv_num_heads: int,
                     update_rule: str, scale: float, chunk_size: int | None
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Recurrent linear attention with an (optionally gated, optionally delta-rule) state
    ``S`` of shape (B, H_kv, d_k, d_v); outputs ``(output, present_state)``. Computed in
    float32 step by step (``chunk_size`` is only a hint for faster kernels)."""
    gating = update_rule in ("gated", "gated_delta")
    delta = update_rule in ("delta", "gated_delta")
    b, t, _ = query.shape
    dk = query.shape[2] // q_num_heads
    dv = value.shape[2] // kv_num_heads
    group = q_num_heads // kv_num_heads
    f32 = np.float32
    q4 = _split_heads(query, q_num_heads).astype(f32)
    k4 = _split_heads(key, kv_num_heads).astype(f32)
    v4 = _split_heads(value, kv_num_heads).astype(f32)
    if decay is not None:
        per_head = decay.shape[-1] == kv_num_heads
        g4 = (decay.reshape(b, t, kv_num_heads, 1).transpose(0, 2, 1, 3) if per_head
              else _split_heads(decay, kv_num_heads)).astype(f32)
    if beta is not None:
        beta4 = beta.reshape(b, t, beta.shape[-1], 1).transpose(0, 2, 1, 3).astype(f32)
    state_dtype = past_state.dtype if past_state is not None else query.dtype
    state = (np.zeros((b, kv_num_heads, dk, dv), f32) if past_state is None
             else past_state.astype(f32))
    scale_val = f32(1.0 / np.sqrt(dk)) if not scale else f32(scale)
    out = np.zeros((b, q_num_heads, t, dv), f32)
    for i in range(t):
        k_t, v_t = k4[:, :, i], v4[:, :, i]
        if gating:
            state = state * np.exp(g4[:, :, i])[..., None]
        if delta:
            retrieved = np.einsum("bhdm,bhd->bhm", state, k_t)
            v_t = beta4[:, :, i] * (v_t - retrieved)
        state = state + k_t[..., :, None] * v_t[..., None, :]
        read = state if group == 1 else np.repeat(state, group, axis=1)
        out[:, :, i] = scale_val * np.einsum("bhd,bhdm->bhm", q4[:, :, i], read)
    output = out.transpose(0, 2, 1, 3).reshape(b, t, q_num_heads * dv).astype(query.dtype)
    return output, state.astype(state_dtype)


def _causal_conv_infer(x: TensorType, w: TensorType, bias: TensorType | None = None,
                       past_state: TensorType | None = None, *,
                       activation: str) -> tuple[TensorType, TensorType]:
    if activation not in ("none", "silu", "swish"):
        raise OpError(f"CausalConvWithState: activation must be none, silu or swish, got "
                      f"{activation!r}")
    if x.ndim != 3 or w.ndim != 3 or w.shape[0] != x.shape[1] or w.shape[1] != 1:
        raise OpError(f"CausalConvWithState: input must be (batch, channels, length) and weight "
                      f"(channels, 1, k), got {x} and {w}")
    state = (x.shape[0], x.shape[1], w.shape[2] - 1)
    if bias is not None and bias.shape != (x.shape[1],):
        raise OpError(f"CausalConvWithState: bias must have shape [{x.shape[1]}], got {bias}")
    if past_state is not None and past_state.shape != state:
        raise OpError(f"CausalConvWithState: past_state must have shape {list(state)}, got "
                      f"{list(past_state.shape)}")
    return x, TensorType(state, x.dtype)


@register_op("CausalConvWithState", attrs={"activation": Attr.str("none")}, inputs=(2, 4),
             infer=_causal_conv_infer)
def causal_conv_with_state(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None,
                           past_state: np.ndarray | None = None, *,
                           activation: str) -> tuple[np.ndarray, np.ndarray]:
    """Depthwise causal 1-D convolution whose left context is ``past_state`` (zeros when
    absent), with an optional fused SiLU; outputs ``(output, present_state)`` where the new
    state is the last ``k - 1`` positions of the padded input."""
    batch, channels, length = x.shape
    k = w.shape[2]
    ct = float_compute_dtype(x.dtype)
    pad = (np.zeros((batch, channels, k - 1), x.dtype) if past_state is None
           else past_state.astype(x.dtype, copy=False))
    padded = np.concatenate([pad, x], axis=2)
    windows = np.lib.stride_tricks.sliding_window_view(padded.astype(ct), k, axis=2)
    out = np.einsum("bclk,ck->bcl", windows[:, :, :length], w[:, 0].astype(ct))
    if bias is not None:
        out = out + bias.astype(ct)[:, None]
    out = out.astype(x.dtype)
    if activation in ("silu", "swish"):
        o32 = out.astype(np.float32)
        out = (o32 / (1.0 + np.exp(-o32))).astype(x.dtype)
    return out, np.ascontiguousarray(padded[:, :, length:])


def _tensor_scatter_infer(past: TensorType, update: TensorType,
                          write_indices: TensorType | None = None, *, mode: str,
                          axis: int) -> TensorType:
    if mode not in ("linear", "circular"):
        raise OpError(f"TensorScatter: mode must be linear or circular, got {mode!r}")
    ax = normalize_axis(axis, past.ndim, "TensorScatter")
    if ax == 0:
        raise OpError("TensorScatter: axis cannot be the batch dimension 0")
    if update.ndim != past.ndim or any(
            u != p for i, (u, p) in enumerate(zip(update.shape, past.shape)) if i != ax) or \
            update.shape[ax] > past.shape[ax]:
        raise OpError(f"TensorScatter: update {list(update.shape)} does not fit past_cache "
                      f"{list(past.shape)} along axis {ax}")
    if write_indices is not None and write_indices.shape != (past.shape[0],):
        raise OpError(f"TensorScatter: write_indices must have shape [{past.shape[0]}], got "
                      f"{list(write_indices.shape)}")
    return past


@register_op("TensorScatter", attrs={"mode": Attr.str("linear"), "axis": Attr.int(-2)},
             inputs=(2, 3), infer=_tensor_scatter_infer)
def tensor_scatter(past: np.ndarray, update: np.ndarray, write_indices: np.ndarray | None = None,
                   *, mode: str, axis: int) -> np.ndarray:
    """Writes ``update`` into a copy of the cache along ``axis`` at each batch's write index
    (wrapping around in ``circular`` mode)."""
    ax = normalize_axis(axis, past.ndim)
    out = past.copy()
    view = np.moveaxis(out, ax, 1)  # a view: writes land in ``out``
    upd = np.moveaxis(update, ax, 1)
    max_len, seq = view.shape[1], upd.shape[1]
    starts = (np.zeros(past.shape[0], np.int64) if write_indices is None
              else np.asarray(write_indices, dtype=np.int64))
    for bi in range(past.shape[0]):
        idx = starts[bi] + np.arange(seq)
        if mode == "circular":
            idx = idx % max_len
        elif seq and (idx[0] < 0 or idx[-1] >= max_len):
            raise ValueError(f"TensorScatter: linear write of {seq} positions at index "
                             f"{starts[bi]} overruns the cache length {max_len}")
        view[bi, idx] = upd[bi]
    return out


def _swiglu_infer(a: TensorType, b: TensorType, *, alpha: float) -> TensorType:
    if a != b:
        raise OpError(f"SwiGLU: A and B must have the same shape and dtype, got {a} and {b}")
    return a


@register_op("SwiGLU", attrs={"alpha": Attr.float(1.0)}, inputs=2, infer=_swiglu_infer,
             pattern=OpPattern.ELEMWISE)
def swiglu(a: np.ndarray, b: np.ndarray, *, alpha: float) -> np.ndarray:
    """``A * sigmoid(alpha * A) * B`` (no broadcasting)."""
    gate = (1.0 / (1.0 + np.exp(-alpha * a))).astype(a.dtype)
    return (a * gate * b).astype(a.dtype)
