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
from tessera.tir.transform._util import stmt_count
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
    host's by default; the data layout is the target machine's): a :class:`ModuleBuilder`
    given all of them at once.

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
    :func:`~tessera_llvm.compile_pool.compile_jobs`); a module of at least
    :data:`~tessera_llvm.compile_pool.MIN_PARALLEL_NODES` TIR nodes is cut into that many
    parts of about equal size, optimised at once and linked before it is emitted."""
    progress = progress or Progress()
    jobs = compile_pool.compile_jobs() if jobs is None else jobs
    total = sum(stmt_count(f.body) for f in funcs)
    part_nodes = 0 if jobs <= 1 or total < compile_pool.MIN_PARALLEL_NODES else \
        -(-total // jobs)
    builder = ModuleBuilder(name, mcpu, mattr, triple, progress=progress, cache=cache,
                            jobs=jobs, part_nodes=part_nodes)
    targets: dict[str, list[str]] = {}
    for alias, target in (aliases or {}).items():
        targets.setdefault(target, []).append(alias)
    progress.update(IR_PHASE, 0, len(funcs), funcs[0].name if funcs else "")
    for i, f in enumerate(funcs):
        builder.add(f, (variants or {}).get(f.name, []))
        for alias in targets.pop(f.name, []):
            builder.alias(alias, f.name)
        progress.update(IR_PHASE, i + 1, len(funcs),
                        funcs[i + 1].name if i + 1 < len(funcs) else "")
    for target, names in targets.items():  # of no function given: the CompileError
        for alias in names:
            builder.alias(alias, target)
    return builder.finish(size_specs)


class ModuleBuilder:
    """One object file made of PrimFuncs given one at a time (:meth:`add`, :meth:`alias`,
    then :meth:`finish`): what :func:`build_module` does, for a caller that makes the
    functions as it goes (the backend's lowering) and has LLVM optimise the first ones while
    it makes the rest.

    The functions' IR is generated as they come, into parts of at least ``part_nodes`` TIR
    nodes (None: :data:`~tessera_llvm.compile_pool.PART_NODES`; 0, or one job: the whole
    module in one part). Each part is handed to a
    :class:`~tessera_llvm.compile_pool.PartOptimizer` as soon as the next function starts
    another, so that a worker process optimises it while this one lowers and generates the
    next; :meth:`finish` optimises what is left here, links the parts and emits the object.
    The parts depend only on the functions (not on timing): the same functions give the same
    IR, cache key and object code. An alias must be given right after its function (before
    the next :meth:`add`): it is part of that function's part."""

    def __init__(self, name: str, mcpu: str | None = None, mattr: str | None = None,
                 triple: str | None = None, progress: Progress | None = None,
                 cache: KernelCache | None = None, jobs: int | None = None,
                 part_nodes: int | None = None) -> None:
        self.name, self.mcpu, self.mattr, self.triple = name, mcpu, mattr, triple
        self.progress = progress or Progress()
        self.cache = cache
        self.jobs = compile_pool.compile_jobs() if jobs is None else jobs
        if part_nodes is None:
            part_nodes = compile_pool.PART_NODES
        #: TIR nodes after which a part is closed (None: one part)
        self.part_nodes = part_nodes if part_nodes > 0 and self.jobs > 1 else None
        self.tm = target_machine(mcpu, mattr, triple)
        self.cpu_name, self.features = cpu_and_features(mcpu, mattr, triple)
        self._enabled = enabled_features(mcpu, mattr, triple)
        self.funcs: list[PrimFunc] = []
        self.aliases: dict[str, str] = {}
        self._names: set[str] = set()  # of the functions added
        self._texts: list[str] = []
        self._unrolling: list[bool] = []
        self._workspaces: dict[str, int] = {}
        self._gen: CodeGenerator | None = None
        self._nodes = 0
        self._symbolic = False
        self._part_aliases: dict[str, str] = {}
        self._optimizer: compile_pool.PartOptimizer | None = None
        self._finished = False

    def add(self, func: PrimFunc,
            variants: list[tuple[E.PrimExpr, PrimFunc]] | tuple[()] = ()) -> None:
        """Generate ``func``'s IR (with its size ``variants``, :func:`build_module`)."""
        if self._finished:
            raise CompileError(f"llvm build {self.name}: add after finish")
        if func.name in self.aliases:
            raise CompileError(f"llvm build: alias {func.name!r} is already a name in the "
                               "module")
        if self._gen is not None and self.part_nodes is not None and \
                self._nodes >= self.part_nodes:
            self._seal(submit=True)
        if self._gen is None:
            self._gen = self._generator()
        # a symbolic function's index arithmetic, once per scope (O3 would otherwise spend
        # seconds finding the common subexpressions of its unrolled statements again)
        self._gen.add_function(hoist_size_exprs(func),
                               [(c, hoist_size_exprs(v)) for c, v in variants])
        self.funcs.append(func)
        self._names.add(func.name)
        self._nodes += stmt_count(func.body)
        self._symbolic = self._symbolic or bool(func.size_vars)

    def alias(self, alias: str, target: str) -> None:
        """Export ``alias`` as a second name of the function ``target`` (the last one added,
        or one in the same part)."""
        if alias in self.aliases or alias in self._names:
            raise CompileError(f"llvm build: alias {alias!r} is already a name in the module")
        self.aliases[alias] = target
        self._part_aliases[alias] = target

    def _generator(self) -> CodeGenerator:
        """The code generator of the next part."""
        return CodeGenerator(f"{self.name}.part{len(self._texts)}", self.tm.triple,
                             str(self.tm.target_data), features=self._enabled)

    def _seal(self, submit: bool) -> None:
        """Close the part under way: its IR text (and aliases) kept, and with ``submit``
        handed to the optimizer (made for the first part: a process's first one starts the
        workers, a fifth of a second each, while this one lowers on)."""
        gen = self._gen or self._generator()
        text = str(gen.finalize()) + _alias_lines(gen.module, self._part_aliases)
        unrolling = not self._symbolic
        self._texts.append(text)
        self._unrolling.append(unrolling)
        self._workspaces.update(gen.workspace_bytes)
        self._gen, self._nodes, self._symbolic, self._part_aliases = None, 0, False, {}
        if submit:
            if self._optimizer is None:
                self._optimizer = compile_pool.PartOptimizer(
                    machine_spec(self.mcpu, self.mattr, self.triple), self.tm, self.jobs - 1)
            self._optimizer.submit(text, unrolling)

    def cancel(self) -> None:
        """Give up (the caller failed): parts under way in workers are dropped."""
        self._finished = True
        if self._optimizer is not None:
            self._optimizer.cancel()

    def finish(self, size_specs: dict[str, SizeSpec] | None = None) -> BuiltModule:
        """The object file of everything added (see :func:`build_module`)."""
        if self._finished:
            raise CompileError(f"llvm build {self.name}: finished already")
        self._finished = True
        try:
            self._seal(submit=self._optimizer is not None)
            return self._emit(size_specs or {})
        except BaseException:
            self.cancel()
            raise

    def _emit(self, size_specs: dict[str, SizeSpec]) -> BuiltModule:
        funcs, aliases, progress = self.funcs, self.aliases, self.progress
        source = "".join(self._texts)
        # kernels with run-time extents: no LLVM loop unrolling. Their register tiles are
        # unrolled in TIR already; LLVM's runtime unrolling of the loops around them (trip
        # counts known only at run time) multiplied their code for no speed (a symbolic
        # encoder's compile 5.4 -> 4.3 s, an image CNN's 11.3 -> 9.6 s, latency unchanged)
        unrolling = "".join("1" if u else "0" for u in self._unrolling)
        cache = self.cache
        key = "" if cache is None else cache.key(
            source, self.tm.triple, self.cpu_name, self.features,
            *code_model(self.triple), unrolling, _pipeline_fingerprint())
        hit = None if cache is None else cache.get(CACHE_NAMESPACE, key)
        if hit is not None and not {"object", "llvm_ir"} <= hit.keys():
            hit = None  # an entry of another form: compiled again and replaced
        if hit is not None:
            if self._optimizer is not None:
                self._optimizer.cancel()
            progress.update(LLVM_PHASE, 2, 2, "object code from the kernel cache")
            obj, optimized = hit["object"], hit["llvm_ir"].decode()
        else:
            if self._optimizer is None:
                with LLVM_LOCK:
                    progress.update(LLVM_PHASE, 0, 2,
                                    f"optimizing {len(funcs)} function(s) (O3)")
                    mod = compile_ir(source, self.tm, loop_unrolling=self._unrolling[0])
            else:
                progress.update(LLVM_PHASE, 0, 2, f"optimizing {len(funcs)} function(s) (O3) "
                                                  f"in {len(self._texts)} parts at once")
                mods = self._optimizer.collect()
                with LLVM_LOCK:
                    mod = mods[0]
                    for other in mods[1:]:
                        mod.link_in(other)
            with LLVM_LOCK:
                progress.update(LLVM_PHASE, 1, 2, "emitting object code")
                obj = self.tm.emit_object(mod)
                progress.update(LLVM_PHASE, 2, 2)
                optimized = str(mod)
            if cache is not None:
                cache.put(CACHE_NAMESPACE, key, {"object": obj, "llvm_ir": optimized.encode()})
        workspaces = self._workspaces
        signatures = {f.name: _signature(f, workspaces[f.name]) for f in funcs}
        specs = _size_specs(funcs, size_specs)
        for alias, target in aliases.items():
            signatures[alias] = signatures[target]
            workspaces[alias] = workspaces[target]
            if target in specs:
                specs[alias] = specs[target]
        names = [f.name for f in funcs]
        return BuiltModule(name=self.name, function_names=[*names, *aliases],
                           object_code=obj, llvm_ir=optimized, source_ir=source,
                           mcpu=self.mcpu, mattr=self.mattr, triple=self.triple,
                           cpu_name=self.cpu_name, features=self.features,
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
