"""LLVM's target machine and optimisation pipeline, shared by everything that compiles IR.

:func:`target_machine` makes the machine for the host CPU (name and features, or ``mcpu``/
``mattr``; another architecture's with ``triple``, see :mod:`tessera_llvm.triple`),
:func:`optimize` runs LLVM's O3 pipeline (new pass manager, loop and SLP vectorization on) and
:func:`compile_ir` parses, verifies and optimises IR. :mod:`tessera_llvm.build` (kernels to
object code), :mod:`tessera_llvm.loader` (linking), :mod:`tessera_llvm.parallel` and
:mod:`tessera_llvm.sequence` (their runtime IR) build on it.

``llvmlite.binding`` is not thread-safe; everything here runs under :data:`LLVM_LOCK`.
"""

from __future__ import annotations

import functools
import sys
import threading
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from tessera.errors import CompileError
from tessera_llvm import pipeline
from tessera_llvm.cpu import parse_features, required_features
from tessera_llvm.lock import LLVM_LOCK
from tessera_llvm.triple import host_triple, init_all_targets, is_foreign, triple_arch

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


def enabled_features(mcpu: str | None, mattr: str | None,
                     triple: str | None = None) -> frozenset[str]:
    """The CPU features (LLVM's names: ``avx512vnni``, ``avxvnni``, ``dotprod``, ...) code
    generated for ``mcpu``/``mattr``/``triple`` may use: the host's as LLVM reports them
    (``mattr`` applied) when ``mcpu`` is None or ``native``, else the ones the name implies
    (:func:`tessera_llvm.cpu.required_features`) with ``mattr``'s changes."""
    cpu, features = cpu_and_features(mcpu, mattr, triple)
    if not is_foreign(triple) and (mcpu is None or mcpu == "native"):
        return parse_features(features)
    arch = triple_arch(triple) if triple else triple_arch(host_triple())
    return frozenset(required_features(cpu, features, arch))


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
    spec = machine_spec(mcpu, mattr, triple)
    with LLVM_LOCK:
        return pipeline.create_machine(spec)


def machine_spec(mcpu: str | None = None, mattr: str | None = None,
                 triple: str | None = None) -> pipeline.MachineSpec:
    """What :func:`target_machine` makes its machine from (a compile worker makes the same
    one from it: :mod:`tessera_llvm.compile_pool`)."""
    init_llvm()
    foreign = is_foreign(triple)
    if foreign:
        with LLVM_LOCK:
            init_all_targets()
    cpu, features = cpu_and_features(mcpu, mattr, triple)
    reloc, codemodel = code_model(triple)
    return pipeline.MachineSpec(triple or host_triple(), cpu, features, reloc, codemodel,
                                foreign)


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


def missing_host_features(features: str, cpu: str = "") -> list[str]:
    """The features code built for the CPU named ``cpu`` (an LLVM name; "" or the host's own
    name: none implied) with the feature string ``features`` uses that this host's CPU lacks:
    those enabled (``+name``) in ``features`` and those the name implies
    (:func:`~tessera_llvm.cpu.required_features`, e.g. AVX-512 for ``znver4``). Such code may
    die of an illegal instruction here."""
    host_name, host_features = host_cpu()
    have = parse_features(host_features)
    wanted = sorted(parse_features(features))
    if cpu and cpu != host_name:
        wanted = required_features(cpu, features, triple_arch(host_triple()))
    return [f for f in wanted if f not in have]


def optimize(module: llvm.ModuleRef, tm: llvm.TargetMachine, speed_level: int = 3,
             loop_unrolling: bool = True) -> None:
    """Run LLVM's default per-module pipeline at ``speed_level`` with loop and SLP
    vectorization, loop interleaving and (unless ``loop_unrolling`` is false) unrolling
    enabled (:func:`tessera_llvm.pipeline.run_pipeline`)."""
    with LLVM_LOCK:
        pipeline.run_pipeline(module, tm, speed_level, loop_unrolling)


def compile_ir(module: ir.Module | str, tm: llvm.TargetMachine,
               speed_level: int = 3, loop_unrolling: bool = True) -> llvm.ModuleRef:
    """Parse, verify and optimise LLVM IR (an ``llvmlite.ir.Module`` or its text; see
    :func:`optimize`)."""
    init_llvm()
    with LLVM_LOCK:
        text = str(module)
        try:
            mod = pipeline.parse_for(text, tm)
        except RuntimeError as exc:
            name = module.name if isinstance(module, ir.Module) else "<text>"
            raise CompileError(f"llvm: generated IR of module {name!r} is invalid: {exc}") from exc
        optimize(mod, tm, speed_level, loop_unrolling)
        return mod


def jit_runner(make_ir: Callable[[llvm.TargetMachine], ir.Module | str], name: str,
               ctype: Any) -> Callable[[], Any]:
    """A getter of the ctypes function (of type ``ctype``) ``name`` in the module ``make_ir``
    builds: compiled on the first call, from any thread once, and never freed."""
    lock = threading.Lock()
    compiled: list[Any] = []

    def get() -> Any:
        if not compiled:
            with lock:
                if not compiled:
                    compiled.append(ctype(jit_function_address(make_ir, name)))
        return compiled[0]

    return get


def jit_function_address(make_ir: Callable[[llvm.TargetMachine], ir.Module | str],
                         name: str) -> int:
    """Compile the module ``make_ir`` builds for this host's target machine and return the
    address of its function ``name``. The code lives as long as the process (the runtime's
    own helpers: the kernel-sequence and loop runners)."""
    tm = target_machine()
    mod = compile_ir(make_ir(tm), tm, speed_level=2)
    with LLVM_LOCK:
        engine = llvm.create_mcjit_compiler(mod, tm)
        engine.finalize_object()
        address = engine.get_function_address(name)
        engine.detach()
        mod.detach()
    return address
