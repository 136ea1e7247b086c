"""The public entry points: :func:`compile`, :func:`partition_model` (no code generated) and
:func:`load`."""

from __future__ import annotations

import dataclasses
import gc
import itertools
import time
import warnings
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tessera.config import CompileConfig, merge_config
from tessera.errors import ArtifactError, CompileError, PluginCompileError, TesseraError
from tessera.frontend.onnx.dim_bounds import model_dim_bounds
from tessera.frontend.onnx.importer import ModelSource, check_onnx_model, import_onnx
from tessera.frontend.onnx.importer import load_model as load_onnx
from tessera.frontend.onnx.input_specs import model_input_specs
from tessera.frontend.onnx.symbolic_eval import (
    bounds_conflicts,
    relations_check,
    relations_source,
)
from tessera.frontend.onnx.symbolic_shapes import model_symbolic
from tessera.ir.graph import Function
from tessera.ir.symbolic import InputSpec, ShapeVars, check_bounds, is_static
from tessera.ir.types import human_bytes
from tessera.partition.partitioner import partition
from tessera.partition.regions import PartitionedGraph
from tessera.passes import PassManager
from tessera.plugin import contract
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions
from tessera.plugin.kernel_cache import cache_from_setting
from tessera.plugin.manager import default_cpu_target, get_backend, resolve_target
from tessera.plugin.records import TuningHistory
from tessera.plugin.subgraphs import SubgraphCompiler
from tessera.plugin.target import Target, TargetKind, kind_of_region  # noqa: F401 (re-export)
from tessera.progress import Progress, ProgressPrinter, RegionProgress
from tessera.runtime.artifact import model_from_members, read_members
from tessera.runtime.compiled import CompiledModel
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.dynamic_artifact import DynamicSource, export_dynamic, is_dynamic, read_dynamic
from tessera.runtime.heap import trim_heap
from tessera.runtime.module import Module
from tessera.runtime.partitioned import PartitionedModel
from tessera.runtime.planner import plan_module
from tessera.runtime.split import SplitModule, model_evaluator, plan_split
from tessera.runtime.staged import StagedModule, compile_staged
from tessera.runtime.staging import data_dependent_nodes, freeze_model, node_text, plan_stages
from tessera.runtime.subgraph import ModuleSubgraph
from tessera.tir.expr import IntImm

FALLBACK_BACKEND = "ref"
#: The built-in backend that runs control flow (nodes holding sub-graphs).
CONTROL_FLOW_BACKEND = "controlflow"


def compile(model: ModelSource | Function, target: str | None = "auto",
            config: CompileConfig | None = None,
            **settings: Any) -> Module | DynamicModule | StagedModule:
    """Compile an ONNX model (path, bytes or ModelProto) or a Tessera function for ``target``.

    ``target`` is a tvmc-style target string (``"llvm"``, ``"cuda -libs=cudnn, llvm"``);
    ``"auto"``/None picks the best available CPU backend. How to compile is a
    :class:`~tessera.config.CompileConfig` (``input_shapes``, ``opt_level``,
    ``tuning_records``, ``pass_config``, ``disabled_passes``, ``freeze_inputs``, ``dump_ir``,
    ``progress``, ``dump_code``, ``dump_dir``, ``devices``: its doc says what each does),
    given as ``config``, as keyword arguments, or both (the keywords win):
    ``tessera.compile("m.onnx", "llvm", input_shapes={"data": [1, 3, 224, 224]})``.
    With ``tuning_records``, :meth:`Module.tuning_summary` says how many schedules came from
    them.
    """
    start = time.perf_counter()
    result = _compile(model, target, merge_config(CompileConfig, config, settings, "compile()"))
    _collect_compile_garbage(start)
    return result


#: A compile that took at least this long (seconds) ends with a full garbage collection.
GC_AFTER_COMPILE_S = 0.5


def _collect_compile_garbage(start: float) -> None:
    """A long compile leaves hundreds of thousands of objects in reference cycles (graph,
    TE and TIR nodes); left alone, Python's collector frees them at some later allocation,
    which for a service is its first request (0.3-0.4 s for a 4-layer encoder). Collected
    here, the pause is part of the compile, and the memory freed goes back to the system
    (:func:`~tessera.runtime.heap.trim_heap`). Short compiles (tests, small models) skip it: a
    full collection scans the whole heap."""
    if time.perf_counter() - start >= GC_AFTER_COMPILE_S:
        gc.collect()
        trim_heap()


