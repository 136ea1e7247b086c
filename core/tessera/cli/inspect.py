"""``tessera inspect``: how a model is split over backends and how much memory it plans.

For an ONNX model, it imports, optimizes and partitions the model with the given compile
options, without generating code (no backend compiles anything): the memory plan is then an
estimate (one buffer per node output). ``--compile`` compiles every region as ``tessera
compile`` does, for the exact memory plan and what only compiled code tells (kernels per
region, how they run, tuned schedules, compile times); so do ``--dump-code`` and
``--tuning-records``. A ``.tar`` is loaded. It prints the model summary, the partition table
(each region with its backend, device and ops, the device copies, the nodes that fell back)
and the memory plan per device.
``--dot``, ``--html`` and ``--svg`` also write a picture of the partitioned graph (Graphviz
text; a page with zoom, search and tooltips; the same picture as a standalone SVG file).
The kernel table shows every scalar fact a backend reports in ``CompiledRegion.info``
(``*_s`` as seconds, ``*_bytes`` as sizes, other numbers, strings and flags as they are);
structured facts (schedules, counters) have reports of their own (``tessera tune --tasks
list``, ``tessera run --profile``).
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tessera
from tessera.api import partition_model
from tessera.cli.arrays import check_output_file
from tessera.cli.compile import (
    add_compile_options,
    check_model_file,
    compile_kwargs,
    is_artifact,
    load_or_compile,
    progress,
    reports,
    summary,
)
from tessera.cli.quantize import read_calibration
from tessera.cli.shapes import ArgumentError
from tessera.ir.symbolic import ShapeVars
from tessera.ir.types import human_bytes
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.module import Module
from tessera.runtime.partitioned import PartitionedModel
from tessera.runtime.staged import StagedModule

if TYPE_CHECKING:
    from tessera.runtime.module import Module

#: ``tessera.compile`` arguments that need code generation (``partition_model`` has none)
_CODE_ONLY = ("tuning_records", "dump_code", "dump_dir", "kernel_cache")


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inspect", help="show the partition and memory plan of a model",
        description="Show how a model is partitioned over backends (regions, device copies, "
                    "fallback nodes) and its memory plan. An ONNX model is partitioned, "
                    "not compiled (the memory plan is then an estimate), unless --compile.")
    parser.add_argument("model", metavar="MODEL", help="ONNX model or module .tar")
    parser.add_argument("--compile", action="store_true",
                        help="compile every region (slower): the exact memory plan and the "
                             "kernels of each region, how they run, compile times")
    parser.add_argument("--dot", metavar="FILE", default=None,
                        help="also write the partitioned graph as a Graphviz picture (regions as "
                             "colored clusters, copies as diamonds); render with "
                             "`dot -Tsvg FILE -o graph.svg`")
    parser.add_argument("--html", metavar="FILE", default=None,
                        help="also write the partitioned graph as a self-contained HTML page "
                             "(nodes colored by backend, region outlines, device copies, "
                             "fallback nodes, tooltips); open it in a browser")
    parser.add_argument("--svg", metavar="FILE", default=None,
                        help="also write the same picture as a standalone SVG file (no "
                             "Graphviz or browser needed: image viewers, documents, "
                             "issue trackers show it)")
    add_compile_options(parser, "compile options (for an ONNX model)")
    parser.set_defaults(handler=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    for flag, text, example in (("--dot", args.dot, "partition.dot"),
                                ("--html", args.html, "partition.html"),
                                ("--svg", args.svg, "partition.svg")):
        if text is not None:
            check_output_file(text, flag, example)
    module = _inspected(args)
    print(f"model:   {args.model}")
    print(summary(module))
    print()
    print(reports(module))
    if isinstance(module, PartitionedModel):
        if module.note:
            print(f"\n({module.note})")
        print("\nkernels: not generated (--compile compiles the regions and shows them)")
    else:
        print(f"\n{kernel_report(module)}")
    pictures = args.dot or args.html or args.svg
    graph = _pictured(module) if pictures else None
    if pictures:
        # local import: tessera.drawing adds ~11 ms to every CLI start; only the pictures use it
        from tessera.drawing import to_dot, to_html, to_svg
    if args.dot:
        Path(args.dot).parent.mkdir(parents=True, exist_ok=True)
        Path(args.dot).write_text(to_dot(graph))
        print(f"\npartition picture written to {args.dot}")
    if args.html:
        Path(args.html).parent.mkdir(parents=True, exist_ok=True)
        Path(args.html).write_text(to_html(graph, title=Path(args.model).name,
                                           report=module.partition_report()), encoding="utf-8")
        print(f"\npartition page written to {args.html}")
    if args.svg:
        Path(args.svg).parent.mkdir(parents=True, exist_ok=True)
        Path(args.svg).write_text(to_svg(graph, title=Path(args.model).name,
                                         report=module.partition_report()), encoding="utf-8")
        print(f"\npartition picture written to {args.svg}")
    return 0


def _pictured(module: Any) -> Any:
    """The partitioned graph to draw: the module's, or a staged module's stage 1 (what
    follows its data-dependent nodes has a graph per shape)."""
    if isinstance(module, StagedModule):
        if module.stage1 is None:
            raise ArgumentError(f"--dot/--html: nothing of this model compiles before its "
                                f"data-dependent nodes ({module.host_text()}); what follows "
                                f"them is partitioned per shape at run time")
        progress("the picture shows stage 1, the part before the data-dependent nodes")
        return _pictured(module.stage1)
    return module.graph


def _inspected(args: argparse.Namespace) -> Module | StagedModule | PartitionedModel:
    """The loaded or compiled module (a ``.tar``; ``--compile``, or the flags that only
    matter to code: ``--dump-code``, ``--tuning-records``), else the partitioned model, with
    no code generated."""
    path = check_model_file(args.model)
    if args.compile or args.dump_code or args.tuning_records or is_artifact(path):
        module = load_or_compile(args.model, args)
        if isinstance(module, Module) and module.shape_vars is not None:
            progress(f"symbolic shapes: outputs {module.describe_outputs()}; one module for "
                     f"every size ({module.shape_vars.describe()})")
            return module
        if not isinstance(module, DynamicModule):
            return module
        progress(f"symbolic shapes: outputs {module.describe_outputs()}")
        for text in module.relations:
            progress(f"checked at each new size: {text}")
        cached = module.specializations()
        if cached:
            sizes, specialized = cached[-1]
            progress(f"symbolic dimensions: showing the specialisation {ShapeVars.text(sizes)}")
            return specialized
        ones = dict.fromkeys(module.variables, 1)
        progress(f"symbolic dimensions taken as 1 ({ShapeVars.text(ones)}); give --input-shapes "
                 f"for other sizes")
        return module.specialize(**ones)
    kwargs = {k: v for k, v in compile_kwargs(args).items() if k not in _CODE_ONLY}
    model: Any = str(path)
    if args.quantize:
        progress(f"quantizing {path} to int8, calibrating on {args.quantize}")
        model = tessera.quantize(str(path), read_calibration(args.quantize, "--quantize"))
    else:
        kwargs["input_shapes"] = _open_dims_as_one(path, kwargs.get("input_shapes"))
    progress(f"partitioning {path} for target {kwargs['target']!r} at -O{kwargs['opt_level']} "
             "(no code generated; --compile compiles)")
    return partition_model(model, progress=True, **kwargs)


def _open_dims_as_one(path: Path, given: dict[str, Any] | None) -> dict[str, Any] | None:
    """``given`` input shapes, plus a shape with every symbolic dimension 1 for each graph
    input of the ONNX model at ``path`` that has one and is not in ``given``: a partition
    needs no particular size, so ``inspect`` shows one without asking (and says so)."""
    import onnx

    try:
        graph = onnx.load(str(path), load_external_data=False).graph
    except Exception:  # noqa: BLE001 - the import that follows names what is wrong
        return given
    shapes = dict(given or {})
    constants = {t.name for t in graph.initializer}
    filled = []
    for value in graph.input:
        if value.name in shapes or value.name in constants:
            continue
        dims = value.type.tensor_type.shape.dim
        if not any(d.HasField("dim_param") or not d.HasField("dim_value") for d in dims):
            continue
        shape = [d.dim_value if d.HasField("dim_value") else 1 for d in dims]
        shapes[value.name] = shape
        filled.append(f"{value.name}: {shape}")
    if filled:
        progress(f"symbolic dimensions taken as 1 ({'; '.join(filled)}); give --input-shapes "
                 f"for other sizes")
    return shapes or given


def _compiled_regions(module: Any) -> dict[str, Any]:
    """Region name -> compiled region of a module; of a staged module's compiled stages
    (``stage1/...``, ``rest/...``: :meth:`StagedModule.compiled_stages`)."""
    stages = module.compiled_stages() if isinstance(module, StagedModule) else [("", module)]
    return {f"{prefix}{name}": cr for prefix, stage in stages
            for name, cr in stage.compiled.items()}


def kernel_report(module: Module | StagedModule) -> str:
    """Per compiled region: its kernels, and the sizes and times its backend reports."""
    compiled = _compiled_regions(module)
    width = max([len(name) for name in compiled] + [12])
    lines = [f"{'region':<{width}}  kernels  backend facts"]
    for name, cr in compiled.items():
        facts = ", ".join(fact for k, v in cr.info.items() if (fact := _fact(k, v)))
        lines.append(f"{name:<{width}}  {len(cr.kernels):>7}  {facts}")
    return "\n".join(lines)


#: Longest string fact shown whole in the kernel table.
_FACT_CHARS = 60


def _fact(key: str, value: Any) -> str:
    """One scalar fact of ``CompiledRegion.info``: ``lower 0.84 s`` for ``lower_s``,
    ``object 85.0 KiB`` for ``object_bytes``, ``mcpu znver4``, ``threads 2``, ``uses_amx
    yes``; "" for structured facts (dicts, lists: schedules, counters), which other reports
    show."""
    if isinstance(value, bool):
        return f"{key} {'yes' if value else 'no'}"
    if isinstance(value, (int, float)):
        if key.endswith("_s"):
            return f"{key[:-2]} {value:.2f} s"
        if key.endswith("_bytes"):
            return f"{key[:-6]} {human_bytes(int(value))}"
        return f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
    if isinstance(value, str) and value:
        text = " ".join(value.split())
        return f"{key} {text if len(text) <= _FACT_CHARS else text[:_FACT_CHARS - 3] + '...'}"
    return ""
