"""Compile LLVM IR to object code with ``llvmlite.binding``.

:func:`target_machine` makes the machine for the host CPU (name and features, or ``mcpu``/
``mattr``; another architecture's with ``triple``, see :mod:`tessera_llvm.triple`),
:func:`optimize` runs LLVM's O3 pipeline (new pass manager, loop and SLP vectorization on),
and :func:`build_module` takes PrimFuncs all the way to a :class:`BuiltModule` holding the
object code, which :mod:`tessera_llvm.loader` links into the process without recompiling.

``llvmlite.binding`` is not thread-safe; everything here runs under :data:`LLVM_LOCK`.
"""

from __future__ import annotations

import functools
import sys
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import llvmlite.binding as llvm
from llvmlite import ir

from tessera.errors import CompileError, RunError
from tessera.progress import Progress
from tessera.tir.stmt import PrimFunc
from tessera_llvm.codegen import CodeGenerator
from tessera_llvm.triple import host_triple, init_all_targets, is_foreign

if TYPE_CHECKING:
    from tessera_llvm.loader import Library

#: Serialises every use of llvmlite.binding (parsing, optimising, emitting, JIT linking).
LLVM_LOCK = threading.RLock()
#: The progress phases of :func:`build_module`: LLVM IR generated per function, then the
#: module optimised and emitted as object code (two steps LLVM does not count further).
IR_PHASE = "generating LLVM IR"
LLVM_PHASE = "LLVM optimize + codegen"

_initialized = False


def init_llvm() -> None:
    """Initialise the native target and its assembly printer (once per process)."""
    global _initialized
    with LLVM_LOCK:
        if not _initialized:
            llvm.initialize_native_target()
            llvm.initialize_native_asmprinter()
            llvm.initialize_native_asmparser()
            _initialized = True


def host_cpu() -> tuple[str, str]:
    """The host CPU name and its feature string (``"+avx2,+fma,..."``)."""
    init_llvm()
    try:
        features = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        features = ""
    return llvm.get_host_cpu_name(), features


def cpu_and_features(mcpu: str | None, mattr: str | None,
                     triple: str | None = None) -> tuple[str, str]:
    """The LLVM CPU name and feature string code is generated for: the host's (plus ``mattr``)
    when ``mcpu`` is None or ``native``, else ``mcpu`` with ``mattr``. For a ``triple`` of
    another architecture than the host's, no ``mcpu`` means LLVM's ``generic`` CPU."""
    if is_foreign(triple):
        return mcpu or "generic", mattr or ""
    if mcpu is None or mcpu == "native":
        cpu, features = host_cpu()
        if mattr:
            features = f"{features},{mattr}" if features else mattr
        return cpu, features
    return mcpu, mattr or ""


def _target(triple: str | None) -> llvm.Target:
    """The LLVM target of ``triple`` (None: this process's), every target registered first
    when it is another architecture's."""
    if triple is None:
        return llvm.Target.from_triple(host_triple())
    init_all_targets()
    return llvm.Target.from_triple(triple)


def target_machine(mcpu: str | None = None, mattr: str | None = None,
                   triple: str | None = None) -> llvm.TargetMachine:
    """A target machine for ``triple`` (None: this process's triple): the host CPU and its
    features when ``mcpu`` is None (else ``mcpu`` with only the ``mattr`` features; for a
    foreign triple LLVM's ``generic`` CPU), opt level 3, and the relocation and code models of
    :func:`code_model`. (LLVM warns on stderr about a CPU name it does not know and then emits
    generic code.)"""
    init_llvm()
    with LLVM_LOCK:
        target = _target(triple)
        cpu, features = cpu_and_features(mcpu, mattr, triple)
        reloc, codemodel = code_model(triple)
        tm = target.create_target_machine(cpu=cpu, features=features, opt=3, reloc=reloc,
                                          codemodel=codemodel)
    return tm


def code_model(triple: str | None) -> tuple[str, str]:
    """(relocation model, code model) of the object code for ``triple``.

    x86-64: static relocations and the large code model. MCJIT's section memory manager maps
    a module's code, read-only data and stubs separately; in a process that has mapped large
    libraries (cuDNN and cuBLAS, PyTorch, Ray) the pieces can land more than 2 GiB apart, and
    the small code model's 32-bit PC-relative references between them then fail an LLVM
    assertion that aborts the process (``isInt<32>(RealOffset)`` in RuntimeDyldELF). The large
    model addresses with 64-bit immediates, which reach anywhere; it costs a ``movabs`` where
    a constant's address is formed, outside the inner loops (about 2% on ResNet-50 when last
    measured). Other architectures (AArch64: llvmlite's own memory manager keeps a module in
    one block) keep PIC and the default model."""
    machine = (triple or host_triple()).split("-")[0]
    if machine in ("x86_64", "amd64"):
        return "static", "large"
    return "pic", "default"


@functools.lru_cache(maxsize=64)
def known_cpu(mcpu: str, triple: str | None = None) -> bool:
    """Whether LLVM knows the CPU name ``mcpu`` for ``triple`` (None: this process's). LLVM
    reports an unknown name only as a warning on the C stderr (and may abort later), so the
    warning is captured at the file-descriptor level while a target machine is created."""
    import os
    import tempfile

    init_llvm()
    with LLVM_LOCK, tempfile.TemporaryFile() as capture:
        sys.stderr.flush()
        saved = os.dup(2)
        try:
            os.dup2(capture.fileno(), 2)
            _target(triple).create_target_machine(cpu=mcpu, features="", opt=0)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        capture.seek(0)
        text = capture.read().decode(errors="replace")
    return "not a recognized processor" not in text


