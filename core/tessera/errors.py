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


class TuningRecordsError(TesseraError):
    """A tuning records file is missing or is not one (no line of it is a record)."""


class PassError(TesseraError):
    """A graph pass failed or was configured wrongly."""


class PluginError(TesseraError):
    """A backend plugin is missing, unavailable, or broke its contract.

    Errors raised at the boundary between Tessera and a plugin (``tessera.plugin.contract``)
    say which ``plugin`` (distribution and version), ``backend``, ``region`` and ``contract``
    (the rule broken, e.g. ``"compile() returns a CompiledRegion"``) were involved; each is
    None where it does not apply.
    """

    def __init__(self, message: str, *, plugin: str | None = None, backend: str | None = None,
                 region: str | None = None, contract: str | None = None):
        super().__init__(message)
        self.plugin = plugin
        self.backend = backend
        self.region = region
        self.contract = contract


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


class ExportError(TesseraError):
    """A compiled model cannot be exported in the form asked for (a region whose backend
    cannot hand over its code, a model with shapes the form cannot hold), or the export's
    tools (a C compiler) failed."""


class PluginCompileError(PluginError, CompileError):
    """A backend broke its contract while compiling a region (an exception it did not mean to
    raise, or a ``CompiledRegion`` the runtime cannot use)."""


class PluginRunError(PluginError, RunError):
    """A backend's kernel broke its contract while running (raised, or returned a value)."""


class PluginArtifactError(PluginError, ArtifactError):
    """A backend failed to save or load its part of an artifact, or refused a saved region."""
