"""ONNX converters: the ``ai.onnx.ml`` featurizers and linear models (tessera.ops.ml).

Tessera has no string tensors: string keys, values, categories and class labels are refused
with an import error naming the node; ZipMap (whose output is a sequence of maps) is refused.
The tree ensembles are in :mod:`.ml_trees`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.frontend.onnx.context import ConvertContext
from tessera.frontend.onnx.registry import converter, simple
from tessera.ir.graph import Value

ML = "ai.onnx.ml"
Inputs = list[Value | None]
Attrs = dict[str, Any]

NO_STRINGS = "Tessera has no string tensors"

simple("Binarizer", domain=ML)
simple("Scaler", domain=ML)
simple("Normalizer", domain=ML)
simple("ArrayFeatureExtractor", domain=ML)


def refuse_strings(ctx: ConvertContext, attrs: Attrs, names: tuple[str, ...], what: str) -> None:
    """An import error when any of the string attributes ``names`` is given."""
    given = [n for n in names if attrs.get(n) not in (None, [], "")]
    if given:
        raise ctx.error(f"string {what} ({', '.join(given)}) are not supported: {NO_STRINGS}; "
                        f"only numeric forms import")


@converter("LinearRegressor", domain=ML)
def convert_linear_regressor(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    return ctx.op("LinearRegressor", inputs[0], **attrs)


@converter("LinearClassifier", domain=ML)
def convert_linear_classifier(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> list[Value]:
    refuse_strings(ctx, attrs, ("classlabels_strings",), "class labels")
    attrs = {"classlabels_ints": [], **attrs}
    return ctx.node("LinearClassifier", inputs, attrs, num_outputs=2)


@converter("OneHotEncoder", domain=ML)
def convert_one_hot_encoder(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    refuse_strings(ctx, attrs, ("cats_strings",), "categories")
    if not attrs.get("cats_int64s"):
        raise ctx.error("cats_int64s is required (the int64 categories)")
    return ctx.op("OneHotEncoder", inputs[0], cats_int64s=attrs["cats_int64s"],
                  zeros=attrs.get("zeros", 1))


def _label_table(ctx: ConvertContext, attrs: Attrs, side: str) -> np.ndarray:
    """The keys or values of a LabelEncoder as one numeric array."""
    if f"{side}_tensor" in attrs:
        table = np.asarray(attrs[f"{side}_tensor"]).reshape(-1)
        if table.dtype.kind not in "iuf":
            raise ctx.error(f"{side}_tensor holds {table.dtype} values; {NO_STRINGS}")
        return table
    if f"{side}_int64s" in attrs:
        return np.asarray(attrs[f"{side}_int64s"], np.int64)
    if f"{side}_floats" in attrs:
        return np.asarray(attrs[f"{side}_floats"], np.float32)
    raise ctx.error(f"no {side} given ({side}_int64s, {side}_floats or {side}_tensor)")


@converter("LabelEncoder", domain=ML)
def convert_label_encoder(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    refuse_strings(ctx, attrs, ("classes_strings", "keys_strings", "values_strings",
                                "default_string"), "keys or values")
    keys = _label_table(ctx, attrs, "keys")
    values = _label_table(ctx, attrs, "values")
    if keys.size != values.size:
        raise ctx.error(f"{keys.size} keys but {values.size} values")
    if "default_tensor" in attrs:
        default = np.asarray(attrs["default_tensor"]).reshape(-1)[:1].astype(values.dtype)
    elif values.dtype.kind == "f":
        value = attrs.get("default_float", -0.0) if "values_floats" in attrs else -0.0
        default = np.asarray([value], values.dtype)
    else:
        value = attrs.get("default_int64", -1) if "values_int64s" in attrs else -1
        default = np.asarray([value], values.dtype)
    x = inputs[0]
    assert x is not None
    if x.type.dtype.numpy.kind != keys.dtype.kind:
        raise ctx.error(f"the keys are {keys.dtype} but X is {x.type.dtype}")
    return ctx.op("LabelEncoder", x, keys=keys, values=values, default=default)


@converter("ZipMap", domain=ML)
def convert_zipmap(ctx: ConvertContext, inputs: Inputs, attrs: Attrs) -> Value:
    raise ctx.error("ZipMap outputs a sequence of maps, which Tessera (tensors only) cannot "
                    "represent; export the model without it (skl2onnx: options="
                    "{'zipmap': False}) and read the classifier's probability tensor")
