"""A region's kernels as one CUDA graph (the ``bind_sequence`` contract).

The runtime binds a region's kernels once per execution state, with that state's buffers, and
then calls the bound sequence every run. Here the launches are captured into a CUDA graph on a
private stream (capturing launches nothing, and other threads' work on the device's stream is
never captured) and instantiated; a run is then one ``cuGraphLaunch`` on the device's stream
instead of one launch per kernel. Kernels the runtime elides (a concatenation placed in place)
are left out. Where capture fails (an old driver), the kernels are launched one by one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .driver import CUDADevice, LaunchArgs, _check, _cu, launch

__all__ = ["GroupLaunches", "make_graph_binder"]

#: One device kernel launch: (function, grid, block, parameter references, name).
Launch = tuple[Any, tuple[int, ...], tuple[int, ...], list[Any], str]


class GroupLaunches:
    """The device kernels of one fused group and their parameter arrays per buffer list."""

    def __init__(self, launches: list[Launch], n_args: int, has_workspace: bool) -> None:
        self.launches = launches
        self.n_args = n_args
        self.has_workspace = has_workspace
        self._cache: dict[tuple[int, ...], list[LaunchArgs]] = {}

    def bind(self, ins: list[Any], outs: list[Any]) -> list[LaunchArgs]:
        """The kernel parameters of each launch for these buffers (built once per set of
        addresses): ``["arg", i]`` is the group's i-th buffer (inputs, then outputs),
        ``["ws", offset]`` a place in its workspace (the buffer after the outputs)."""
        buffers = list(ins) + list(outs)
        key = tuple(b.ptr for b in buffers)
        hit = self._cache.get(key)
        if hit is None:
            args = buffers[:self.n_args]
            ws = buffers[self.n_args] if self.has_workspace else None
            hit = [LaunchArgs([args[i].ptr if kind == "arg" else ws.ptr + i
                               for kind, i in params])
                   for _f, _g, _b, params, _n in self.launches]
            if len(self._cache) >= 16:
                self._cache.clear()
            self._cache[key] = hit
        return hit


def make_graph_binder(device: CUDADevice, groups: list[GroupLaunches]) -> Callable[..., Any]:
    """The ``bind_sequence`` of a region whose kernels are ``groups``, in order."""
    def bind(calls: list[tuple[list[Any], list[Any]] | None]) -> Callable[[], None]:
        plan = []
        for group, call in zip(groups, calls):
            if call is None:
                continue
            ins, outs = call
            plan.extend(zip(group.launches, group.bind(ins, outs)))

        def direct() -> None:
            for (function, grid, block, _p, name), a in plan:
                launch(device, function, grid, block, a, name)

        cu = _cu()
        device.context()
        try:
            stream = _check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                            "cuStreamCreate")
            mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
            _check(cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
            for (function, grid, block, _p, name), a in plan:
                if 0 in grid or 0 in block:
                    continue
                _check(cu.cuLaunchKernel(function, *grid, *block, 0, stream, a.address, 0),
                       f"capture of kernel {name}")
            graph = _check(cu.cuStreamEndCapture(stream), "cuStreamEndCapture")
            executable = _check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
            cu.cuStreamDestroy(stream)
        except Exception:  # noqa: BLE001 - fall back to plain launches
            return direct

        def run() -> None:
            device.context()
            _check(cu.cuGraphLaunch(executable, device.stream), "cuGraphLaunch")

        run.keep = (plan, graph)  # type: ignore[attr-defined] - alive as long as the call
        return run

    return bind
