"""ONNX converters, one module per op family (explicit import list)."""

from tessera.frontend.onnx.converters import (  # noqa: F401  (imported for their registrations)
    binary,
    bitcast,
    control_flow,
    detection,
    elementwise,
    flex_attention,
    ml,
    ml_trees,
    nn,
    optional,
    quant,
    reduce,
    sequence,
    sequences,
    tensor,
    training,
)
