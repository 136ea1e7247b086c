"""The vta_sim Tessera backend: quantized conv2d and dense layers on a simulated VTA.

Target options: ``-sim=fsim`` (default; numpy, needs nothing else) or ``-sim=tsim`` (the Verilog
core through Verilator and pyverilator), and ``-config=PATH`` (a VTA configuration JSON; VTA's
defaults otherwise). For example ``tessera.compile(model, target="vta_sim -sim=tsim, ref")``.

``claims`` returns the composite patterns of :mod:`tessera_vta.patterns`. ``compile`` lowers each
layer of a region with the VTA compiler into a :class:`~tessera_vta.compiler.Program` (an
instruction stream and a DRAM image holding the packed weights, bias and micro-ops) and returns
one kernel per layer: it packs its int8 NCHW input into NCHW1n16c in a copy of the DRAM image,
runs the simulator and unpacks the output. Buffers live on the ``vta`` device (host numpy
arrays standing for VTA's DRAM), so the partitioner puts explicit copies between CPU and VTA.

Counters. After every run ``CompiledRegion.info["counters"]`` holds what the region's layers
did in their latest run (bytes loaded per buffer, bytes stored, GEMM and ALU operations,
instructions, and cycles: fsim's estimate, or the Verilog model's count with tsim), which
``Module.profile()`` and ``tessera run --profile`` print. With tsim the data-independent
counters come from one fsim run of each layer (its output is also checked against tsim's).

Artifacts. ``save`` writes each layer's encoded instructions and DRAM image and a
``layers.json`` with the layer metadata and the configuration; ``load`` rebuilds the programs
from them without compiling.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArtifactError, CompileError, RunError, TargetError
from tessera.ir.graph import Function, Node
from tessera.ir.types import DType, TensorType
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.device import CPUDevice
from tessera.plugin.patterns import Pattern
from tessera.plugin.target import TargetKind

from . import tsim
from .compiler import Conv2dParams, Program, Tiling
from .config import DEFAULT_CONFIG, VTAConfig
from .errors import VTAError
from .isa import decode_stream
from .machine import Counters
from .patterns import NotALayer, check_layer, find_layers, layer_patterns
from .runner import run as run_program

SIMULATORS = ("fsim", "tsim")
#: Version of the files ``save`` writes.
ARTIFACT_FORMAT = 1
METADATA = "layers.json"


class VTADevice(CPUDevice):
    """VTA's DRAM, simulated: buffers are host numpy arrays, but on a device of their own so
    that the partitioner inserts explicit copies between the CPU and VTA."""

    name = "vta"


VTA_DEVICE = VTADevice()


@lru_cache(maxsize=16)
def _load_config(path: str) -> VTAConfig:
    try:
        return VTAConfig.load(path)
    except (OSError, ValueError, TypeError) as err:
        raise TargetError(f"vta_sim -config={path}: cannot read a VTA configuration: "
                          f"{err}") from None


def target_simulator(target: TargetKind) -> str:
    """The simulator a target kind asks for (``-sim``, default fsim)."""
    sim = target.get("sim") or "fsim"
    if sim not in SIMULATORS:
        raise TargetError(f"vta_sim -sim={sim}: expected one of {', '.join(SIMULATORS)}")
    return sim


def target_settings(target: TargetKind) -> tuple[str, VTAConfig]:
    """The simulator and hardware configuration (``-config``) a target kind asks for."""
    path = target.get("config")
    config = _load_config(str(Path(path).expanduser().resolve())) if path else DEFAULT_CONFIG
    return target_simulator(target), config


def tsim_unavailable() -> str | None:
    """Why tsim cannot run here (Verilator or pyverilator missing), or None."""
    return tsim.unavailable_reason()


def counter_dict(counters: Counters, cycles: int) -> dict[str, int]:
    """A simulator's counters as the flat numbers profiles print."""
    out = {"cycles": int(cycles)}
    for buffer, nbytes in counters.bytes_loaded.items():
        out[f"bytes_loaded_{buffer}"] = int(nbytes)
    out["bytes_stored"] = int(counters.bytes_stored)
    out["gemm_ops"] = int(counters.gemm_iterations)
    out["gemm_macs"] = int(counters.gemm_macs)
    out["alu_ops"] = int(counters.alu_ops)
    out["instructions"] = int(sum(counters.instructions.values()))
    return out


@dataclass
class LayerPlan:
    """One compiled layer: what its kernel runs and what an artifact stores."""

    name: str
    kind: str
    form: str
    input: str
    output: str
    input_type: TensorType
    output_type: TensorType
    program: Program
    description: str = ""

    def to_json(self) -> dict[str, Any]:
        p = self.program
        return {
            "name": self.name, "kind": self.kind, "form": self.form,
            "input": self.input, "output": self.output,
            "input_shape": list(self.input_type.shape),
            "output_shape": list(self.output_type.shape),
            "description": self.description,
            "program": {"kind": p.kind, "params": dataclasses.asdict(p.params),
                        "tiling": dataclasses.asdict(p.tiling),
                        "input_offset": p.input_offset, "input_nbytes": p.input_nbytes,
                        "output_offset": p.output_offset, "output_nbytes": p.output_nbytes},
        }