def missing_host_features(features: str) -> list[str]:
    """The features enabled (``+name``) in ``features`` that this host's CPU lacks: object
    code built for them may die of an illegal instruction here."""
    have = {f[1:] for f in host_cpu()[1].split(",") if f.startswith("+")}
    wanted = [f[1:] for f in features.split(",") if f.startswith("+")]
    return [f for f in wanted if f not in have]


def optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, speed_level: int = 3) -> None:
    """Run LLVM's default per-module pipeline at ``speed_level`` with loop and SLP
    vectorization, loop interleaving and unrolling enabled."""
    with LLVM_LOCK:
        pto = llvm.create_pipeline_tuning_options(speed_level=speed_level)
        pto.loop_vectorization = True
        pto.slp_vectorization = True
        pto.loop_interleaving = True
        pto.loop_unrolling = True
        pb = llvm.create_pass_builder(tm, pto)
        mpm = pb.getModulePassManager()
        mpm.run(module, pb)


def compile_ir(module: ir.Module | str, tm: llvm.TargetMachine,
               speed_level: int = 3) -> llvm.ModuleRef:
    """Parse, verify and optimise LLVM IR (an ``llvmlite.ir.Module`` or its text)."""
    init_llvm()
    with LLVM_LOCK:
        text = str(module)
        try:
            mod = llvm.parse_assembly(text)
            mod.verify()
        except RuntimeError as exc:
            name = module.name if isinstance(module, ir.Module) else "<text>"
            raise CompileError(f"llvm: generated IR of module {name!r} is invalid: {exc}") from exc
        mod.triple = tm.triple
        mod.data_layout = str(tm.target_data)
        optimize(mod, tm, speed_level)
        return mod


@dataclass
class BuiltModule:
    """Compiled PrimFuncs: ``object_code`` (ELF bytes for this CPU, or for ``triple``'s
    architecture when one is given), the optimised
    ``llvm_ir`` and the IR as generated (``source_ir``), the exported ``function_names``, and
    per function the ``signatures`` of its parameters (dtype, element count or None) and the
    ``workspaces`` it needs (bytes; a function with a workspace takes it as one more uint8
    parameter after its buffers, which its signature lists)."""

    name: str
    function_names: list[str]
    object_code: bytes
    llvm_ir: str
    source_ir: str
    mcpu: str | None = None
    mattr: str | None = None
    #: The ``-mtriple`` the code was generated for (None: this process's triple).
    triple: str | None = None
    #: The CPU name and feature string the code was generated for (host values resolved).
    cpu_name: str = ""
    features: str = ""
    signatures: dict[str, list[tuple[str, int | None]]] = field(default_factory=dict)
    workspaces: dict[str, int] = field(default_factory=dict)
    _asm: str | None = field(default=None, repr=False)

    @property
    def asm(self) -> str:
        """The assembly of the optimised module (generated on first use)."""
        if self._asm is None:
            tm = target_machine(self.mcpu, self.mattr, self.triple)
            with LLVM_LOCK:
                mod = llvm.parse_assembly(self.llvm_ir)
                self._asm = tm.emit_assembly(mod)
        return self._asm

    def load(self) -> Library:
        """Link the object code into this process (see :func:`tessera_llvm.loader.load_object`);
        RunError for code of another architecture."""
        from tessera_llvm.loader import load_object

        if is_foreign(self.triple):
            raise RunError(f"llvm module {self.name}: compiled for {self.triple}, this host is "
                           f"{host_triple()}; its object code cannot be linked here")

        return load_object(self.object_code, self.function_names, self.mcpu,
                           signatures=self.signatures, workspaces=self.workspaces)


def _signature(func: PrimFunc, workspace: int) -> list[tuple[str, int | None]]:
    sig: list[tuple[str, int | None]] = []
    for p in func.params:
        try:
            size: int | None = p.size()
        except ValueError:
            size = None
        sig.append((p.dtype, size))
    if workspace:
        sig.append(("uint8", workspace))
    return sig


def build_module(funcs: list[PrimFunc], name: str, mcpu: str | None = None,
                 mattr: str | None = None, triple: str | None = None,
                 progress: Progress | None = None) -> BuiltModule:
    """Generate, optimise and compile ``funcs`` into one object file (for ``triple``, the
    host's by default; the data layout is the target machine's).

    The lifecycle is explicit: a :class:`~tessera_llvm.codegen.CodeGenerator` is created, each
    PrimFunc added, the IR module finalised, then parsed, verified, optimised (O3) and emitted.
    ``progress`` hears of each function generated and of the two LLVM steps (:data:`IR_PHASE`,
    :data:`LLVM_PHASE`). Raises CompileError naming the PrimFunc and node the code generator
    cannot handle."""
    progress = progress or Progress()
    tm = target_machine(mcpu, mattr, triple)
    cpu_name, features = cpu_and_features(mcpu, mattr, triple)
    gen = CodeGenerator(name, tm.triple, str(tm.target_data))
    for f in progress.track(funcs, IR_PHASE, lambda f: f.name):
        gen.add_function(f)
    module = gen.finalize()
    source = str(module)
    with LLVM_LOCK:
        progress.update(LLVM_PHASE, 0, 2, f"optimizing {len(funcs)} function(s) (O3)")
        mod = compile_ir(source, tm)
        progress.update(LLVM_PHASE, 1, 2, "emitting object code")
        obj = tm.emit_object(mod)
        progress.update(LLVM_PHASE, 2, 2)
        optimized = str(mod)
    return BuiltModule(name=name, function_names=list(gen.function_names), object_code=obj,
                       llvm_ir=optimized, source_ir=source, mcpu=mcpu, mattr=mattr,
                       triple=triple, cpu_name=cpu_name, features=features,
                       signatures={f.name: _signature(f, gen.workspace_bytes[f.name])
                                   for f in funcs},
                       workspaces=dict(gen.workspace_bytes))