def _compile(model: ModelSource | Function, target: str | None,
             cfg: CompileConfig) -> Module | DynamicModule | StagedModule:
    if not isinstance(model, Function):
        _pass_manager(cfg)  # the settings and the target are checked before the import
        backends = resolve_target(target)
        forms = cfg.code_forms()
        if forms:  # at once, for every kind of model (a symbolic one compiles later)
            _check_code_forms(forms, [b for b, _ in backends],
                              ", ".join(str(k) for _, k in backends))
        # the proto only through ``source``, which drops it once imported (no local here
        # may keep it: it holds a second copy of every weight while the model compiles)
        source = _OnnxSource(model, load_onnx(model))
        specs = model_input_specs(source.proto, cfg.input_shapes, cfg.freeze_inputs)
        staged = compile_staged(source.proto, target, cfg, compile)  # data-dependent shapes
        if staged is not None:
            return staged
        if cfg.specialize or not all(is_static(s.dims) for s in specs):
            if _shape_mode(cfg) == "symbolic":
                module = _compile_symbolic(source, specs, target, cfg)
                if module is not None:
                    return module
            return _compile_dynamic(source.proto, specs, target, cfg)
        if cfg.dim_bounds or cfg.symbolic_dims:
            raise CompileError("dim_bounds and symbolic_dims are about the variables of "
                               "symbolic dimensions; this model has none left (its inputs: "
                               f"{', '.join(str(s) for s in specs)})")
        cfg = dataclasses.replace(cfg, input_shapes={s.name: list(s.dims) for s in specs})
        return _compile_static(source, target, cfg)
    elif cfg.specialize or cfg.dim_bounds or cfg.symbolic_dims:
        raise CompileError("specialize, dim_bounds and symbolic_dims are for ONNX models "
                           "with symbolic input dimensions; a Tessera Function's shapes and "
                           "bounds are its own (import_onnx(symbolic=True, dim_bounds=...))")
    return _compile_static(model, target, cfg)


#: The settings of a dynamic module (they choose ``shape_mode="specialize"`` under "auto").
#: Tuning records are not among them: a symbolic module's kernels take records tuned at
#: several sizes as one version per size bucket (a backend's choice: llvm's
#: ``size_buckets``); a dynamic module applies each at the nearest tuned size.
_DYNAMIC_SETTINGS = ("specialize", "symbolic_dims", "background_compile")


def _shape_mode(cfg: CompileConfig) -> str:
    """``"symbolic"`` or ``"specialize"``: how a model with symbolic inputs compiles."""
    mode = cfg.shape_mode
    if mode not in ("auto", "symbolic", "specialize"):
        raise CompileError(f"shape_mode: expected \"auto\", \"symbolic\" or "
                           f"\"specialize\", got {mode!r}")
    dynamic = [name for name in _DYNAMIC_SETTINGS if getattr(cfg, name)]
    if cfg.max_specializations != CompileConfig.max_specializations:
        dynamic.append("max_specializations")
    if mode == "symbolic" and dynamic:
        raise CompileError(f"shape_mode=\"symbolic\" compiles one module for every size; "
                           f"{', '.join(dynamic)} set(s) up per-size compiles "
                           f"(shape_mode=\"specialize\")")
    if mode == "auto":
        return "specialize" if dynamic else "symbolic"
    return mode


class _OnnxSource:
    """The ONNX model a compile reads: the user's ``model`` and its proto as loaded. Once the
    graph is imported, :meth:`release` drops the proto when it can be loaded again from
    ``model`` (a path or bytes, or an older opset's proto upgraded), so that the weights are
    not held twice while the model compiles; :attr:`proto` loads it again when a fallback
    needs it (a per-size module after a failed symbolic compile)."""

    def __init__(self, model: ModelSource, proto: onnx.ModelProto) -> None:
        self._model = model
        self._proto: onnx.ModelProto | None = proto

    @property
    def proto(self) -> onnx.ModelProto:
        if self._proto is None:
            self._proto = load_onnx(self._model)
        return self._proto

    def release(self) -> None:
        if self._proto is not self._model:
            self._proto = None


