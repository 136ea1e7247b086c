"""The llvm backend's code for a program without Python (``Backend.export_code``).

A region compiled for export (``options.extra["export"]``) keeps its optimised LLVM IR
(``LLVMHandle.llvm_ir``). :func:`export_region` emits that IR again, for the CPU and
features the region was compiled for, as position-independent code with the default code
model (the in-process loader takes static code of the large model: see
:func:`tessera_llvm.machine.code_model`): the same instructions, addressed so that a shared
library needs no text relocations. The thread pool the kernels launch their parallel loops
on (:mod:`tessera_llvm.pool_ir`) is emitted as an object of its own, ``tessera_pool.o``, the
same bytes for every region of one triple and CPU; its thread count starts at one and is set
by ``tessera_pool_set_nthreads(int)``. For a system without threads (``serial``) the pool is
``tessera_pool_serial.o`` instead: ``tessera_parallel_for`` runs the whole loop in the calling
thread, and nothing needs pthreads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import llvmlite.binding as llvm
from llvmlite import ir

from tessera.errors import ExportError
from tessera.plugin.exported import ExportedCode

from . import pipeline
from .cpu import required_features
from .lock import LLVM_LOCK
from .machine import compile_ir, init_llvm
from .pool_ir import PoolIR
from .triple import host_triple, is_foreign, triple_arch

#: The object holding the thread pool, and the serial one.
POOL_OBJECT = "tessera_pool.o"
SERIAL_POOL_OBJECT = "tessera_pool_serial.o"
#: What the exported code links against besides the C library (with the pool, without).
LIBRARIES = ["pthread", "m"]
SERIAL_LIBRARIES = ["m"]


def export_spec(triple: str | None, cpu: str, features: str) -> pipeline.MachineSpec:
    """The target machine of exported code: the region's triple, CPU and features,
    position independent, the default code model."""
    triple = triple or host_triple()
    return pipeline.MachineSpec(triple, cpu, features, "pic", "default", is_foreign(triple))


def export_region(region: str, llvm_ir: str | None, table: list[dict[str, Any]],
                  size_names: list[str], triple: str | None, cpu: str,
                  features: str, serial: bool = False) -> ExportedCode:
    """The objects of region ``region`` (its optimised IR and kernel table as compiled; a
    region with run-time sizes, ``size_names``, keeps its kernels' calling convention: the
    buffers, the workspace or a null pointer, then the sizes array) and of the thread pool
    (``serial``: the one without threads), and the symbol of each kernel."""
    if llvm_ir is None:
        raise ExportError(f"llvm region {region} was compiled without its LLVM IR (loaded "
                          f"from an artifact, or compiled without export); compile the model "
                          f"for export (tessera export model.onnx, tessera.deploy.export_c)")
    spec = export_spec(triple, cpu, features)
    init_llvm()
    with LLVM_LOCK:
        pipeline.init_targets(spec.foreign)
        tm = pipeline.create_machine(spec)
        try:
            mod = llvm.parse_assembly(llvm_ir)
            mod.verify()
        except RuntimeError as exc:
            raise ExportError(f"llvm region {region}: its kept IR does not parse: "
                              f"{exc}") from exc
        obj = tm.emit_object(mod)
    wanted = required_features(cpu, features, triple_arch(spec.triple))
    symbols = {k["name"]: k["name"] for k in table}
    if serial:
        return ExportedCode({f"{region}.o": obj, SERIAL_POOL_OBJECT: serial_pool_object(spec)},
                            symbols, spec.triple, cpu_features=wanted,
                            libraries=list(SERIAL_LIBRARIES))
    return ExportedCode({f"{region}.o": obj, POOL_OBJECT: pool_object(spec)}, symbols,
                        spec.triple, set_threads="tessera_pool_set_nthreads",
                        cpu_features=wanted, libraries=list(LIBRARIES))


@functools.lru_cache(maxsize=8)
def pool_object(spec: pipeline.MachineSpec) -> bytes:
    """The thread pool compiled for ``spec`` as a position-independent object."""
    return _emit(spec, lambda triple, layout: PoolIR(triple, layout,
                                                     triple_arch(spec.triple)).build())


def _emit(spec: pipeline.MachineSpec, make: Callable[[str, str], ir.Module]) -> bytes:
    """The module ``make(triple, data_layout)`` builds, optimised and emitted for ``spec``."""
    init_llvm()
    with LLVM_LOCK:
        pipeline.init_targets(spec.foreign)
        tm = pipeline.create_machine(spec)
    mod = compile_ir(make(tm.triple, str(tm.target_data)), tm, speed_level=2)
    with LLVM_LOCK:
        return bytes(tm.emit_object(mod))


def serial_pool_ir(triple: str, data_layout: str) -> ir.Module:
    """``tessera_parallel_for(body, closure, extent, grain)`` as one call
    ``body(0, extent, closure)`` (nothing for an empty loop), and a
    ``tessera_pool_set_nthreads(int)`` that does nothing: the pool of a program without
    threads."""
    module = ir.Module(name="tessera_pool_serial")
    module.triple = triple
    module.data_layout = data_layout
    i32, i64, ptr, void = ir.IntType(32), ir.IntType(64), ir.PointerType(), ir.VoidType()
    body_ty = ir.FunctionType(void, [i64, i64, ptr])
    fn = ir.Function(module, ir.FunctionType(void, [body_ty.as_pointer(), ptr, i64, i64]),
                     "tessera_parallel_for")
    body, closure, extent, _grain = fn.args
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    with b.if_then(b.icmp_signed(">", extent, ir.Constant(i64, 0))):
        b.call(body, [ir.Constant(i64, 0), extent, closure])
    b.ret_void()
    setter = ir.Function(module, ir.FunctionType(void, [i32]), "tessera_pool_set_nthreads")
    ir.IRBuilder(setter.append_basic_block("entry")).ret_void()
    return module


@functools.lru_cache(maxsize=8)
def serial_pool_object(spec: pipeline.MachineSpec) -> bytes:
    """:func:`serial_pool_ir` compiled for ``spec`` as a position-independent object."""
    return _emit(spec, serial_pool_ir)
