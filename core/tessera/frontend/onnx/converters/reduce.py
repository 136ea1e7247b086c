"""ONNX converters: reduce family."""