def _compile_symbolic(source: _OnnxSource, specs: tuple[InputSpec, ...],
                      target: str | None, cfg: CompileConfig) -> Module | None:
    """:func:`compile` of a model with symbolic inputs into one module for every size within
    its bounds (:func:`model_dim_bounds`), or None under ``shape_mode="auto"`` when the
    target cannot take it (a backend of the target, or one its regions fall back to, without
    ``symbolic_extents``; a failed symbolic compile also warns)."""
    required = cfg.shape_mode == "symbolic"
    static = [b.name for b, _ in resolve_target(target) if not b.symbolic_extents]
    if static:  # a static accelerator gets its regions at fixed sizes, one module per size
        if required:
            raise CompileError(f"shape_mode=\"symbolic\": the target's backends "
                               f"{', '.join(static)} compile fixed shapes only "
                               f"(Backend.symbolic_extents); use shape_mode=\"specialize\"")
        return None
    say = ProgressPrinter(cfg.progress)
    try:
        bounds, notes, relations = model_dim_bounds(source.proto, specs, cfg.dim_bounds,
                                                    cfg.freeze_inputs)
    except TesseraError as e:
        raise CompileError(str(e)) from None
    for v, (lo, hi) in bounds.items():
        say(f"size variable {v}: {lo} <= {v} <= {hi} ({notes[v]})")
    for conflict in bounds_conflicts(relations, check_bounds(cfg.dim_bounds)):
        warnings.warn(f"dim_bounds admit sizes the model cannot take: {conflict}",
                      RuntimeWarning, stacklevel=3)
    settings = dataclasses.replace(cfg, input_shapes=None, freeze_inputs=None,
                                   dim_bounds=None, shape_mode="auto")
    try:
        say("importing the ONNX model with symbolic shapes")
        fn = import_onnx(source.proto, {s.name: list(s.dims) for s in specs},
                         cfg.freeze_inputs, symbolic=True, dim_bounds=bounds)
        source.release()
        fn.attrs["dim_bound_notes"] = notes
        fn.attrs["size_relations"] = relations_source(relations)  # checked per call
        return _compile_static(fn, target, settings, static_fallback=not required)
    except _StaticOnly:
        return None
    except TesseraError as e:
        if required:
            raise
        warnings.warn(f"compiling one module for every size failed ({e}); compiling per "
                      f"size instead (shape_mode=\"specialize\")", RuntimeWarning, stacklevel=3)
        return None


class _StaticOnly(CompileError):
    """A region with symbolic shapes went to a backend that compiles static ones only."""


def _compile_static(model: ModelSource | Function | _OnnxSource, target: str | None,
                    cfg: CompileConfig, static_fallback: bool = False,
                    release_weights: bool = True) -> Module:
    """:func:`compile` of a model whose inputs have fixed shapes, or of a symbolic function
    (one module for every size) when the backends its regions go to take symbolic extents
    (else a CompileError, of the private type ``_StaticOnly`` with ``static_fallback``)."""
    say = ProgressPrinter(cfg.progress)
    backends = resolve_target(target)
    history = cfg.tuning_records
    if history is not None and not isinstance(history, TuningHistory):
        history = TuningHistory.load(history)  # a bad file fails before the work
    target_text = ", ".join(str(k) for _, k in backends)
    manager = _pass_manager(cfg, backends)
    extra: dict[str, Any] = {}
    forms = cfg.code_forms()
    if forms:
        extra["dump_code"] = forms
        extra["dump_dir"] = str(cfg.dump_dir or ".")
        _check_code_forms(forms, [b for b, _ in backends], target_text)
    if cfg.for_export:
        extra["export"] = True
    fallbacks = fallback_backends()
    result = _import_and_partition(model, cfg.input_shapes, cfg.freeze_inputs, manager,
                                   backends, fallbacks, say)
    options = CompileOptions(opt_level=cfg.opt_level, pass_config=dict(cfg.pass_config or {}),
                             tuning_records=history, extra=extra,
                             devices=dict(cfg.devices or {}),
                             subgraphs=subgraph_compiler(target, cfg),
                             kernel_cache=cache_from_setting(cfg.kernel_cache))
    used = _used_backends(backends, fallbacks)
    _check_symbolic_regions(result, used, _StaticOnly if static_fallback else CompileError)
    compiled = compile_regions(result, used, options, say)
    if history is not None:
        history.warn_skipped()  # one warning for every record not used
        history.warn_rejected()  # and one for the records the whole-model check rejected
    model = CompiledModel(result, compiled, used, target_text, manager.timings, options)
    say("planning memory and building the execution plan")
    try:
        module = Module(model, planned=plan_module(model))
    except MemoryError as e:
        raise CompileError(f"cannot allocate the model's memory ({e}); its largest tensors: "
                           f"{_largest_values(result.graph)}") from None
    # the weights the backends keep in their own form (packed, transformed) live there only
    if release_weights and not cfg.keep_graph_weights:
        model.release_kept_constants()
    return module


