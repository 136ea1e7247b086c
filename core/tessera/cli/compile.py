"""``tessera compile``: import an ONNX model, compile it for a target and export a ``.tar``.

Also holds the compile options that ``run`` and ``inspect`` share when given an ONNX model.
"""

from __future__ import annotations

import argparse
import sys
import tarfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import tessera
from tessera.cli.arrays import check_output_file, read_npy, read_npz
from tessera.cli.shapes import (
    ArgumentError,
    parse_dim_bounds,
    parse_input_shapes,
    parse_key_value,
    parse_name_list,
    parse_switch,
)
from tessera.config import CompileConfig
from tessera.errors import PassError
from tessera.frontend.onnx.importer import ARTIFACT, tar_kind
from tessera.passes import check_pass_switches, default_passes
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.staged import StagedModule

if TYPE_CHECKING:
    from tessera.api import Module

    #: What ``tessera.compile`` and ``tessera.load`` give: a static, symbolic or staged model.
    AnyModule = Module | DynamicModule | StagedModule

#: Flags that only matter when a model is compiled (ignored, with a warning, for a .tar).
COMPILE_FLAGS = ("target", "input_shapes", "opt_level", "pass_config", "disabled_pass",
                 "freeze_input", "tuning_records", "dump_ir", "quantize", "dump_code",
                 "dim_bounds", "specialize", "symbolic_dims", "shape_mode")

#: The graph passes ``--pass-config`` and ``--disabled-pass`` name.
PASS_NAMES = sorted({p.name for p in default_passes(3)})


def progress(message: str) -> None:
    """A progress line on stderr (stdout carries the reports)."""
    print(f"tessera: {message}", file=sys.stderr, flush=True)


def add_compile_options(parser: argparse.ArgumentParser, title: str = "compile options") -> None:
    """The flags that control ``tessera.compile`` (tvmc's names)."""
    group = parser.add_argument_group(title)
    group.add_argument("--target", default=None, metavar="TARGET",
                       help="target string, e.g. \"llvm -mcpu=znver3\", \"cuda -libs=cudnn, llvm\" "
                            "or \"ref\"; default: auto (the best installed CPU backend)")
    group.add_argument("--input-shapes", default=None, metavar="SHAPES",
                       help="input shapes, e.g. \"data:[1,3,224,224],mask:[1,128]\"; a "
                            "dimension may be a variable (\"input_ids:[batch,128]\": any "
                            "size) or ? (the model's own); without it symbolic dimensions "
                            "stay symbolic")
    group.add_argument("--dim-bounds", default=None, metavar="BOUNDS",
                       help="the sizes symbolic dimensions may take, e.g. "
                            "\"batch=1..64,seq=1..512\"")
    group.add_argument("--shape-mode", default=None, choices=("auto", "symbolic", "specialize"),
                       help="a model with symbolic dimensions: \"symbolic\" compiles it once "
                            "for every size within --dim-bounds, \"specialize\" per size on "
                            "first use; default auto: symbolic when the target takes it")
    group.add_argument("--symbolic-dims", action="append", default=None, metavar="A,B",
                       help="for a model with symbolic dimensions: variables not to compile "
                            "per size, because nearly every call changes them (a decoder's "
                            "cache length, e.g. \"past,total\"): the parts of the model whose "
                            "shapes do not depend on them compile once, the rest is "
                            "evaluated per call; \"auto\": any variable seen at three sizes")
    group.add_argument("--specialize", action="append", default=None, metavar="SHAPES",
                       help="for a model with symbolic dimensions: compile these input shapes "
                            "now (and store them in the .tar), e.g. "
                            "\"input_ids:[1,128],attention_mask:[1,128]\" (repeatable); "
                            "other sizes compile on first use")
    group.add_argument("-O", "--opt-level", type=int, default=None, choices=range(4),
                       metavar="N", help="optimization level 0-3 (default 3)")
    group.add_argument("--pass-config", action="append", default=None, metavar="NAME=VALUE",
                       help="switch a graph pass on or off, e.g. \"FoldConstants=off\" "
                            f"(on/off; repeatable); passes: {', '.join(PASS_NAMES)}")
    group.add_argument("--disabled-pass", action="append", default=None, metavar="A,B",
                       help="passes not to run, comma-separated (repeatable), e.g. "
                            "Canonicalize")
    group.add_argument("--freeze-input", action="append", default=None, metavar="NAME=FILE.npy",
                       help="bind a graph input to a constant at compile time (repeatable)")
    group.add_argument("--quantize", default=None, metavar="CALIB.npz",
                       help="quantize the model to int8 first (as `tessera quantize` does, with "
                            "these calibration inputs), e.g. for --target \"vta_sim, ref\"")
    group.add_argument("--dump-ir", default=None, metavar="DIR",
                       help="write the IR after each graph pass into DIR")
    group.add_argument("--dump-code", default=None, metavar="FORMS",
                       help="write the generated code of each region in these forms, "
                            "comma-separated: ll (LLVM IR), asm, tir (loop IR); into the "
                            "output's folder (or --dump-ir's DIR) as <region>.<form>")
    group.add_argument("--tuning-records", default=None, metavar="FILE",
                       help="tuning records (JSON lines) from tessera tune")
    group.add_argument("--no-kernel-cache", action="store_true",
                       help="compile every kernel again rather than taking code compiled "
                            "before from the kernel cache (TESSERA_CACHE_DIR, default "
                            "~/.cache/tessera/kernels; TESSERA_KERNEL_CACHE=0 turns it off "
                            "everywhere)")


