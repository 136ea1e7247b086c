"""Ops: recurrent, attention, signal and miscellaneous sequence ops.

* Recurrent layers: ``RNN``, ``LSTM``, ``GRU`` (every direction, activation lists with their
  alpha/beta, ``clip``, ``layout``, per-batch ``sequence_lens``, initial states, peepholes).
  Each IR op always has all of its outputs; the converter keeps the ones the model uses.
* Attention: ``Attention`` (ONNX opset 23-25: masks, KV cache, causal and sliding-window
  masking, soft-capping, grouped-query heads, 3D and 4D layouts), ``RotaryEmbedding``,
  ``LinearAttention``, ``CausalConvWithState``, ``TensorScatter``, ``SwiGLU``.
* Signal processing: ``DFT``, ``STFT`` and the window / mel-matrix generators
  (``HannWindow``, ``HammingWindow``, ``BlackmanWindow``, ``MelWeightMatrix``), which take
  their sizes as attributes (static shapes) and therefore have no inputs.
* Miscellaneous: ``Det``, ``TfIdfVectorizer`` (integer n-grams).

The numerics follow the ONNX specification and its reference implementation (order of
operations, dtype of intermediate results), so the conformance expectations are met.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, normalize_axis, register_op

# ==============================================================================================
# Recurrent layers
# ==============================================================================================

# name -> (uses alpha, uses beta, default alpha, default beta); defaults as the ONNX ops.
_ACTIVATION_ARGS: dict[str, tuple[bool, bool, float, float]] = {
    "relu": (False, False, 0.0, 0.0),
    "tanh": (False, False, 0.0, 0.0),
    "sigmoid": (False, False, 0.0, 0.0),
    "affine": (True, True, 1.0, 0.0),
    "leakyrelu": (True, False, 0.01, 0.0),
    "thresholdedrelu": (True, False, 1.0, 0.0),
    "scaledtanh": (True, True, 1.0, 1.0),
    "hardsigmoid": (True, True, 0.2, 0.5),
    "elu": (True, False, 1.0, 0.0),
    "softsign": (False, False, 0.0, 0.0),
    "softplus": (False, False, 0.0, 0.0),
}

Activation = Callable[[np.ndarray], np.ndarray]


def _sigmoid(x: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-x))


def _make_activation(name: str, alpha: float, beta: float) -> Activation:
    n = name.lower()
    if n == "relu":
        return lambda x: np.maximum(x, 0)
    if n == "tanh":
        return np.tanh
    if n == "sigmoid":
        return _sigmoid
    if n == "affine":
        return lambda x: alpha * x + beta
    if n == "leakyrelu":
        return lambda x: np.where(x >= 0, x, alpha * x)
    if n == "thresholdedrelu":
        return lambda x: np.where(x > alpha, x, 0)
    if n == "scaledtanh":
        return lambda x: alpha * np.tanh(beta * x)
    if n == "hardsigmoid":
        return lambda x: np.clip(alpha * x + beta, 0, 1)
    if n == "elu":
        return lambda x: np.where(x >= 0, x, alpha * (np.exp(x) - 1))
    if n == "softsign":
        return lambda x: x / (1 + np.abs(x))
    if n == "softplus":
        return lambda x: np.logaddexp(0, x)
    raise OpError(f"unknown activation {name!r}; expected one of "
                  f"{', '.join(sorted(_ACTIVATION_ARGS))} (any case)")


def _num_directions(direction: str) -> int:
    if direction in ("forward", "reverse"):
        return 1
    if direction == "bidirectional":
        return 2
    raise OpError(f"direction must be forward, reverse or bidirectional, got {direction!r}")


def _activation_names(op: str, activations: list[str] | None, defaults: Sequence[str],
                      num_directions: int) -> list[str]:
    """One activation name per (direction, function); a single set is used for both
    directions of a bidirectional layer."""
    per_dir = len(defaults)
    names = list(activations) if activations else list(defaults) * num_directions
    if len(names) == per_dir and num_directions == 2:
        names = names * 2
    if len(names) != per_dir * num_directions:
        raise OpError(f"{op}: activations must list {per_dir * num_directions} functions "
                      f"({per_dir} per direction), got {len(names)}")
    for name in names:
        if name.lower() not in _ACTIVATION_ARGS:
            _make_activation(name, 0.0, 0.0)  # raises with the list of known names
    return names


def _activations(op: str, activations: list[str] | None, alphas: list[float] | None,
                 betas: list[float] | None, defaults: Sequence[str],
                 num_directions: int) -> list[list[Activation]]:
    """The activation functions of each direction. ``activation_alpha``/``beta`` values are
    consumed in order by the functions that take them (others take none); missing ones take
    the ONNX operator's default."""
    names = _activation_names(op, activations, defaults, num_directions)
    alpha_it = iter(alphas or [])
    beta_it = iter(betas or [])
    funcs: list[Activation] = []
    for name in names:
        uses_a, uses_b, da, db = _ACTIVATION_ARGS[name.lower()]
        a = next(alpha_it, da) if uses_a else da
        b = next(beta_it, db) if uses_b else db
        funcs.append(_make_activation(name, a, b))
    per_dir = len(defaults)
    return [funcs[d * per_dir:(d + 1) * per_dir] for d in range(num_directions)]