def subgraph_compiler(target: str | None, cfg: CompileConfig) -> SubgraphCompiler:
    """What ``CompileOptions.subgraphs`` calls: a sub-graph (an ``If`` branch, a ``Loop`` or
    ``Scan`` body) compiled like the module itself, for the same target and settings, into a
    module whose execution states serve as sessions."""
    settings = dataclasses.replace(cfg, input_shapes=None, freeze_inputs=None, dump_ir=None,
                                   progress=False)
    count = itertools.count()

    def compile_subgraph(graph: Function) -> ModuleSubgraph:
        own = settings
        if cfg.dump_code:  # a body's regions are named like the model's: a folder each
            folder = Path(cfg.dump_dir or ".") / f"subgraph{next(count)}_{graph.name}"
            own = dataclasses.replace(settings, dump_dir=str(folder))
        # a body's constants belong to the enclosing model's graph too: they keep their data
        return ModuleSubgraph(_compile_static(graph, target, own, release_weights=False))

    return compile_subgraph


def _compile_dynamic(proto: onnx.ModelProto, specs: tuple[InputSpec, ...],
                     target: str | None, cfg: CompileConfig) -> DynamicModule:
    """:func:`compile` of a model whose inputs keep symbolic dimensions: checked now (ops,
    target, records, bounds), compiled per size on first use and for ``cfg.specialize``."""
    backends = resolve_target(target)
    check_onnx_model(proto)
    history = cfg.tuning_records
    if history is not None and not isinstance(history, TuningHistory):
        history = TuningHistory.load(history)
    try:
        shape_vars = ShapeVars(specs, check_bounds(cfg.dim_bounds))
    except TesseraError as e:
        raise CompileError(str(e)) from None
    source = DynamicSource(proto.SerializeToString(), ", ".join(str(k) for _, k in backends),
                           cfg.opt_level, dict(cfg.pass_config or {}),
                           tuple(cfg.disabled_passes or ()),
                           {k: np.asarray(v) for k, v in (cfg.freeze_inputs or {}).items()},
                           history.to_text() if history is not None else None,
                           *_symbolic_setting(cfg.symbolic_dims))
    settings = dataclasses.replace(cfg, tuning_records=history, specialize=None,
                                   dim_bounds=None, symbolic_dims=None)
    module = _dynamic_module(proto, source, shape_vars, cfg.max_specializations, settings)
    for shapes in cfg.specialize or ():
        module.specialize(shapes)
    return module


def _dynamic_module(proto: onnx.ModelProto, source: DynamicSource, shape_vars: ShapeVars,
                    max_specializations: int, settings: CompileConfig) -> DynamicModule:
    """A dynamic module whose specialisations compile ``proto`` for ``source.target`` with
    ``settings`` (their input shapes replaced by each size's). Its tuning records apply at
    every size: a workload tuned at another size takes the nearest size's knob values."""
    records = settings.tuning_records
    if isinstance(records, TuningHistory):
        nearest = TuningHistory(records.records, records.source, records.skipped_lines)
        nearest.nearest_sizes = True
        settings = dataclasses.replace(settings, tuning_records=nearest)
    def specializer(shapes: dict[str, list[int]]) -> Module:
        return _compile_static(proto, source.target,
                               dataclasses.replace(settings, input_shapes=shapes))

    def compile_segment(segment: onnx.ModelProto) -> Module:
        return _compile_static(segment, source.target,
                               dataclasses.replace(settings, input_shapes=None,
                                                   freeze_inputs=None))

    def splitter(arrays: dict[str, np.ndarray], symbolic: tuple[str, ...]) -> SplitModule:
        return plan_split(proto, shape_vars.inputs, symbolic, arrays, compile_segment,
                          settings.freeze_inputs, shape_vars.bounds)

    values, relations = model_symbolic(
        proto, {s.name: list(s.dims) for s in shape_vars.inputs}, settings.freeze_inputs,
        {v: (lo, hi) for v, (lo, hi) in shape_vars.bounds.items()})
    for conflict in bounds_conflicts(relations, shape_vars.bounds):
        warnings.warn(f"dim_bounds admit sizes the model cannot take: {conflict}",
                      RuntimeWarning, stacklevel=4)
    outputs = {o.name: _symbolic_dims(values[o.name].shape) if o.name in values else None
               for o in proto.graph.output}
    try:
        return DynamicModule(shape_vars, list(outputs), specializer,
                             source.target, max_specializations=max_specializations,
                             exporter=lambda mod, path: export_dynamic(mod, source, path),
                             symbolic=source.symbolic, auto_symbolic=source.auto_symbolic,
                             splitter=splitter if source.symbolic or source.auto_symbolic
                             else None,
                             relations=relations_check(relations), output_shapes=outputs,
                             relation_texts=[f"node {r.node}: {r.text}" for r in relations],
                             evaluator=lambda: model_evaluator(proto, settings.freeze_inputs),
                             background_compile=settings.background_compile)
    except TesseraError as e:
        raise CompileError(str(e)) from None


