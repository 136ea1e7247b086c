"""Op: ``FlexAttention`` (ONNX ``ai.onnx.preview`` opset 1), scaled dot-product attention over
rank-4 ``(batch, heads, sequence, head size)`` tensors with two optional modifier sub-graphs::

    scores = (Q * sqrt(scale)) @ (K * sqrt(scale))^T     # in Q's dtype
    scores = score_mod(scores.astype(P))                  # P: the softmax precision
    probs  = softmax(scores, axis=-1)
    probs  = prob_mod(probs)
    Y      = (probs @ V.astype(P)).astype(V's dtype)

``scale`` defaults to ``1/sqrt(head_size)``; grouped-query heads share K/V head
``h // (q_heads / kv_heads)``; V's head size may differ from Q's and K's. The precision ``P`` is
the ``softmax_precision`` attribute, else float32 for float16/bfloat16/float32 inputs and float64
for float64 ones (the order of operations and the dtypes follow onnx's reference
implementation).

Each modifier is a closed :class:`~tessera.ir.graph.Function` whose first input is the
``(B, Hq, L, S)`` tensor of dtype ``P`` and whose one output has the same type; it is evaluated
once on the whole tensor (the ops in it are elementwise or broadcasting: position-dependent
mods build their index tensors from ``Shape`` and ``Range``). Outer-scope values a modifier reads
are trailing inputs of the node (``captures`` of them) and trailing inputs of both modifiers,
in the same order, as for ``Loop``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from tessera.errors import OpError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ops.control_flow import run_graph
from tessera.ops.registry import Attr, register_op

#: the graph attributes of FlexAttention, in the order they are applied
MODS = ("score_mod", "prob_mod")

_FLOATS = (DType.bfloat16, DType.float16, DType.float32, DType.float64)

#: runs a modifier on the whole (B, Hq, L, S) tensor; returns its output
ModFn = Callable[[np.ndarray], np.ndarray]


def softmax_dtype(dtype: DType, softmax_precision: DType | None) -> DType:
    """The dtype of the scores, the softmax and the modifiers."""
    if softmax_precision is not None:
        if softmax_precision not in _FLOATS:
            raise OpError(f"FlexAttention: softmax_precision must be one of "
                          f"{', '.join(d.value for d in _FLOATS)}, got {softmax_precision.value}")
        return softmax_precision
    return DType.float64 if dtype == DType.float64 else DType.float32


def _dims(q: TensorType, k: TensorType, v: TensorType) -> tuple[int, int, int, int, int]:
    """(batch, q heads, q length, kv length, v head size), after checking the shapes."""
    for name, t in (("Q", q), ("K", k), ("V", v)):
        if t.ndim != 4:
            raise OpError(f"FlexAttention: {name} must be rank 4 (batch, heads, sequence, head "
                          f"size), got {t}")
        if t.dtype not in _FLOATS or t.dtype != q.dtype:
            raise OpError(f"FlexAttention: Q, K and V must share one float dtype "
                          f"({', '.join(d.value for d in _FLOATS)}), got {q}, {k}, {v}")
    b, hq, length, e = q.shape
    if k.shape[0] != b or v.shape[0] != b:
        raise OpError(f"FlexAttention: batch sizes differ: Q {list(q.shape)}, K "
                      f"{list(k.shape)}, V {list(v.shape)}")
    if k.shape[1] != v.shape[1] or k.shape[2] != v.shape[2]:
        raise OpError(f"FlexAttention: K {list(k.shape)} and V {list(v.shape)} must share heads "
                      "and sequence length")
    if k.shape[3] != e:
        raise OpError(f"FlexAttention: Q head size {e} differs from K head size {k.shape[3]}")
    hkv = k.shape[1]
    if hkv <= 0 or hq % hkv:
        raise OpError(f"FlexAttention: q_num_heads {hq} is not a multiple of kv_num_heads {hkv}")
    return b, hq, length, k.shape[2], v.shape[3]


def _check_mod(graph: Function, key: str, want: TensorType, outer: Sequence[TensorType]) -> None:
    if len(graph.inputs) != 1 + len(outer):
        raise OpError(f"FlexAttention: {key} takes {len(graph.inputs)} inputs; it must take the "
                      f"{list(want.shape)} tensor and the node's {len(outer)} captured value(s)")
    for i, (v, t) in enumerate(zip(graph.inputs, [want, *outer])):
        if v.type != t:
            raise OpError(f"FlexAttention: {key} input {i} (%{v.name}) is {v.type}, the node "
                          f"gives {t}")
    if len(graph.outputs) != 1 or graph.outputs[0].type != want:
        got = ", ".join(str(o.type) for o in graph.outputs) or "nothing"
        raise OpError(f"FlexAttention: {key} must give one {want} tensor (the type of its "
                      f"input), gives {got}")


def _infer(q: TensorType, k: TensorType, v: TensorType, *outer: TensorType,
           score_mod: Function | None, prob_mod: Function | None, scale: float | None,
           softmax_precision: DType | None, captures: int) -> TensorType:
    if captures != len(outer):
        raise OpError(f"FlexAttention: {3 + len(outer)} inputs do not hold Q, K, V and "
                      f"{captures} captured value(s)")
    b, hq, length, s, ev = _dims(q, k, v)
    scores = TensorType((b, hq, length, s), softmax_dtype(q.dtype, softmax_precision))
    for key, graph in zip(MODS, (score_mod, prob_mod)):
        if graph is not None:
            _check_mod(graph, key, scores, outer)
    return TensorType((b, hq, length, ev), q.dtype)


def flex_attention_compute(q: np.ndarray, k: np.ndarray, v: np.ndarray, *,
                           scale: float | None, softmax_precision: DType | None,
                           score_fn: ModFn | None, prob_fn: ModFn | None) -> np.ndarray:
    """FlexAttention on arrays, the modifiers given as functions of the whole score or
    probability tensor (shared by the numpy reference and compiled kernels)."""
    hq, e, hkv = q.shape[1], q.shape[3], k.shape[1]
    if scale is None:
        scale = 1.0 / np.sqrt(e)
    if hq != hkv:
        k = np.repeat(k, hq // hkv, axis=1)
        v = np.repeat(v, hq // hkv, axis=1)
    # Q and K are each pre-scaled by sqrt(scale), computed in float32 and cast to their dtype
    sqrt_scale = np.array(np.sqrt(np.float32(scale)), dtype=q.dtype)
    scores = np.matmul(q * sqrt_scale, np.swapaxes(k * sqrt_scale, -1, -2))
    p = softmax_dtype(DType.from_numpy(q.dtype), softmax_precision).numpy
    scores = scores.astype(p)
    if score_fn is not None:
        scores = np.asarray(score_fn(scores), dtype=p)
    exp = np.exp(scores - np.max(scores, axis=-1, keepdims=True))
    probs = exp / np.sum(exp, axis=-1, keepdims=True)
    if prob_fn is not None:
        probs = np.asarray(prob_fn(probs), dtype=p)
    return np.matmul(probs, v.astype(p)).astype(v.dtype)


def _graph_fn(graph: Function | None, outer: Sequence[np.ndarray]) -> ModFn | None:
    if graph is None:
        return None
    return lambda x: run_graph(graph, [x, *outer])[0]


@register_op("FlexAttention", attrs={"score_mod": Attr.graph(None), "prob_mod": Attr.graph(None),
                                     "scale": Attr.float(None),
                                     "softmax_precision": Attr.dtype(None),
                                     "captures": Attr.int(0)},
             inputs=(3, None), infer=_infer)
def flex_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, *outer: np.ndarray,
                   score_mod: Function | None, prob_mod: Function | None, scale: float | None,
                   softmax_precision: DType | None, captures: int) -> np.ndarray:
    """Attention with score and probability modifier sub-graphs, each run once on the whole
    tensor with the registry's references."""
    return flex_attention_compute(q, k, v, scale=scale, softmax_precision=softmax_precision,
                                  score_fn=_graph_fn(score_mod, outer),
                                  prob_fn=_graph_fn(prob_mod, outer))


__all__ = ["MODS", "ModFn", "flex_attention_compute", "softmax_dtype"]