def compile_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    """Keyword arguments for ``tessera.compile`` from the parsed compile options."""
    pass_config = parse_pass_config(args.pass_config)
    disabled = parse_name_list(args.disabled_pass)
    _check_passes(None, disabled, "--disabled-pass")
    frozen: dict[str, Any] = {}
    for item in args.freeze_input or []:
        name, path = parse_key_value(item, "--freeze-input")
        frozen[name] = read_npy(path, f"--freeze-input {name}")
    if args.tuning_records is not None and not Path(args.tuning_records).is_file():
        raise ArgumentError(f"--tuning-records: file {args.tuning_records!r} does not exist")
    return {
        "target": args.target or "auto",
        "input_shapes": (parse_input_shapes(args.input_shapes) if args.input_shapes else
                         getattr(args, "derived_input_shapes", None)),  # run: from --inputs
        "opt_level": 3 if args.opt_level is None else args.opt_level,
        "tuning_records": args.tuning_records,
        "pass_config": pass_config or None,
        "disabled_passes": disabled or None,
        "freeze_inputs": frozen or None,
        "dump_ir": getattr(args, "dump_ir", None),
        "dump_code": getattr(args, "dump_code", None),
        "dump_dir": getattr(args, "dump_ir", None) or _output_dir(args),
        "dim_bounds": parse_dim_bounds(args.dim_bounds) if args.dim_bounds else None,
        "specialize": [_fixed_shapes(text) for text in args.specialize or []] or None,
        "symbolic_dims": parse_name_list(getattr(args, "symbolic_dims", None)) or None,
        "shape_mode": getattr(args, "shape_mode", None) or "auto",
        "kernel_cache": False if getattr(args, "no_kernel_cache", False) else None,
        "for_export": bool(getattr(args, "for_export", False)),
    }


def _fixed_shapes(text: str) -> dict[str, list[int]]:
    """One ``--specialize`` value: input shapes with every dimension a size."""
    shapes = parse_input_shapes(text)
    fixed: dict[str, list[int]] = {}
    for name, dims in shapes.items():
        if not all(isinstance(d, int) for d in dims):
            raise ArgumentError(f"--specialize: every dimension of {name!r} must be a size, got "
                                f"{text!r}")
        fixed[name] = [int(d) for d in dims if isinstance(d, int)]
    return fixed