def _symbolic_setting(value: Sequence[str] | str | None) -> tuple[tuple[str, ...], bool]:
    """``symbolic_dims`` as (the variables named, whether to choose more automatically)."""
    if value is None:
        return (), False
    if isinstance(value, str):
        if value != "auto":
            raise CompileError(f"symbolic_dims: expected variable names or \"auto\", got "
                               f"{value!r}")
        return (), True
    names = tuple(str(v) for v in value)
    return tuple(v for v in names if v != "auto"), "auto" in names


def _symbolic_dims(shape: tuple[Any, ...] | None) -> tuple[int | str, ...] | None:
    """An inferred shape for people: sizes as ints, expressions as text (``past + seq``)."""
    if shape is None:
        return None
    return tuple(d.value if isinstance(d, IntImm) else _unwrapped(str(d)) for d in shape)


def _unwrapped(text: str) -> str:
    """``(past + seq)`` -> ``past + seq``; ``(a) + (b)`` stays as it is."""
    if not (text.startswith("(") and text.endswith(")")):
        return text
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if depth == 0 and i < len(text) - 1:
            return text  # the first parenthesis closes before the end
    return text[1:-1]


def partition_model(model: ModelSource | Function, target: str | None = "auto",
                    config: CompileConfig | None = None, **settings: Any) -> PartitionedModel:
    """Import, optimize and partition a model as :func:`compile` does (same arguments; the
    settings only code generation reads, ``tuning_records``, ``dump_code``, ``dump_dir`` and
    ``kernel_cache``, are not used), without generating code: no backend's ``compile`` is
    called. The result has the partition report, the partitioned graph and a memory estimate
    (one buffer per node output, reused by liveness); what ``tessera inspect`` shows without
    ``--compile``."""
    cfg = merge_config(CompileConfig, config, settings, "partition_model()")
    say = ProgressPrinter(cfg.progress)
    backends = resolve_target(target)
    manager = _pass_manager(cfg, backends)
    fallbacks = fallback_backends()
    note = ""
    if not isinstance(model, Function):
        model, note = _first_stage(load_onnx(model), cfg)
        if note:
            say(note)
            cfg = dataclasses.replace(cfg, input_shapes=None, freeze_inputs=None)
    result = _import_and_partition(model, cfg.input_shapes, cfg.freeze_inputs, manager,
                                   backends, fallbacks, say)
    say("estimating memory from the partitioned graph")
    partitioned = PartitionedModel(result, _used_backends(backends, fallbacks),
                                   ", ".join(str(k) for _, k in backends), manager.timings,
                                   dict(cfg.devices or {}))
    partitioned.note = note
    return partitioned