class RegionCounters:
    """The counters of a region's layers in their latest run, summed into ``totals`` (the dict
    ``CompiledRegion.info["counters"]`` holds, updated in place)."""

    def __init__(self, layers: int) -> None:
        self._lock = threading.Lock()  # runs from several threads record at once
        self.per_layer: list[dict[str, int] | None] = [None] * layers
        self.totals: dict[str, int] = {}
        #: fsim's counters per layer, for tsim runs (computed on a layer's first run)
        self.static: list[Counters | None] = [None] * layers

    def record(self, index: int, values: dict[str, int]) -> None:
        with self._lock:
            self.per_layer[index] = values
            totals: dict[str, int] = {}
            for layer in self.per_layer:
                for key, value in (layer or {}).items():
                    totals[key] = totals.get(key, 0) + value
            self.totals.clear()
            self.totals.update(totals)


@dataclass
class VTACompiledRegion(CompiledRegion):
    """A compiled region plus its layer plans (for ``save``)."""

    plans: list[LayerPlan] = field(default_factory=list)
    simulator: str = "fsim"


def _layer_kernel(index: int, plan: LayerPlan, sim: str, counters: RegionCounters) -> Kernel:
    program = plan.program

    def run(ins: list[Any], outs: list[Any]) -> None:
        x = ins[0]
        try:
            result = run_program(program, x, sim=sim)
            stats = result.counters
            if stats is None:  # tsim: data-independent counters from one fsim run
                stats = counters.static[index]
                if stats is None:
                    check = run_program(program, x, sim="fsim")
                    if not np.array_equal(check.output, result.output):
                        raise RunError(f"vta_sim layer {plan.name}: tsim and fsim disagree")
                    stats = counters.static[index] = check.counters
        except VTAError as err:
            raise RunError(f"vta_sim layer {plan.name} ({plan.kind}) failed on {sim}: "
                           f"{err}") from err
        np.copyto(outs[0], result.output.reshape(outs[0].shape), casting="no")
        assert stats is not None
        counters.record(index, counter_dict(stats, result.cycles))

    return Kernel(name=plan.name, fn=run, inputs=[plan.input], outputs=[plan.output],
                  op=f"vta.{plan.kind}", flops=2 * program.macs)


