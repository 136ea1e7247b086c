"""Ops: optimizer steps of ONNX domain ``ai.onnx.preview.training`` (``Adagrad``, ``Adam``,
``Momentum``).

Each node updates several tensors at once with one learning rate ``R`` (a float scalar) and one
update count ``T`` (an int64 scalar). Its inputs are ``R, T``, then the n tensors ``X``, their n
gradients ``G``, then the n accumulators of each kind (Adagrad: ``H``; Momentum: ``V``; Adam:
``V`` then ``H``); its outputs are the n new ``X``, then the new accumulators in the same order.
The formulas are the ONNX specification's, computed in the tensors' element type (float32 or
float64) with the scalar step size in float64.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, OpPattern, register_op

#: ONNX keeps float attribute defaults as float32: the defaults below are those values.
_EPSILON = float(np.float32(1e-6))
_ALPHA = float(np.float32(0.9))
_BETA = float(np.float32(0.999))

#: accumulator names of each op, in input (and output) order after X and G
ACCUMULATORS = {"Adagrad": ("H",), "Momentum": ("V",), "Adam": ("V", "H")}


def _check_scalar(t: TensorType, what: str, ok: bool, want: str) -> None:
    if t.size != 1 or not ok:
        raise OpError(f"{what} must be {want} scalar (one element), got {t}")


def _optimizer_infer(op: str, r: TensorType, t: TensorType,
                     tensors: tuple[TensorType, ...]) -> tuple[TensorType, ...]:
    """Check ``R``, ``T`` and the variadic tensors of ``op``; the output types."""
    _check_scalar(r, "the learning rate R", r.dtype.is_float, "a float")
    _check_scalar(t, "the update count T", t.dtype == DType.int64, "an int64")
    groups = 2 + len(ACCUMULATORS[op])
    if not tensors or len(tensors) % groups:
        names = ", ".join(("X", "G") + ACCUMULATORS[op])
        raise OpError(f"expects R, T and then n tensors of each of {names} (a multiple of "
                      f"{groups} inputs after T), got {len(tensors)}")
    n = len(tensors) // groups
    for i in range(n):
        x = tensors[i]
        if x.dtype not in (DType.float32, DType.float64):
            raise OpError(f"tensor X{i + 1} must be float32 or float64, got {x}")
        for g in range(1, groups):
            other = tensors[g * n + i]
            if other != x:
                name = (("X", "G") + ACCUMULATORS[op])[g]
                raise OpError(f"{name}{i + 1} {other} must have the type of X{i + 1} {x}")
    return tuple(tensors[:n]) + tuple(tensors[2 * n:])


def _split(op: str, tensors: tuple[np.ndarray, ...]) -> list[tuple[np.ndarray, ...]]:
    """The variadic inputs regrouped per updated tensor: ``[(x, g, acc...), ...]``."""
    groups = 2 + len(ACCUMULATORS[op])
    n = len(tensors) // groups
    return [tuple(tensors[g * n + i] for g in range(groups)) for i in range(n)]


def _outputs(results: list[tuple[np.ndarray, ...]]) -> tuple[np.ndarray, ...]:
    """Per-tensor results ``[(x_new, acc_new...), ...]`` as the op's outputs (all X first)."""
    return tuple(r[k] for k in range(len(results[0])) for r in results)


def _as(x: np.ndarray, like: np.ndarray) -> np.ndarray:
    return np.asarray(x).astype(like.dtype, copy=False)


# -- Adagrad -------------------------------------------------------------------------------------

def adagrad_step(r: float, t: int, x: np.ndarray, g: np.ndarray, h: np.ndarray, *,
                 norm_coefficient: float, decay_factor: float,
                 epsilon: float) -> tuple[np.ndarray, np.ndarray]:
    """One Adagrad step of one tensor: ``(x_new, h_new)``."""
    rate = r / (1 + t * decay_factor)
    g_reg = norm_coefficient * x + g
    h_new = h + g_reg * g_reg
    x_new = x - rate * g_reg / (np.sqrt(h_new) + epsilon)
    return _as(x_new, x), _as(h_new, h)


@register_op("Adagrad", attrs={"norm_coefficient": Attr.float(0.0),
                               "decay_factor": Attr.float(0.0), "epsilon": Attr.float(_EPSILON)},
             inputs=(5, None), pattern=OpPattern.OPAQUE,
             infer=lambda r, t, *xs, **_: _optimizer_infer("Adagrad", r, t, xs))
