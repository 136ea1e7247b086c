"""The ``llvm`` Tessera backend: fused groups compiled to native CPU code through LLVM.

``claims`` accepts every op that has a topi compute (and whose attributes the compute handles)
and, as a backend of the target, every ``Loop`` whose whole body it runs: the body is compiled
here and its iterations run by one native call (:mod:`.native_loop`, :mod:`.loop_region`).
``compile`` lowers a region (:mod:`.lowering`: NCHWc layout, FuseOps, computes, default
schedules, TIR passes; structurally identical groups lowered once, the others' kernels
aliases of the first one's function: ``alias_of`` in the kernel table, counted in
``info["shared_kernels"]``), generates one LLVM module for all its kernels
(:mod:`.codegen`), optimises it for the host CPU or ``-mcpu`` and emits object code
(:mod:`.build`; or takes both from the kernel cache, ``options.kernel_cache``, when the same
IR was compiled for the same CPU before: ``info["kernel_cache"]``), then links the object code
in memory (:mod:`.loader`). It reports its
progress on ``options.progress``: each fused group lowered, each function's IR generated,
then LLVM's optimisation and emission.
Each kernel is a native function; parallel loops run on the process-wide native thread pool
(:mod:`.parallel`).

Target options: ``-mcpu=NAME`` (LLVM CPU name; the host CPU by default), ``-mattr=+f,-g``
(extra features), ``-num-threads=N`` (threads of the kernel pool; default
``TESSERA_NUM_THREADS`` or the CPU count), ``-mtriple=TRIPLE`` (cross-compilation, e.g.
``aarch64-linux-gnu``: code for another architecture is kept for export but not linked here;
its module's kernels raise RunError naming the triple).

Artifacts keep the object code (``kernels.o``), the kernel table (``kernels.json``), for a
module compiled for export its optimised IR (``kernels.ll.z``: ``tessera export model.tar``)
and the constants the lowering created (packed weights, as arrays in the artifact's shared
store), so ``tessera.load`` links the saved code without compiling again. They are the only
copy of the region's weights: the artifact does not store the region's own constants again.
A region holding native loops is saved without code (its constants in graph form) and compiled again
on load.
"""

from __future__ import annotations

import hashlib
import time
import zlib
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import ArtifactError, CompileError, ExportError, RunError, TargetError
from tessera.ir.aligned import as_aligned
from tessera.ir.graph import Function, Node
from tessera.ir.mapped import as_aligned_unless_mapped
from tessera.ir.symbolic import eval_dim
from tessera.ir.types import TensorType
from tessera.plugin.artifact_files import CONSTANT_KEY, ArtifactFiles  # noqa: F401
from tessera.plugin.backend import (
    Backend,
    CompiledRegion,
    CompileOptions,
    Kernel,
    contiguous_concat_offsets,
)
from tessera.plugin.exported import ExportedCode
from tessera.plugin.patterns import Pattern
from tessera.plugin.space import schedule_info, tuning_info
from tessera.plugin.target import TargetKind
from tessera.tir.heavy import heavy_work
from tessera.topi.from_graph import kernel_names
from tessera.topi.registry import has_compute, registered_ops, unsupported_reason

from . import parallel, region_cache
from .build import ModuleBuilder
from .cpu import cpu_info
from .export import export_region
from .loader import SizeSpec, check_object, load_object, pack_pointers
from .loop_region import LoopRegionHandle, compile_with_loops, has_loops
from .lowering import LOWER_PHASE, LoweredKernel, group_constants, lower_region, prepare_region
from .machine import known_cpu, missing_host_features
from .native_loop import loop_refusal
from .parallel import set_num_threads
from .peak import measure_fma_peak
from .region_cache import region_key
from .schedules.common import REPRESENTATIVE_SIZE
from .sequence import make_binder
from .triple import check_triple, host_triple, is_foreign, triple_arch
from .tuning import llvm_candidate, llvm_features

