"""ONNX converters: binary and variadic family.

Opset < 7 gave binary ops explicit ``broadcast``/``axis`` attributes; from opset 7 on every op
here broadcasts like numpy, as the IR ops do, so each maps one to one onto its IR op. Later
versions only widened the element types (``Pow`` 12: exponent of another type; ``BitShift`` 28:
signed types and defined out-of-range shifts; ``Mod`` 28: floor modulo of floats), which the IR
ops already cover. ``Max``/``Min``/``Sum``/``Mean`` required equal shapes before opset 8; the
broadcasting IR ops are a superset.
"""

from __future__ import annotations

from tessera.frontend.onnx.registry import simple

for _op in ("Add", "Sub", "Mul", "Div", "Pow", "Equal", "Less", "Greater", "And", "Or", "Xor"):
    simple(_op, since=7)

for _op in ("Max", "Min", "Sum", "Mean"):
    simple(_op, since=6)

for _op, _since in (("Where", 9), ("Mod", 10), ("BitShift", 11), ("LessOrEqual", 12),
                    ("GreaterOrEqual", 12), ("BitwiseAnd", 18), ("BitwiseOr", 18),
                    ("BitwiseXor", 18)):
    simple(_op, since=_since)
