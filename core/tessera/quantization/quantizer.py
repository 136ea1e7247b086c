"""``tessera.quantize``: float ONNX in, int8 QDQ ONNX out, by one of two schemes.

- ``"vta"`` (the default): symmetric per-tensor power-of-two scales, zero point 0 (VTA
  requantizes with shifts); the first convolution and the classifier stay in float.
- ``"cpu"``: any scale; weights int8 per output channel (or per tensor); activations int8
  symmetric or uint8 asymmetric with a zero point; ranges by min-max, percentile or entropy
  calibration (:mod:`.ranges`); every layer quantized unless excluded.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np
import onnx
import onnx.version_converter

from tessera.frontend.onnx.external_data import inline_external_data
from tessera.frontend.onnx.importer import ModelSource, load_model
from tessera.quantization.calibration import CalibrationData, QuantizeError, calibrate
from tessera.quantization.qdq import (
    MIN_PER_CHANNEL_OPSET,
    ActQuant,
    carried_scales,
    insert_qdq,
    plan_layers,
)
from tessera.quantization.ranges import METHODS, calibrate_ranges, describe
from tessera.quantization.scales import affine_params, pow2_scale

#: The quantization schemes (module doc).
SCHEMES = ("vta", "cpu")


@dataclass
class QuantizeReport:
    """What :func:`quantize_model` did: layers quantized, layers kept in float (with the
    reason), and the scale of every quantized activation tensor."""

    quantized: list[tuple[str, str]] = field(default_factory=list)
    kept_float: list[tuple[str, str, str]] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)
    #: the scheme, and for ``"cpu"`` how (``"per-channel int8 weights, ..."``)
    scheme: str = "vta"
    how: str = "power-of-two scales, zero point 0"
    #: the CPU scheme's activations: tensor -> (scale, zero point, "int8"/"uint8")
    activations: dict[str, tuple[float, int, str]] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"quantized {len(self.quantized)} layer(s) to int8 ({self.how}):"]
        lines += [f"  {name} ({op})" for name, op in self.quantized]
        if self.kept_float:
            lines.append(f"kept {len(self.kept_float)} layer(s) in float:")
            lines += [f"  {name} ({op}): {why}" for name, op, why in self.kept_float]
        if self.activations:
            lines.append("activations (scale, zero point):")
            lines += [f"  {t}: {s:.6g}, {z} ({d})" for t, (s, z, d) in self.activations.items()]
        elif self.scales:
            lines.append("activation scales:")
            lines += [f"  {t}: 2^{int(round(math.log2(s)))}"
                      for t, s in self.scales.items()]
        return "\n".join(lines)


def quantize_model(model: ModelSource, calibration_inputs: CalibrationData, *,
                   scheme: str = "vta", skip_first_conv: bool | None = None,
                   skip_last_dense: bool | None = None, exclude: Iterable[str] = (),
                   batch_size: int = 64, method: str = "minmax", percentile: float = 99.99,
                   symmetric: bool = True,
                   per_channel: bool = True) -> tuple[onnx.ModelProto, QuantizeReport]:
    """:func:`quantize`, also returning a :class:`QuantizeReport`."""
    if scheme not in SCHEMES:
        raise QuantizeError(f"unknown quantization scheme {scheme!r}: expected one of "
                            f"{', '.join(SCHEMES)}")
    if method not in METHODS:
        raise QuantizeError(f"unknown calibration method {method!r}: expected one of "
                            f"{', '.join(METHODS)}")
    if not 0.0 < percentile <= 100.0:
        raise QuantizeError(f"percentile must be in (0, 100], got {percentile}")
    vta = scheme == "vta"
    if vta and (method != "minmax" or not symmetric or not per_channel):
        raise QuantizeError("the vta scheme takes symmetric power-of-two scales over each "
                            "tensor's largest magnitude; method, asymmetric activations and "
                            "per-tensor weights are options of the cpu scheme")
    # the quantized model is the caller's to save anywhere: its tensors hold their bytes
    proto = inline_external_data(load_model(model))
    if not vta and per_channel:
        proto = _with_opset(proto, MIN_PER_CHANNEL_OPSET)
    plan = plan_layers(proto.graph, vta if skip_first_conv is None else skip_first_conv,
                       vta if skip_last_dense is None else skip_last_dense, exclude)
    report = QuantizeReport([(layer.name, layer.op) for layer in plan.layers],
                            [(layer.name, layer.op, layer.skipped) for layer in plan.skipped],
                            scheme=scheme)
    if not vta:
        report.how = (f"{'per-channel' if per_channel else 'per-tensor'} weights, "
                      f"{'symmetric int8' if symmetric else 'asymmetric uint8'} activations, "
                      f"{describe(method, percentile)} calibration")
    if not plan.layers:
        result = onnx.ModelProto()
        result.CopyFrom(proto)
        return result, report
    carried = carried_scales(proto.graph, plan)
    tensors = [t for t in plan.tensors() if t not in carried]
    params: dict[str, float | ActQuant]
    if vta:
        maxima = calibrate(proto, tensors, calibration_inputs, batch_size)
        params = {t: pow2_scale(m) for t, m in maxima.items()}
    else:
        ranges = calibrate_ranges(proto, tensors, calibration_inputs, method, symmetric,
                                  percentile, batch_size)
        params = {t: ActQuant(*affine_params(lo, hi, symmetric))
                  for t, (lo, hi) in ranges.items()}
    for tensor, source in carried.items():
        params[tensor] = params[source]
    for t in plan.tensors():
        q = params[t]
        if isinstance(q, ActQuant):
            report.scales[t] = q.scale
            report.activations[t] = (q.scale, q.zero_point, np.dtype(q.dtype).name)
        else:
            report.scales[t] = q
    weights = "pow2" if vta else ("per_channel" if per_channel else "per_tensor")
    result = insert_qdq(proto, plan, params, weights)
    try:
        onnx.checker.check_model(result)
    except onnx.checker.ValidationError as err:
        raise QuantizeError(f"the quantized model is not valid ONNX: {err}") from None
    return result, report


def _with_opset(model: onnx.ModelProto, least: int) -> onnx.ModelProto:
    """``model`` converted to default-domain opset ``least`` when it declares an older one
    (per-channel weights need a ``DequantizeLinear`` with ``axis``); a clear error when ONNX's
    version converter cannot convert it."""
    version = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), least)
    if version >= least:
        return model
    try:
        converted = onnx.version_converter.convert_version(model, least)
    except Exception as err:  # noqa: BLE001 - the converter raises several kinds
        raise QuantizeError(f"the model uses opset {version}; per-channel weights need opset "
                            f"{least}, and onnx.version_converter could not convert it "
                            f"({err}); quantize with per_channel=False (--per-tensor)") from None
    return converted


def quantize(model: ModelSource, calibration_inputs: CalibrationData, *,
             scheme: str = "vta", skip_first_conv: bool | None = None,
             skip_last_dense: bool | None = None, exclude: Iterable[str] = (),
             batch_size: int = 64, method: str = "minmax", percentile: float = 99.99,
             symmetric: bool = True, per_channel: bool = True) -> onnx.ModelProto:
    """Quantize a float ONNX model to an int8 QDQ model.

    ``scheme="vta"`` (the default) makes a model VTA (``vta_sim``) can run: every ``Conv`` /
    ``Gemm`` / ``MatMul`` with constant weights is quantized (weights per tensor to int8,
    biases to int32, activations to int8; symmetric, zero point 0, every scale a power of two
    so that requantization is a shift), except the first convolution and the last
    Gemm/MatMul (the classifier), which stay in float as in TVM's VTA flow (unless
    ``skip_first_conv`` / ``skip_last_dense`` are False), and the nodes named in ``exclude``.

    ``scheme="cpu"`` makes the model CPUs run (and onnxruntime's quantizer makes): every layer
    quantized (unless ``skip_first_conv`` / ``skip_last_dense`` / ``exclude`` keep some in
    float), weights int8 with one scale per output channel (``per_channel=False``: per
    tensor), biases int32 at ``s_x * s_w``, activations over the range ``method`` gives
    (``"minmax"``, ``"percentile"`` at ``percentile``, ``"entropy"``: :mod:`.ranges`), int8
    with zero point 0 when ``symmetric``, else uint8 with a zero point.

    Activation scales come from calibration: the float model runs on the
    reference interpreter over ``calibration_inputs`` (arrays by input name, samples along axis
    0, cut into batches of ``batch_size`` or of the model's fixed batch size; or an iterable of
    such batches; or one array for a one-input model; every fixed dimension as the model
    declares it, else a ``QuantizeError`` naming the input and both shapes) and each scale
    covers the largest magnitude seen (vta) or the chosen range (cpu). Returns the quantized
    ``onnx.ModelProto``; ``model`` is left unchanged.
    """
    return quantize_model(model, calibration_inputs, scheme=scheme,
                          skip_first_conv=skip_first_conv, skip_last_dense=skip_last_dense,
                          exclude=exclude, batch_size=batch_size, method=method,
                          percentile=percentile, symmetric=symmetric,
                          per_channel=per_channel)[0]
