"""The whole plugin contract (pluggy project name ``tessera``).

A plugin is a module (or object) with functions marked ``@tessera.plugin.hookimpl`` named like
the specs below; a package makes it loadable by declaring an entry point in the group
``tessera.backends``::

    [project.entry-points."tessera.backends"]
    mynpu = "tessera_mynpu.plugin"

Plugins are loaded by an explicit call (:func:`tessera.plugin.manager.get_plugin_manager`), never
as an import side effect. The built-in reference backend is registered through the same hook.

What a backend guarantees about threads: ``Module.run`` is called from many threads at once, and
each concurrent call has its own execution state (its own arenas, its own bindings of every
kernel and ``bind_sequence``), so a compiled region's kernels may run concurrently on different
buffers. They must keep no mutable state of their own: scratch memory is asked for with
``Kernel.workspace_bytes`` (the runtime gives each state its own), and shared counters or caches
need a lock. A region that cannot run concurrently (one simulator instance) sets
``CompiledRegion.thread_safe = False`` and the runtime runs its kernels one call at a time.
``Backend.compile`` and ``load`` are called from one thread at a time per model, but several
models may compile at once.
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
    plugins: a plugin naming a backend that an earlier one provides is disabled with a warning
    (listed as broken by ``tessera plugins``). Changes nothing.
    """