def adagrad(r: np.ndarray, t: np.ndarray, *tensors: np.ndarray, norm_coefficient: float,
            decay_factor: float, epsilon: float) -> tuple[np.ndarray, ...]:
    """Adagrad on n tensors: inputs ``R, T, X1..Xn, G1..Gn, H1..Hn``, outputs the new X and H."""
    rate, count = float(np.asarray(r).reshape(-1)[0]), int(np.asarray(t).reshape(-1)[0])
    return _outputs([adagrad_step(rate, count, *group, norm_coefficient=norm_coefficient,
                                  decay_factor=decay_factor, epsilon=epsilon)
                     for group in _split("Adagrad", tensors)])


# -- Momentum ------------------------------------------------------------------------------------

def momentum_step(r: float, t: int, x: np.ndarray, g: np.ndarray, v: np.ndarray, *,
                  alpha: float, beta: float, norm_coefficient: float,
                  mode: str) -> tuple[np.ndarray, np.ndarray]:
    """One SGD-with-momentum step of one tensor (``mode`` standard or nesterov):
    ``(x_new, v_new)``. The gradient's coefficient is 1 (not ``beta``) at the first step."""
    g_reg = norm_coefficient * x + g
    v_new = alpha * v + (beta if t > 0 else 1.0) * g_reg
    step = v_new if mode == "standard" else g_reg + alpha * v_new
    return _as(x - r * step, x), _as(v_new, v)


def _momentum_infer(r: TensorType, t: TensorType, *tensors: TensorType,
                    mode: str, **attrs: Any) -> tuple[TensorType, ...]:
    if mode not in ("standard", "nesterov"):
        raise OpError(f"mode must be 'standard' or 'nesterov', got {mode!r}")
    return _optimizer_infer("Momentum", r, t, tensors)


@register_op("Momentum", attrs={"alpha": Attr.float(), "beta": Attr.float(),
                                "norm_coefficient": Attr.float(), "mode": Attr.str()},
             inputs=(5, None), infer=_momentum_infer, pattern=OpPattern.OPAQUE)
def momentum(r: np.ndarray, t: np.ndarray, *tensors: np.ndarray, alpha: float, beta: float,
             norm_coefficient: float, mode: str) -> tuple[np.ndarray, ...]:
    """SGD with momentum on n tensors: inputs ``R, T, X1..Xn, G1..Gn, V1..Vn``, outputs the new
    X and V."""
    rate, count = float(np.asarray(r).reshape(-1)[0]), int(np.asarray(t).reshape(-1)[0])
    return _outputs([momentum_step(rate, count, *group, alpha=alpha, beta=beta,
                                   norm_coefficient=norm_coefficient, mode=mode)
                     for group in _split("Momentum", tensors)])


# -- Adam ----------------------------------------------------------------------------------------

def adam_step(r: float, t: int, x: np.ndarray, g: np.ndarray, v: np.ndarray, h: np.ndarray, *,
              alpha: float, beta: float, epsilon: float, norm_coefficient: float,
              norm_coefficient_post: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One Adam step of one tensor: ``(x_new, v_new, h_new)``; the step size is bias-corrected
    once ``t > 0``."""
    g_reg = norm_coefficient * x + g
    v_new = alpha * v + (1 - alpha) * g_reg
    h_new = beta * h + (1 - beta) * (g_reg * g_reg)
    rate = r * math.sqrt(1 - beta ** t) / (1 - alpha ** t) if t > 0 else r
    x_new = x - rate * (v_new / (np.sqrt(h_new) + epsilon))
    return _as((1 - norm_coefficient_post) * x_new, x), _as(v_new, v), _as(h_new, h)


@register_op("Adam", attrs={"alpha": Attr.float(_ALPHA), "beta": Attr.float(_BETA),
                            "epsilon": Attr.float(_EPSILON), "norm_coefficient": Attr.float(0.0),
                            "norm_coefficient_post": Attr.float(0.0)},
             inputs=(6, None), pattern=OpPattern.OPAQUE,
             infer=lambda r, t, *xs, **_: _optimizer_infer("Adam", r, t, xs))
def adam(r: np.ndarray, t: np.ndarray, *tensors: np.ndarray, alpha: float, beta: float,
         epsilon: float, norm_coefficient: float,
         norm_coefficient_post: float) -> tuple[np.ndarray, ...]:
    """Adam on n tensors: inputs ``R, T, X1..Xn, G1..Gn, V1..Vn, H1..Hn``, outputs the new X,
    V and H."""
    rate, count = float(np.asarray(r).reshape(-1)[0]), int(np.asarray(t).reshape(-1)[0])
    return _outputs([adam_step(rate, count, *group, alpha=alpha, beta=beta, epsilon=epsilon,
                               norm_coefficient=norm_coefficient,
                               norm_coefficient_post=norm_coefficient_post)
                     for group in _split("Adam", tensors)])


__all__ = ["ACCUMULATORS", "adagrad", "adagrad_step", "adam", "adam_step", "momentum",
           "momentum_step"]