def _first_stage(proto: onnx.ModelProto, cfg: CompileConfig) -> tuple[onnx.ModelProto, str]:
    """``(proto, "")``, or for a model with data-dependent output shapes (NonZero of a
    run-time value, ...) its stage 1, the part compiled once (:mod:`tessera.runtime.staging`;
    the input shapes and frozen inputs applied), and a note that says so: what follows the
    data-dependent nodes has shapes only a run knows."""
    frozen = freeze_model(proto, cfg.input_shapes, cfg.freeze_inputs)
    found = data_dependent_nodes(frozen)
    if not found:
        return proto, ""
    names = ", ".join(node_text(n) for n in found)
    plan = plan_stages(frozen)
    if plan.stage1 is None:
        raise TesseraError(f"the model's data-dependent nodes ({names}) read its inputs "
                           f"directly: nothing compiles before them, and what follows them is "
                           f"partitioned per shape at run time (tessera.compile gives a "
                           f"StagedModule; its partition_report() after a run shows it)")
    return plan.stage1, (f"data-dependent output shapes at {names}: the partition of stage 1, "
                         f"the part before them; what follows is partitioned per shape at run "
                         f"time")


def _pass_manager(cfg: CompileConfig,
                  backends: list[tuple[Backend, TargetKind]] | None = None) -> PassManager:
    """The graph passes ``cfg`` selects; for ``backends`` (the target), ``QDQToInteger`` only
    where the first one runs integer products faster than float ones
    (``Backend.integer_products``), unless ``pass_config`` names it."""
    disabled = set(cfg.disabled_passes or ())
    config = dict(cfg.pass_config or {})
    if backends and not backends[0][0].integer_products and "QDQToInteger" not in config:
        disabled.add("QDQToInteger")
    return PassManager(opt_level=cfg.opt_level, pass_config=config, disabled=disabled,
                       dump_dir=cfg.dump_ir)


def _import_and_partition(model: ModelSource | Function | _OnnxSource,
                          input_shapes: Mapping[str, Sequence[int]] | None,
                          freeze_inputs: Mapping[str, np.ndarray] | None, manager: PassManager,
                          backends: list[tuple[Backend, TargetKind]],
                          fallbacks: list[tuple[Backend, TargetKind]],
                          say: Callable[[str], None]) -> PartitionedGraph:
    """The model imported (unless already a Function), optimized by ``manager`` and
    partitioned over ``backends``."""
    if isinstance(model, Function):
        fn = model.copy()
    elif isinstance(model, _OnnxSource):
        say("importing the ONNX model")
        fn = import_onnx(model.proto, input_shapes=input_shapes, freeze_inputs=freeze_inputs)
        model.release()
    else:
        say("importing the ONNX model")
        fn = import_onnx(model, input_shapes=input_shapes, freeze_inputs=freeze_inputs)
    say(f"running graph passes at -O{manager.opt_level} on {len(fn.nodes)} nodes")
    fn = manager.run(fn)
    target_text = ", ".join(str(k) for _, k in backends)
    say(f"partitioning {len(fn.nodes)} nodes for {target_text}")
    return partition(fn, backends, fallbacks, target_text)


def _check_symbolic_regions(partitioned: PartitionedGraph, backends: dict[str, Backend],
                            error: type[CompileError]) -> None:
    """Refuse regions with symbolic shapes for backends without ``symbolic_extents``."""
    static = [f"{r.name} ({r.backend})" for r in partitioned.regions
              if r.body.is_symbolic and not backends[r.backend].symbolic_extents]
    if static:
        raise error(f"regions {', '.join(static)} have symbolic shapes, and their backends "
                    f"compile fixed shapes only (Backend.symbolic_extents): compile the "
                    f"ONNX model with shape_mode=\"specialize\" (a module per size)")


def _used_backends(backends: list[tuple[Backend, TargetKind]],
                   fallbacks: list[tuple[Backend, TargetKind]]) -> dict[str, Backend]:
    """Name -> backend, for the target's backends and the fallbacks."""
    used: dict[str, Backend] = {b.name: b for b, _ in backends}
    for b, _ in fallbacks:
        used.setdefault(b.name, b)
    return used


def _largest_values(graph: Function, count: int = 3) -> str:
    """The ``count`` largest values the nodes of a partitioned graph make, for messages."""
    found = []
    for node in graph.nodes:
        for inner in node.body.nodes if node.body is not None else [node]:
            found += [(v.type.nbytes, f"{v.name!r} {v.type} ({inner.op} {inner.name!r}, "
                       f"{human_bytes(v.type.nbytes)})") for v in inner.outputs]
    return "; ".join(text for _, text in sorted(found, key=lambda f: -f[0])[:count])


