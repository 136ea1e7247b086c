"""The ``cuda`` Tessera backend: fused groups compiled to CUDA C, NVRTC and NVIDIA GPUs.

``claims`` accepts every op with a topi compute whose tensors are of a dtype the code generator
handles (no float16 yet). ``compile`` lowers a region (:mod:`.lowering`: FuseOps, computes,
GPU schedules, the cuda TIR pipeline, CUDA C), compiles the translation unit with NVRTC to
cubin for the target architecture (:mod:`.nvrtc`), loads it into the device's context and
returns one Kernel per fused group, launching its kernels on the device's stream
(:mod:`.driver`). A region's kernels are bound as one CUDA graph per execution state
(``bind_sequence``): one launch per region and run instead of one per kernel; the region's
``info["cuda_graph"]`` says whether it does (True) or why not.

Target options: ``-arch=sm_90`` (the GPU architecture cubin is built for; default: the GPU's
own, sm_90 without one), ``-max_threads_per_block=N`` (default 1024; schedules never use more),
``-fast-math=1`` (hardware approximations of exp, log, pow, division, sigmoid).

Artifacts keep the CUDA C (``kernels.cu``), the cubin (``kernels.cubin``), the kernel table and
the constants, so ``tessera.load`` loads the cubin without compiling again.

Run-time extents (``symbolic_extents``). A region whose graph types keep size variables (a
model compiled once for every size, ``shape_mode="auto"`` or ``"symbolic"``) is lowered with
fixed tiles and guarded tails (:mod:`.schedules.common`); every kernel of it takes the region's
size variables as ``long long`` parameters (``CompiledRegion.size_names``, one sizes array the
runtime writes before each run), and each launch's grid and block are encoded size expressions
(the table entries' ``"sizes"``) evaluated on the host per call. Its CUDA graphs are made per
set of sizes (a few kept, :mod:`.graphs`), and its artifacts keep the encoded launches, so a
loaded one runs at every size too. Ops the schedules take at fixed sizes only (convolutions,
pooling, resizing: :data:`STATIC_ONLY_OPS`) with a run-time extent are refused at compile time
with a CompileError naming the node (:func:`check_symbolic_ops`), so ``shape_mode="auto"``
compiles the model per size instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArtifactError, CompileError, RunError, TargetError
from tessera.ir.graph import Function, Node
from tessera.ir.symbolic import eval_dim as eval_graph_dim
from tessera.ir.types import TensorType
from tessera.plugin.artifact_files import CONSTANT_KEY, ArtifactFiles  # noqa: F401
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.device import Device
from tessera.plugin.kernel_cache import KernelCache
from tessera.plugin.patterns import Pattern
from tessera.plugin.space import schedule_info, tuning_info
from tessera.plugin.target import TargetKind
from tessera.topi.registry import registered_ops, unsupported_reason

from .codegen import _C_TYPES, encode_dim
from .driver import CudaBuffer, CUDADevice, LoadedModule, driver_missing
from .graphs import make_graph_binder, make_group_kernel
from .lowering import LoweredRegion, lower_region
from .nvrtc import compile_cuda, nvrtc_missing
from .schedules import GPUInfo
from .tuning import cuda_candidate, cuda_features

#: 2: constants saved as arrays (``constants/<name>``, in the artifact's shared store), not in
#: a ``constants.npz`` of their own; the region's constants are not stored in graph form
ARTIFACT_FORMAT = 2
SOURCE_FILE = "kernels.cu"
CUBIN_FILE = "kernels.cubin"
TABLE_FILE = "kernels.json"
DEFAULT_ARCH = "sm_90"
#: The files ``save`` writes and ``load`` checks (the format, the cubin's hash).
ARTIFACT = ArtifactFiles(TABLE_FILE, files=(SOURCE_FILE, CUBIN_FILE),
                         hashes={"cubin_sha256": CUBIN_FILE}, keys=("arch", "kernels", "tensors"))


def node_unsupported(node: Node) -> str | None:
    """Why the cuda backend cannot run ``node`` (None when it can)."""
    reason = unsupported_reason(node)
    if reason is not None:
        return reason
    for v in [*node.inputs, *node.outputs]:
        if v is not None and str(v.type.dtype) not in _C_TYPES:
            return f"node {node.name} ({node.op}): dtype {v.type.dtype} is not supported by " \
                   f"the CUDA code generator"
    return None


#: Ops whose cuda schedules take static extents only (their tiles are divisors of the
#: extents): a symbolic region where one of their tensors has a run-time dimension is refused.
STATIC_ONLY_OPS = frozenset({"Conv", "ConvTranspose", "ConvInteger", "QLinearConv", "MaxPool",
                             "AveragePool", "GlobalAveragePool", "GlobalMaxPool", "LpPool",
                             "GlobalLpPool", "MaxRoiPool", "RoiAlign", "MaxUnpool", "Resize",
                             "Upsample", "Col2Im", "DeformConv"})


def check_symbolic_ops(region: Function) -> None:
    """A CompileError naming the first node of a symbolic region whose op the cuda schedules
    do not take at run-time sizes (:data:`STATIC_ONLY_OPS` with a tensor of run-time
    shape)."""
    for node in region.nodes:
        if node.op in STATIC_ONLY_OPS and any(
                not isinstance(d, int) for v in [*node.inputs, *node.outputs]
                if v is not None for d in v.type.shape):
            raise CompileError(f"cuda: node {node.name} ({node.op}): convolutions, pooling "
                               f"and resizing over run-time sizes are not supported (compile "
                               f"the model per size: shape_mode=\"specialize\")")


@lru_cache(maxsize=1)
def _patterns() -> tuple[Pattern, ...]:
    return tuple(Pattern(op, check=lambda n: node_unsupported(n) is None)
                 for op in sorted(registered_ops()))


@dataclass
class BuiltRegion:
    """A region compiled for an architecture, before it is loaded on a device."""

    lowered: LoweredRegion
    arch: str
    cubin: bytes
    ptx: str | None
    table: list[dict[str, Any]] = field(default_factory=list)
    #: ``"hit"``/``"miss"`` in the kernel cache, None when built without one.
    cache: str | None = None


def _flops_at_bounds(flops: Any, func: Any) -> int:
    """A group's operations as an int: a symbolic count at the upper bounds of its function's
    size variables (the most a call does)."""
    if isinstance(flops, int | np.integer):
        return int(flops)
    return eval_graph_dim(flops, {v.name: int(hi) for v, (_lo, hi) in func.size_bounds.items()
                                  if hi is not None})


def _table(lowered: LoweredRegion) -> list[dict[str, Any]]:
    """The kernel table: per fused group its device kernels' launches (grid, block and where
    each parameter comes from); a group with run-time extents also has ``"sizes"`` (see
    :func:`table_sizes`) and its launches' grid and block are encoded extents."""
    table = []
    for g in lowered.groups:
        entry: dict[str, Any] = {
            "name": g.name, "inputs": g.inputs, "outputs": g.outputs, "op": g.op,
            "flops": _flops_at_bounds(g.flops, g.kernels.func), "template": g.template,
            "config": g.config,
            "workspace": g.kernels.workspace_bytes,
            "launches": [{"kernel": k.name,
                          "grid": list(k.grid_dims if k.is_symbolic else k.launch.grid),
                          "block": list(k.block_dims if k.is_symbolic else k.launch.block),
                          "params": [_param_ref(g, p.name) for p in k.params]}
                         for k in g.kernels.kernels]}
        sizes = table_sizes(g.kernels.func)
        if sizes is not None:
            entry["sizes"] = sizes
        table.append(entry)
    return table


