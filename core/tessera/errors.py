"""The TesseraError family: one subclass per pipeline stage.

Every message names the model node or op involved, what was expected and what was found.
"""

from __future__ import annotations


class TesseraError(Exception):
    """Base class of every error Tessera raises on purpose."""


class IRError(TesseraError):
    """A malformed graph: the verifier or a graph edit found an inconsistency."""


class OpError(TesseraError):
    """An op was used against its schema (unknown attribute, wrong input count or type)."""


class ModelImportError(TesseraError):
    """The ONNX frontend could not import a model (malformed file, unsupported ops, ...)."""

    def __init__(self, message: str, unsupported: list[tuple[str, str, int]] | None = None):
        super().__init__(message)
        #: (op_type, node name, opset) for every unsupported node, when that is the cause.
        self.unsupported = unsupported or []


class NeedsConstantError(ModelImportError):
    """An operand that fixes a shape (Reshape's shape, Reduce axes, ...) is not a constant.

    ``inputs`` lists the graph inputs that would have to be bound to values at compile time
    (``tessera.compile(..., freeze_inputs={...})``).
    """

    def __init__(self, message: str, inputs: list[str]):
        super().__init__(message)
        self.inputs = inputs


class QuantizeError(TesseraError):
    """Quantization failed: a model it cannot quantize, or bad calibration data."""


class PassError(TesseraError):
    """A graph pass failed or was configured wrongly."""


class PluginError(TesseraError):
    """A backend plugin is missing, unavailable, or broke its contract."""


class TargetError(PluginError):
    """A target string could not be parsed or names an unknown backend."""


class PartitionError(TesseraError):
    """The partitioner could not assign every node to a backend."""


class CompileError(TesseraError):
    """A backend failed to compile a region."""


class RunError(TesseraError):
    """Running a compiled module failed (bad inputs, kernel failure)."""


class ArtifactError(TesseraError):
    """An exported artifact is malformed, tampered with, or needs a plugin that is missing."""
