"""ONNX converters: quant family."""