def _rnn_infer(op: str, gates: int, n_states: int,
               default_activations: Sequence[str]) -> Callable[..., tuple[TensorType, ...]]:
    """Type inference shared by RNN (1 gate), GRU (3) and LSTM (4)."""

    def infer(x: TensorType, w: TensorType, r: TensorType, b: TensorType | None = None,
              seq: TensorType | None = None, h0: TensorType | None = None,
              *rest: TensorType | None, hidden_size: int | None = None,
              direction: str = "forward", layout: int = 0,
              activations: list[str] | None = None, **attrs: Any) -> tuple:
        nd = _num_directions(direction)
        _activation_names(op, activations, default_activations, nd)
        if not x.dtype.is_float:
            raise OpError(f"{op}: X must be a float tensor, got {x}")
        if x.ndim != 3 or w.ndim != 3 or r.ndim != 3:
            raise OpError(f"{op}: X, W and R must be rank 3, got {x}, {w}, {r}")
        hidden = r.shape[-1]
        if hidden_size is not None and hidden_size != hidden:
            raise OpError(f"{op}: hidden_size={hidden_size} but R has shape {list(r.shape)}")
        if w.shape[0] != nd or r.shape[0] != nd:
            raise OpError(f"{op}: direction {direction!r} needs {nd} direction(s) in W and R, "
                          f"got W {list(w.shape)}, R {list(r.shape)}")
        if w.shape[1] != gates * hidden or r.shape[1] != gates * hidden:
            raise OpError(f"{op}: W and R must have {gates}*hidden_size={gates * hidden} rows, "
                          f"got W {list(w.shape)}, R {list(r.shape)}")
        if layout not in (0, 1):
            raise OpError(f"{op}: layout must be 0 or 1, got {layout}")
        seq_len, batch = (x.shape[0], x.shape[1]) if layout == 0 else (x.shape[1], x.shape[0])
        if w.shape[2] != x.shape[2]:
            raise OpError(f"{op}: W has input size {w.shape[2]}, X has {x.shape[2]}")
        if b is not None and b.shape != (nd, 2 * gates * hidden):
            raise OpError(f"{op}: B must have shape {[nd, 2 * gates * hidden]}, got "
                          f"{list(b.shape)}")
        if seq is not None and (seq.shape != (batch,) or not seq.dtype.is_int):
            raise OpError(f"{op}: sequence_lens must be an integer vector of length {batch}, "
                          f"got {seq}")
        if layout == 0:
            y = (seq_len, nd, batch, hidden)
            state = (nd, batch, hidden)
        else:
            y = (batch, seq_len, nd, hidden)
            state = (batch, nd, hidden)
        for s in [h0, *rest[:n_states - 1]]:
            if s is not None and s.shape != state:
                raise OpError(f"{op}: initial states must have shape {list(state)}, got "
                              f"{list(s.shape)}")
        peepholes = rest[n_states - 1] if len(rest) >= n_states else None
        if peepholes is not None and peepholes.shape != (nd, 3 * hidden):
            raise OpError(f"{op}: P must have shape {[nd, 3 * hidden]}, got "
                          f"{list(peepholes.shape)}")
        return (TensorType(y, x.dtype),) + (TensorType(state, x.dtype),) * n_states

    return infer


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float16 is computed in float32; float32/float64 as themselves."""
    return np.result_type(dtype, np.float32)


class _Recurrence:
    """Runs one direction of a recurrent layer over time with per-batch sequence lengths.

    ``cell(x_t, states) -> states`` computes the new states (the first is the hidden state
    that goes to ``Y``). Batches whose sequence has ended keep their states and write zeros;
    a batch with an empty sequence ends with zero states.
    """

    def __init__(self, x: np.ndarray, lengths: np.ndarray, reverse: bool):
        self.x = x  # (T, B, I)
        self.lengths = lengths
        self.reverse = reverse

    def run(self, cell: Callable[[np.ndarray, list[np.ndarray]], list[np.ndarray]],
            states: list[np.ndarray]) -> tuple[np.ndarray, list[np.ndarray]]:
        seq_len, batch = self.x.shape[:2]
        hidden = states[0].shape[-1]
        y = np.zeros((seq_len, batch, hidden), dtype=states[0].dtype)
        rows = np.arange(batch)
        full = bool(np.all(self.lengths == seq_len))
        for step in range(seq_len):
            if self.reverse:
                t = self.lengths - 1 - step  # per batch
            else:
                t = np.full(batch, step)
            valid = step < self.lengths
            if not valid.any():
                break
            x_t = self.x[np.maximum(t, 0), rows]
            new = cell(x_t, states)
            if full:
                states = new
                y[t[0]] = new[0]
                continue
            keep = valid[:, None]
            states = [np.where(keep, n, s) for n, s in zip(new, states)]
            y[t[valid], rows[valid]] = new[0][valid]
        empty = (self.lengths == 0)[:, None]
        if empty.any():  # an empty sequence has zero final states (as onnxruntime)
            states = [np.where(empty, np.zeros((), s.dtype), s) for s in states]
        return y, states


def _rnn_layer(x: np.ndarray, sequence_lens: np.ndarray | None, initial: list[np.ndarray | None],
               layout: int, direction: str, hidden: int, n_states: int,
               make_cell: Callable[[int], Callable[..., list[np.ndarray]]]
               ) -> tuple[np.ndarray, ...]:
    """The direction/layout/sequence-length plumbing shared by RNN, GRU and LSTM.

    ``make_cell(d)`` returns the cell function of direction ``d``. Returns Y and the final
    states in the ONNX output layout and the input dtype.
    """
    out_dtype = x.dtype
    ct = _compute_dtype(x.dtype)
    if layout == 1:
        x = np.swapaxes(x, 0, 1)
        initial = [None if s is None else np.swapaxes(s, 0, 1) for s in initial]
    x = x.astype(ct, copy=False)
    seq_len, batch = x.shape[:2]
    nd = _num_directions(direction)
    lengths = (np.full(batch, seq_len, dtype=np.int64) if sequence_lens is None
               else np.clip(np.asarray(sequence_lens, dtype=np.int64), 0, seq_len))
    ys, finals = [], [[] for _ in range(n_states)]
    for d in range(nd):
        reverse = direction == "reverse" or d == 1
        states = [np.zeros((batch, hidden), ct) if s is None else s[d].astype(ct)
                  for s in initial]
        y, states = _Recurrence(x, lengths, reverse).run(make_cell(d), states)
        ys.append(y)
        for i, s in enumerate(states):
            finals[i].append(s)
    y_all = np.stack(ys, axis=1)  # (T, D, B, H)
    outs = [np.stack(f, axis=0) for f in finals]  # (D, B, H)
    if layout == 1:
        y_all = np.transpose(y_all, (2, 0, 1, 3))
        outs = [np.swapaxes(o, 0, 1) for o in outs]
    return tuple(a.astype(out_dtype) for a in (y_all, *outs))


def _clipper(clip: float | None) -> Callable[[np.ndarray], np.ndarray]:
    if clip is None:
        return lambda v: v
    return lambda v: np.clip(v, -clip, clip)


_RNN_ATTRS = {
    "hidden_size": Attr.int(None),
    "direction": Attr.str("forward"),
    "activations": Attr.strs(None),
    "activation_alpha": Attr.floats(None),
    "activation_beta": Attr.floats(None),
    "clip": Attr.float(None),
    "layout": Attr.int(0),
}


@register_op("RNN", attrs=dict(_RNN_ATTRS), inputs=(3, 6), infer=_rnn_infer("RNN", 1, 1, ["Tanh"]))
def rnn(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
        sequence_lens: np.ndarray | None = None, initial_h: np.ndarray | None = None, *,
        hidden_size: int | None, direction: str, activations: list[str] | None,
        activation_alpha: list[float] | None, activation_beta: list[float] | None,
        clip: float | None, layout: int) -> tuple[np.ndarray, np.ndarray]:
    """Simple RNN: ``Ht = f(Xt*Wi^T + Ht-1*Ri^T + Wbi + Rbi)``; outputs ``(Y, Y_h)``."""
    nd = _num_directions(direction)
    hidden = r.shape[-1]
    ct = _compute_dtype(x.dtype)
    acts = _activations("RNN", activations, activation_alpha, activation_beta, ["Tanh"], nd)
    clipf = _clipper(clip)

    def make_cell(d: int) -> Callable[..., list[np.ndarray]]:
        wt, rt = w[d].astype(ct).T, r[d].astype(ct).T
        bias = (np.zeros(hidden, ct) if b is None
                else b[d, :hidden].astype(ct) + b[d, hidden:].astype(ct))
        (f,) = acts[d]

        def cell(x_t: np.ndarray, states: list[np.ndarray]) -> list[np.ndarray]:
            return [f(clipf(x_t @ wt + states[0] @ rt + bias))]

        return cell

    y, y_h = _rnn_layer(x, sequence_lens, [initial_h], layout, direction, hidden, 1, make_cell)
    return y, y_h


@register_op("GRU", attrs={**_RNN_ATTRS, "linear_before_reset": Attr.int(0)}, inputs=(3, 6),
             infer=_rnn_infer("GRU", 3, 1, ["Sigmoid", "Tanh"]))
def gru(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
        sequence_lens: np.ndarray | None = None, initial_h: np.ndarray | None = None, *,
        hidden_size: int | None, direction: str, activations: list[str] | None,
        activation_alpha: list[float] | None, activation_beta: list[float] | None,
        clip: float | None, layout: int, linear_before_reset: int) -> tuple[np.ndarray, ...]:
    """GRU with gates in z, r, h order; outputs ``(Y, Y_h)``."""
    nd = _num_directions(direction)
    hidden = r.shape[-1]
    ct = _compute_dtype(x.dtype)
    acts = _activations("GRU", activations, activation_alpha, activation_beta,
                        ["Sigmoid", "Tanh"], nd)
    clipf = _clipper(clip)

    def make_cell(d: int) -> Callable[..., list[np.ndarray]]:
        wd, rd = w[d].astype(ct), r[d].astype(ct)
        bd = np.zeros(6 * hidden, ct) if b is None else b[d].astype(ct)
        w_zr, w_h = wd[:2 * hidden].T, wd[2 * hidden:].T
        r_zr, r_h = rd[:2 * hidden].T, rd[2 * hidden:].T
        wb_zr, wb_h = bd[:2 * hidden], bd[2 * hidden:3 * hidden]
        rb_zr, rb_h = bd[3 * hidden:5 * hidden], bd[5 * hidden:]
        f, g = acts[d]

        def cell(x_t: np.ndarray, states: list[np.ndarray]) -> list[np.ndarray]:
            h_prev = states[0]
            zr = f(clipf(x_t @ w_zr + h_prev @ r_zr + wb_zr + rb_zr))
            z, rr = zr[:, :hidden], zr[:, hidden:]
            if linear_before_reset:
                pre = x_t @ w_h + rr * (h_prev @ r_h + rb_h) + wb_h
            else:
                pre = x_t @ w_h + (rr * h_prev) @ r_h + rb_h + wb_h
            h_new = g(clipf(pre))
            return [(1 - z) * h_new + z * h_prev]

        return cell

    y, y_h = _rnn_layer(x, sequence_lens, [initial_h], layout, direction, hidden, 1, make_cell)
    return y, y_h


@register_op("LSTM", attrs={**_RNN_ATTRS, "input_forget": Attr.int(0)}, inputs=(3, 8),
             infer=_rnn_infer("LSTM", 4, 2, ["Sigmoid", "Tanh", "Tanh"]))
def lstm(x: np.ndarray, w: np.ndarray, r: np.ndarray, b: np.ndarray | None = None,
         sequence_lens: np.ndarray | None = None, initial_h: np.ndarray | None = None,
         initial_c: np.ndarray | None = None, p: np.ndarray | None = None, *,
         hidden_size: int | None, direction: str, activations: list[str] | None,
         activation_alpha: list[float] | None, activation_beta: list[float] | None,
         clip: float | None, layout: int, input_forget: int) -> tuple[np.ndarray, ...]:
    """LSTM with gates in i, o, f, c order and peepholes in i, o, f order; outputs
    ``(Y, Y_h, Y_c)``."""
    nd = _num_directions(direction)
    hidden = r.shape[-1]
    ct = _compute_dtype(x.dtype)
    acts = _activations("LSTM", activations, activation_alpha, activation_beta,
                        ["Sigmoid", "Tanh", "Tanh"], nd)
    clipf = _clipper(clip)

    def make_cell(d: int) -> Callable[..., list[np.ndarray]]:
        wt, rt = w[d].astype(ct).T, r[d].astype(ct).T
        bias = (np.zeros(4 * hidden, ct) if b is None
                else b[d, :4 * hidden].astype(ct) + b[d, 4 * hidden:].astype(ct))
        pd = np.zeros(3 * hidden, ct) if p is None else p[d].astype(ct)
        p_i, p_o, p_f = pd[:hidden], pd[hidden:2 * hidden], pd[2 * hidden:]
        f, g, h = acts[d]

        def cell(x_t: np.ndarray, states: list[np.ndarray]) -> list[np.ndarray]:
            h_prev, c_prev = states
            gates = x_t @ wt + h_prev @ rt + bias
            gi, go = gates[:, :hidden], gates[:, hidden:2 * hidden]
            gf, gc = gates[:, 2 * hidden:3 * hidden], gates[:, 3 * hidden:]
            i = f(clipf(gi + p_i * c_prev))
            fg = 1 - i if input_forget else f(clipf(gf + p_f * c_prev))
            c_new = fg * c_prev + i * g(clipf(gc))
            o = f(clipf(go + p_o * c_new))
            return [o * h(c_new), c_new]

        return cell

    y, y_h, y_c = _rnn_layer(x, sequence_lens, [initial_h, initial_c], layout, direction,
                             hidden, 2, make_cell)
    return y, y_h, y_c


# ==============================================================================================
# Attention
# ==============================================================================================

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
    ct = _compute_dtype(x.dtype)
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


# ==============================================================================================
# Signal processing
# ==============================================================================================

def _to_complex(x: np.ndarray) -> np.ndarray:
    """A (..., 1) real or (..., 2) real/imaginary tensor as a complex array (...): complex64
    for float16/float32 (the precision ONNX's reference computes in), complex128 for float64."""
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    c = np.empty(x.shape[:-1], ctype)
    c.real = x[..., 0]
    c.imag = x[..., 1]
    return c


def _from_complex(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


def _dft_infer(x: TensorType, *, axis: int, inverse: int, onesided: int,
               dft_length: int | None) -> TensorType:
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise OpError(f"DFT: input must end in a dimension of 1 (real) or 2 (complex), got {x}")
    ax = normalize_axis(axis, x.ndim, "DFT")
    if ax == x.ndim - 1:
        raise OpError("DFT: axis cannot be the last (real/imaginary) dimension")
    if onesided and not inverse and x.shape[-1] == 2:
        raise OpError("DFT: a one-sided forward transform needs a real input (last dimension 1)")
    n = x.shape[ax]
    if dft_length is None:
        dft_length = 2 * (n - 1) if inverse and onesided else n
    if dft_length < 1:
        raise OpError(f"DFT: dft_length must be positive, got {dft_length}")
    shape = list(x.shape)
    if inverse and onesided:
        shape[ax], shape[-1] = dft_length, 1
    else:
        shape[ax] = dft_length // 2 + 1 if onesided else dft_length
        shape[-1] = 2
    return TensorType(tuple(shape), x.dtype)


@register_op("DFT", attrs={"axis": Attr.int(), "inverse": Attr.int(0), "onesided": Attr.int(0),
                           "dft_length": Attr.int(None)}, inputs=1, infer=_dft_infer)
def dft(x: np.ndarray, *, axis: int, inverse: int, onesided: int,
        dft_length: int | None) -> np.ndarray:
    """Discrete Fourier transform along ``axis`` of a real (..., 1) or complex (..., 2) signal,
    padded or cut to ``dft_length``. ``onesided`` keeps the first n/2+1 frequencies of a
    forward transform; an inverse ``onesided`` transform is an inverse real FFT (output (..., 1)).
    """
    ax = normalize_axis(axis, x.ndim)
    if dft_length is None:
        dft_length = 2 * (x.shape[ax] - 1) if inverse and onesided else x.shape[ax]
    c = _to_complex(x)
    if inverse and onesided:
        return np.fft.irfft(c, n=dft_length, axis=ax)[..., None].astype(x.dtype)
    if inverse:
        return _from_complex(np.fft.ifft(c, n=dft_length, axis=ax), x.dtype)
    out = np.fft.fft(c, n=dft_length, axis=ax)
    if onesided:
        out = np.take(out, np.arange(dft_length // 2 + 1), axis=ax)
    return _from_complex(out, x.dtype)


def _stft_frame_length(signal: tuple[int, ...], window: tuple[int, ...] | None,
                       frame_length: int | None) -> int:
    if frame_length is not None:
        return frame_length
    return window[0] if window is not None else signal[-2]


def _stft_infer(signal: TensorType, window: TensorType | None = None, *, frame_step: int,
                frame_length: int | None, onesided: int) -> TensorType:
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2):
        raise OpError(f"STFT: signal must be (batch, length, 1|2), got {signal}")
    if window is not None and window.ndim != 1:
        raise OpError(f"STFT: window must be rank 1, got {window}")
    n = _stft_frame_length(signal.shape, window.shape if window is not None else None,
                           frame_length)
    if frame_step < 1 or n < 1 or n > signal.shape[1]:
        raise OpError(f"STFT: frame_step {frame_step} and frame_length {n} must be positive and "
                      f"the frame no longer than the signal ({signal.shape[1]})")
    if window is not None and window.shape[0] != n:
        raise OpError(f"STFT: window length {window.shape[0]} != frame_length {n}")
    if onesided and signal.shape[-1] == 2:
        raise OpError("STFT: onesided output needs a real signal")
    frames = 1 + (signal.shape[1] - n) // frame_step
    bins = n // 2 + 1 if onesided else n
    return TensorType((signal.shape[0], frames, bins, 2), signal.dtype)


@register_op("STFT", attrs={"frame_step": Attr.int(), "frame_length": Attr.int(None),
                            "onesided": Attr.int(1)}, inputs=(1, 2), infer=_stft_infer)
def stft(signal: np.ndarray, window: np.ndarray | None = None, *, frame_step: int,
         frame_length: int | None, onesided: int) -> np.ndarray:
    """Short-time Fourier transform: windowed frames of ``frame_length`` every ``frame_step``
    samples; output (batch, frames, bins, 2)."""
    n = _stft_frame_length(signal.shape, window.shape if window is not None else None,
                           frame_length)
    frames = 1 + (signal.shape[1] - n) // frame_step
    c = _to_complex(signal)  # (batch, length)
    idx = np.arange(frames)[:, None] * frame_step + np.arange(n)[None, :]
    framed = c[:, idx]  # (batch, frames, n)
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    out = np.fft.fft(framed, n=n, axis=-1)
    if onesided:
        out = out[..., :n // 2 + 1]
    return _from_complex(out, signal.dtype)


def _window_infer(*, size: int, output_datatype: DType, periodic: int) -> TensorType:
    if size < 0:
        raise OpError(f"window size must be non-negative, got {size}")
    return TensorType((size,), output_datatype)


def _window_positions(size: int, periodic: int) -> tuple[np.ndarray, int]:
    return np.arange(size, dtype=np.float64), size if periodic else size - 1


_WINDOW_ATTRS = {"size": Attr.int(), "output_datatype": Attr.dtype(DType.float32),
                 "periodic": Attr.int(1)}


@register_op("HannWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def hann_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``sin(pi n / N)^2`` (N = size if periodic else size - 1)."""
    n, big_n = _window_positions(size, periodic)
    return (np.sin(n * np.pi / big_n) ** 2).astype(output_datatype.numpy)


@register_op("HammingWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def hamming_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``25/46 - 21/46 cos(2 pi n / N)``."""
    n, big_n = _window_positions(size, periodic)
    alpha = 25.0 / 46.0
    return (alpha - (1 - alpha) * np.cos(2 * np.pi * n / big_n)).astype(output_datatype.numpy)


@register_op("BlackmanWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def blackman_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""
    n, big_n = _window_positions(size, periodic)
    w = 0.42 - 0.5 * np.cos(2 * np.pi * n / big_n) + 0.08 * np.cos(4 * np.pi * n / big_n)
    return w.astype(output_datatype.numpy)


def _mel_infer(*, num_mel_bins: int, dft_length: int, output_datatype: DType,
               **attrs: Any) -> TensorType:
    if num_mel_bins < 1 or dft_length < 1:
        raise OpError(f"MelWeightMatrix: num_mel_bins ({num_mel_bins}) and dft_length "
                      f"({dft_length}) must be positive")
    return TensorType((dft_length // 2 + 1, num_mel_bins), output_datatype)


@register_op("MelWeightMatrix", attrs={"num_mel_bins": Attr.int(), "dft_length": Attr.int(),
                                       "sample_rate": Attr.int(), "lower_edge_hertz": Attr.float(),
                                       "upper_edge_hertz": Attr.float(),
                                       "output_datatype": Attr.dtype(DType.float32)},
             inputs=0, infer=_mel_infer)
def mel_weight_matrix(*, num_mel_bins: int, dft_length: int, sample_rate: int,
                      lower_edge_hertz: float, upper_edge_hertz: float,
                      output_datatype: DType) -> np.ndarray:
    """Triangular mel filter bank mapping ``dft_length // 2 + 1`` linear frequency bins to
    ``num_mel_bins`` mel bins (the ONNX construction, with its integer bin edges)."""
    def to_mel(hz: float) -> float:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    low, high = to_mel(lower_edge_hertz), to_mel(upper_edge_hertz)
    points = np.arange(num_mel_bins + 2)
    mels = points * ((high - low) / (num_mel_bins + 2)) + low
    hz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = (((dft_length + 1) * hz) // sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for m in range(num_mel_bins):
        left, center, right = (int(e) for e in edges[m:m + 3])
        if center == left:
            out[center, m] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, m] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, m] = (right - j) / (right - center)
    return out.astype(output_datatype.numpy)


# ==============================================================================================
# Miscellaneous
# ==============================================================================================

def _det_infer(x: TensorType) -> TensorType:
    if x.ndim < 2 or x.shape[-1] != x.shape[-2] or not x.dtype.is_float:
        raise OpError(f"Det: input must be float square matrices (..., M, M), got {x}")
    return TensorType(x.shape[:-2], x.dtype)


@register_op("Det", infer=_det_infer)
def det(x: np.ndarray) -> np.ndarray:
    """Determinant of each trailing square matrix."""
    return np.asarray(np.linalg.det(x.astype(_compute_dtype(x.dtype)))).astype(x.dtype)


def _ngram_total(pool_size: int, ngram_counts: list[int]) -> int:
    bounds = list(ngram_counts) + [pool_size]
    return sum((bounds[i + 1] - bounds[i]) // (i + 1) for i in range(len(ngram_counts)))


def _tfidf_infer(x: TensorType, *, ngram_indexes: list[int], ngram_counts: list[int],
                 pool_int64s: list[int], weights: list[float] | None,
                 **attrs: Any) -> TensorType:
    if not x.dtype.is_int or x.ndim not in (1, 2):
        raise OpError(f"TfIdfVectorizer: X must be an integer tensor [C] or [B, C], got {x}")
    total = _ngram_total(len(pool_int64s), ngram_counts)
    if len(ngram_indexes) != total or (weights and len(weights) != total):
        raise OpError(f"TfIdfVectorizer: the pool holds {total} n-grams but ngram_indexes has "
                      f"{len(ngram_indexes)} entries and weights "
                      f"{len(weights) if weights else 0}")
    size = max(ngram_indexes) + 1 if ngram_indexes else 0
    return TensorType((size,) if x.ndim == 1 else (x.shape[0], size), DType.float32)


def _ngram_table(pool: list[int], ngram_counts: list[int], ngram_indexes: list[int],
                 min_n: int, max_n: int) -> dict[tuple[int, ...], int]:
    """n-gram (as a tuple) -> output column, for the sizes in [min_n, max_n]."""
    table: dict[tuple[int, ...], int] = {}
    index = 0
    for size_minus_1, start in enumerate(ngram_counts):
        size = size_minus_1 + 1
        end = ngram_counts[size_minus_1 + 1] if size_minus_1 + 1 < len(ngram_counts) \
            else len(pool)
        count = (end - start) // size
        if min_n <= size <= max_n:
            for g in range(count):
                gram = tuple(pool[start + g * size:start + (g + 1) * size])
                table[gram] = ngram_indexes[index + g]
        index += count
    return table


@register_op("TfIdfVectorizer", attrs={
    "mode": Attr.str(), "min_gram_length": Attr.int(), "max_gram_length": Attr.int(),
    "max_skip_count": Attr.int(), "ngram_counts": Attr.ints(), "ngram_indexes": Attr.ints(),
    "pool_int64s": Attr.ints(), "weights": Attr.floats(None)}, infer=_tfidf_infer)
def tfidf_vectorizer(x: np.ndarray, *, mode: str, min_gram_length: int, max_gram_length: int,
                     max_skip_count: int, ngram_counts: list[int], ngram_indexes: list[int],
                     pool_int64s: list[int], weights: list[float] | None) -> np.ndarray:
    """Counts the pool's integer n-grams (sizes min..max, items up to ``max_skip_count``
    apart; unigrams once) in each row and weights them (TF, IDF or TFIDF; ``weights[i]`` is
    the weight of the pool's i-th n-gram, as in the specification and onnxruntime)."""
    if mode not in ("TF", "IDF", "TFIDF"):
        raise ValueError(f"TfIdfVectorizer: mode must be TF, IDF or TFIDF, got {mode!r}")
    size = max(ngram_indexes) + 1 if ngram_indexes else 0
    table = _ngram_table(pool_int64s, ngram_counts, ngram_indexes, min_gram_length,
                         max_gram_length)
    rows = x.reshape(1, -1) if x.ndim == 1 else x
    counts = np.zeros((rows.shape[0], size), dtype=np.int64)
    length = rows.shape[1]
    for n in range(max(min_gram_length, 1), max_gram_length + 1):
        skips = range(1) if n == 1 else range(max_skip_count + 1)
        for skip in skips:
            step = skip + 1
            starts = length - (n - 1) * step
            if starts <= 0:
                continue
            for r, row in enumerate(rows.tolist()):
                for s in range(starts):
                    col = table.get(tuple(row[s:s + (n - 1) * step + 1:step]))
                    if col is not None:
                        counts[r, col] += 1
    w = None
    if weights:  # weights[i] belongs to the i-th n-gram of the pool, i.e. column ngram_indexes[i]
        w = np.zeros(size, np.float32)
        w[np.asarray(ngram_indexes[:len(weights)])] = np.asarray(weights, np.float32)
    if mode == "TF":
        out = counts.astype(np.float32)
    elif mode == "IDF":
        out = (counts > 0).astype(np.float32) * (w if w is not None else 1.0)
    else:
        out = counts.astype(np.float32) * (w if w is not None else 1.0)
    out = out.astype(np.float32)
    return out[0] if x.ndim == 1 else out

