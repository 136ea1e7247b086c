"""Loading plugins and finding backends.

Every plugin is found through its entry point in the group ``tessera.backends``, the built-in
reference backend too (the core distribution ``tessera`` declares ``ref`` there in its
``pyproject.toml``); the core's own entry points are loaded first. A plugin that fails to
import, whose hook raises, returns something other than named backends, or names a backend
another plugin already provides is recorded as broken with the reason and a warning (none of its
backends is registered); it never breaks the program. A backend whose device name and device
API disagree is registered with a warning (:func:`tessera.plugin.contract.check_device`).
"""

from __future__ import annotations

import importlib
import importlib.metadata as md
import warnings
from dataclasses import dataclass
from functools import lru_cache

import pluggy

from tessera.errors import PluginError, TargetError
from tessera.plugin import contract, hookspecs
from tessera.plugin.backend import Backend
from tessera.plugin.distribution import distribution_version  # noqa: F401 (re-export)
from tessera.plugin.target import Target, TargetKind

#: The distribution of the core, whose own plugins (the reference backend) load first.
CORE_DISTRIBUTION = "tessera"


@dataclass
class PluginInfo:
    """One loaded (or broken) plugin: where it came from and what it gave."""

    name: str
    distribution: str
    version: str
    backends: list[str]
    error: str | None = None


class Registry:
    """The loaded plugin manager with its backends by name."""

    def __init__(self) -> None:
        self.pm = pluggy.PluginManager(hookspecs.PROJECT)
        self.pm.add_hookspecs(hookspecs)
        self.plugins: list[PluginInfo] = []
        self.backends: dict[str, Backend] = {}
        self._owner: dict[str, str] = {}

    def load(self) -> None:
        for ep in sorted(md.entry_points(group=hookspecs.ENTRY_POINT_GROUP),
                         key=lambda ep: _dist_name(ep) != CORE_DISTRIBUTION):
            dist = ep.dist.name if ep.dist is not None else "?"
            version = ep.dist.version if ep.dist is not None else "?"
            try:
                module = ep.load()
            except Exception as e:  # noqa: BLE001 - a broken plugin must not break Tessera
                self._broken(ep.name, dist, version, f"import failed: {type(e).__name__}: {e}")
                continue
            self._register(module, ep.name, dist, version)

    def _broken(self, name: str, dist: str, version: str, reason: str) -> None:
        warnings.warn(f"tessera plugin {name!r} ({dist} {version}) is unavailable: {reason}",
                      RuntimeWarning, stacklevel=3)
        self.plugins.append(PluginInfo(name, dist, version, [], reason))

    def _register(self, plugin: object, name: str, dist: str, version: str) -> None:
        try:
            self.pm.register(plugin, name=name)
        except Exception as e:  # noqa: BLE001 - pluggy validates hook signatures here
            self._broken(name, dist, version, f"registration failed: {e}")
            return
        impls = getattr(plugin, "tessera_backends", None)
        try:
            backends = list(impls()) if impls is not None else []
        except Exception as e:  # noqa: BLE001
            self.pm.unregister(plugin)
            self._broken(name, dist, version, f"tessera_backends() raised {type(e).__name__}: {e}")
            return
        problem = self._check_backends(backends, dist)
        if problem:
            self.pm.unregister(plugin)
            self._broken(name, dist, version, problem)
            return
        for backend in backends:
            self.backends[backend.name] = backend
            self._owner[backend.name] = dist
            reason = contract.check_device(backend)
            if reason:
                warnings.warn(f"tessera plugin {name!r} ({dist} {version}), backend "
                              f"{backend.name!r}: {reason}", RuntimeWarning, stacklevel=3)
        self.plugins.append(PluginInfo(name, dist, version, [b.name for b in backends]))

    def _check_backends(self, backends: list[Backend], dist: str) -> str | None:
        """Why a plugin's backends cannot be registered (then none of them is), or None."""
        seen: set[str] = set()
        for backend in backends:
            if not isinstance(backend, Backend) or not isinstance(backend.name, str) or \
                    not backend.name:
                return f"tessera_backends() returned {backend!r}, not a named Backend"
            if backend.name in self.backends:
                return (f"backend name {backend.name!r} is already provided by "
                        f"{self._owner[backend.name]}; this plugin ({dist}) is disabled")
            if backend.name in seen:
                return f"tessera_backends() returned two backends named {backend.name!r}"
            seen.add(backend.name)
        return None

    def add(self, plugin: object, name: str, distribution: str = "in-process",
            version: str = "0") -> PluginInfo:
        """Register a plugin object (a module or any object with hook implementations) in this
        process, as its entry point would: what the backend test kit uses instead of pip.
        Returns its record; a broken plugin is recorded (with a warning), not raised."""
        self._register(plugin, name, distribution, version)
        return self.plugins[-1]

    def remove(self, name: str) -> None:
        """Forget plugin ``name`` and its backends (the undo of :meth:`add`)."""
        for info in [i for i in self.plugins if i.name == name]:
            for backend in info.backends:
                self.backends.pop(backend, None)
                self._owner.pop(backend, None)
            self.plugins.remove(info)
        plugin = self.pm.get_plugin(name)
        if plugin is not None:
            self.pm.unregister(plugin)

    def broken_distribution(self, distribution: str) -> PluginInfo | None:
        """The record of an installed plugin of ``distribution`` that failed to load."""
        for info in self.plugins:
            if info.error and info.distribution == distribution:
                return info
        return None

    def plugin_version(self, backend: str) -> str | None:
        """The version of the plugin that registered ``backend``, as it was registered."""
        for info in self.plugins:
            if backend in info.backends:
                return info.version
        return None

    def owner(self, backend: str) -> str:
        """The distribution that provides a backend."""
        return self._owner[backend]

    def get(self, name: str) -> Backend:
        try:
            return self.backends[name]
        except KeyError:
            raise TargetError(f"unknown target kind {name!r}; installed backends: "
                              f"{', '.join(sorted(self.backends))}") from None


