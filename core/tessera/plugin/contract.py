"""The boundary between Tessera and its plugins: every call into a backend goes through here.

A plugin's bug (an exception it did not mean to raise, a return value of the wrong kind) becomes
a :class:`~tessera.errors.PluginError` (or its compile, run or artifact subclass) that names the
plugin, the backend, the region and the contract broken, with the original exception as its
``__cause__`` (``tessera --verbose`` prints it). A :class:`~tessera.errors.TesseraError` a
backend raises on purpose (``CompileError("unsupported ...")``) passes through unchanged.

Strict mode turns what is otherwise a warning (a claim pattern's ``check`` that raises, a
device name that does not match the device API) into an error. The backend test kit switches
it on (:func:`strict_contracts`); ``TESSERA_STRICT_PLUGINS=1`` does too.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypeVar

from tessera.errors import PluginCompileError, PluginError, TesseraError
from tessera.ir.types import TensorType
from tessera.plugin import manager
from tessera.plugin.backend import CompiledRegion, Kernel
from tessera.plugin.patterns import Pattern

if TYPE_CHECKING:
    from tessera.ir.graph import Function, Node
    from tessera.plugin.backend import Backend

T = TypeVar("T")

_strict: list[bool] = []
_warned: set[tuple[str, ...]] = set()
_warned_lock = threading.Lock()


def is_strict() -> bool:
    """Whether contract warnings are errors (inside :func:`strict_contracts`, or with the
    environment variable ``TESSERA_STRICT_PLUGINS`` set to anything but ``0``)."""
    if _strict:
        return _strict[-1]
    return os.environ.get("TESSERA_STRICT_PLUGINS", "") not in ("", "0")


@contextmanager
def strict_contracts(enabled: bool = True) -> Iterator[None]:
    """Within the block, contract warnings are :class:`PluginError`s (process-wide)."""
    _strict.append(enabled)
    try:
        yield
    finally:
        _strict.pop()


def describe(backend: Backend | str) -> str:
    """``backend 'mynpu' (plugin tessera-mynpu 0.1.0)``, as far as it is known."""
    name = backend if isinstance(backend, str) else backend.name
    plugin = plugin_of(name)
    return f"backend {name!r}" + (f" (plugin {plugin})" if plugin else "")


def plugin_of(backend: str) -> str | None:
    """The distribution and version that registered backend ``backend``, or None."""
    registry = manager.get_registry()
    for info in registry.plugins:
        if backend in info.backends:
            return f"{info.distribution} {info.version}"
    return None


def violation(backend: Backend | str, contract: str, message: str, region: str | None = None,
              cls: type[PluginError] = PluginError) -> PluginError:
    """An error naming the backend's plugin, the region and the contract broken."""
    name = backend if isinstance(backend, str) else backend.name
    where = f" in region {region}" if region else ""
    return cls(f"{describe(backend)}{where}: {message} (contract: {contract})",
               plugin=plugin_of(name), backend=name, region=region, contract=contract)


def call(backend: Backend, what: str, fn: Callable[..., T], *args: Any,
         region: str | None = None, cls: type[PluginError] = PluginError) -> T:
    """``fn(*args)``, a call into ``backend``; an unexpected exception becomes ``cls``."""
    try:
        return fn(*args)
    except TesseraError:
        raise
    except Exception as e:  # noqa: BLE001 - a plugin bug: name the plugin
        method = what.split("(")[0]
        raise violation(backend, f"{method}() raises only TesseraErrors",
                        f"{what} raised {type(e).__name__}: {e}", region, cls) from e


def warn_or_raise(backend: Backend | str, contract: str, message: str,
                  key: tuple[str, ...] = ()) -> None:
    """A contract violation that Tessera can live with: a warning (once per ``key``), or a
    :class:`PluginError` in strict mode."""
    error = violation(backend, contract, message)
    if is_strict():
        raise error
    with _warned_lock:
        if key:
            if key in _warned:
                return
            _warned.add(key)
    warnings.warn(str(error), RuntimeWarning, stacklevel=3)


def check_failed(backend: Backend, pattern: Pattern, node: Node, error: BaseException) -> None:
    """A claim pattern's ``check`` raised on ``node``: the pattern does not match there, and
    the backend's author hears of it (a warning once per pattern and error type, or an error
    in strict mode)."""
    name = backend.name
    message = (f"the check of pattern {pattern.name!r} raised {type(error).__name__}: {error} "
               f"on node {node.name} ({node.op}); the pattern was treated as not matching")
    key = (name, pattern.name, type(error).__name__)
    if is_strict():
        raise violation(backend, "a pattern's check returns a bool and does not raise",
                        message) from error
    warn_or_raise(backend, "a pattern's check returns a bool and does not raise", message, key)


def check_claims(backend: Backend, patterns: Any) -> list[Pattern]:
    """What ``claims()`` returned, checked to be a list of patterns."""
    if not isinstance(patterns, (list, tuple)) or not all(
            isinstance(p, Pattern) for p in patterns):
        raise violation(backend, "claims() returns a list of Patterns",
                        f"claims() returned {_short(patterns)}")
    return list(patterns)


