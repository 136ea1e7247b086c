"""Registering a backend in this process, as an installed plugin's entry point would."""

from __future__ import annotations

import types
from typing import Any

from tessera.errors import PluginError
from tessera.plugin.backend import Backend
from tessera.plugin.hookspecs import hookimpl
from tessera.plugin.manager import get_registry


class RegisteredBackend:
    """A backend registered by :func:`register_backend`; ``remove()`` (or leaving its ``with``
    block) takes it out of the registry again."""

    def __init__(self, backend: Backend, plugin_name: str):
        self.backend = backend
        self.plugin_name = plugin_name

    def remove(self) -> None:
        get_registry().remove(self.plugin_name)

    def __enter__(self) -> Backend:
        return self.backend

    def __exit__(self, *exc: Any) -> None:
        self.remove()


def register_backend(backend: Backend, distribution: str = "in-process",
                     version: str = "0") -> RegisteredBackend:
    """Register ``backend`` through the plugin hook, in this process only.

    The registry checks it as it checks an installed plugin (a named ``Backend``, no name
    clash, device name and device API in agreement); a backend it refuses is a
    :class:`~tessera.errors.PluginError` here rather than a warning."""
    if not isinstance(backend, Backend):
        raise PluginError(f"register_backend() takes a Backend instance, got {backend!r}")
    plugin_name = f"kit:{backend.name}"
    module = types.ModuleType(plugin_name)

    @hookimpl
    def tessera_backends() -> list[Backend]:
        return [backend]

    module.tessera_backends = tessera_backends  # type: ignore[attr-defined]
    registry = get_registry()
    registry.remove(plugin_name)
    info = registry.add(module, plugin_name, distribution, version)
    if info.error:
        registry.remove(plugin_name)
        raise PluginError(f"backend {backend.name!r} cannot be registered: {info.error}",
                          plugin=f"{distribution} {version}", backend=backend.name)
    return RegisteredBackend(backend, plugin_name)
