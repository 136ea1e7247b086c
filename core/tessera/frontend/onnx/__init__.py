"""The ONNX frontend: :func:`import_onnx` turns an ONNX model into a Tessera function."""

from tessera.frontend.onnx.importer import import_onnx, load_model

__all__ = ["import_onnx", "load_model"]
