"""Post-training int8 quantization of ONNX models for accelerators such as VTA.

``tessera.quantize(model, calibration_inputs)`` takes a float ONNX model and returns an int8 QDQ
ONNX model (QuantizeLinear/DequantizeLinear pairs around each quantized layer) with symmetric
power-of-two scales, which the ``vta_sim`` backend runs on the accelerator and every CPU backend
runs as ordinary ONNX:

- :mod:`.calibration` runs the float model with the reference interpreter and records the
  largest magnitude of every tensor that gets quantized;
- :mod:`.scales` turns those into power-of-two scales and quantizes weights and biases;
- :mod:`.qdq` chooses the layers and inserts the QDQ nodes;
- :mod:`.quantizer` ties them together (``quantize``, ``quantize_model`` with a report).

``tessera.quantize`` is the public entry point; this package holds its parts.
"""

from tessera.quantization.calibration import QuantizeError, calibrate
from tessera.quantization.quantizer import QuantizeReport, quantize, quantize_model
from tessera.quantization.scales import pow2_scale

__all__ = ["QuantizeError", "QuantizeReport", "calibrate", "pow2_scale", "quantize",
           "quantize_model"]
