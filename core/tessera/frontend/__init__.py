"""Model frontends. ONNX is the one there is: :func:`tessera.frontend.onnx.import_onnx`."""
