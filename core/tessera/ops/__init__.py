"""Operator registry. Importing this package registers every op family (explicit list below)."""

from tessera.ops import (  # noqa: F401  (imported for their registrations)
    attention,
    binary,
    bitcast,
    control_flow,
    conv,
    detection,
    dynamic_slice,
    elementwise,
    flex_attention,
    layout,
    linalg,
    ml,
    ml_trees,
    nn,
    norm,
    pool,
    quant,
    reduce,
    rnn,
    sampling,
    shape,
    signal,
    symbolic_rules,
    tensor,
    text,
    training,
)
from tessera.ops.registry import (
    Attr,
    OpPattern,
    OpSchema,
    all_ops,
    get_schema,
    has_op,
    register_op,
)

__all__ = ["Attr", "OpPattern", "OpSchema", "all_ops", "get_schema", "has_op", "register_op"]
