"""ONNX converters: sequence family."""
