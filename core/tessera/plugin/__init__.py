"""The plugin system: hook specs, plugin manager, Backend/Device base classes, target strings."""

from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel, SavedBackend
from tessera.plugin.device import CPU, CPUDevice, Device
from tessera.plugin.hookspecs import hookimpl
from tessera.plugin.manager import get_backend, get_backends, get_registry, reload_plugins
from tessera.plugin.target import Target, TargetKind

__all__ = [
    "CPU", "Backend", "CPUDevice", "CompileOptions", "CompiledRegion", "Device", "Kernel",
    "Target", "TargetKind", "get_backend", "get_backends", "get_registry", "hookimpl",
    "reload_plugins", "SavedBackend",
]