def table_sizes(func: Any) -> dict[str, Any] | None:
    """A symbolic group function's ``"sizes"`` table entry: its size variables' ``names`` (the
    order of the kernels' ``long long`` parameters) and each parameter's ``shapes`` in terms of
    them (:data:`~tessera_cuda.codegen.Dim` s; None for one that cannot be encoded); None for a
    static function."""
    if not func.size_vars:
        return None
    shapes: list[Any] = []
    for p in func.params:
        try:
            shapes.append([encode_dim(d, func.size_vars) for d in p.shape])
        except CompileError:
            shapes.append(None)
    return {"names": [v.name for v in func.size_vars], "shapes": shapes}


def _region_size_names(region: str, table: list[dict[str, Any]]) -> list[str]:
    """The size variables a region's kernels take (every group of a symbolic region takes
    them all, in one order: ``CompiledRegion.size_names``); [] for a static region."""
    orders = {tuple(k["sizes"]["names"]) if "sizes" in k else () for k in table}
    if len(orders) > 1:
        raise ArtifactError(f"cuda region {region}: its kernels take different run-time sizes "
                            f"({sorted(orders)}); a region's kernels take one sizes array")
    return list(orders.pop()) if orders else []


def _param_ref(group: Any, name: str) -> list[Any]:
    """Where a device kernel's parameter comes from: ``["arg", i]`` (the group function's
    i-th parameter: inputs then outputs) or ``["ws", offset]`` (its workspace)."""
    if name in group.kernels.workspace:
        return ["ws", group.kernels.workspace[name]]
    names = [p.name for p in group.kernels.func.params]
    return ["arg", names.index(name)]