def _dist_name(ep: md.EntryPoint) -> str:
    return ep.dist.name if ep.dist is not None else ""


@lru_cache(maxsize=1)
def get_registry() -> Registry:
    """The process-wide registry, loaded on first use."""
    registry = Registry()
    registry.load()
    return registry


def reload_plugins() -> Registry:
    """Forget loaded plugins and load them again (after installing one at run time)."""
    get_registry.cache_clear()
    importlib.invalidate_caches()
    return get_registry()


def get_backends() -> dict[str, Backend]:
    return dict(get_registry().backends)


def get_backend(name: str) -> Backend:
    return get_registry().get(name)


def resolve_target(target: str | Target | None) -> list[tuple[Backend, TargetKind]]:
    """Backends in claim priority order with their target kinds, checking each is available.

    ``None`` or ``"auto"`` picks the highest-ranked available CPU backend. A kind's ``-libs=``
    list puts the named backends just before it, with the kind's options.
    """
    registry = get_registry()
    if target is None or (isinstance(target, str) and target.strip() == "auto"):
        target = Target.parse(default_cpu_target())
    parsed = Target.parse(target)
    ordered: list[tuple[Backend, TargetKind]] = []
    for kind in parsed.kinds:
        backend = registry.get(kind.name)
        allowed = set(backend.options) | {"libs"}
        unknown = sorted(set(kind.options) - allowed)
        if unknown:
            known = ", ".join(f"-{k} ({d})" for k, d in backend.options.items()) or "none"
            raise TargetError(f"target {kind.name!r} does not know option(s) "
                              f"{', '.join('-' + u for u in unknown)}; its options: {known}")
        for lib in kind.get_list("libs"):
            # a library backend sees the options of the kind that names it
            ordered.append((registry.get(lib), TargetKind(lib, dict(kind.options))))
        ordered.append((backend, kind))
    for backend, kind in ordered:
        reason = contract.call(backend, "available_for()", backend.available_for, kind)
        if reason:
            raise TargetError(f"backend {backend.name!r} is installed but unavailable here: "
                              f"{reason}")
    return ordered


def default_cpu_target() -> str:
    """The name of the best available CPU backend (highest ``default_rank``)."""
    best = None
    for backend in get_registry().backends.values():
        if backend.device != "cpu" or backend_unavailable(backend):
            continue
        if best is None or backend.default_rank > best.default_rank:
            best = backend
    if best is None:
        raise PluginError("no CPU backend is available: the reference backend 'ref' is "
                          "missing (is the tessera distribution installed, with its entry "
                          "point in the group tessera.backends? pip install -e .)")
    return best.name


def backend_unavailable(backend: Backend) -> str | None:
    """``backend.available()``, with an exception it raises as the reason it is unavailable."""
    try:
        return backend.available()
    except Exception as e:  # noqa: BLE001 - a plugin's check must not break the program
        return f"available() raised {type(e).__name__}: {e}"
