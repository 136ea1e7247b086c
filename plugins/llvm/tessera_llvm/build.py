"""Compile PrimFuncs to object code with ``llvmlite.binding``.

:func:`build_module` takes PrimFuncs all the way to a :class:`BuiltModule` holding the object
code: LLVM IR from :class:`~tessera_llvm.codegen.CodeGenerator`, then the target machine and
O3 pipeline of :mod:`tessera_llvm.machine` (whose functions this module re-exports:
:func:`target_machine`, :func:`optimize`, :func:`compile_ir`, ...), which
:mod:`tessera_llvm.loader` links into the process without recompiling.

``llvmlite.binding`` is not thread-safe; everything here runs under :data:`LLVM_LOCK`.

Symbolic PrimFuncs (``size_vars``: run-time extents) compile like static ones; their
signatures list ``None`` as the element count of a buffer whose shape uses size variables, and
:attr:`BuiltModule.size_specs` holds each one's :class:`~tessera_llvm.loader.SizeSpec` (the
size variables' names and bounds, the buffers' shapes in terms of them), which the loaded
kernels use to derive and check sizes. The calling convention (sizes after the workspace slot)
is described in :mod:`tessera_llvm.codegen` and :mod:`tessera_llvm.loader`.
"""

from __future__ import annotations

import functools
import hashlib
import sys
from dataclasses import dataclass, field
from pathlib import Path

import llvmlite
import llvmlite.binding as llvm
from llvmlite import ir

from tessera.errors import CompileError, RunError
from tessera.plugin.kernel_cache import KernelCache
from tessera.progress import Progress
from tessera.tir import expr as E
from tessera.tir import size_expr
from tessera.tir.heavy import heavy_work
from tessera.tir.size_expr import Dim
from tessera.tir.stmt import PrimFunc
from tessera.tir.transform.hoist_sizes import hoist_size_exprs
from tessera_llvm import compile_pool, machine, pipeline
from tessera_llvm.codegen import CodeGenerator
from tessera_llvm.loader import Library, SizeSpec, load_object
from tessera_llvm.machine import (  # noqa: F401 - re-exported: callers import them from here
    LLVM_LOCK,
    code_model,
    compile_ir,
    cpu_and_features,
    enabled_features,
    host_cpu,
    init_llvm,
    known_cpu,
    machine_spec,
    missing_host_features,
    optimize,
    target_machine,
)
from tessera_llvm.triple import host_triple, is_foreign

#: The progress phases of :func:`build_module`: LLVM IR generated per function, then the
#: module optimised and emitted as object code (two steps LLVM does not count further).
IR_PHASE = "generating LLVM IR"
LLVM_PHASE = "LLVM optimize + codegen"
#: The kernel cache's namespace of this backend's object code.
CACHE_NAMESPACE = "llvm"


@dataclass
class BuiltModule:
    """Compiled PrimFuncs: ``object_code`` (ELF bytes for this CPU, or for ``triple``'s
    architecture when one is given), the optimised
    ``llvm_ir`` and the IR as generated (``source_ir``), the exported ``function_names``, and
    per function the ``signatures`` of its parameters (dtype, element count or None) and the
    ``workspaces`` it needs (bytes; a function with a workspace takes it as one more uint8
    parameter after its buffers, which its signature lists); ``size_specs`` describes the
    run-time extents of the symbolic functions (none for static ones)."""

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
    size_specs: dict[str, SizeSpec] = field(default_factory=dict)
    #: ``"hit"`` or ``"miss"`` in the kernel cache, None when built without one.
    cache: str | None = None
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
        RunError for code of another architecture, or built for a CPU with features this one
        lacks (which would die of an illegal instruction)."""
        if is_foreign(self.triple):
            raise RunError(f"llvm module {self.name}: compiled for {self.triple}, this host is "
                           f"{host_triple()}; its object code cannot be linked here")
        missing = missing_host_features(self.features, self.cpu_name or self.mcpu or "")
        if missing:
            raise RunError(f"llvm module {self.name}: built for CPU "
                           f"{self.cpu_name or self.mcpu!r}, whose features this CPU lacks "
                           f"({', '.join(missing[:8])}); it cannot run here (compile without "
                           "-mcpu, or for an older CPU, to run it on this machine)")

        return load_object(self.object_code, self.function_names, self.mcpu,
                           signatures=self.signatures, workspaces=self.workspaces,
                           sizes=self.size_specs)


def _signature(func: PrimFunc, workspace: int) -> list[tuple[str, int | None]]:
    """(dtype, element count) per parameter, the workspace last when there is one; the count
    is None for a buffer whose shape uses the function's size variables."""
    sig: list[tuple[str, int | None]] = []
    for p in func.params:
        try:
            size: int | None = p.size()
        except ValueError:  # a symbolic shape: checked against the sizes of each call
            size = None
        sig.append((p.dtype, size))
    if workspace:
        sig.append(("uint8", workspace))
    return sig


