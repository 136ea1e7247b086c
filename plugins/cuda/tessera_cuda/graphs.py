"""A region's kernels as one CUDA graph (the ``bind_sequence`` contract).

The runtime binds a region's kernels once per execution state, with that state's buffers, and
then calls the bound sequence every run. Here the launches are captured into a CUDA graph on a
private stream (capturing launches nothing, and other threads' work is never captured) and
instantiated; a run is then one ``cuGraphLaunch`` on the calling thread's current stream (the
state's own) instead of one launch per kernel. Kernels the runtime elides (a concatenation
placed in place) are left out.

Every handle has an owner: the capture stream and the graph live only while the executable is
made (the executable is a snapshot of the graph), and the executable is destroyed when the
bound sequence is dropped (its execution state is). A capture is always ended, also when a
launch fails inside it, so the thread never stays in capture mode. Where capture or
instantiation fails, the kernels are launched one by one, with a warning naming the cause; the
region's ``info["cuda_graph"]`` is True when its kernels run as a graph, else why not, and
``info["execution"]`` says the same for reports. ``TESSERA_CUDA_GRAPHS=0`` turns graphs off.
"""

from __future__ import annotations

import os
import warnings
import weakref
from collections.abc import Callable
from typing import Any

from tessera.plugin.backend import Kernel

from .driver import CUDADevice, LaunchArgs, LoadedModule, _check, launch

__all__ = ["GroupLaunches", "graphs_enabled", "make_graph_binder", "make_group_kernel"]

#: One device kernel launch: (function, grid, block, parameter references, name).
Launch = tuple[Any, tuple[int, ...], tuple[int, ...], list[Any], str]


def graphs_enabled() -> str | None:
    """None when regions may run as CUDA graphs, else why not (``TESSERA_CUDA_GRAPHS=0``)."""
    value = os.environ.get("TESSERA_CUDA_GRAPHS", "1").strip().lower()
    if value in ("0", "false", "off", "no"):
        return f"turned off by TESSERA_CUDA_GRAPHS={value}"
    return None


class GroupLaunches:
    """The device kernels of one fused group and their parameter arrays per buffer list.
    ``owner`` is what must outlive the launches (the loaded module of their functions)."""

    def __init__(self, launches: list[Launch], n_args: int, has_workspace: bool,
                 owner: Any = None) -> None:
        self.launches = launches
        self.n_args = n_args
        self.has_workspace = has_workspace
        self.owner = owner
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


def make_group_kernel(module: LoadedModule, entry: dict[str, Any]
                      ) -> tuple[Kernel, GroupLaunches]:
    """The Kernel of one fused group (kernel-table ``entry``: its device kernels in
    ``module``, launched in order on the stream), and its launches for the region's CUDA
    graph."""
    device = module.device
    group = GroupLaunches(
        [(module.functions[x["kernel"]], tuple(x["grid"]), tuple(x["block"]), x["params"],
          x["kernel"]) for x in entry["launches"]],
        len(entry["inputs"]) + len(entry["outputs"]), bool(entry.get("workspace")),
        owner=module)

    def run(ins: list[Any], outs: list[Any]) -> None:
        for (function, grid, block, _p, name), args in zip(group.launches,
                                                           group.bind(ins, outs)):
            launch(device, function, grid, block, args, name)

    kernel = Kernel(name=entry["name"], fn=run, inputs=list(entry["inputs"]),
                    outputs=list(entry["outputs"]), op=entry["op"],
                    flops=int(entry.get("flops", 0)),
                    workspace_bytes=int(entry.get("workspace", 0)))
    return kernel, group


#: A bound launch: the launch and its parameter array.
Planned = tuple[Launch, LaunchArgs]


def capture(device: CUDADevice, plan: list[Planned]) -> Any:
    """The executable CUDA graph of ``plan``'s launches (captured on a private stream). The
    capture is ended and the stream and graph destroyed whatever happens; on failure the
    error names the step that failed."""
    cu = device.cu
    device.context()
    stream = _check(cu.cuStreamCreate(cu.CUstream_flags.CU_STREAM_NON_BLOCKING.value),
                    "cuStreamCreate (capture)")
    graph = None
    try:
        mode = cu.CUstreamCaptureMode.CU_STREAM_CAPTURE_MODE_THREAD_LOCAL
        _check(cu.cuStreamBeginCapture(stream, mode), "cuStreamBeginCapture")
        try:
            for (function, grid, block, _p, name), a in plan:
                if 0 in grid or 0 in block:
                    continue
                _check(cu.cuLaunchKernel(function, *grid, *block, 0, stream, a.address, 0),
                       f"capture of kernel {name}")
        finally:
            ended = cu.cuStreamEndCapture(stream)  # always: the thread leaves capture mode
            if int(ended[0]) == 0 and ended[1] is not None:
                graph = ended[1]
        _check(ended, "cuStreamEndCapture")
        return _check(cu.cuGraphInstantiate(graph, 0), "cuGraphInstantiate")
    finally:
        if graph is not None:
            cu.cuGraphDestroy(graph)  # the executable does not need it
        cu.cuStreamDestroy(stream)


def _destroy_exec(device: CUDADevice, executable: Any) -> None:
    try:
        device.context()
        device.cu.cuGraphExecDestroy(executable)
    except Exception:  # noqa: BLE001 - at exit the context may be gone
        pass


class GraphRun:
    """A bound sequence run as one executable graph, destroyed with this object."""

    def __init__(self, device: CUDADevice, executable: Any, plan: list[Planned]) -> None:
        self.device = device
        self.executable = executable
        self.plan = plan  # the functions' modules and parameter arrays stay alive
        self._finalizer = weakref.finalize(self, _destroy_exec, device, executable)

    def __call__(self) -> None:
        _check(self.device.cu.cuGraphLaunch(self.executable, self.device.stream),
               "cuGraphLaunch")

    def destroy(self) -> None:
        self._finalizer()


class DirectRun:
    """A bound sequence launched kernel by kernel."""

    def __init__(self, device: CUDADevice, plan: list[Planned]) -> None:
        self.device = device
        self.plan = plan

    def __call__(self) -> None:
        for (function, grid, block, _p, name), a in self.plan:
            launch(self.device, function, grid, block, a, name)


def make_graph_binder(device: CUDADevice, groups: list[GroupLaunches], region: str = "",
                      info: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The ``bind_sequence`` of region ``region`` whose kernels are ``groups``, in order; it
    records in ``info`` whether the region runs as a graph."""
    info = info if info is not None else {}

    def bind(calls: list[tuple[list[Any], list[Any]] | None]) -> Callable[[], None]:
        plan: list[Planned] = []
        for group, call in zip(groups, calls):
            if call is None:
                continue
            ins, outs = call
            plan.extend(zip(group.launches, group.bind(ins, outs)))
        why = graphs_enabled()
        if why is None:
            try:
                run = GraphRun(device, capture(device, plan), plan)
            except Exception as err:  # noqa: BLE001 - fall back to plain launches, said
                why = f"capture failed: {err}"
                warnings.warn(f"cuda region {region}: its kernels run one by one, not as a CUDA "
                              f"graph ({why})", RuntimeWarning, stacklevel=2)
            else:
                info["cuda_graph"] = True
                info["execution"] = f"one CUDA graph ({len(plan)} kernels)"
                return run
        info["cuda_graph"] = why
        info["execution"] = f"{len(plan)} kernel launches ({why})"
        return DirectRun(device, plan)

    return bind
