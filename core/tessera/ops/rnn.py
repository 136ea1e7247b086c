"""Ops: recurrent layers: ``RNN``, ``GRU`` and ``LSTM``.

Every direction, activation lists with their alpha/beta, ``clip``, ``layout``, per-batch
``sequence_lens``, initial states and peepholes are supported. Each IR op always has all of its
outputs; the converter keeps the ones the model uses. The numerics follow the ONNX specification
and its reference implementation (order of operations, dtype of intermediate results), so the
conformance expectations are met.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import TensorType
from tessera.ops.dtypes import float_compute_dtype
from tessera.ops.registry import Attr, register_op

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
    ct = float_compute_dtype(x.dtype)
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
    ct = float_compute_dtype(x.dtype)
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
    ct = float_compute_dtype(x.dtype)
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
    ct = float_compute_dtype(x.dtype)
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