def encode_dim(e: E.PrimExpr, size_vars: list[E.Var]) -> Dim:
    """Extent ``e`` as a :data:`~tessera.tir.size_expr.Dim` (ValueError for one that is not an
    integer expression of the size variables)."""
    return size_expr.encode_dim(e, size_vars)


def size_spec(func: PrimFunc) -> SizeSpec | None:
    """The :class:`~tessera_llvm.loader.SizeSpec` of a symbolic function (None for a static
    one); a parameter whose shape cannot be encoded gets None (its size is not checked)."""
    if not func.size_vars:
        return None
    shapes: list[tuple[Dim, ...] | None] = []
    for p in func.params:
        try:
            shapes.append(tuple(encode_dim(d, func.size_vars) for d in p.shape))
        except ValueError:
            shapes.append(None)
    bounds = func.var_bounds()
    return SizeSpec(tuple(v.name for v in func.size_vars),
                    tuple(bounds[v] for v in func.size_vars), tuple(shapes))


@heavy_work
def build_module(funcs: list[PrimFunc], name: str, mcpu: str | None = None,
                 mattr: str | None = None, triple: str | None = None,
                 progress: Progress | None = None,
                 size_specs: dict[str, SizeSpec] | None = None,
                 aliases: dict[str, str] | None = None,
                 variants: dict[str, list[tuple[E.PrimExpr, PrimFunc]]] | None = None,
                 cache: KernelCache | None = None, jobs: int | None = None) -> BuiltModule:
    """Generate, optimise and compile ``funcs`` into one object file (for ``triple``, the
    host's by default; the data layout is the target machine's).

    The lifecycle is explicit: a :class:`~tessera_llvm.codegen.CodeGenerator` is created, each
    PrimFunc added, the IR module finalised, then parsed, verified, optimised (O3) and emitted.
    ``progress`` hears of each function generated and of the two LLVM steps (:data:`IR_PHASE`,
    :data:`LLVM_PHASE`). Raises CompileError naming the PrimFunc and node the code generator
    cannot handle.

    ``size_specs`` overrides the :class:`~tessera_llvm.loader.SizeSpec` of symbolic functions
    by name: the TIR pipeline flattens buffers, so a spec made with :func:`size_spec` from the
    function before lowering keeps the dimensions (sizes are then derived from each dimension
    of an array of the original shape, not only from element counts).

    ``aliases`` (alias name -> function name) exports more names for functions of ``funcs``:
    each an LLVM alias of its function (the same machine code under a second symbol), listed
    in ``function_names``, ``signatures``, ``workspaces`` and ``size_specs`` like its
    function.

    ``variants`` (function name -> ``(condition, function)`` list) gives a function versions
    for some sizes: its entry runs the first whose condition over the size variables holds,
    else the function itself (:mod:`.size_buckets`).

    ``cache`` (:class:`~tessera.plugin.kernel_cache.KernelCache`): the object code and the
    optimised IR are looked up there under a key of the generated IR, the target (triple, CPU,
    features, relocation and code model), the pipeline's settings and LLVM's version, and
    stored there after a miss; :attr:`BuiltModule.cache` says which it was.

    ``jobs``: how many processes may optimise the module at once (default
    :func:`~tessera_llvm.compile_pool.compile_jobs`); a large one is split into that many
    parts (:func:`~tessera_llvm.compile_pool.split_parts`), optimised in parallel and linked
    into one module before it is emitted."""
    progress = progress or Progress()
    aliases = dict(aliases or {})
    tm = target_machine(mcpu, mattr, triple)
    cpu_name, features = cpu_and_features(mcpu, mattr, triple)
    # a large region in parts, optimised at once in worker processes (:mod:`.compile_pool`)
    parts = compile_pool.split_parts(funcs, jobs)
    if len(parts) > 1:
        compile_pool.prepare(len(parts) - 1)  # they start while the IR is generated
    part_of = {f.name: i for i, part in enumerate(parts) for f in part}
    enabled = enabled_features(mcpu, mattr, triple)
    gens = [CodeGenerator(name if len(parts) == 1 else f"{name}.part{i}", tm.triple,
                          str(tm.target_data), features=enabled) for i in range(len(parts))]
    for f in progress.track(funcs, IR_PHASE, lambda f: f.name):
        # a symbolic function's index arithmetic, once per scope (O3 would otherwise spend
        # seconds finding the common subexpressions of its unrolled statements again)
        gens[part_of[f.name]].add_function(
            hoist_size_exprs(f),
            [(c, hoist_size_exprs(v)) for c, v in (variants or {}).get(f.name, [])])
    texts = [str(g.finalize()) + _alias_lines(g.module, {
        a: t for a, t in aliases.items() if part_of.get(t) == i}) for i, g in enumerate(gens)]
    unknown = [a for a, t in aliases.items() if t not in part_of]
    if unknown:
        _alias_lines(gens[0].module, {a: aliases[a] for a in unknown})  # the CompileError
    source = "".join(texts)
    # kernels with run-time extents: no LLVM loop unrolling. Their register tiles are
    # unrolled in TIR already; LLVM's runtime unrolling of the loops around them (trip
    # counts known only at run time) multiplied their code for no speed (a symbolic
    # encoder's compile 5.4 -> 4.3 s, an image CNN's 11.3 -> 9.6 s, latency unchanged)
    unrolling = not any(f.size_vars for f in funcs)
    key = "" if cache is None else cache.key(
        source, tm.triple, cpu_name, features, *code_model(triple), str(unrolling),
        _pipeline_fingerprint())
    hit = None if cache is None else cache.get(CACHE_NAMESPACE, key)
    if hit is not None and not {"object", "llvm_ir"} <= hit.keys():
        hit = None  # an entry of another form: compiled again and replaced
    if hit is not None:
        progress.update(LLVM_PHASE, 2, 2, "object code from the kernel cache")
        obj, optimized = hit["object"], hit["llvm_ir"].decode()
    else:
        if len(texts) == 1:
            with LLVM_LOCK:
                progress.update(LLVM_PHASE, 0, 2, f"optimizing {len(funcs)} function(s) (O3)")
                mod = compile_ir(source, tm, loop_unrolling=unrolling)
        else:
            progress.update(LLVM_PHASE, 0, 2, f"optimizing {len(funcs)} function(s) (O3) in "
                                              f"{len(texts)} parts at once")
            mods = compile_pool.optimize_parts(
                texts, machine_spec(mcpu, mattr, triple), tm, loop_unrolling=unrolling)
            with LLVM_LOCK:
                mod = mods[0]
                for other in mods[1:]:
                    mod.link_in(other)
        with LLVM_LOCK:
            progress.update(LLVM_PHASE, 1, 2, "emitting object code")
            obj = tm.emit_object(mod)
            progress.update(LLVM_PHASE, 2, 2)
            optimized = str(mod)
        if cache is not None:
            cache.put(CACHE_NAMESPACE, key, {"object": obj, "llvm_ir": optimized.encode()})
    workspaces = {n: b for g in gens for n, b in g.workspace_bytes.items()}
    signatures = {f.name: _signature(f, workspaces[f.name]) for f in funcs}
    specs = _size_specs(funcs, size_specs or {})
    for alias, target in aliases.items():
        signatures[alias] = signatures[target]
        workspaces[alias] = workspaces[target]
        if target in specs:
            specs[alias] = specs[target]
    names = [f.name for f in funcs]
    return BuiltModule(name=name, function_names=[*names, *aliases],
                       object_code=obj, llvm_ir=optimized, source_ir=source, mcpu=mcpu,
                       mattr=mattr, triple=triple, cpu_name=cpu_name, features=features,
                       signatures=signatures, workspaces=workspaces, size_specs=specs,
                       cache=None if cache is None else "miss" if hit is None else "hit")