def gpu_info(target: TargetKind, device: CUDADevice | None = None) -> GPUInfo:
    """The GPU facts schedules read, from the target options and the device when there is
    one."""
    arch = target.get("arch")
    sms = 132
    if device is not None and driver_missing() is None:
        arch = arch or device.arch()
        sms = device.attribute("MULTIPROCESSOR_COUNT")
    mtpb = target.get("max_threads_per_block")
    threads = 1024
    if mtpb not in (None, ""):
        try:
            threads = int(mtpb)
        except ValueError:
            threads = 0
        if not 32 <= threads <= 1024:
            raise TargetError(f"cuda -max_threads_per_block={mtpb}: expected an integer from "
                              f"32 to 1024")
    return GPUInfo(max_threads_per_block=threads, multiprocessors=sms,
                   arch=arch or DEFAULT_ARCH)


def _fast_math(target: TargetKind) -> bool:
    value = (target.get("fast-math") or "0").lower()
    if value not in ("0", "1", "true", "false", "on", "off"):
        raise TargetError(f"cuda -fast-math={value}: expected 0 or 1")
    return value in ("1", "true", "on")


def build_region(region: Function, target: TargetKind, options: CompileOptions,
                 gpu: GPUInfo | None = None, want_ptx: bool = False,
                 overrides: dict[str, dict[str, Any]] | None = None,
                 cache: KernelCache | None = None) -> BuiltRegion:
    """Lower ``region`` and compile its CUDA C to cubin with NVRTC (no GPU needed), with the
    schedule ``overrides`` (workload key -> knob values; default: the tuning records'), the
    cubin from the kernel ``cache`` when it holds the same source for the same architecture."""
    for node in region.nodes:
        reason = node_unsupported(node)
        if reason is not None:
            raise CompileError(f"cuda: {reason}")
    if region.is_symbolic:
        check_symbolic_ops(region)
    gpu = gpu or gpu_info(target)
    lowered = lower_region(region, gpu, options.opt_level, prefix=f"{region.name}_",
                           fast_math=_fast_math(target),
                           overrides=overrides if overrides is not None else
                           options.schedule_overrides("cuda", str(target)),
                           progress=options.progress)
    options.progress.update("compiling CUDA C", 0, 1, f"NVRTC for {gpu.arch}")
    result = compile_cuda(lowered.source.text, gpu.arch, name=f"{region.name}.cu",
                          want_ptx=want_ptx, cache=cache)
    options.progress.update("compiling CUDA C", 1, 1)
    return BuiltRegion(lowered, gpu.arch, result.cubin, result.ptx, _table(lowered),
                       result.cache)


def _dump(options: CompileOptions, name: str, kinds: set[str],
          built: BuiltRegion) -> dict[str, str]:
    folder = Path(options.extra.get("dump_dir") or ".")
    folder.mkdir(parents=True, exist_ok=True)
    forms = {"cu": lambda: built.lowered.source.text, "ptx": lambda: built.ptx or "",
             "tir": lambda: built.lowered.tir}
    written = {}
    for kind in sorted(kinds):
        if kind not in forms:
            raise CompileError(f"--dump-code: unknown code form {kind!r}; expected cu, ptx or "
                               f"tir")
        path = folder / f"{name}.{kind}"
        path.write_text(forms[kind]())
        written[kind] = str(path)
    return written


@dataclass
class CUDAHandle:
    """What a compiled cuda region keeps: its source, cubin, kernel table and the module
    loaded on the device."""

    source: str
    cubin: bytes
    arch: str
    table: list[dict[str, Any]]
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    module: LoadedModule | None = None


