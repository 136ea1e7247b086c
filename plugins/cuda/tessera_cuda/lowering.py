"""From a region to CUDA kernels: fusion, computes, GPU schedules, the cuda TIR pipeline and
CUDA C.

:func:`lower_region` runs the lowering chain of :mod:`tessera.kernel.lowering` with the GPU's
steps: it fuses the region (FuseOps), builds each group's tensor expression from the topi
computes (the cuda backend's own for some ops, :data:`~tessera_cuda.computes.CUDA_COMPUTES`),
applies the group's cuda schedule (:data:`~tessera_cuda.schedules.CUDA_SCHEDULES`), lowers it
through :func:`~tessera_cuda.pipeline.gpu_pipeline` and generates its kernels into one CUDA C
translation unit (:class:`~tessera_cuda.codegen.CudaSource`). Nothing here needs a GPU.

A region whose graph types keep size variables (``Function.is_symbolic``: compiled once for
every size) is lowered with its ``dim_bounds`` in scope; every group function takes all of the
region's size variables (:func:`region_sizes`, ``Function.used_size_variables``, in that
order: one sizes array serves every kernel of the region) as ``PrimFunc.size_vars`` with their
bounds, which the code generator makes ``long long`` kernel parameters and evaluates the
launch shapes of on the host per call.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tessera.errors import CompileError
from tessera.ir.graph import Function, Value
from tessera.ir.symbolic import dim_bounds_scope
from tessera.kernel.flops import group_flops
from tessera.kernel.lowering import (
    SizeBounds,
    group_facts,
    group_te,
    loop_nest,
    lower_groups,
    lowering_errors,
    prepare_region,
    region_sizes,
    with_region_sizes,
)
from tessera.progress import Progress
from tessera.tir import expr as E
from tessera.tir.gpu_verifier import GPULimits
from tessera.tir.stmt import PrimFunc
from tessera.tir.transform import Pipeline
from tessera.topi.from_graph import group_error

from .codegen import CudaSource, GroupKernels
from .computes import CUDA_COMPUTES
from .pipeline import gpu_pipeline
from .schedules import GPUInfo, schedule_group

__all__ = ["LoweredGroup", "LoweredRegion", "SizeBounds", "group_flops", "lower_group_tir",
           "lower_region", "region_sizes"]


@dataclass
class LoweredGroup:
    """One fused group: its kernels, and the graph values its function takes (inputs, with
    constants, then outputs, in parameter order)."""

    name: str
    kernels: GroupKernels
    inputs: list[str]
    outputs: list[str]
    op: str
    flops: int = 0
    template: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    #: The workload key tuning records and ``overrides`` name the config by ("" when none).
    key: str = ""
    #: Every config the group's schedule read (their spaces, keys and whether records chose
    #: them).
    configs: list[Any] = field(default_factory=list)


@dataclass
class LoweredRegion:
    func: Function
    groups: list[LoweredGroup]
    constants: dict[str, Value]
    source: CudaSource
    #: The size variables every group function takes, in order (empty: a static region).
    size_names: list[str] = field(default_factory=list)

    @property
    def tir(self) -> str:
        return "\n\n".join(repr(g.kernels.func) for g in self.groups)


def _limits(gpu: GPUInfo) -> GPULimits:
    return GPULimits(max_threads_per_block=gpu.max_threads_per_block,
                     max_shared_bytes=gpu.max_shared_bytes, warp_size=gpu.warp_size)


def lower_group_tir(group: Any, name: str, gpu: GPUInfo,
                    overrides: dict[str, dict[str, Any]] | None = None,
                    pipeline: Pipeline | None = None, passes: bool = True,
                    size_order: list[E.Var] | None = None,
                    size_bounds: SizeBounds | None = None) -> tuple[PrimFunc, Any, Any]:
    """One fused group scheduled (with ``overrides``) and lowered through the cuda TIR
    pipeline (``pipeline``, by default :func:`gpu_pipeline`; none with ``passes=False``: the
    loop nest ``te.lower`` makes, what the tuner featurises) to a function named ``name``
    (no CUDA C yet); with its tensor expression and schedule. A group of a symbolic region
    takes the region's size variables (``size_order``, with their ``size_bounds``)."""
    with lowering_errors("cuda", group):
        gte = group_te(group, CUDA_COMPUTES)
        sched = schedule_group(list(gte.outputs), gpu, overrides)
        prim = loop_nest(sched.schedule, gte, name, size_bounds or None)
        if size_order:
            prim = with_region_sizes(prim, size_order, size_bounds or {}, "cuda")
        elif prim.size_vars:
            raise CompileError(f"cuda kernel {name}: its loops use run-time sizes "
                               f"({', '.join(v.name for v in prim.size_vars)}) but its "
                               f"region is static")
        if passes:
            prim = (pipeline or gpu_pipeline()).run(prim)
    return prim, gte, sched


def lower_region(region: Function, gpu: GPUInfo, opt_level: int = 3, prefix: str = "",
                 fast_math: bool = False,
                 overrides: dict[str, dict[str, Any]] | None = None,
                 progress: Progress | None = None) -> LoweredRegion:
    """Lower every node of ``region`` (all of which have topi computes) to CUDA C, reporting
    each fused group to ``progress``."""
    order, bounds = region_sizes(region)
    dim_bounds = region.attrs.get("dim_bounds")
    with dim_bounds_scope(dim_bounds):
        func, groups = prepare_region(region, opt_level)
    source = CudaSource(fast_math=fast_math, limits=_limits(gpu))
    pipeline = gpu_pipeline()

    def lower(group: Any, name: str) -> tuple[LoweredGroup, list[Value]]:
        with dim_bounds_scope(dim_bounds):
            prim, gte, sched = lower_group_tir(group, name, gpu, overrides, pipeline,
                                               size_order=order or None,
                                               size_bounds=bounds or None)
        try:
            kernels = source.add(prim)
        except Exception as err:  # noqa: BLE001 - name the group that failed
            raise group_error("cuda", group, err) from err
        return (LoweredGroup(name=name, kernels=kernels, **group_facts(group, gte, sched)),
                [v for v in gte.inputs if v.is_constant])

    lowered, constants = lower_groups(groups, lower, prefix, progress,
                                      describe=lambda item: item[0].name)
    return LoweredRegion(func, lowered, constants, source, [v.name for v in order])