@functools.lru_cache(maxsize=1)
def _pipeline_fingerprint() -> str:
    """What the object code depends on besides the IR and the target: LLVM's and llvmlite's
    versions and the code that sets up the target machine and the pass pipeline (hashed from
    its source, so that a change to it is a miss even without a new version)."""
    h = hashlib.sha256()
    for mod in (machine, pipeline, sys.modules[__name__]):
        if mod.__file__:
            h.update(Path(mod.__file__).read_bytes())
    return f"{llvm.llvm_version_info}/{llvmlite.__version__}/{h.hexdigest()}"


def _alias_lines(module: ir.Module, aliases: dict[str, str]) -> str:
    """The IR of ``aliases`` (alias name -> function name) of functions of ``module``, one
    external alias each (``llvmlite.ir`` has no aliases of its own)."""
    lines = []
    for alias, target in aliases.items():
        fn = module.globals.get(target)
        if not isinstance(fn, ir.Function) or fn.is_declaration:
            raise CompileError(f"llvm build: alias {alias!r} names {target!r}, which is not a "
                               "function defined in the module")
        if alias in module.globals or alias in aliases.values():
            raise CompileError(f"llvm build: alias {alias!r} is already a name in the module")
        lines.append(f'@"{alias}" = alias {fn.function_type}, {fn.type} @"{target}"')
    return "".join(line + "\n" for line in lines)


def _size_specs(funcs: list[PrimFunc], given: dict[str, SizeSpec]) -> dict[str, SizeSpec]:
    out: dict[str, SizeSpec] = {}
    for f in funcs:
        spec = given.get(f.name) or size_spec(f)
        if spec is None:
            continue
        names = tuple(v.name for v in f.size_vars)
        if spec.names != names or len(spec.shapes) != len(f.params):
            raise ValueError(f"build_module: the size spec given for {f.name} has sizes "
                             f"{spec.names} and {len(spec.shapes)} buffers; the function has "
                             f"{names} and {len(f.params)}")
        out[f.name] = spec
    return out
