"""The public entry points: :func:`compile`, :func:`partition_model` (no code generated) and
:func:`load`."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import CompileError, PluginCompileError
from tessera.frontend.onnx.importer import ModelSource, import_onnx
from tessera.ir.graph import Function
from tessera.ir.types import human_bytes
from tessera.partition.partitioner import partition
from tessera.partition.regions import PartitionedGraph
from tessera.passes import PassManager
from tessera.plugin import contract
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions
from tessera.plugin.manager import default_cpu_target, get_backend, resolve_target
from tessera.plugin.records import TuningHistory
from tessera.plugin.target import Target, TargetKind, kind_of_region  # noqa: F401 (re-export)
from tessera.progress import Progress, ProgressPrinter, RegionProgress
from tessera.runtime.artifact import load_model
from tessera.runtime.compiled import CompiledModel
from tessera.runtime.module import Module
from tessera.runtime.partitioned import PartitionedModel
from tessera.runtime.planner import plan_module

FALLBACK_BACKEND = "ref"


def compile(model: ModelSource | Function, target: str | None = "auto",
            input_shapes: Mapping[str, Sequence[int]] | None = None, opt_level: int = 3,
            tuning_records: Any = None, pass_config: Mapping[str, Any] | None = None,
            disabled_passes: Iterable[str] | None = None,
            freeze_inputs: Mapping[str, np.ndarray] | None = None,
            dump_ir: str | Path | None = None, progress: bool = False,
            dump_code: str | Iterable[str] | None = None,
            dump_dir: str | Path | None = None,
            devices: Mapping[str, int] | None = None) -> Module:
    """Compile an ONNX model (path, bytes or ModelProto) or a Tessera function for ``target``.

    ``target`` is a tvmc-style target string (``"llvm"``, ``"cuda -libs=cudnn, llvm"``);
    ``"auto"``/None picks the best available CPU backend. ``input_shapes`` fixes input shapes,
    ``freeze_inputs`` binds inputs to constant values, ``pass_config``/``disabled_passes`` switch
    passes on or off by name (``{"FoldConstants": False}``, checked before the import),
    ``dump_ir`` writes the IR after each pass into that folder, ``progress`` prints each stage
    (and each region compiled, with what its backend reports within it: a bar on a terminal,
    a line a second in a log) to stderr. ``dump_code`` (``"ll,asm,tir"`` or a list) asks
    code-generating backends to write those forms of each region's code into
    ``dump_dir`` (default: the current directory) as ``<region>.<form>``. ``devices`` picks
    which device of a kind runs its regions (``{"cuda": 1}``: ``cuda:1``; default: index 0).
    ``tuning_records`` (a JSON-lines file of ``tessera tune``, or a
    :class:`~tessera.autotune.records.TuningHistory`) gives each workload its best measured
    schedule (``apply_history_best``); :meth:`Module.tuning_summary` says how many were tuned.
    """
    say = ProgressPrinter(progress)
    backends = resolve_target(target)
    if tuning_records is not None and not isinstance(tuning_records, TuningHistory):
        tuning_records = TuningHistory.load(tuning_records)  # a bad file fails before the work
    target_text = ", ".join(str(k) for _, k in backends)
    manager = PassManager(opt_level=opt_level, pass_config=dict(pass_config or {}),
                          disabled=set(disabled_passes or ()), dump_dir=dump_ir)
    fallbacks = fallback_backends()
    result = _import_and_partition(model, input_shapes, freeze_inputs, manager, backends,
                                   fallbacks, say)
    extra: dict[str, Any] = {}
    if dump_code:
        forms = dump_code.split(",") if isinstance(dump_code, str) else list(dump_code)
        extra["dump_code"] = [f.strip() for f in forms if f.strip()]
        extra["dump_dir"] = str(dump_dir or ".")
        _check_code_forms(extra["dump_code"], [b for b, _ in backends], target_text)
    options = CompileOptions(opt_level=opt_level, pass_config=dict(pass_config or {}),
                             tuning_records=tuning_records, extra=extra,
                             devices=dict(devices or {}))
    used = _used_backends(backends, fallbacks)
    compiled = compile_regions(result, used, options, say)
    if isinstance(options.tuning_records, TuningHistory):
        options.tuning_records.warn_skipped()  # one warning for every record not used
    model = CompiledModel(result, compiled, used, target_text, manager.timings, options)
    say("planning memory and building the execution plan")
    try:
        return Module(model, planned=plan_module(model))
    except MemoryError as e:
        raise CompileError(f"cannot allocate the model's memory ({e}); its largest tensors: "
                           f"{_largest_values(result.graph)}") from None


def partition_model(model: ModelSource | Function, target: str | None = "auto",
                    input_shapes: Mapping[str, Sequence[int]] | None = None,
                    opt_level: int = 3, pass_config: Mapping[str, Any] | None = None,
                    disabled_passes: Iterable[str] | None = None,
                    freeze_inputs: Mapping[str, np.ndarray] | None = None,
                    dump_ir: str | Path | None = None, progress: bool = False,
                    devices: Mapping[str, int] | None = None) -> PartitionedModel:
    """Import, optimize and partition a model as :func:`compile` does (same arguments),
    without generating code: no backend's ``compile`` is called. The result has the
    partition report, the partitioned graph and a memory estimate (one buffer per node
    output, reused by liveness); what ``tessera inspect`` shows without ``--compile``."""
    say = ProgressPrinter(progress)
    backends = resolve_target(target)
    manager = PassManager(opt_level=opt_level, pass_config=dict(pass_config or {}),
                          disabled=set(disabled_passes or ()), dump_dir=dump_ir)
    fallbacks = fallback_backends()
    result = _import_and_partition(model, input_shapes, freeze_inputs, manager, backends,
                                   fallbacks, say)
    say("estimating memory from the partitioned graph")
    return PartitionedModel(result, _used_backends(backends, fallbacks),
                            ", ".join(str(k) for _, k in backends), manager.timings,
                            dict(devices or {}))


def _import_and_partition(model: ModelSource | Function,
                          input_shapes: Mapping[str, Sequence[int]] | None,
                          freeze_inputs: Mapping[str, np.ndarray] | None, manager: PassManager,
                          backends: list[tuple[Backend, TargetKind]],
                          fallbacks: list[tuple[Backend, TargetKind]],
                          say: Callable[[str], None]) -> PartitionedGraph:
    """The model imported (unless already a Function), optimized by ``manager`` and
    partitioned over ``backends``."""
    if isinstance(model, Function):
        fn = model.copy()
    else:
        say("importing the ONNX model")
        fn = import_onnx(model, input_shapes=input_shapes, freeze_inputs=freeze_inputs)
    say(f"running graph passes at -O{manager.opt_level} on {len(fn.nodes)} nodes")
    fn = manager.run(fn)
    target_text = ", ".join(str(k) for _, k in backends)
    say(f"partitioning {len(fn.nodes)} nodes for {target_text}")
    return partition(fn, backends, fallbacks, target_text)


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
    backend (``"auto"``), then the reference backend, which runs every op."""
    best = default_cpu_target()
    names = [best] if best == FALLBACK_BACKEND else [best, FALLBACK_BACKEND]
    return [(get_backend(n), TargetKind(n)) for n in names]


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
    options.progress = reporter.progress() if reporter is not None else Progress()
    try:
        result = contract.call(backend, "compile()", backend.compile, body, kind, options,
                               region=body.name, cls=PluginCompileError)
    finally:
        options.progress = Progress()
        if reporter is not None:
            reporter.close()
    return contract.check_compiled(backend, body, result)


def load(path: str | Path, devices: Mapping[str, int] | None = None) -> Module:
    """Load a module exported with :meth:`Module.export` (checks plugins and file hashes);
    ``devices`` as for :func:`compile` (an artifact runs on any device of its kinds)."""
    return Module(load_model(Path(path), dict(devices or {})))
