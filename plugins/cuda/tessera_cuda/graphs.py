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

A group with run-time extents (its table entry has ``"sizes"``: the size variables' names and
the group function's parameter shapes in terms of them, encoded as
:data:`~tessera_cuda.codegen.Dim` s, like its launches' grid and block) gets its sizes from the
shapes of the buffers it is bound to (``buffer.type.shape``: a dimension that is exactly a size
variable, or a flattened parameter whose element count is linear in the one size it uses), or
from ``sizes=`` given to :meth:`GroupLaunches.plan`; each launch's grid and block are computed
from them on the host and the sizes passed as the kernels' ``long long`` parameters after the
buffers. A bound CUDA graph holds the launch shapes of the sizes it was bound with.
"""

from __future__ import annotations

import math
import os
import warnings
import weakref
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tessera.errors import RunError
from tessera.plugin.backend import Kernel

from .codegen import Dim, eval_dim, size_values
from .driver import CUDADevice, LaunchArgs, LoadedModule, _check, launch

__all__ = ["SIZED_GRAPHS", "GroupLaunches", "SizedRun", "graphs_enabled", "make_graph_binder",
           "make_group_kernel"]

#: CUDA graphs a region with run-time sizes keeps per execution state (one per set of sizes).
SIZED_GRAPHS = 8

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
    ``owner`` is what must outlive the launches (the loaded module of their functions).
    ``sizes`` (a table entry's ``"sizes"``: ``names`` and parameter ``shapes``) makes the group
    symbolic: its launches' grid and block are then encoded extents, evaluated per binding."""

    def __init__(self, launches: list[Launch], n_args: int, has_workspace: bool,
                 owner: Any = None, sizes: Mapping[str, Any] | None = None) -> None:
        self.launches = launches
        self.n_args = n_args
        self.has_workspace = has_workspace
        self.owner = owner
        self.size_names: list[str] = list(sizes["names"]) if sizes else []
        self.size_shapes: list[Any] = list(sizes.get("shapes", [])) if sizes else []
        self._cache: dict[tuple[int, ...], list[Planned]] = {}

    @property
    def is_symbolic(self) -> bool:
        return bool(self.size_names)

    def sizes_of(self, buffers: Sequence[Any],
                 sizes: Sequence[int] | Mapping[str, int] | None = None) -> list[int]:
        """The group's sizes for these buffers: ``sizes`` when given, else derived from the
        buffers' shapes (RunError when they cannot be, or disagree)."""
        if sizes is not None:
            return size_values(self.name, self.size_names, sizes)
        return derive_sizes(self.name, self.size_names, self.size_shapes,
                            [getattr(getattr(b, "type", None), "shape", None) for b in buffers])

    @property
    def name(self) -> str:
        return self.launches[0][4] if self.launches else "?"

    def plan(self, ins: list[Any], outs: list[Any],
             sizes: Sequence[int] | Mapping[str, int] | None = None) -> list[Planned]:
        """Each launch, with its grid and block for this binding, and its kernel parameters
        (built once per set of addresses and sizes): ``["arg", i]`` is the group's i-th buffer
        (inputs, then outputs), ``["ws", offset]`` a place in its workspace (the buffer after
        the outputs); a symbolic group's sizes follow the buffers."""
        buffers = list(ins) + list(outs)
        values = self.sizes_of(buffers[:self.n_args], sizes) if self.is_symbolic else []
        key = tuple(b.ptr for b in buffers) + (-1, *values)
        hit = self._cache.get(key)
        if hit is None:
            args = buffers[:self.n_args]
            ws = buffers[self.n_args] if self.has_workspace else None
            hit = []
            for function, grid, block, params, name in self.launches:
                if self.is_symbolic:
                    grid = tuple(eval_dim(d, values) for d in grid)
                    block = tuple(eval_dim(d, values) for d in block)
                pointers = [args[i].ptr if kind == "arg" else ws.ptr + i for kind, i in params]
                hit.append(((function, grid, block, params, name),
                            LaunchArgs(pointers, values)))
            if len(self._cache) >= 16:
                self._cache.clear()
            self._cache[key] = hit
        return hit

    def bind(self, ins: list[Any], outs: list[Any],
             sizes: Sequence[int] | Mapping[str, int] | None = None) -> list[LaunchArgs]:
        """The kernel parameters of each launch for these buffers (see :meth:`plan`)."""
        return [a for _launch, a in self.plan(ins, outs, sizes)]


def derive_sizes(where: str, names: Sequence[str], shapes: Sequence[Any],
                 buffer_shapes: Sequence[Sequence[int] | None]) -> list[int]:
    """Size values from buffer shapes: a parameter dimension that is exactly a size variable
    gives it, then a parameter whose element count is linear in the one size still unknown
    (a flattened buffer) gives that one. RunError when one cannot be derived, or when the
    buffers disagree."""
    values: list[int | None] = [None] * len(names)
    known = [(shape, tuple(have)) for shape, have in zip(shapes, buffer_shapes)
             if shape is not None and have is not None]
    for shape, have in known:
        if len(shape) != len(have):
            continue
        for d, extent in zip(shape, have):
            if isinstance(d, list | tuple) and d[0] == "var":
                k = d[1]
                if values[k] is not None and values[k] != extent:
                    raise RunError(f"cuda group {where}: its buffers disagree on size "
                                   f"{names[k]} ({values[k]} and {extent})")
                values[k] = int(extent)

    def count(shape: Sequence[Dim], trial: list[int | None]) -> int | None:
        if any(v is None for k, v in enumerate(trial) if _uses(shape, k)):
            return None
        return math.prod(eval_dim(d, trial) for d in shape)  # type: ignore[arg-type]

    progress = True
    while progress and None in values:
        progress = False
        for shape, have in known:
            unknown = [k for k, v in enumerate(values) if v is None and _uses(shape, k)]
            if len(unknown) != 1:
                continue
            k, size = unknown[0], math.prod(have)
            c = []
            for x in (0, 1, 2):
                trial = list(values)
                trial[k] = x
                c.append(count(shape, trial))
            if None in c or c[1] - c[0] <= 0 or c[2] - c[1] != c[1] - c[0]:
                continue
            step = c[1] - c[0]
            if (size - c[0]) % step == 0 and size >= c[0]:
                values[k] = (size - c[0]) // step
                progress = True
    missing = [n for n, v in zip(names, values) if v is None]
    if missing:
        raise RunError(f"cuda group {where}: cannot derive size(s) {', '.join(missing)} from "
                       f"its buffers' shapes; pass sizes")
    return [int(v) for v in values if v is not None]


def _uses(shape: Sequence[Dim], k: int) -> bool:
    def uses(d: Dim) -> bool:
        if isinstance(d, int):
            return False
        if d[0] == "var":
            return d[1] == k
        return uses(d[1]) or uses(d[2])

    return any(uses(d) for d in shape)


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
        owner=module, sizes=entry.get("sizes"))

    def run(ins: list[Any], outs: list[Any],
            sizes: Sequence[int] | Mapping[str, int] | None = None) -> None:
        # a symbolic group: its sizes (given, or derived from the buffers' shapes)
        for (function, grid, block, _p, name), args in group.plan(ins, outs, sizes):
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


