"""LLVM's optimisation pipeline and target machines from explicit settings, with nothing but
llvmlite: what :mod:`tessera_llvm.machine` runs in this process (under its lock) and what the
compile workers of :mod:`tessera_llvm.llvm_worker` run in theirs, so both optimise alike.

Nothing here takes a lock or imports Tessera: a worker process starts in a fifth of a second.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import llvmlite.binding as llvm


@dataclass(frozen=True)
class MachineSpec:
    """Everything a target machine is made from: the ``triple``, the CPU name and feature
    string, the relocation and code models, and whether the triple is another architecture's
    than this process's (every target must then be registered)."""

    triple: str
    cpu: str
    features: str
    reloc: str
    codemodel: str
    foreign: bool = False

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def init_targets(foreign: bool) -> None:
    """Register the native target (and every target LLVM was built with, for ``foreign``)
    with their assembly printers and parsers; LLVM ignores a second registration."""
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    llvm.initialize_native_asmparser()
    if foreign:
        llvm.initialize_all_targets()
        llvm.initialize_all_asmprinters()


def create_machine(spec: MachineSpec) -> llvm.TargetMachine:
    """The target machine ``spec`` describes, at opt level 3."""
    target = llvm.Target.from_triple(spec.triple)
    return target.create_target_machine(cpu=spec.cpu, features=spec.features, opt=3,
                                        reloc=spec.reloc, codemodel=spec.codemodel)


def run_pipeline(module: llvm.ModuleRef, tm: llvm.TargetMachine, speed_level: int = 3,
                 loop_unrolling: bool = True) -> None:
    """LLVM's default per-module pipeline at ``speed_level`` with loop and SLP vectorization,
    loop interleaving and (unless ``loop_unrolling`` is false) unrolling enabled."""
    pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_interleaving = True
    pto.loop_unrolling = loop_unrolling
    pb = llvm.create_pass_builder(tm, pto)
    mpm = pb.getModulePassManager()
    mpm.run(module, pb)


def parse_for(text: str, tm: llvm.TargetMachine) -> llvm.ModuleRef:
    """IR text parsed and verified (RuntimeError with LLVM's message when it is invalid),
    with ``tm``'s triple and data layout."""
    mod = llvm.parse_assembly(text)
    mod.verify()
    mod.triple = tm.triple
    mod.data_layout = str(tm.target_data)
    return mod
