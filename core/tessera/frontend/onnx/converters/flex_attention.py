"""Converter: ``FlexAttention`` of domain ``ai.onnx.preview`` (opset 1).

Its ``score_mod`` and ``prob_mod`` graph attributes become closed functions whose one declared
input is the ``(B, Hq, L, S)`` tensor in the softmax precision (so ``Shape`` of it folds and the
index tensors a positional modifier builds with ``Range`` are constants); the outer values they
read become trailing inputs of the node and of both functions (:mod:`tessera.ops.flex_attention`).
"""

from __future__ import annotations

from typing import Any

from tessera.errors import OpError
from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.dtypes import onnx_dtype
from tessera.frontend.onnx.registry import converter
from tessera.frontend.onnx.subgraphs import share_captures
from tessera.ir.graph import Value
from tessera.ir.types import TensorType
from tessera.ops.flex_attention import MODS, softmax_dtype

DOMAIN = "ai.onnx.preview"


@converter("FlexAttention", since=1, domain=DOMAIN)
def convert_flex_attention(ctx: ConvertContext, inputs: list[Value | None],
                           attrs: dict[str, Any]) -> list[Value]:
    if len(inputs) != 3 or any(v is None for v in inputs):
        raise ctx.error(f"expected the three inputs Q, K and V, got {len(inputs)}")
    q, k, v = inputs
    assert q is not None and k is not None and v is not None
    for name, t in (("Q", q.type), ("K", k.type), ("V", v.type)):
        if t.ndim != 4:
            raise ctx.error(f"{name} must be rank 4 (batch, heads, sequence, head size), got {t}")
    precision = None
    if "softmax_precision" in attrs:
        precision = onnx_dtype(int(attrs["softmax_precision"]), "attribute 'softmax_precision'")
    try:
        p = softmax_dtype(q.type.dtype, precision)
    except OpError as e:
        raise ctx.error(str(e)) from None
    scores = TensorType((q.type.shape[0], q.type.shape[1], q.type.shape[2], k.type.shape[2]), p)
    mods = [(key, ctx.subgraph(attrs[key], key, [scores])) for key in MODS if key in attrs]
    captured = share_captures([m for _, m in mods])
    node_attrs: dict[str, Any] = {key: fn for key, (fn, _) in mods}
    if "scale" in attrs:
        node_attrs["scale"] = float(attrs["scale"])
    if precision is not None:
        node_attrs["softmax_precision"] = precision
    node_attrs["captures"] = len(captured)
    return ctx.node("FlexAttention", [q, k, v, *captured], node_attrs)
