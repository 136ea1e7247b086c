"""ONNX converters: optional values (``Optional``, ``OptionalHasElement``,
``OptionalGetElement``) where the value's presence is known when the model is imported.

Tessera's values are tensors: an optional that holds a tensor is that tensor, and one that is
absent is an omitted input (``None``). Whether it has an element is then a constant. An empty
optional that a graph would carry as a value (``Optional`` with only a ``type``) has no tensor
form and is refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter
from tessera.frontend.onnx.sequence_value import ABSENT
from tessera.ir.graph import Value


@converter("Optional", since=15)
def convert_optional(ctx: ConvertContext, inputs: list[Value | None],
                     attrs: dict[str, Any]) -> Any:
    if not inputs or inputs[0] is None:
        return ABSENT  # empty, known at import (:mod:`..sequence_value`)
    return ctx.op("Identity", inputs[0])


@converter("OptionalHasElement", since=15)
def convert_has_element(ctx: ConvertContext, inputs: list[Value | None],
                        attrs: dict[str, Any]) -> Any:
    present = bool(inputs) and inputs[0] is not None
    return ctx.const(np.array(present), name=ctx.output_names[0] if ctx.output_names else "has")


@converter("OptionalGetElement", since=15)
def convert_get_element(ctx: ConvertContext, inputs: list[Value | None],
                        attrs: dict[str, Any]) -> Any:
    if not inputs or inputs[0] is None:
        raise ctx.error("an empty optional has no element to get")
    return ctx.op("Identity", inputs[0])
