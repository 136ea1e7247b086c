"""ONNX converters: nn family."""
