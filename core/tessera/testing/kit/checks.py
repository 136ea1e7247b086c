"""Static checks of a backend: what can be verified before it compiles anything."""

from __future__ import annotations

from tessera.errors import PluginError
from tessera.plugin import contract
from tessera.plugin.backend import Backend
from tessera.plugin.device import Device
from tessera.plugin.patterns import Pattern
from tessera.plugin.target import TargetKind


def check_backend(backend: Backend, target: TargetKind | str | None = None) -> list[Pattern]:
    """Check ``backend``'s declarations; return its claims under ``target`` (default: its
    name with no options). Raises a :class:`PluginError` naming the first problem."""
    def fail(rule: str, message: str) -> PluginError:
        return contract.violation(backend.name or repr(backend), rule, message)

    if not isinstance(backend, Backend):
        raise PluginError(f"{backend!r} is not a tessera.plugin.Backend")
    if not isinstance(backend.name, str) or not backend.name.isidentifier():
        raise fail("Backend.name is a target kind (an identifier)",
                   f"name is {backend.name!r}")
    if not isinstance(backend.device, str) or not backend.device:
        raise fail("Backend.device names where its buffers live", f"device is "
                   f"{backend.device!r}")
    if not isinstance(backend.options, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in backend.options.items()):
        raise fail("Backend.options maps option names to descriptions",
                   f"options is {backend.options!r}")
    if not isinstance(backend.artifact_version, str):
        raise fail("Backend.artifact_version is a string",
                   f"artifact_version is {backend.artifact_version!r}")
    reason = contract.check_device(backend)
    if reason:
        raise fail("the device API's name is the backend's device", reason)
    if not isinstance(backend.device_api(), Device):
        raise fail("device_api() returns a tessera.plugin.Device",
                   f"device_api() returned {backend.device_api()!r}")
    available = contract.call(backend, "available()", backend.available)
    if available is not None and not isinstance(available, str):
        raise fail("available() returns None or a reason", f"available() returned "
                   f"{available!r}")
    kind = target if isinstance(target, TargetKind) else TargetKind(target or backend.name)
    claims = contract.check_claims(backend, contract.call(backend, "claims()", backend.claims,
                                                          kind))
    if not claims:
        raise fail("claims() names what the backend runs", "claims() is empty")
    return claims