def _unloaded_kernel(entry: dict[str, Any], why: str) -> Kernel:
    """The Kernel of a fused group compiled without a GPU: the runtime never calls it (the
    module has no execution state while its device is missing); if anything does, it says
    why."""

    def run(ins: list[Any], outs: list[Any], sizes: Any = None) -> None:
        raise RunError(f"{why}: export the module and load it on a machine with the GPU")

    return Kernel(name=entry["name"], fn=run, inputs=list(entry["inputs"]),
                  outputs=list(entry["outputs"]), op=entry["op"],
                  flops=int(entry.get("flops", 0)),
                  workspace_bytes=int(entry.get("workspace", 0)))


class CUDABackend(Backend):
    """CUDA C kernels for NVIDIA GPUs, compiled with NVRTC."""

    name = "cuda"
    device = "cuda"
    options = {
        "arch": "GPU architecture to build cubin for, e.g. sm_90 (default: the GPU's)",
        "max_threads_per_block": "most threads a kernel's block may have (32 to 1024; default "
                                 "1024)",
        "fast-math": "1: hardware approximations of exp, log, pow, division and sigmoid",
    }
    code_forms = ("cu", "ptx", "tir")
    artifact_version = str(ARTIFACT_FORMAT)
    symbolic_extents = True

    def available(self) -> str | None:
        missing = nvrtc_missing()
        if missing:
            return missing
        why = driver_missing()
        if why:
            return f"{why}; it still compiles for a named GPU (cuda -arch={DEFAULT_ARCH}) " \
                   f"into artifacts that run where the GPU is"
        return None

    def available_for(self, target: TargetKind) -> str | None:
        """NVRTC is enough to compile for a named architecture (``cuda -arch=sm_90`` on a
        machine without a GPU: the module is exported and runs where the GPU is); without
        ``-arch`` the GPU decides it, so it must be here."""
        gpu_info(target)
        _fast_math(target)
        missing = nvrtc_missing()
        if missing:
            return missing
        missing = driver_missing()
        if missing and not target.get("arch"):
            return f"{missing}; to compile without a GPU, name its architecture " \
                   f"(cuda -arch={DEFAULT_ARCH}) and run the exported module on the GPU machine"
        return None

    def claims(self, target: TargetKind) -> list[Pattern]:
        return list(_patterns())

    def device_api(self) -> Device:
        return CUDADevice.get(0)

    def tuning_candidate(self, region: Function, kernel: str,
                         overrides: dict[str, dict[str, Any]], target: TargetKind,
                         options: CompileOptions) -> Any:
        """The fused group ``kernel`` built with the knobs ``overrides`` and bound to
        buffers of its own on the GPU (:mod:`.tuning`); without a GPU a RunError."""
        if region.is_symbolic:
            raise CompileError(f"cuda: region {region.name} has run-time sizes; its kernels "
                               f"are tuned at fixed sizes (tune the model with input shapes)")
        device = self.device_instance(options)
        missing = device.missing()
        if missing is not None:
            raise RunError(f"cuda: tuning measures kernels on the GPU, and this machine has "
                           f"none ({missing}); tune on the GPU machine")
        built = build_region(region, target, options, gpu_info(target, device),
                             overrides=overrides)
        return cuda_candidate(device, region, built, kernel)

    def tuning_features(self, region: Function, kernel: str, configs: list[dict[str, Any]],
                        key: str, target: TargetKind, options: CompileOptions
                        ) -> list[list[float] | None]:
        """The loop-nest features of the group lowered to TIR with each config
        (:func:`tessera_cuda.tuning.cuda_features`); no GPU needed (without one, the GPU's
        facts come from the target: ``-arch``)."""
        device = self.device_instance(options) if driver_missing() is None else None
        return cuda_features(region, kernel, configs, key, gpu_info(target, device),
                             options.opt_level)

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        device = self.device_instance(options)
        assert isinstance(device, CUDADevice)
        t0 = time.perf_counter()
        dump = options.extra.get("dump_code")
        kinds = set(dump) if dump and not isinstance(dump, str) else \
            set(dump.split(",")) if dump else set()
        built = build_region(region, target, options, gpu_info(target, device),
                             want_ptx="ptx" in kinds, cache=options.kernel_cache)
        t1 = time.perf_counter()
        constants = {name: np.ascontiguousarray(np.asarray(v.data))
                     for name, v in built.lowered.constants.items()}
        types = {v.name: v.type for v in built.lowered.func.inputs}
        types.update({v.name: v.type for n in built.lowered.func.nodes for v in n.outputs})
        tensors: dict[str, TensorType] = {v.name: v.type for v in region.inputs}
        for k in built.table:
            for name in k["inputs"] + k["outputs"]:
                if name not in constants:
                    tensors[name] = types[name]
        compiled = self._assemble(region, device, built.lowered.source.text, built.cubin,
                                  built.arch, built.table, constants, tensors)
        compiled.info.update({"compile_s": round(t1 - t0, 3), "cubin_bytes": len(built.cubin),
                              "arch": built.arch, "kernel_cache": built.cache or "off",
                              "schedules": {g.name: schedule_info(g.template, g.configs)
                                            for g in built.lowered.groups}})
        if options.tuned:
            compiled.info["tuning"] = tuning_info(c for g in built.lowered.groups
                                                  for c in g.configs)
        if kinds:
            compiled.info["dumped"] = _dump(options, region.name, kinds, built)
        return compiled

    def _assemble(self, region: Function, device: CUDADevice, source: str, cubin: bytes,
                  arch: str, table: list[dict[str, Any]], constants: dict[str, np.ndarray],
                  tensors: dict[str, TensorType]) -> CompiledRegion:
        size_names = _region_size_names(region.name, table)
        missing = device.missing()
        if missing is not None:
            # cross-compiled (-arch named, no GPU here): nothing is loaded; the module refuses
            # to run (Device.missing) and its artifact loads where the GPU is
            why = f"cuda region {region.name} was compiled for {arch} without a GPU ({missing})"
            return CompiledRegion(
                self.name, region, [_unloaded_kernel(e, why) for e in table], tensors,
                {k: CudaBuffer(0, TensorType.of(v)) for k, v in constants.items()},
                {"kernels": len(table), "device": device.key, "loaded": False},
                handle=CUDAHandle(source, cubin, arch, table, constants), size_names=size_names)
        names = [x["kernel"] for e in table for x in e["launches"]]
        module = LoadedModule.load(device, cubin, names)
        made = [make_group_kernel(module, e) for e in table]
        kernels = [k for k, _ in made]
        on_device = {k: device.from_host(v) for k, v in constants.items()}
        handle = CUDAHandle(source, cubin, arch, table, constants, module)
        info: dict[str, Any] = {"kernels": len(table), "device": device.key}
        if size_names:
            info["run_time_sizes"] = list(size_names)
        binder = make_graph_binder(device, [g for _, g in made], region.name, info)
        return CompiledRegion(self.name, region, kernels, tensors, on_device, info,
                              bind_sequence=binder, handle=handle, size_names=size_names)

    # -- artifacts ------------------------------------------------------------------------
    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        handle = ARTIFACT.handle(self, compiled, CUDAHandle, "no cubin to save")
        return ARTIFACT.save(self, {"arch": handle.arch, "kernels": handle.table},
                             {SOURCE_FILE: handle.source.encode(), CUBIN_FILE: handle.cubin},
                             handle.constants, compiled.tensors)

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        """All of them: the kernels read only the saved constants and the values compiled
        into the cubin."""
        return [v.name for v in compiled.region.constants()]

    def load(self, region: Function, files: dict[str, bytes | np.ndarray],
             target: TargetKind, options: CompileOptions) -> CompiledRegion:
        saved = ARTIFACT.load(self, region.name, files)
        meta = saved.table
        device = self.device_instance(options)
        assert isinstance(device, CUDADevice)
        arch = device.arch()
        if arch != meta["arch"]:
            raise ArtifactError(f"cuda region {region.name}: its cubin is built for "
                                f"{meta['arch']}, this GPU is {arch}; compile the model again "
                                f"for this GPU (or with -arch={arch})")
        return self._assemble(region, device, saved.files[SOURCE_FILE].decode(),
                              saved.files[CUBIN_FILE], meta["arch"], meta["kernels"],
                              saved.constants, saved.tensors)