class SizedRun:
    """The bound sequence of a region with run-time sizes: per run, the sequence bound for the
    current values of ``sizes`` (the runtime's array, rewritten before each run), made by
    ``make(values)`` on the first run at those values; the :data:`SIZED_GRAPHS` most recently
    used are kept (an evicted CUDA graph is destroyed)."""

    def __init__(self, make: Callable[[tuple[int, ...]], Callable[[], None]],
                 sizes: Any) -> None:
        self.make = make
        self.sizes = sizes
        self.bound: dict[tuple[int, ...], Callable[[], None]] = {}

    def __call__(self) -> None:
        key = tuple(int(v) for v in self.sizes)
        run = self.bound.pop(key, None)
        if run is None:
            run = self.make(key)
            while len(self.bound) >= SIZED_GRAPHS:
                old = self.bound.pop(next(iter(self.bound)))
                if isinstance(old, GraphRun):  # after its launches on this stream finished
                    old.device.synchronize()
                    old.destroy()
        self.bound[key] = run  # most recently used last
        run()


def make_graph_binder(device: CUDADevice, groups: list[GroupLaunches], region: str = "",
                      info: dict[str, Any] | None = None) -> Callable[..., Any]:
    """The ``bind_sequence`` of region ``region`` whose kernels are ``groups``, in order; it
    records in ``info`` whether the region runs as a graph."""
    info = info if info is not None else {}

    def bind(calls: list[tuple[list[Any], list[Any]] | None],
             sizes: Any = None) -> Callable[[], None]:
        if sizes is not None:  # a region with run-time sizes: its array, read per run
            return SizedRun(lambda values: bind_at(calls, values), sizes)
        return bind_at(calls, None)

    def bind_at(calls: list[tuple[list[Any], list[Any]] | None],
                sizes: Sequence[int] | None) -> Callable[[], None]:
        plan: list[Planned] = []
        for group, call in zip(groups, calls):
            if call is None:
                continue
            ins, outs = call
            plan.extend(group.plan(ins, outs, sizes if group.is_symbolic else None))
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
