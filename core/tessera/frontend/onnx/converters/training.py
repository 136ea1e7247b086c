"""ONNX converters: optimizer steps of domain ``ai.onnx.preview.training`` (opset 1).

``Adagrad``, ``Adam`` and ``Momentum`` map one to one onto the IR ops of the same names, with
their variadic inputs and outputs in ONNX's order (see :mod:`tessera.ops.training`).
"""

from __future__ import annotations

from typing import Any

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter
from tessera.ir.graph import Value
from tessera.ops.training import ACCUMULATORS

DOMAIN = "ai.onnx.preview.training"


@converter(("Adagrad", "Adam", "Momentum"), since=1, domain=DOMAIN)
def convert_optimizer(ctx: ConvertContext, inputs: list[Value | None],
                      attrs: dict[str, Any]) -> list[Value]:
    """Every input is required; the node lists all its outputs (n new X, then n of each
    accumulator)."""
    if len(inputs) < 2 or any(v is None for v in inputs):
        raise ctx.error("every input (R, T and the tensors) is required")
    groups = 2 + len(ACCUMULATORS[ctx.op_type])
    n = (len(inputs) - 2) // groups
    if ctx.num_outputs != (groups - 1) * n:
        raise ctx.error(f"{len(inputs) - 2} tensor inputs update {n} tensor(s): expected "
                        f"{(groups - 1) * n} outputs, got {ctx.num_outputs}")
    return ctx.node(ctx.op_type, inputs, attrs)