def parse_pass_config(items: list[str] | None) -> dict[str, bool]:
    """``["FoldConstants=off", ...]`` -> ``{"FoldConstants": False}``, checked: known pass names
    and on/off values only (an :class:`ArgumentError` listing what is allowed)."""
    pass_config: dict[str, bool] = {}
    for item in items or []:
        key, value = parse_key_value(item, "--pass-config")
        _check_passes({key: True}, None, "--pass-config")
        pass_config[key] = parse_switch(value, f"--pass-config {key}")
    return pass_config


def _check_passes(pass_config: dict[str, bool] | None, disabled: list[str] | None,
                  option: str) -> None:
    try:
        check_pass_switches(pass_config, disabled)
    except PassError as e:
        raise ArgumentError(f"{option}: {e}") from None


def _output_dir(args: argparse.Namespace) -> str:
    output = getattr(args, "output", None)
    return str(Path(output).parent) if output else "."


def check_model_file(path: str) -> Path:
    """The model path, or an error saying it does not exist."""
    model = Path(path)
    if not model.is_file():
        raise ArgumentError(f"model file {path!r} does not exist")
    return model


def check_onnx_file(text: str) -> Path:
    """The path of an ONNX model to compile, or an error saying what it is instead (a compiled
    artifact: run or inspect it)."""
    path = check_model_file(text)
    kind = tar_kind(path)
    if kind == ARTIFACT:
        raise ArgumentError(f"{text} is a compiled Tessera artifact, not an ONNX model: use "
                            f"`tessera run {text}` (or `tessera inspect {text}`)")
    if kind is not None:
        raise ArgumentError(f"{text} is {kind}, not an ONNX model")
    return path


def is_artifact(path: Path) -> bool:
    """True for an exported module (a tar file) rather than an ONNX model."""
    return path.suffix == ".tar" or tarfile.is_tarfile(path)


def compile_model(path: Path, args: argparse.Namespace) -> AnyModule:
    """Compile the ONNX model at ``path`` with the options in ``args``."""
    kwargs = compile_kwargs(args)
    model: Any = str(path)
    if getattr(args, "quantize", None):
        progress(f"quantizing {path} to int8, calibrating on {args.quantize}")
        model = tessera.quantize(str(path), read_npz(args.quantize, "--quantize"))
    target = kwargs.pop("target")
    config = CompileConfig(**kwargs, progress=True)
    progress(f"compiling {path} for target {target!r} at -O{config.opt_level}")
    start = time.perf_counter()
    module = tessera.compile(model, target, config)
    progress(f"compiled for {module.target!r} in {time.perf_counter() - start:.2f} s")
    return module


def load_or_compile(path_text: str, args: argparse.Namespace) -> AnyModule:
    """Load an exported ``.tar`` or compile an ONNX model, as ``run`` and ``inspect`` accept."""
    path = check_model_file(path_text)
    if not is_artifact(path):
        return compile_model(path, args)
    given = [f"--{flag.replace('_', '-')}" for flag in COMPILE_FLAGS
             if getattr(args, flag, None) is not None]
    if given:
        progress(f"warning: {', '.join(given)} ignored: {path} is already compiled")
    progress(f"loading {path}")
    return tessera.load(str(path))


def format_type(tensor_type: Any) -> str:
    """``float32[1,3,224,224]`` for a TensorType."""
    dims = ",".join(str(d) for d in tensor_type.shape)
    return f"{tensor_type.dtype}[{dims}]"


