"""The ``cudnn`` and ``cublas`` backends: library calls on the ``cuda`` device.

Both run on tessera-cuda's device object (one arena and one stream with the generated kernels,
so no copies between them), claim what their library does well (see :mod:`.conv`,
:mod:`.pool_softmax`, :mod:`.gemm`), say why they leave a node of an op they claim to the next
backend (``declines``: shown in the partition report), and compile a region into one plan per
matched pattern: plain data (shapes, descriptors' settings, the algorithm) that artifacts keep
as JSON. Selected by ``cuda -libs=cudnn,cublas`` (they then see the cuda kind's options) or as
kinds of their own (``"cudnn -tf32=1, cublas, cuda"``).

Target options: ``-arch`` (as cuda's: compile without a GPU for that architecture),
``-tf32=1`` (let the libraries use TF32 tensor cores for float32, as PyTorch's cuDNN
convolutions do by default; off: exact float32), ``-workspace_mb=N`` (scratch per call, default
32).

Without a GPU the plans are made and their descriptors created and checked (both libraries
create descriptors without a GPU), the algorithms are left to be measured where the module is
loaded on a GPU; with a GPU they are measured at compile time. Artifacts record the algorithm,
how it was chosen, the GPU architecture and the library versions; a module loaded on another
GPU or library version measures again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import CompileError, RunError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.plugin.artifact_files import CONSTANT_KEY, ArtifactFiles  # noqa: F401
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.device import Device
from tessera.plugin.patterns import Pattern, PatternMatch, region_matches
from tessera.plugin.target import TargetKind
from tessera_cuda.driver import CudaBuffer, CUDADevice, driver_missing

from . import cublaslt_api as lt
from . import cudnn_api as dnn
from . import libs
from .common import Plan, tf32, workspace_limit
from .conv import ConvCall, ConvDescriptors, ConvPlan, conv_unsupported, plan_conv, unchecked_fused
from .conv import add_unsupported as conv_add_unsupported
from .conv import choose_algorithm as choose_conv
from .conv import patterns as conv_patterns
from .gemm import (
    GemmCall,
    GemmDescriptors,
    GemmPlan,
    gemm_unsupported,
    matmul_unsupported,
    plan_gemm,
)
from .gemm import choose_algorithm as choose_gemm
from .gemm import patterns as gemm_patterns
from .pool_softmax import (
    POOLS,
    SOFTMAXES,
    PoolCall,
    PoolPlan,
    SoftmaxCall,
    SoftmaxPlan,
    plan_pool,
    plan_softmax,
    pool_unsupported,
    softmax_unsupported,
)
from .pool_softmax import patterns as pool_patterns

#: 2: constants saved as arrays (``constants/<name>``, in the artifact's shared store), not in
#: a ``constants.npz`` of their own; the region's constants are not stored in graph form
ARTIFACT_FORMAT = 2
PLANS_FILE = "plans.json"
DEFAULT_ARCH = "sm_90"
#: The file ``save`` writes and ``load`` checks (the format, the plans).
ARTIFACT = ArtifactFiles(PLANS_FILE, keys=("plans", "tensors"), what="plans")
PLAN_TYPES: dict[str, type[Plan]] = {c.kind: c for c in (ConvPlan, PoolPlan, SoftmaxPlan,
                                                          GemmPlan)}


class LibraryBackend(Backend):
    """What the cuDNN and cuBLASLt backends share: the cuda device, availability, compile,
    artifacts. Subclasses name their library and make a plan per matched pattern."""

    device = "cuda"
    options = {
        "arch": "GPU architecture to compile for without a GPU, e.g. sm_90 (as cuda's)",
        "tf32": "1: allow TF32 tensor cores for float32 (PyTorch's default for cuDNN "
                "convolutions); default 0, exact float32",
        "workspace_mb": "scratch memory per library call in MiB (default 32)",
    }
    artifact_version = str(ARTIFACT_FORMAT)
    library = ""
    package = ""

    # -- availability ----------------------------------------------------------------------
    def available(self) -> str | None:
        missing = libs.missing(self.library)
        if missing:
            return missing
        why = driver_missing()
        if why:
            return f"{why}; it still compiles for a named GPU (cuda -arch={DEFAULT_ARCH} " \
                   f"-libs=cudnn,cublas) into artifacts that run where the GPU is"
        return None

    def available_for(self, target: TargetKind) -> str | None:
        tf32(target)
        workspace_limit(target)
        missing = libs.missing(self.library)
        if missing:
            return missing
        why = driver_missing()
        if why and not target.get("arch"):
            return f"{why}; to compile without a GPU, name its architecture " \
                   f"(cuda -arch={DEFAULT_ARCH} -libs=cudnn,cublas)"
        return None

    def device_api(self) -> Device:
        return CUDADevice.get(0)

    # -- claims ----------------------------------------------------------------------------
    def checks(self) -> dict[str, Callable[[Node], str | None]]:
        """op -> why a node of that op is left to another backend (None: claimed alone)."""
        raise NotImplementedError

    def declines(self, node: Node, target: TargetKind) -> str | None:
        check = self.checks().get(node.op)
        return check(node) if check is not None else None

    # -- compile ---------------------------------------------------------------------------
    def plan(self, match: PatternMatch, target: TargetKind,
             constants: dict[str, np.ndarray]) -> Plan:
        raise NotImplementedError

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        constants: dict[str, np.ndarray] = {}
        plans = []
        for match in region_matches(region):
            try:
                plans.append(self.plan(match, target, constants))
            except (KeyError, ValueError, IndexError) as err:
                raise CompileError(f"{self.name}: cannot plan {match.pattern} at node "
                                   f"{match.root.name} ({match.root.op}): {err}") from err
        region_consts = {v.name: v for v in region.constants()}
        for p in plans:
            for name in p.inputs:
                if name not in constants and name in region_consts:
                    constants[name] = np.ascontiguousarray(
                        np.asarray(region_consts[name].data, dtype=np.float32))
        types = {v.name: v.type for v in region.inputs}
        types.update({v.name: v.type for n in region.nodes for v in n.outputs if v is not None})
        tensors = {name: types[name] for p in plans for name in [*p.inputs, *p.outputs]
                   if name not in constants}
        return self._assemble(region, plans, constants, tensors, options, stale=False)

    def _descriptors(self, plan: Plan) -> Any:
        try:
            if isinstance(plan, ConvPlan):
                return ConvDescriptors(plan)
            if isinstance(plan, GemmPlan):
                return GemmDescriptors(plan)
            if isinstance(plan, PoolPlan):
                return PoolCall(plan, None)
            if isinstance(plan, SoftmaxPlan):
                return SoftmaxCall(plan, None)
        except (dnn.DescriptorError, lt.DescriptorError) as err:
            raise CompileError(f"{self.name}: node {plan.name} ({plan.op}): {err}") from err
        raise CompileError(f"{self.name}: unknown plan kind {plan.kind!r}")

    def _assemble(self, region: Function, plans: list[Plan], constants: dict[str, np.ndarray],
                  tensors: dict[str, TensorType], options: CompileOptions,
                  stale: bool) -> CompiledRegion:
        device = self.device_instance(options)
        descriptors = [self._descriptors(p) for p in plans]
        handle = {"plans": plans, "constants": constants, "arch": None}
        missing = device.missing()
        info: dict[str, Any] = {"calls": len(plans), "device": device.key,
                                "library": self._version_text()}
        if missing is not None:
            why = f"{self.name} region {region.name} was compiled without a GPU ({missing})"
            kernels = [self._kernel(p, _unloaded(why)) for p in plans]
            info["loaded"] = False
            info["algorithms"] = {p.name: p.algo_source for p in plans if hasattr(p, "algo")}
            absent = {k: CudaBuffer(0, TensorType.of(v)) for k, v in constants.items()}
            return CompiledRegion(self.name, region, kernels, tensors, absent, info,
                                  handle=handle)
        handle["arch"] = device.arch()
        on_device = {k: device.from_host(v) for k, v in constants.items()}
        kernels = []
        for p, d in zip(plans, descriptors):
            if stale or getattr(p, "algo", "n/a") is None or unchecked_fused(p):
                self._choose(p, d, device, on_device)
            kernels.append(self._kernel(p, self._call(p, d, device)))
        info["algorithms"] = {p.name: p.algo_source for p in plans if hasattr(p, "algo")}
        return CompiledRegion(self.name, region, kernels, tensors, on_device, info,
                              handle=handle)

    def _choose(self, plan: Plan, d: Any, device: Any, on_device: dict[str, Any]) -> None:
        if isinstance(plan, ConvPlan):
            w = on_device.get(plan.inputs[1])
            scratch = None
            if w is None:  # weights computed at run time: measure on scratch memory
                scratch = device.allocate(int(np.prod(plan.w_shape)) * 4)
                w = scratch
            try:
                choose_conv(plan, d, device, w)
            finally:
                if scratch is not None:
                    device.free(scratch)
        elif isinstance(plan, GemmPlan):
            choose_gemm(plan, d, device)

    def _call(self, plan: Plan, d: Any, device: Any) -> Callable[[list[Any], list[Any]], None]:
        if isinstance(plan, ConvPlan):
            return ConvCall(plan, d, device)
        if isinstance(plan, GemmPlan):
            return GemmCall(plan, d, device)
        d.device = device  # PoolCall / SoftmaxCall
        return d

    def _kernel(self, plan: Plan, fn: Callable[[list[Any], list[Any]], None]) -> Kernel:
        return Kernel(name=plan.name, fn=fn, inputs=list(plan.inputs),
                      outputs=list(plan.outputs), op=plan.op, flops=int(plan.flops),
                      workspace_bytes=int(plan.workspace))

    def _version_text(self) -> str:
        try:
            return f"{self.library} {libs.load(self.library).version_text}"
        except libs.LibraryMissing:
            return f"{self.library} missing"

    # -- artifacts -------------------------------------------------------------------------
    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        handle = ARTIFACT.handle(self, compiled,
                                 lambda h: isinstance(h, dict) and "plans" in h)
        return ARTIFACT.save(self, {"arch": handle["arch"], "library": self._version_text(),
                                    "plans": [p.to_json() for p in handle["plans"]]},
                             {}, handle["constants"], compiled.tensors)

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        """All of them: the calls read only the saved constants (the plans hold the rest)."""
        return [v.name for v in compiled.region.constants()]

    def load(self, region: Function, files: dict[str, bytes | np.ndarray],
             target: TargetKind, options: CompileOptions) -> CompiledRegion:
        saved = ARTIFACT.load(self, region.name, files)
        meta = saved.table
        with ARTIFACT.reading(self, region.name):
            plans = [PLAN_TYPES[p["kind"]].from_json(p) for p in meta["plans"]]
        device = self.device_instance(options)
        stale = False
        if device.missing() is None:
            # chosen on another GPU or library version (or not yet): measure again here
            stale = meta.get("arch") != device.arch() or meta.get("library") != \
                self._version_text()
        return self._assemble(region, plans, saved.constants, saved.tensors, options,
                              stale=stale)

def _unloaded(why: str) -> Callable[[list[Any], list[Any]], None]:
    def run(ins: list[Any], outs: list[Any]) -> None:
        raise RunError(f"{why}: export the module and load it on a machine with the GPU")

    return run


class CuDNNBackend(LibraryBackend):
    """Convolutions (with bias, residual and ReLU fused), pooling and softmax on cuDNN."""

    name = "cudnn"
    library = "cudnn"

    def claims(self, target: TargetKind) -> list[Pattern]:
        return conv_patterns() + pool_patterns()

    def checks(self) -> dict[str, Callable[[Node], str | None]]:
        out: dict[str, Callable[[Node], str | None]] = {"Conv": conv_unsupported}
        out.update({op: pool_unsupported for op in POOLS})
        out.update({op: softmax_unsupported for op in SOFTMAXES})
        return out

    def plan(self, match: PatternMatch, target: TargetKind,
             constants: dict[str, np.ndarray]) -> Plan:
        op = match.root.op
        if op in POOLS:
            return plan_pool(match)
        if op in SOFTMAXES:
            return plan_softmax(match)
        math = dnn.DEFAULT_MATH if tf32(target) else dnn.FMA_MATH
        if op in ("Add", "Sum"):  # ConvAdd: check the addend again (the pattern did)
            idx = 0 if match.root.inputs[0].producer in match.nodes else 1
            reason = conv_add_unsupported(match.root, idx)
            if reason:
                raise ValueError(reason)
        return plan_conv(match, math, workspace_limit(target), constants)


class CuBLASBackend(LibraryBackend):
    """Matrix products (2-D, batched, transposed, Gemm) with bias, ReLU and GELU epilogues on
    cuBLASLt."""

    name = "cublas"
    library = "cublasLt"

    def claims(self, target: TargetKind) -> list[Pattern]:
        return gemm_patterns()

    def checks(self) -> dict[str, Callable[[Node], str | None]]:
        return {"MatMul": matmul_unsupported, "Gemm": gemm_unsupported}

    def plan(self, match: PatternMatch, target: TargetKind,
             constants: dict[str, np.ndarray]) -> Plan:
        compute = lt.COMPUTE_32F_FAST_TF32 if tf32(target) else lt.COMPUTE_32F
        return plan_gemm(match, compute, workspace_limit(target))