class VTABackend(Backend):
    """int8 conv2d and dense layers on a simulated VTA (fsim or tsim)."""

    name = "vta_sim"
    device = "vta"
    options = {"sim": "fsim (default) or tsim",
               "config": "path to a VTA config JSON"}
    #: int8 layers are what it runs (it claims both the QDQ and the integer forms)
    integer_products = True

    def available(self) -> str | None:
        return None  # fsim needs numpy only

    def available_for(self, target: TargetKind) -> str | None:
        sim, _ = target_settings(target)  # an unreadable -config is a TargetError here
        if sim == "tsim":
            reason = tsim_unavailable()
            if reason:
                return f"-sim=tsim: {reason}"
        return None

    def device_api(self) -> VTADevice:
        return VTA_DEVICE

    # -- claims ---------------------------------------------------------------------------------
    def claims(self, target: TargetKind) -> list[Pattern]:
        _, config = target_settings(target)
        # every root pattern calls the check; remember each node's answer (keeping the node
        # alive so that its id is not reused)
        memo: dict[int, tuple[Node, bool]] = {}

        def check(node: Node) -> bool:
            known = memo.get(id(node))
            if known is None or known[0] is not node:
                try:
                    check_layer(node, config)
                    ok = True
                except NotALayer:
                    ok = False
                known = memo[id(node)] = (node, ok)
            return known[1]

        return layer_patterns(check)

    def explain(self, node: Node, target: TargetKind | None = None) -> str | None:
        """Why vta_sim does not claim the layer ending at ``node`` (None when it does)."""
        _, config = target_settings(target or TargetKind(self.name))
        try:
            check_layer(node, config)
        except NotALayer as err:
            return str(err)
        return None

    # -- compile --------------------------------------------------------------------------------
    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        sim, config = target_settings(target)
        try:
            layers = find_layers(region)
        except NotALayer as err:
            raise CompileError(f"vta_sim cannot compile {region.name}: {err}") from None
        plans = []
        for layer in layers:
            try:
                program = layer.lower(config)
            except VTAError as err:
                raise CompileError(f"vta_sim: node {layer.name}: cannot lower "
                                   f"{layer.describe()}: {err}") from None
            plans.append(LayerPlan(layer.name, layer.kind, layer.form, layer.input.name,
                                   layer.output.name, layer.input.type, layer.output.type,
                                   program, layer.describe()))
        return self._assemble(region, plans, sim, config)

    def _assemble(self, region: Function, plans: list[LayerPlan], sim: str,
                  config: VTAConfig) -> VTACompiledRegion:
        counters = RegionCounters(len(plans))
        kernels = [_layer_kernel(i, plan, sim, counters) for i, plan in enumerate(plans)]
        tensors: dict[str, TensorType] = {}
        for plan in plans:
            tensors[plan.input] = plan.input_type
            tensors[plan.output] = plan.output_type
        info = {
            "counters": counters.totals,
            "simulator": sim,
            "layers": [plan.description for plan in plans],
            "instructions": sum(len(plan.program.insns) for plan in plans),
            "dram_bytes": sum(int(plan.program.dram.size) for plan in plans),
        }
        return VTACompiledRegion(self.name, region, kernels, tensors, {}, info, plans=plans,
                                 simulator=sim)

    # -- artifacts ------------------------------------------------------------------------------
    def save(self, compiled: CompiledRegion) -> dict[str, bytes]:
        if not isinstance(compiled, VTACompiledRegion):
            return {}
        files: dict[str, bytes] = {}
        entries = []
        for i, plan in enumerate(compiled.plans):
            entry = plan.to_json()
            entry["insn_file"] = f"layer{i}.insn"
            entry["dram_file"] = f"layer{i}.dram"
            files[entry["insn_file"]] = plan.program.instruction_bytes()
            files[entry["dram_file"]] = plan.program.dram.tobytes()
            entries.append(entry)
        config = compiled.plans[0].program.config if compiled.plans else DEFAULT_CONFIG
        meta = {"format": ARTIFACT_FORMAT, "simulator": compiled.simulator,
                "config": config.to_dict(), "layers": entries}
        files[METADATA] = json.dumps(meta, indent=1).encode()
        return files

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        """All of them when ``save`` writes the layers (their DRAM images hold the packed
        weights); none otherwise (``load`` compiles again)."""
        if not isinstance(compiled, VTACompiledRegion):
            return []
        return [v.name for v in compiled.region.constants()]

    def load(self, region: Function, files: dict[str, bytes], target: TargetKind,
             options: CompileOptions) -> CompiledRegion:
        if METADATA not in files:
            return self.compile(region, target, options)
        # the configuration comes from the artifact: a -config file need not exist here
        sim = target_simulator(target)
        reason = tsim_unavailable() if sim == "tsim" else None
        if reason:
            raise ArtifactError(f"region {region.name} was compiled for vta_sim -sim=tsim, "
                                f"which is unavailable here: {reason}")
        try:
            meta = json.loads(files[METADATA])
            if meta.get("format") != ARTIFACT_FORMAT:
                raise ValueError(f"format {meta.get('format')!r}, expected {ARTIFACT_FORMAT}")
            config = VTAConfig.from_dict(meta["config"])
            plans = [_plan_from_json(entry, files, config) for entry in meta["layers"]]
        except (KeyError, ValueError, TypeError, VTAError) as err:
            raise ArtifactError(f"vta_sim files of region {region.name} are malformed: "
                                f"{type(err).__name__}: {err}") from None
        known = {v.name for v in region.values()}
        for plan in plans:
            for name in (plan.input, plan.output):
                if name not in known:
                    raise ArtifactError(f"vta_sim layer {plan.name} of region {region.name} "
                                        f"reads or writes {name!r}, which the region lacks")
        return self._assemble(region, plans, sim, config)


def _plan_from_json(entry: dict[str, Any], files: dict[str, bytes],
                    config: VTAConfig) -> LayerPlan:
    p = entry["program"]
    dram = np.frombuffer(files[entry["dram_file"]], dtype=np.uint8).copy()
    program = Program(
        config=config, kind=p["kind"], params=Conv2dParams(**p["params"]),
        tiling=Tiling(**p["tiling"]), insns=decode_stream(files[entry["insn_file"]], config),
        dram=dram, input_offset=int(p["input_offset"]), input_nbytes=int(p["input_nbytes"]),
        output_offset=int(p["output_offset"]), output_nbytes=int(p["output_nbytes"]))
    if program.output_offset + program.output_nbytes > dram.size:
        raise ValueError(f"layer {entry['name']}: the DRAM image is too small")
    return LayerPlan(entry["name"], entry["kind"], entry["form"], entry["input"], entry["output"],
                     TensorType(tuple(entry["input_shape"]), DType.int8),
                     TensorType(tuple(entry["output_shape"]), DType.int8), program,
                     entry.get("description", ""))
