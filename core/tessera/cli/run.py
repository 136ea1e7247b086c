"""``tessera run``: run a compiled module (or an ONNX model compiled on the fly).

Inputs come from an ``.npz`` file (``--inputs``); inputs it lacks are generated with
``--fill-mode``. ``--print-time`` benchmarks, ``--profile`` prints per-kernel and per-backend
times (and, for a backend that offers its device's peak rate, each conv and matmul kernel's
GFLOP/s as a fraction of it), ``--print-top N`` prints the N largest entries of the first output.
"""

from __future__ import annotations

import argparse
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from tessera.cli.arrays import check_output_file, read_npz
from tessera.cli.compile import (
    add_compile_options,
    check_model_file,
    is_artifact,
    load_or_compile,
    progress,
)
from tessera.cli.shapes import ArgumentError
from tessera.errors import TesseraError
from tessera.ir.symbolic import ShapeVars
from tessera.plugin.manager import get_backends
from tessera.plugin.target import Target
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.module import Module
from tessera.runtime.profiler import Profile

#: Rows of a batched first output that --print-top shows.
MAX_TOP_ROWS = 8


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run", help="run a compiled module",
        description="Run a module exported by 'tessera compile' (or an ONNX model, compiled "
                    "first with the compile options below).")
    parser.add_argument("model", metavar="MODEL", help="module .tar (or ONNX model)")
    parser.add_argument("--inputs", default=None, metavar="FILE.npz",
                        help="input arrays by input name")
    parser.add_argument("--fill-mode", choices=("zeros", "ones", "random"), default="random",
                        help="how to make inputs missing from --inputs (default: random)")
    parser.add_argument("--outputs", default=None, metavar="FILE.npz",
                        help="save the outputs, by output name")
    parser.add_argument("--print-time", action="store_true",
                        help="benchmark and print the execution time")
    parser.add_argument("--repeat", type=int, default=10, metavar="N",
                        help="timed measurements for --print-time (default 10)")
    parser.add_argument("--number", type=int, default=1, metavar="N",
                        help="runs averaged within one measurement (default 1)")
    parser.add_argument("--profile", action="store_true",
                        help="print per-kernel and per-backend times, and conv/matmul GFLOP/s "
                             "against the peak of backends that offer one")
    parser.add_argument("--print-top", type=int, default=None, metavar="N",
                        help="print the N largest values (and indices) of the first output")
    parser.add_argument("--seed", type=int, default=0, help="seed for --fill-mode random")
    add_compile_options(parser, "compile options (for an ONNX model)")
    parser.set_defaults(handler=run_run)


def make_input(shape: tuple[int, ...], dtype: np.dtype, mode: str,
               rng: np.random.Generator) -> np.ndarray:
    """An input array filled with zeros, ones or random values.

    Random floats are uniform in [0, 1); random integers are 0 or 1 (valid as masks, token ids
    and indices alike); random booleans are fair coins.
    """
    if mode == "zeros":
        return np.zeros(shape, dtype)
    if mode == "ones":
        return np.ones(shape, dtype)
    if dtype.kind == "f":
        return rng.random(shape).astype(dtype)
    if dtype.kind == "b":
        return rng.random(shape) < 0.5
    return rng.integers(0, 2, size=shape).astype(dtype)


def read_inputs(args: argparse.Namespace) -> dict[str, np.ndarray]:
    """The arrays of ``--inputs`` by name (none without it)."""
    return {} if args.inputs is None else read_npz(args.inputs, "--inputs")


def shapes_from_inputs(args: argparse.Namespace,
                       given: dict[str, np.ndarray]) -> dict[str, list[int]] | None:
    """For an ONNX model compiled here without ``--input-shapes``: the shapes of its inputs
    with symbolic dimensions (a batch ``N``), taken from the ``--inputs`` arrays of the same
    rank (their fixed dimensions stay the model's: a mismatch is run's shape error). None
    when there is nothing to derive."""
    if not given or args.input_shapes is not None:
        return None
    path = check_model_file(args.model)
    if is_artifact(path):
        return None
    import onnx

    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception:  # noqa: BLE001 - compiling it says what is wrong with the file
        return None
    frozen = {item.split("=", 1)[0] for item in args.freeze_input or []}
    shapes: dict[str, list[int]] = {}
    for vi in model.graph.input:
        value = given.get(vi.name)
        tt = vi.type.tensor_type
        if value is None or vi.name in frozen or not tt.HasField("shape"):
            continue
        dims = list(tt.shape.dim)
        symbolic = [not (d.HasField("dim_value") and d.dim_value >= 0) for d in dims]
        if any(symbolic) and len(dims) == value.ndim:
            shapes[vi.name] = [int(n) if sym else int(d.dim_value)
                               for d, n, sym in zip(dims, value.shape, symbolic)]
    if shapes:
        progress(f"input shapes from {args.inputs}: "
                 + ", ".join(f"{n}:{s}".replace(" ", "") for n, s in shapes.items()))
    return shapes or None