#: 2: large scratch buffers moved from static globals to per-call workspaces (thread safety)
#: 3: constants saved as arrays (``constants/<name>``, in the artifact's shared store), not
#: in a ``constants.npz`` of their own; the region's constants are not stored in graph form
ARTIFACT_FORMAT = 3
OBJECT_FILE = "kernels.o"
#: The optimised LLVM IR (zlib), saved for a region compiled for export only.
IR_FILE = "kernels.ll.z"
TABLE_FILE = "kernels.json"
#: The files ``save`` writes and ``load`` checks (the format, the object code's hash).
ARTIFACT = ArtifactFiles(TABLE_FILE, files=(OBJECT_FILE,),
                         hashes={"object_sha256": OBJECT_FILE}, keys=("kernels", "tensors"))


@dataclass
class LLVMHandle:
    """What a compiled llvm region keeps for ``save`` (``CompiledRegion.handle``): its object
    code, kernel table and the CPU it was built for, and the linked library its kernels call
    (None for another architecture's code)."""

    object_code: bytes
    table: list[dict[str, Any]]
    mcpu: str | None
    mattr: str | None
    triple: str | None
    cpu_name: str = ""
    features: str = ""
    lib: Any = None
    #: the optimised LLVM IR, kept when the region was compiled for export
    #: (``options.extra["export"]``): :meth:`LLVMBackend.export_code` emits it again as
    #: position-independent code
    llvm_ir: str | None = None


def target_triple(target: TargetKind | None = None) -> str:
    """The triple code is generated for: ``-mtriple`` or this process's."""
    return (target.get("mtriple") if target is not None else None) or host_triple()


def _supported(node: Node) -> bool:
    return unsupported_reason(node) is None


@lru_cache(maxsize=1)
def _patterns() -> tuple[Pattern, ...]:
    return tuple(Pattern(op, check=_supported) for op in sorted(registered_ops()))


def _foreign_kernel(k: dict[str, Any], triple: str, missing: list[str] | None = None,
                    cpu: str = "") -> Kernel:
    """A Kernel for code of another architecture, or (``missing``) built for a CPU ``cpu``
    with features this one lacks: calling it raises RunError (running the code would die of
    an illegal instruction)."""
    def run(ins: list[Any], outs: list[Any]) -> None:
        what = f"kernel {k['name']} ({k['op']})"
        if missing:
            raise RunError(f"llvm {what}: built for CPU {cpu!r}, whose features this CPU lacks "
                           f"({', '.join(missing[:8])}); export it (Module.export) and run it on "
                           "such a machine, or compile again without -mcpu (or for an older "
                           "CPU)")
        raise _not_runnable(triple, what)

    return _table_kernel(k, run)


def _table_kernel(k: dict[str, Any], fn: Any) -> Kernel:
    """The Kernel of kernel-table entry ``k`` calling ``fn``."""
    return Kernel(name=k["name"], fn=fn, inputs=list(k["inputs"]), outputs=list(k["outputs"]),
                  op=k["op"], flops=int(k.get("flops", 0)),
                  workspace_bytes=int(k.get("workspace", 0)))


def _region_size_names(region: str, table: list[dict[str, Any]]) -> list[str]:
    """The size variables a region's kernels take (every kernel of a symbolic region takes
    them all, in one order: ``CompiledRegion.size_names``); [] for a static region."""
    orders = {tuple(k["sizes"]["names"]) if "sizes" in k else () for k in table}
    if len(orders) > 1:
        raise ArtifactError(f"llvm region {region}: its kernels take different run-time sizes "
                            f"({sorted(orders)}); a region's kernels take one sizes array")
    return list(orders.pop()) if orders else []


def _not_runnable(triple: str, what: str) -> RunError:
    return RunError(f"llvm {what}: compiled for {triple} ({triple_arch(triple)}), this host is "
                    f"{host_triple()}; export the module (Module.export) and run it on an "
                    f"{triple_arch(triple)} machine, or compile again without -mtriple")


