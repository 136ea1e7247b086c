"""ONNX converters: tensor family."""