def check_compiled(backend: Backend, region: Function, compiled: Any) -> CompiledRegion:
    """What ``compile`` (or ``load``) returned, checked against what the runtime relies on;
    a :class:`PluginCompileError` naming the first problem otherwise."""
    def fail(contract: str, message: str) -> PluginCompileError:
        error = violation(backend, contract, message, region.name, PluginCompileError)
        assert isinstance(error, PluginCompileError)
        return error

    if not isinstance(compiled, CompiledRegion):
        raise fail("compile() returns a CompiledRegion",
                   f"compile() returned {_short(compiled)} instead of a CompiledRegion")
    if compiled.backend != backend.name:
        raise fail("CompiledRegion.backend is the backend's name",
                   f"the compiled region says backend {compiled.backend!r}")
    if not isinstance(compiled.tensors, dict) or not all(
            isinstance(k, str) and isinstance(t, TensorType) for k, t in compiled.tensors.items()):
        raise fail("CompiledRegion.tensors maps names to TensorTypes",
                   f"tensors is {_short(compiled.tensors)}")
    if not isinstance(compiled.constants, dict):
        raise fail("CompiledRegion.constants maps names to device buffers",
                   f"constants is {_short(compiled.constants)}")
    if not isinstance(compiled.kernels, list):
        raise fail("CompiledRegion.kernels is a list of Kernels",
                   f"kernels is {_short(compiled.kernels)}")
    if compiled.bind_sequence is not None and not callable(compiled.bind_sequence):
        raise fail("bind_sequence is None or callable",
                   f"bind_sequence is {_short(compiled.bind_sequence)}")
    names = compiled.size_names
    if not isinstance(names, list) or not all(isinstance(n, str) and n for n in names) \
            or len(set(names)) != len(names):
        raise fail("CompiledRegion.size_names is a list of distinct variable names",
                   f"size_names is {_short(names)}")
    known = set(compiled.tensors) | set(compiled.constants)
    written: set[str] = set()
    for k in compiled.kernels:
        if not isinstance(k, Kernel):
            raise fail("CompiledRegion.kernels is a list of Kernels",
                       f"a kernel is {_short(k)}")
        if not callable(k.fn):
            raise fail("Kernel.fn is callable", f"kernel {k.name}'s fn is {_short(k.fn)}")
        if not isinstance(k.workspace_bytes, int) or k.workspace_bytes < 0:
            raise fail("Kernel.workspace_bytes is a byte count >= 0",
                       f"kernel {k.name} asks for {k.workspace_bytes!r} workspace bytes")
        for n in list(k.inputs) + list(k.outputs):
            if n not in known:
                raise fail("every tensor a kernel uses is in CompiledRegion.tensors or "
                           "constants", f"kernel {k.name} uses {n!r}, which is declared in "
                           f"neither")
        written.update(k.outputs)
    for v in region.inputs:
        if v.name not in compiled.tensors:
            raise fail("CompiledRegion.tensors types every region input",
                       f"region input {v.name!r} is not in tensors")
        if compiled.tensors[v.name] != v.type:
            raise fail("CompiledRegion.tensors types every region input as the region does",
                       f"region input {v.name!r} is {v.type} in the region and "
                       f"{compiled.tensors[v.name]} in tensors")
    inputs = {v.name for v in region.inputs}
    for v in region.outputs:
        if v.is_constant or v.name in inputs:
            continue
        if v.name not in written:
            raise fail("a kernel writes every region output",
                       f"no kernel writes region output {v.name!r} "
                       f"({len(compiled.kernels)} kernels)")
        if compiled.tensors.get(v.name) != v.type:
            raise fail("CompiledRegion.tensors types every region output as the region does",
                       f"region output {v.name!r} is {v.type} in the region and "
                       f"{compiled.tensors.get(v.name)} in tensors")
    return compiled


def check_device(backend: Backend) -> str | None:
    """Why ``backend``'s device name and device API disagree, or None.

    A backend whose ``device`` is not ``"cpu"`` gets arenas of its own and an explicit copy for
    every tensor that crosses to or from it; with the host's device API (``CPU``) those copies
    move host memory to host memory for nothing."""
    try:
        api = backend.device_api()
    except Exception as e:  # noqa: BLE001 - reported as the problem
        return f"device_api() raised {type(e).__name__}: {e}"
    api_name = getattr(api, "name", None)
    if api_name != backend.device:
        return (f"device is {backend.device!r} but device_api() returns the {api_name!r} "
                f"device; a backend whose buffers are host numpy arrays should say "
                f"device = 'cpu' (no copies), one with memory of its own needs a Device whose "
                f"name is its device")
    return None


def _short(value: Any, limit: int = 80) -> str:
    text = f"{type(value).__name__} {value!r}"
    return text if len(text) <= limit else text[:limit - 3] + "..."
