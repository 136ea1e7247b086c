"""Post-training int8 quantization of ONNX models, for accelerators such as VTA and for CPUs.

``tessera.quantize(model, calibration_inputs)`` takes a float ONNX model and returns an int8 QDQ
ONNX model (QuantizeLinear/DequantizeLinear pairs around each quantized layer): with symmetric
power-of-two scales (``scheme="vta"``, the default), which the ``vta_sim`` backend runs on the
accelerator, or with any scale, per-channel weights and calibrated ranges (``scheme="cpu"``);
every CPU backend runs either as ordinary ONNX:

- :mod:`.calibration` runs the float model with the reference interpreter and records the
  largest magnitude of every tensor that gets quantized;
- :mod:`.ranges` calibrates ranges by min-max, percentile or entropy (the CPU scheme);
- :mod:`.scales` turns those into scales (power-of-two, or affine with zero points and per
  channel) and quantizes weights and biases;
- :mod:`.qdq` chooses the layers and inserts the QDQ nodes;
- :mod:`.quantizer` ties them together (``quantize``, ``quantize_model`` with a report).

``tessera.quantize`` is the public entry point; this package holds its parts.
"""

from tessera.quantization.calibration import QuantizeError, calibrate
from tessera.quantization.quantizer import SCHEMES, QuantizeReport, quantize, quantize_model
from tessera.quantization.ranges import METHODS, calibrate_ranges
from tessera.quantization.scales import pow2_scale

__all__ = ["METHODS", "SCHEMES", "QuantizeError", "QuantizeReport", "calibrate",
           "calibrate_ranges", "pow2_scale", "quantize", "quantize_model"]