def _check_code_forms(forms: list[str], backends: list[Backend], target: str) -> None:
    """Refuse ``dump_code`` forms that no backend of the target writes (before compiling)."""
    known: list[str] = []
    for b in backends:
        known += [f for f in b.code_forms if f not in known]
    if not known:
        raise CompileError(f"--dump-code: no backend of target {target!r} generates code to "
                           "dump (llvm writes ll, asm and tir)")
    for form in forms:
        if form not in known:
            raise CompileError(f"--dump-code: unknown code form {form!r}; the backends of "
                               f"target {target!r} write {', '.join(known)}")


def fallback_backends() -> list[tuple[Backend, TargetKind]]:
    """Where nodes no backend of the target claims go, in order: the best installed CPU
    backend (``"auto"``), the control-flow backend (``If``/``Loop``/``Scan`` around bodies
    compiled for the target), then the reference backend, which runs every other op."""
    best = default_cpu_target()
    names = list(dict.fromkeys([best, CONTROL_FLOW_BACKEND, FALLBACK_BACKEND]))
    return [(get_backend(n), TargetKind(n, fallback=True)) for n in names]


def compile_regions(partitioned: PartitionedGraph, backends: dict[str, Backend],
                    options: CompileOptions, say: Callable[[str], None] | None = None
                    ) -> dict[str, CompiledRegion]:
    """Compile every region of a partitioned model with its backend, for the target kind
    the partitioner chose it for; region name -> compiled region."""
    regions = partitioned.regions
    compiled: dict[str, CompiledRegion] = {}
    for i, region in enumerate(regions):
        backend, body = backends[region.backend], region.body
        if say is not None:
            say(f"[{i + 1}/{len(regions)}] compiling {body.name} ({len(body.nodes)} nodes) "
                f"with {backend.name}")
        reporter = say.region(body.name) if isinstance(say, ProgressPrinter) else None
        compiled[region.name] = _compile_region(backend, body, region.kind, options, reporter)
    return compiled


def _compile_region(backend: Backend, body: Function, kind: TargetKind,
                    options: CompileOptions, reporter: RegionProgress | None) -> CompiledRegion:
    """One region compiled, its backend's progress reports drawn by ``reporter``."""
    region_options = options.for_region(backend.name, str(kind))
    region_options.progress = reporter.progress() if reporter is not None else Progress()
    try:
        result = contract.call(backend, "compile()", backend.compile, body, kind,
                               region_options, region=body.name, cls=PluginCompileError)
    finally:
        if reporter is not None:
            reporter.close()
    return contract.check_compiled(backend, body, result)


def _load_subgraph_compiler(devices: Mapping[str, int] | None
                            ) -> Callable[[str], SubgraphCompiler]:
    """The sub-graph compiler of a loaded artifact, for its target: control-flow bodies are
    compiled again (with default settings) when the artifact loads."""
    def for_target(target: str) -> SubgraphCompiler:
        return subgraph_compiler(target, CompileConfig(devices=dict(devices or {}) or None))

    return for_target


def load(path: str | Path, devices: Mapping[str, int] | None = None) -> Module | DynamicModule:
    """Load a module exported with :meth:`Module.export` or :meth:`DynamicModule.export`
    (checks plugins and file hashes); ``devices`` as for :func:`compile` (an artifact runs on
    any device of its kinds). A dynamic artifact's stored specialisations load without
    compiling; other sizes compile on first use, as where it was exported."""
    where = str(path)
    members = read_members(Path(path))
    subgraphs = _load_subgraph_compiler(devices)
    if not is_dynamic(members):
        return Module(model_from_members(members, where, dict(devices or {}), subgraphs))
    stored = read_dynamic(members, where)
    src = stored.source
    try:
        proto = onnx.load_model_from_string(src.model)
    except Exception as e:  # noqa: BLE001 - protobuf's own error types
        raise ArtifactError(f"model.onnx of {where!r} cannot be read: {e}") from None
    history = TuningHistory.from_text(src.records, where) if src.records else None
    settings = CompileConfig(opt_level=src.opt_level, pass_config=dict(src.pass_config),
                             disabled_passes=list(src.disabled_passes),
                             freeze_inputs=dict(src.frozen) or None, tuning_records=history,
                             devices=dict(devices or {}))
    module = _dynamic_module(proto, src, stored.shape_vars, stored.max_specializations,
                             settings)
    for i, (sizes, sub) in enumerate(stored.specializations):
        model = model_from_members(sub, f"{where} (specialisation {i})", dict(devices or {}),
                                   subgraphs)
        module.preload(sizes, Module(model))
    return module
