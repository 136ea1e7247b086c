"""From a region to CUDA kernels: fusion, computes, GPU schedules, the cuda TIR pipeline and
CUDA C.

:func:`lower_region` fuses the region (FuseOps), builds each group's tensor expression from
the topi computes, applies the group's cuda schedule (:mod:`.schedules`), lowers it through
:func:`~tessera_cuda.pipeline.gpu_pipeline` and generates its kernels into one CUDA C
translation unit (:class:`~tessera_cuda.codegen.CudaSource`). Nothing here needs a GPU.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from tessera import te
from tessera.ir.graph import Function, Node, Value
from tessera.passes.fuse_ops import fuse_ops
from tessera.progress import Progress
from tessera.tir.gpu_verifier import GPULimits
from tessera.tir.stmt import PrimFunc
from tessera.tir.transform import Pipeline
from tessera.topi.from_graph import build_te, group_error, kernel_names

from .codegen import CudaSource, GroupKernels
from .computes import CUDA_COMPUTES
from .pipeline import gpu_pipeline
from .schedules import GPUInfo, schedule_group

__all__ = ["LoweredGroup", "LoweredRegion", "group_flops", "lower_group_tir", "lower_region"]


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

    @property
    def tir(self) -> str:
        return "\n\n".join(repr(g.kernels.func) for g in self.groups)


def group_flops(nodes: list[Node]) -> int:
    """Estimated operations of a group, for profiles: 2 per multiply-add of a convolution or
    matrix product, one per output element otherwise."""
    total = 0
    for node in nodes:
        out = node.outputs[0].type
        if node.op == "Conv":
            total += 2 * out.size * math.prod(node.inputs[1].type.shape[1:])
        elif node.op in ("MatMul", "Gemm"):
            k = node.inputs[0].type.shape[-1]
            if node.op == "Gemm" and node.attrs.get("transA"):
                k = node.inputs[0].type.shape[0]
            total += 2 * out.size * k
        else:
            total += out.size
    return total


def _limits(gpu: GPUInfo) -> GPULimits:
    return GPULimits(max_threads_per_block=gpu.max_threads_per_block,
                     max_shared_bytes=gpu.max_shared_bytes, warp_size=gpu.warp_size)


def lower_group_tir(group: Any, name: str, gpu: GPUInfo,
                    overrides: dict[str, dict[str, Any]] | None = None,
                    pipeline: Pipeline | None = None, passes: bool = True
                    ) -> tuple[PrimFunc, Any, Any]:
    """One fused group scheduled (with ``overrides``) and lowered through the cuda TIR
    pipeline (``pipeline``, by default :func:`gpu_pipeline`; none with ``passes=False``: the
    loop nest ``te.lower`` makes, what the tuner featurises) to a function named ``name``
    (no CUDA C yet); with its tensor expression and schedule."""
    try:
        gte = build_te(group.nodes, [v for v in group.inputs if not v.is_constant],
                       group.outputs, computes=CUDA_COMPUTES)
        sched = schedule_group(list(gte.outputs), gpu, overrides)
        prim = te.lower(sched.schedule, list(gte.placeholders) + list(gte.outputs), name)
        if passes:
            prim = (pipeline or gpu_pipeline()).run(prim)
    except Exception as err:  # noqa: BLE001 - name the group that failed
        raise group_error("cuda", group, err) from err
    return prim, gte, sched


def lower_region(region: Function, gpu: GPUInfo, opt_level: int = 3, prefix: str = "",
                 fast_math: bool = False,
                 overrides: dict[str, dict[str, Any]] | None = None,
                 progress: Progress | None = None) -> LoweredRegion:
    """Lower every node of ``region`` (all of which have topi computes) to CUDA C, reporting
    each fused group to ``progress``."""
    func = region.copy()
    groups = fuse_ops(func, opt_level=opt_level)
    source = CudaSource(fast_math=fast_math, limits=_limits(gpu))
    pipeline = gpu_pipeline()
    lowered: list[LoweredGroup] = []
    constants: dict[str, Value] = {}
    named = list(zip(groups, kernel_names(groups, prefix)))
    for group, name in (progress or Progress()).track(named, "lowering fused groups",
                                                      lambda item: item[0].name):
        prim, gte, sched = lower_group_tir(group, name, gpu, overrides, pipeline)
        try:
            kernels = source.add(prim)
        except Exception as err:  # noqa: BLE001 - name the group that failed
            raise group_error("cuda", group, err) from err
        for v in gte.inputs:
            if v.is_constant:
                constants[v.name] = v
        cfg = sched.configs[0] if sched.configs else None
        lowered.append(LoweredGroup(
            name=name, kernels=kernels, inputs=[v.name for v in gte.inputs],
            outputs=[v.name for v in group.outputs], op="+".join(n.op for n in group.nodes),
            flops=group_flops(group.nodes), template=sched.template,
            config=dict(cfg.values) if cfg else {}, key=cfg.key() if cfg else "",
            configs=list(sched.configs)))
    return LoweredRegion(func, lowered, constants, source)
