"""Tessera: a deep-learning compiler whose backends are pip-installable plugins.

::

    import tessera
    mod = tessera.compile("model.onnx", target="llvm", input_shapes={"data": [1, 3, 224, 224]})
    config = tessera.CompileConfig(opt_level=2, tuning_records="tuning.jsonl")
    mod = tessera.compile("model.onnx", "llvm", config)  # the same settings, as one object
    outs = mod.run(data=x)
    mod.export("model.tar"); mod = tessera.load("model.tar")
    qmodel = tessera.quantize("model.onnx", {"data": calibration_batch})  # int8 QDQ ONNX
"""

# The op families register their schemas into tessera.ir's table before anything asks for one:
# the package is the composition root, the one module that may import every layer.
from tessera import ops as _ops  # noqa: F401
from tessera._version import __version__
from tessera.api import compile, load
from tessera.config import CompileConfig
from tessera.errors import TesseraError
from tessera.quantization import quantize
from tessera.runtime.module import Module

__all__ = ["CompileConfig", "Module", "TesseraError", "__version__", "compile", "load", "quantize"]