def _make_sized_kernel(lib: Any, k: dict[str, Any]) -> Kernel:
    """A Kernel calling the native function of table entry ``k`` of a symbolic region: the
    runtime calls it with the same lists of buffers and the same sizes array (rewritten before
    each run) every time, so the pointers (the last to the sizes array) are packed once per
    triple of them."""
    call = lib.get(k["name"])
    raw = call.raw
    name = k["name"]
    cache: dict[tuple[int, int, int], tuple[Any, ...]] = {}

    def run(ins: list[Any], outs: list[Any], sizes: np.ndarray) -> None:
        key = (id(ins), id(outs), id(sizes))
        hit = cache.get(key)
        ids = tuple(map(id, ins)) + tuple(map(id, outs))
        if hit is None or hit[0] is not ins or hit[1] is not outs or hit[2] is not sizes \
                or hit[3] != ids:
            try:
                packed = call.pack_shared(ins + outs, sizes)
            except Exception as err:  # noqa: BLE001 - name the kernel
                raise RunError(f"llvm kernel {name} ({k['op']}): {err}") from err
            if len(cache) >= 8:
                cache.clear()
            hit = cache[key] = (ins, outs, sizes, ids, packed)
        raw(hit[4])

    return _table_kernel(k, run)


def _make_kernel(lib: Any, k: dict[str, Any]) -> Kernel:
    """A Kernel calling the native function of table entry ``k``.

    The runtime calls a kernel with the same two lists of buffers every run, so the packed
    ``void *[]`` of their data pointers is built (and the buffers checked against the kernel's
    parameters) once per pair of lists and reused: a call then costs one ctypes call."""
    call = lib.get(k["name"])
    raw = call.raw
    name = k["name"]
    cache: dict[tuple[int, int], tuple[list[Any], list[Any], tuple[int, ...], Any]] = {}

    def run(ins: list[Any], outs: list[Any]) -> None:
        hit = cache.get((id(ins), id(outs)))
        ids = tuple(map(id, ins)) + tuple(map(id, outs))
        if hit is None or hit[0] is not ins or hit[1] is not outs or hit[2] != ids:
            args = ins + outs
            try:
                if call.signature is not None:
                    call.check(args)
                packed = pack_pointers(args)
            except Exception as err:  # noqa: BLE001 - name the kernel
                raise RunError(f"llvm kernel {name} ({k['op']}): {err}") from err
            if len(cache) >= 8:
                cache.clear()
            # the lists (and through them the arrays) stay referenced, so ids are not reused
            hit = cache[(id(ins), id(outs))] = (ins, outs, ids, packed)
        raw(hit[3])

    return _table_kernel(k, run)


def _dump(options: CompileOptions, name: str, kinds: set[str], built: Any,
          lowered: list[LoweredKernel]) -> dict[str, str]:
    """Write the requested code forms (``ll``, ``asm``, ``tir``) into the dump folder."""
    folder = Path(options.extra.get("dump_dir") or ".")
    folder.mkdir(parents=True, exist_ok=True)
    written: dict[str, str] = {}
    forms = {"ll": lambda: built.llvm_ir, "asm": lambda: built.asm,
             "tir": lambda: "\n\n".join(repr(k.func) for k in lowered)}
    for kind in sorted(kinds):
        if kind not in forms:
            raise CompileError(f"--dump-code: unknown code form {kind!r}; expected ll, asm "
                               "or tir")
        path = folder / f"{name}.{kind}"
        path.write_text(forms[kind]())
        written[kind] = str(path)
    return written


#: Ops whose llvm computes and schedules take static spatial sizes only: a region with run-time
#: heights or widths through them is refused. (Conv, MaxPool, AveragePool and the global pools
#: take run-time batch, height and width: their schedules keep fixed register tiles and
#: specialise the last, partial tile of a row; never Winograd.)
_STATIC_ONLY_OPS = frozenset({"ConvTranspose", "LpPool", "Resize"})


def _check_symbolic_ops(region: Function) -> None:
    """A CompileError naming the first node of a symbolic region whose op the llvm schedules
    do not take at run-time sizes yet."""
    for node in region.nodes:
        if node.op in _STATIC_ONLY_OPS and any(  # a spatial axis (2, 3, ...) of run-time size
                not isinstance(d, int) for v in [*node.inputs, *node.outputs]
                if v is not None for d in v.type.shape[2:]):
            raise CompileError(f"llvm: node {node.name} ({node.op}): transposed convolutions, "
                               f"Lp pooling and resizing over run-time sizes are not "
                               f"supported yet (compile the model per size: "
                               f"shape_mode=\"specialize\")")


