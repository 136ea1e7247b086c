"""The whole plugin contract (pluggy project name ``tessera``).

A plugin is a module (or object) with functions marked ``@tessera.plugin.hookimpl`` named like
the specs below; a package makes it loadable by declaring an entry point in the group
``tessera.backends``::

    [project.entry-points."tessera.backends"]
    mynpu = "tessera_mynpu.plugin"

Plugins are loaded by an explicit call (:func:`tessera.plugin.manager.get_plugin_manager`), never
as an import side effect. The built-in reference backend is registered through the same hook.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from tessera.plugin.backend import Backend

PROJECT = "tessera"
ENTRY_POINT_GROUP = "tessera.backends"

hookspec = pluggy.HookspecMarker(PROJECT)
hookimpl = pluggy.HookimplMarker(PROJECT)


@hookspec
def tessera_backends() -> list[Backend]:
    """Return every backend this plugin provides, as :class:`~tessera.plugin.backend.Backend`
    instances.

    Called once, when the plugin manager is first built (``tessera.plugin.get_backends``). The
    implementation must be cheap and must not fail when its hardware or toolchain is missing:
    the backend's ``available()`` reports that instead. Backend names must be unique across
    plugins; a clash is reported as a :class:`~tessera.errors.PluginError`. Changes nothing.
    """