def summary(module: AnyModule) -> str:
    """Target, inputs and outputs of a module, a few lines."""
    if isinstance(module, DynamicModule):
        opened = ", ".join(module.symbolic) + (" and any variable seen at three sizes"
                                                if module.auto_symbolic else "")
        split = ([f"split:   {opened.removeprefix(' and ')} not specialised on (parts "
                  f"compiled once, the rest evaluated per call)"]
                 if module.symbolic or module.auto_symbolic else [])
        return "\n".join([f"target:  {module.target}",
                          f"inputs:  {module.shape_vars.describe()}",
                          f"outputs: {module.describe_outputs()}",
                          *split, str(module.cache_info())])
    if isinstance(module, StagedModule):
        return "\n".join([f"target:  {module.target}",
                          f"inputs:  {module.shape_vars.describe()}",
                          f"outputs: {', '.join(module.output_names)}",
                          f"staged:  data-dependent output shapes; {module.host_text()} run on "
                          f"the host at each call, what follows compiles per shape"])
    inputs = ", ".join(f"{name} {format_type(t)}" for name, t in module.input_types.items())
    lines = [f"target:  {module.target}",
             f"inputs:  {inputs}",
             f"outputs: {', '.join(module.output_names)}"]
    if getattr(module, "shape_vars", None) is not None:  # one module for every size
        lines[1:3] = [f"inputs:  {module.shape_vars.describe()}",
                      f"outputs: {module.describe_outputs()}",
                      "sizes:   compiled once for every size within the bounds"]
    timings = list(getattr(module, "pass_timings", None) or [])
    if timings:
        total = sum(ms for _, ms in timings)
        name, slowest = max(timings, key=lambda item: item[1])
        lines.append(f"passes:  {len(timings)} in {total:.1f} ms (slowest: {name} "
                     f"{slowest:.1f} ms)")
    tuning = module.tuning_summary()
    if tuning is not None:
        tuned, default = tuning
        lines.append(f"tuning:  {tuned} schedule(s) from the tuning records, {default} with "
                     f"default knobs")
    return "\n".join(lines)


def reports(module: AnyModule) -> str:
    """The partition table and the memory plan, as ``compile`` and ``inspect`` print them (of
    the specialisation compiled last, for a module with symbolic shapes)."""
    if isinstance(module, DynamicModule):
        cached = module.specializations()
        if not cached:
            return ("symbolic input shapes: compiled per size on first use (--specialize "
                    "compiles sizes now and stores them in the .tar)")
        sizes, module = cached[-1]
        head = f"specialisation {', '.join(f'{v}={n}' for v, n in sizes.items())}:\n"
        return f"{head}{module.partition_report()}\n\n{module.memory_report()}"
    if isinstance(module, StagedModule):
        return f"{module.describe()}\n\n{module.partition_report()}\n\n{module.memory_report()}"
    return f"{module.partition_report()}\n\n{module.memory_report()}"


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "compile", help="compile an ONNX model into a .tar module",
        description="Import an ONNX model, optimize and partition it over the target's "
                    "backends, compile each region and export the module as a .tar.")
    parser.add_argument("model", metavar="MODEL", help="ONNX model file")
    parser.add_argument("-o", "--output", default=None, metavar="FILE.tar",
                        help="where to write the module (default: MODEL's name with .tar, in the "
                             "current directory)")
    parser.add_argument("--for-export", action="store_true",
                        help="keep what tessera export needs in the module (llvm: its IR), so "
                             "that tessera export FILE.tar writes it as a C library later")
    add_compile_options(parser)
    parser.set_defaults(handler=run_compile)


def run_compile(args: argparse.Namespace) -> int:
    path = check_onnx_file(args.model)
    default = path.with_suffix(".tar").name
    output = check_output_file(args.output, "--output", default) if args.output else Path(default)
    if output.resolve() == path.resolve():
        raise ArgumentError(f"--output {str(output)!r} would overwrite the model")
    module = compile_model(path, args)
    module.export(str(output))
    progress(f"wrote {output}")
    print(f"model:   {path}")
    print(f"output:  {output}")
    print(summary(module))
    print()
    print(reports(module))
    return 0