def gather_inputs(module: Any, args: argparse.Namespace,
                  given: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """Inputs from ``--inputs`` (``given``: already read), completed with ``--fill-mode`` for
    any it lacks."""
    if given is None:
        given = read_inputs(args)
    specs = module.input_specs
    unknown = sorted(set(given) - set(specs))
    if unknown:
        warnings.warn(f"--inputs: ignoring {_names(unknown)} of {args.inputs}, not "
                      f"{'an input' if len(unknown) == 1 else 'inputs'} of the model (its inputs: "
                      f"{', '.join(specs)})", stacklevel=2)
    rng = np.random.default_rng(args.seed)
    inputs: dict[str, np.ndarray] = {}
    for name, spec in specs.items():
        if name in given:
            inputs[name] = given[name]
            continue
        if not all(isinstance(d, int) for d in spec.dims):
            raise ArgumentError(f"{args.model} has symbolic input shapes: input {spec}; give "
                                f"it with --inputs (--fill-mode needs a size)")
        if args.inputs is not None:
            progress(f"input {name!r} not in {args.inputs}; using --fill-mode "
                     f"{args.fill_mode}")
        inputs[name] = make_input(tuple(int(d) for d in spec.dims), spec.dtype.numpy,
                                  args.fill_mode, rng)
    return inputs


def _specialized(module: DynamicModule, given: dict[str, np.ndarray],
                 args: argparse.Namespace) -> Module:
    """The module for the ``--inputs`` arrays' shapes, of a module with symbolic shapes."""
    missing = [name for name in module.input_specs if name not in given]
    if missing:
        raise ArgumentError(f"{args.model} has symbolic input shapes "
                            f"({module.shape_vars.describe()}): give every input with "
                            f"--inputs (missing: {', '.join(missing)}), or compile it with "
                            f"--input-shapes")
    shapes = {name: list(given[name].shape) for name in module.input_specs}
    try:
        sizes = module.shape_vars.sizes_of_shapes(shapes)
    except TesseraError as e:
        raise ArgumentError(f"--inputs: {e}") from None
    progress(f"running the specialisation {ShapeVars.text(sizes)}")
    return module.specialize(shapes)


def _names(names: list[str]) -> str:
    """``array 'z'`` or ``arrays 'a', 'b'``."""
    quoted = ", ".join(repr(n) for n in names)
    return f"array {quoted}" if len(names) == 1 else f"arrays {quoted}"


def format_top(name: str, output: np.ndarray, n: int) -> str:
    """The ``n`` largest values of ``output`` with their indices, per batch row."""
    rows = output.reshape(output.shape[0], -1) if output.ndim >= 2 else output.reshape(1, -1)
    n = min(n, rows.shape[1])
    lines = [f"top {n} of {name} {output.dtype}{list(output.shape)}:"]
    for r, row in enumerate(rows[:MAX_TOP_ROWS]):
        order = np.argsort(-row, kind="stable")[:n]
        entries = "  ".join(f"{int(i)}: {row[i]:.6g}" for i in order)
        prefix = f"  [{r}] " if len(rows) > 1 else "  "
        lines.append(prefix + entries)
    if len(rows) > MAX_TOP_ROWS:
        lines.append(f"  ... {len(rows) - MAX_TOP_ROWS} more rows")
    return "\n".join(lines)


def format_output(name: str, output: np.ndarray) -> str:
    """A one-line description of an output array."""
    text = f"{name}: {output.dtype}{list(output.shape)}"
    if output.size and output.dtype.kind in "fiub":
        values = output.astype(np.float64)
        text += f"  min {values.min():.6g}  max {values.max():.6g}  mean {values.mean():.6g}"
    return text


def roofline_reports(module: Any, profile: Profile) -> list[str]:
    """For each backend of ``module`` whose kernels did measured work and which offers a peak
    rate (:meth:`~tessera.plugin.backend.Backend.peak_gflops`), its conv and matmul kernels
    against that peak."""
    try:
        target = Target.parse(module.target)
    except TesseraError:
        return []
    reports = []
    backends = getattr(module, "backends", None) or get_backends()  # staged: the registry's
    for name in sorted({k.backend for k in profile.kernels if k.flops > 0}):
        backend, kind = backends.get(name), target.kind(name)
        peak = backend.peak_gflops(kind) if backend is not None and kind is not None else None
        if peak is not None:
            gflops, description = peak
            reports.append(f"{description}\n"
                           f"{profile.roofline(gflops, peak_label=name, backend=name)}")
    return reports


def run_run(args: argparse.Namespace) -> int:
    for flag, value in (("--repeat", args.repeat), ("--number", args.number),
                        ("--print-top", args.print_top)):
        if value is not None and value < 1:
            raise ArgumentError(f"{flag} must be at least 1, got {value}")
    if args.outputs is not None:
        check_output_file(args.outputs, "--outputs", "outputs.npz")
    given = read_inputs(args)
    args.derived_input_shapes = shapes_from_inputs(args, given)
    loaded = load_or_compile(args.model, args)
    module = _specialized(loaded, given, args) if isinstance(loaded, DynamicModule) else loaded
    inputs = gather_inputs(module, args, given)
    outputs = module.run(inputs)
    if args.outputs is not None:
        written = Path(args.outputs)
        written = written if written.suffix == ".npz" else Path(f"{written}.npz")  # as numpy
        written.parent.mkdir(parents=True, exist_ok=True)
        np.savez(written, **outputs)
        progress(f"wrote {written}")
    if args.print_top is not None:
        first = module.output_names[0]
        print(format_top(first, np.asarray(outputs[first]), args.print_top))
    elif args.outputs is None:
        for name in module.output_names:
            print(format_output(name, np.asarray(outputs[name])))
    if args.profile:
        profile = module.profile(**inputs)
        print()
        print(profile)
        for report in roofline_reports(module, profile):
            print()
            print(report)
    if args.print_time:
        for name, value in inputs.items():
            module.set_input(name, value)
        result = module.benchmark(repeat=args.repeat, number=args.number)
        print()
        print(result)
    return 0