class LLVMBackend(Backend):
    """Native CPU kernels generated with llvmlite."""

    name = "llvm"
    device = "cpu"
    default_rank = 10
    options = {
        "mcpu": "LLVM CPU name to generate code for (default: the host CPU)",
        "mattr": "extra CPU features, e.g. +avx2,-avx512f",
        "num-threads": "threads of the kernel thread pool (default: TESSERA_NUM_THREADS or "
                       "the CPU count)",
        "mtriple": "target triple to cross-compile for, e.g. aarch64-linux-gnu (default: this "
                   "host's); the code is exported, not run here",
    }
    code_forms = ("ll", "asm", "tir")
    artifact_version = str(ARTIFACT_FORMAT)
    symbolic_extents = True
    #: 8-bit weights packed in int16 pairs or int8 quads (pmaddwd, vpdpwssd, vpdpbusd)
    integer_products = True

    def available(self) -> str | None:
        try:
            import llvmlite.binding  # noqa: F401
        except ImportError as err:  # pragma: no cover - a dependency of the package
            return f"llvmlite cannot be imported: {err}"
        return None

    def available_for(self, target: TargetKind) -> str | None:
        reason = self.available()
        if reason is None:
            triple = target.get("mtriple")
            if triple is not None:
                check_triple(triple)
            self._check_mcpu(target.get("mcpu"), triple)
            self._threads(target)
        return reason

    @staticmethod
    def _check_mcpu(mcpu: str | None, triple: str | None) -> None:
        """TargetError unless LLVM knows the CPU ``mcpu`` for ``triple`` (or the host)."""
        foreign = is_foreign(triple)
        arm = triple_arch(triple or host_triple()) == "aarch64"
        hint = "e.g. neoverse-n1, cortex-a76, apple-m1" if arm else \
            "e.g. x86-64-v3, znver4, skylake-avx512"
        if mcpu in ("native", "host") and foreign:
            raise TargetError(f"llvm -mcpu={mcpu} -mtriple={triple}: the host CPU cannot run "
                              f"{triple} code; name a CPU of that architecture ({hint}) or "
                              "leave -mcpu out for a generic one")
        if not mcpu or mcpu in ("native", "host") or known_cpu(mcpu, triple):
            return
        other = "" if triple else ", -mtriple= for another architecture (aarch64-linux-gnu)"
        default = "a generic CPU" if foreign else "the host CPU"
        raise TargetError(f"llvm -mcpu={mcpu}: LLVM does not know this CPU for "
                          f"{triple or host_triple()}; use a name from `llc -mcpu=help` "
                          f"({hint}){other}, or leave -mcpu out for {default}")

    def peak_gflops(self, target: TargetKind) -> tuple[float, str] | None:
        """The host's float32 FMA peak for code built under ``target`` (its -mcpu and
        -num-threads), measured once per process with a kernel from this code generator
        (:mod:`.peak`); None for a foreign -mtriple or code this CPU cannot run."""
        if is_foreign(target.get("mtriple")):
            return None
        try:
            peak = measure_fma_peak(self._threads(target), target.get("mcpu"))
        except ValueError:
            return None
        return peak.gflops, peak.describe()

    def host_threads(self) -> str | None:
        """The kernel pool's thread count and its source, and what the pool does under load
        (:mod:`.parallel`)."""
        n = parallel.get_num_threads()
        text = f"{n} thread{'s' if n != 1 else ''} ({parallel.thread_count_source()})"
        cap = parallel.load_cap()
        if cap:
            text += f"; {cap} while other tasks keep cores busy"
        sit_outs = parallel.sit_outs()
        if sit_outs:
            text += f"; {sit_outs} straggler sit-out{'s' if sit_outs != 1 else ''} so far"
        return text

    def claims(self, target: TargetKind) -> list[Pattern]:
        """Every op with a topi compute; and, as a backend of the target (not a fallback of
        another target, whose loops the controlflow backend runs around bodies compiled for
        that target), each ``Loop`` whose whole body it runs (:mod:`.native_loop`)."""
        patterns = list(_patterns())
        if target.fallback:
            return patterns

        def whole_loop(node: Node) -> bool:
            return self._loop_refusal(node, target, patterns) is None

        return [*patterns, Pattern("Loop", check=whole_loop)]

    def declines(self, node: Node, target: TargetKind) -> str | None:
        """Why a ``Loop`` stays with the controlflow backend (:func:`.native_loop.loop_refusal`)."""
        if node.op == "Loop":
            return self._loop_refusal(node, target, list(_patterns()))
        return None

    @staticmethod
    def _loop_refusal(node: Node, target: TargetKind, patterns: list[Pattern]) -> str | None:
        triple = target.get("mtriple") or None
        return loop_refusal(node, patterns, triple if is_foreign(triple) else None)

    def _threads(self, target: TargetKind) -> int | None:
        value = target.get("num-threads")
        if value in (None, ""):
            return None
        try:
            n = int(value)
        except ValueError:
            n = 0
        if n < 1:
            raise TargetError(f"llvm -num-threads={value}: expected a positive integer")
        return n

    def tuning_candidate(self, region: Function, kernel: str,
                         overrides: dict[str, dict[str, Any]], target: TargetKind,
                         options: CompileOptions) -> Any:
        """The kernel built alone for the host (:mod:`tessera_llvm.tuning`); a target of
        another architecture cannot be measured here."""
        triple = target.get("mtriple") or None
        if triple is not None and is_foreign(triple):
            raise CompileError(f"llvm: cannot measure code for {triple} on this "
                               f"{host_triple()} host")
        threads = self._threads(target)
        if threads:
            set_num_threads(threads)
        mcpu = target.get("mcpu")
        return llvm_candidate(region, kernel, overrides,
                              cpu_info(mcpu, threads, triple, target.get("mattr")),
                              options.opt_level, mcpu, target.get("mattr"))

    def tuning_features(self, region: Function, kernel: str, configs: list[dict[str, Any]],
                        key: str, target: TargetKind, options: CompileOptions
                        ) -> list[list[float] | None]:
        """The loop-nest features of the kernel lowered to TIR with each config, for the CPU
        ``target`` describes (:func:`tessera_llvm.tuning.llvm_features`); nothing is
        compiled, so any architecture's target works."""
        cpu = cpu_info(target.get("mcpu"), self._threads(target), target.get("mtriple") or None,
                       target.get("mattr"))
        return llvm_features(region, kernel, configs, key, cpu, options.opt_level)

    @heavy_work
    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        if has_loops(region):  # each Loop a native loop, the nodes between them as regions
            return compile_with_loops(region, self.compile, target, options)
        for node in region.nodes:
            reason = unsupported_reason(node) if has_compute(node.op) else "no topi compute"
            if reason is not None:
                raise CompileError(f"llvm: node {node.name} ({node.op}) has no CPU compute: "
                                   f"{reason}")
        if region.is_symbolic:
            _check_symbolic_ops(region)
        threads = self._threads(target)
        triple = target.get("mtriple") or None
        if triple is not None:
            check_triple(triple)
        if threads and not is_foreign(triple):
            set_num_threads(threads)
        mcpu = target.get("mcpu")
        cpu = cpu_info(mcpu, threads, triple, target.get("mattr"))
        t0 = time.perf_counter()
        overrides = options.schedule_overrides(self.name, str(target))
        dump = options.extra.get("dump_code")
        exporting = bool(options.extra.get("export"))
        prepared = prepare_region(region, cpu, options.opt_level)
        key = None  # of the whole region in the kernel cache (region_cache)
        if options.kernel_cache is not None and not options.tuned and not dump and \
                not exporting:  # a region's cache entry holds no IR
            key = region_key(options.kernel_cache, region, prepared[1],
                             kernel_names(prepared[1], f"{region.name}_"), cpu, mcpu,
                             target.get("mattr"), triple, options.opt_level)
        if key is not None:
            cached = self._from_cache(region, key, prepared, cpu, mcpu, target, triple,
                                      options, t0)
            if cached is not None:
                return cached
        # each kernel's IR generated as it is lowered, and LLVM optimising the first parts
        # of the module in a worker process while this one lowers the rest
        builder = ModuleBuilder(region.name, mcpu=mcpu, mattr=target.get("mattr"),
                                triple=triple, progress=options.progress,
                                cache=options.kernel_cache)

        def made(kernel: LoweredKernel) -> None:
            if kernel.alias_of is None:
                builder.add(kernel.func, kernel.variants)
            else:
                builder.alias(kernel.name, kernel.alias_of)

        try:
            lowered = lower_region(region, cpu, options.opt_level, overrides=overrides,
                                   prefix=f"{region.name}_", progress=options.progress,
                                   prepared=prepared, made=made)
        except BaseException:
            builder.cancel()
            raise
        t1 = time.perf_counter()
        own = [k for k in lowered.kernels if k.alias_of is None]
        built = builder.finish({k.name: k.size_spec for k in own if k.size_spec is not None})
        t2 = time.perf_counter()
        table = [self._entry(k, built.workspaces.get(k.name, 0)) for k in lowered.kernels]
        # an aligned array as it is (an initializer as the importer reads it: the module then
        # holds that weight once), so is one mapped from its file (the kernels' loads need
        # only element alignment); else an aligned copy
        constants = {name: as_aligned_unless_mapped(v.data)
                     for name, v in lowered.constants.items()}
        types = {v.name: v.type for v in lowered.func.inputs}
        types.update({v.name: v.type for n in lowered.func.nodes for v in n.outputs})
        tensors: dict[str, TensorType] = {v.name: v.type for v in region.inputs}
        for k in table:
            for name in k["inputs"] + k["outputs"]:
                if name not in constants:
                    tensors[name] = types[name]
        compiled = self._assemble(region, built.object_code, table, constants, tensors, mcpu,
                                  target.get("mattr"), triple, built.cpu_name, built.features)
        if exporting:
            compiled.handle.llvm_ir = built.llvm_ir
        compiled.info.update({
            "lower_s": round(t1 - t0, 3), "codegen_s": round(t2 - t1, 3),
            "object_bytes": len(built.object_code), "kernel_cache": built.cache or "off",
            "schedules": {k.name: _schedule_info(k) for k in lowered.kernels},
        })
        if key is not None and options.kernel_cache is not None:
            region_cache.store(options.kernel_cache, key, region_cache.Entry(
                built.object_code, table, compiled.info["schedules"], built.cpu_name,
                built.features, {n: (str(a.dtype), tuple(a.shape))
                                 for n, a in constants.items()}))
        if options.tuned:
            compiled.info["tuning"] = tuning_info(c for k in lowered.kernels for c in k.configs)
        if dump:
            kinds = set(dump) if not isinstance(dump, str) else set(dump.split(","))
            compiled.info["dumped"] = _dump(options, region.name, kinds, built, own)
        return compiled

    def _from_cache(self, region: Function, key: str, prepared: tuple[Function, list[Any]],
                    cpu: Any, mcpu: str | None, target: TargetKind, triple: str | None,
                    options: CompileOptions, t0: float) -> CompiledRegion | None:
        """The region compiled from its kernel-cache entry (:mod:`.region_cache`), its
        constants made from the graph again; None on a miss."""
        assert options.kernel_cache is not None
        entry = region_cache.restore(options.kernel_cache, key)
        if entry is None:
            return None
        func, groups = prepared
        constants = {name: as_aligned_unless_mapped(v.data)
                     for name, v in group_constants(region, groups, cpu).items()}
        if not region_cache.constants_match(entry, constants):
            return None
        types = {v.name: v.type for v in func.inputs}
        types.update({v.name: v.type for n in func.nodes for v in n.outputs})
        tensors: dict[str, TensorType] = {v.name: v.type for v in region.inputs}
        for k in entry.table:
            for name in k["inputs"] + k["outputs"]:
                if name not in constants:
                    tensors[name] = types[name]
        options.progress.update(LOWER_PHASE, 1, 1, "the region's code from the kernel cache")
        t1 = time.perf_counter()
        compiled = self._assemble(region, entry.object_code, entry.table, constants, tensors,
                                  mcpu, target.get("mattr"), triple, entry.cpu_name,
                                  entry.features)
        compiled.info.update({
            "lower_s": round(t1 - t0, 3), "codegen_s": round(time.perf_counter() - t1, 3),
            "object_bytes": len(entry.object_code), "kernel_cache": "hit",
            "schedules": entry.schedules})
        return compiled

    @staticmethod
    def _entry(k: LoweredKernel, workspace: int) -> dict[str, Any]:
        flops = k.flops
        if k.size_spec is not None:  # the work at the size bounds (the most a call does)
            at = {n: hi if hi is not None else REPRESENTATIVE_SIZE
                  for n, (_, hi) in zip(k.size_spec.names, k.size_spec.bounds)}
            flops = eval_dim(flops, at)
        entry = {"name": k.name, "inputs": k.inputs, "outputs": k.outputs, "op": k.op,
                 "flops": int(flops), "template": k.template, "workspace": workspace}
        if k.size_spec is not None:
            entry["sizes"] = k.size_spec.to_json()
        if k.alias_of is not None:  # its symbol an alias of that kernel's function
            entry["alias_of"] = k.alias_of
        return entry

    def _assemble(self, region: Function, object_code: bytes, table: list[dict[str, Any]],
                  constants: dict[str, np.ndarray], tensors: dict[str, TensorType],
                  mcpu: str | None, mattr: str | None, triple: str | None = None,
                  cpu_name: str = "", features: str = "") -> CompiledRegion:
        """The CompiledRegion of linked object code; for another architecture's code (a
        foreign ``triple``), or code for a CPU with features this one lacks, one whose kernels
        raise RunError, which can still be saved and exported."""
        info: dict[str, Any] = {"kernels": len(table), "mcpu": mcpu or cpu_name or "host",
                                "shared_kernels": sum(1 for k in table if k.get("alias_of"))}
        handle = LLVMHandle(object_code, table, mcpu, mattr, triple, cpu_name, features)
        if triple is not None and is_foreign(triple):
            return CompiledRegion(self.name, region, [_foreign_kernel(k, triple) for k in table],
                                  tensors, constants, info, handle=handle)
        missing = missing_host_features(features, cpu_name or mcpu or "")
        if missing:  # for another CPU of this architecture: saved, exported, not run here
            return CompiledRegion(
                self.name, region,
                [_foreign_kernel(k, host_triple(), missing, cpu_name or mcpu or "")
                 for k in table], tensors, constants, info, handle=handle)

        def param(n: str) -> tuple[str, int | None]:
            if n in constants:
                return str(constants[n].dtype), int(constants[n].size)
            t = tensors[n]  # a symbolic type: checked against each call's sizes
            return str(t.dtype), t.size if t.is_static else None

        workspaces = {k["name"]: int(k.get("workspace", 0)) for k in table}
        signatures = {k["name"]: [param(n) for n in k["inputs"] + k["outputs"]]
                      + ([("uint8", workspaces[k["name"]])] if workspaces[k["name"]] else [])
                      for k in table}
        specs = {k["name"]: SizeSpec.from_json(k["sizes"]) for k in table if "sizes" in k}
        size_names = _region_size_names(region.name, table)
        lib = load_object(object_code, [k["name"] for k in table], mcpu=mcpu,
                          signatures=signatures, workspaces=workspaces, sizes=specs)
        make = _make_sized_kernel if size_names else _make_kernel
        kernels = [make(lib, k) for k in table]
        for kernel in kernels:  # the runtime may place a concat's inputs inside its output
            if kernel.op == "Concat" and all(n in tensors and tensors[n].is_static
                                             for n in [*kernel.inputs, *kernel.outputs]):
                kernel.concat_offsets = contiguous_concat_offsets(
                    [tensors[n] for n in kernel.inputs], tensors[kernel.outputs[0]])
        handle.lib = lib
        return CompiledRegion(self.name, region, kernels, tensors, constants, info,
                              bind_sequence=make_binder([lib.get(k["name"]) for k in table]),
                              handle=handle, size_names=size_names)

    # -- export -----------------------------------------------------------------------------
    def export_code(self, compiled: CompiledRegion, serial: bool = False) -> ExportedCode:
        if isinstance(compiled.handle, LoopRegionHandle):
            raise ExportError(f"llvm region {compiled.region.name} runs native loops "
                              f"(ONNX Loop), which export does not take yet")
        handle = compiled.handle
        if not isinstance(handle, LLVMHandle):
            raise ExportError(f"llvm region {compiled.region.name}: no object code to export")
        return export_region(compiled.region.name, handle.llvm_ir, handle.table,
                             compiled.size_names, handle.triple, handle.cpu_name,
                             handle.features, serial)

    # -- artifacts ------------------------------------------------------------------------
    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        if isinstance(compiled.handle, LoopRegionHandle):
            return {}  # compiled again on load
        handle = ARTIFACT.handle(self, compiled, LLVMHandle, "no object code to save")
        table: dict[str, Any] = {
            "mcpu": handle.mcpu, "triple": handle.triple, "cpu_name": handle.cpu_name,
            "features": handle.features, "mattr": handle.mattr, "kernels": handle.table}
        files = {OBJECT_FILE: handle.object_code}
        if handle.llvm_ir is not None:  # compiled for export: tessera export model.tar
            files[IR_FILE] = zlib.compress(handle.llvm_ir.encode(), 6)
            table["ir_sha256"] = hashlib.sha256(files[IR_FILE]).hexdigest()
        return ARTIFACT.save(self, table, files, compiled.constants, compiled.tensors)

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        """All of them: the kernels read only the saved constants (packed, transformed) and
        the values compiled into the object code. None for a region holding loops, which
        loads by compiling again."""
        if isinstance(compiled.handle, LoopRegionHandle):
            return []
        return [v.name for v in compiled.region.constants()]

    def load(self, region: Function, files: dict[str, bytes | np.ndarray],
             target: TargetKind, options: CompileOptions) -> CompiledRegion:
        if has_loops(region):  # saved without object code (see save)
            return self.compile(region, target, options)
        saved = ARTIFACT.load(self, region.name, files, copy=as_aligned)
        meta, obj = saved.table, saved.files[OBJECT_FILE]
        with ARTIFACT.reading(self, region.name):
            triple = meta.get("triple")
            if triple is not None and is_foreign(triple):
                raise ArtifactError(f"llvm region {region.name}: its code was compiled for "
                                    f"{triple} (-mtriple), this host is {host_triple()}; load "
                                    "the artifact on a machine of that architecture, or "
                                    "compile the model again without -mtriple")
            check_object(obj)
            missing = missing_host_features(meta.get("features") or "",
                                            meta.get("cpu_name") or meta.get("mcpu") or "")
            if missing:
                raise ArtifactError(
                    f"llvm region {region.name}: its code was built for CPU "
                    f"{meta.get('cpu_name') or meta.get('mcpu')!r} and uses features this CPU "
                    f"lacks ({', '.join(sorted(missing)[:8])}); compile the model again here, "
                    "or with -mcpu naming an older CPU")
        compiled = self._assemble(region, obj, meta["kernels"], saved.constants,
                                  saved.tensors, meta.get("mcpu"), meta.get("mattr"),
                                  meta.get("triple"), meta.get("cpu_name") or "",
                                  meta.get("features") or "")
        ir_file = files.get(IR_FILE)
        if isinstance(ir_file, bytes):  # saved from a module compiled for export
            with ARTIFACT.reading(self, region.name):
                if hashlib.sha256(ir_file).hexdigest() != meta.get("ir_sha256"):
                    raise ArtifactError(f"llvm region {region.name}: {IR_FILE} does not "
                                        f"match the hash {TABLE_FILE} records")
                compiled.handle.llvm_ir = zlib.decompress(ir_file).decode()
        return compiled


def _schedule_info(k: LoweredKernel) -> dict[str, Any]:
    """``schedule_info`` of a kernel, with the tuned sizes of its versions
    (``size_buckets``: the config shown is the largest's) when it has several."""
    info = schedule_info(k.template, k.configs)
    if k.size_buckets:
        info["size_buckets"] = k.size_buckets
    return info
