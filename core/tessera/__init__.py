"""Tessera: a deep-learning compiler whose backends are pip-installable plugins.

::

    import tessera
    mod = tessera.compile("model.onnx", target="llvm", input_shapes={"data": [1, 3, 224, 224]})
    outs = mod.run(data=x)
    mod.export("model.tar"); mod = tessera.load("model.tar")
    qmodel = tessera.quantize("model.onnx", {"data": calibration_batch})  # int8 QDQ ONNX
"""

from importlib.metadata import PackageNotFoundError, version

from tessera.api import compile, load
from tessera.errors import TesseraError
from tessera.quantization import quantize
from tessera.runtime.module import Module

try:
    __version__ = version("tessera")
except PackageNotFoundError:  # running from a source tree without installing
    __version__ = "0+unknown"

__all__ = ["Module", "TesseraError", "__version__", "compile", "load", "quantize"]
