"""``tessera.quantize``: float ONNX in, int8 QDQ ONNX with power-of-two scales out."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

import onnx

from tessera.frontend.onnx.external_data import inline_external_data
from tessera.frontend.onnx.importer import ModelSource, load_model
from tessera.quantization.calibration import CalibrationData, QuantizeError, calibrate
from tessera.quantization.qdq import carried_scales, insert_qdq, plan_layers
from tessera.quantization.scales import pow2_scale


@dataclass
class QuantizeReport:
    """What :func:`quantize_model` did: layers quantized, layers kept in float (with the
    reason), and the scale of every quantized activation tensor."""

    quantized: list[tuple[str, str]] = field(default_factory=list)
    kept_float: list[tuple[str, str, str]] = field(default_factory=list)
    scales: dict[str, float] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"quantized {len(self.quantized)} layer(s) to int8 (power-of-two scales, "
                 f"zero point 0):"]
        lines += [f"  {name} ({op})" for name, op in self.quantized]
        if self.kept_float:
            lines.append(f"kept {len(self.kept_float)} layer(s) in float:")
            lines += [f"  {name} ({op}): {why}" for name, op, why in self.kept_float]
        if self.scales:
            lines.append("activation scales:")
            lines += [f"  {t}: 2^{int(round(math.log2(s)))}"
                      for t, s in self.scales.items()]
        return "\n".join(lines)


def quantize_model(model: ModelSource, calibration_inputs: CalibrationData, *,
                   skip_first_conv: bool = True, skip_last_dense: bool = True,
                   exclude: Iterable[str] = (),
                   batch_size: int = 64) -> tuple[onnx.ModelProto, QuantizeReport]:
    """:func:`quantize`, also returning a :class:`QuantizeReport`."""
    # the quantized model is the caller's to save anywhere: its tensors hold their bytes
    proto = inline_external_data(load_model(model))
    plan = plan_layers(proto.graph, skip_first_conv, skip_last_dense, exclude)
    report = QuantizeReport([(layer.name, layer.op) for layer in plan.layers],
                            [(layer.name, layer.op, layer.skipped) for layer in plan.skipped])
    if not plan.layers:
        result = onnx.ModelProto()
        result.CopyFrom(proto)
        return result, report
    carried = carried_scales(proto.graph, plan)
    tensors = [t for t in plan.tensors() if t not in carried]
    maxima = calibrate(proto, tensors, calibration_inputs, batch_size)
    scales = {t: pow2_scale(m) for t, m in maxima.items()}
    for tensor, source in carried.items():
        scales[tensor] = scales[source]
    report.scales = {t: scales[t] for t in plan.tensors()}
    result = insert_qdq(proto, plan, scales)
    try:
        onnx.checker.check_model(result)
    except onnx.checker.ValidationError as err:
        raise QuantizeError(f"the quantized model is not valid ONNX: {err}") from None
    return result, report


def quantize(model: ModelSource, calibration_inputs: CalibrationData, *,
             skip_first_conv: bool = True, skip_last_dense: bool = True,
             exclude: Iterable[str] = (), batch_size: int = 64) -> onnx.ModelProto:
    """Quantize a float ONNX model to an int8 QDQ model that VTA (``vta_sim``) can run.

    Every ``Conv`` / ``Gemm`` / ``MatMul`` with constant weights is quantized (weights per tensor
    to int8, biases to int32, activations to int8; symmetric, zero point 0, every scale a power
    of two so that requantization is a shift), except the first convolution and the last
    Gemm/MatMul (the classifier), which stay in float as in TVM's VTA flow, and the nodes named
    in ``exclude``. Activation scales come from calibration: the float model runs on the
    reference interpreter over ``calibration_inputs`` (arrays by input name, samples along axis
    0, cut into batches of ``batch_size`` or of the model's fixed batch size; or an iterable of
    such batches; or one array for a one-input model; every fixed dimension as the model
    declares it, else a ``QuantizeError`` naming the input and both shapes) and each scale
    covers the largest magnitude seen. Returns the quantized ``onnx.ModelProto``; ``model``
    is left unchanged.
    """
    return quantize_model(model, calibration_inputs, skip_first_conv=skip_first_conv,
                          skip_last_dense=skip_last_dense, exclude=exclude,
                          batch_size=batch_size)[0]
