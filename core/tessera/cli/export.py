"""``tessera export``: a compiled model as a C library that runs without Python."""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path
from typing import Any

import tessera
from tessera.cli.compile import (
    add_compile_options,
    check_model_file,
    check_onnx_file,
    compile_kwargs,
    is_artifact,
    progress,
)
from tessera.cli.shapes import ArgumentError
from tessera.config import CompileConfig
from tessera.deploy import export_c


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "export", help="export a model as a C library (no Python needed to run it)",
        description="Compile an ONNX model with fixed input shapes for export and write it as "
                    "C: a header with the C API, the plan as C source, the weights, the "
                    "backends' position-independent objects and a Makefile; with --shared, "
                    "link the shared library with the system C compiler too.")
    parser.add_argument("model", metavar="MODEL",
                        help="ONNX model file, or a .tar compiled with --for-export")
    parser.add_argument("--format", default="c", choices=("c",),
                        help="what to write (c: header, sources, objects; the default)")
    parser.add_argument("-o", "--output", required=True, metavar="DIR",
                        help="the folder to write into (created)")
    parser.add_argument("--prefix", default="model", metavar="NAME",
                        help="the C API's prefix: NAME_create, NAME_run, libNAME.so "
                             "(default: model)")
    parser.add_argument("--shared", default=None, metavar="FILE.so",
                        help="also link the shared library with the C compiler and write it "
                             "here")
    parser.add_argument("--serial", action="store_true",
                        help="code that starts no threads (parallel loops run in the calling "
                             "thread; no pthreads needed: a system without threads)")
    parser.add_argument("--cc", default=None, metavar="CC",
                        help="the C compiler for --shared (default: $CC, else cc)")
    add_compile_options(parser)
    parser.set_defaults(handler=run_export)


def run_export(args: argparse.Namespace) -> int:
    path = check_model_file(args.model)
    module: Any
    if is_artifact(path):  # compiled with --for-export: it keeps the IR export emits again
        progress(f"loading {path}")
        module = tessera.load(str(path))
    else:
        path = check_onnx_file(args.model)
        kwargs = compile_kwargs(args)
        target = kwargs.pop("target")
        if target == "auto":
            target = "llvm"
        kwargs["for_export"] = True
        config = CompileConfig(**kwargs, progress=True)
        progress(f"compiling {path} for target {target!r} for export")
        module = tessera.compile(str(path), target, config)
    if not isinstance(module, tessera.Module):
        raise ArgumentError(f"{path} compiled into a {type(module).__name__} (a module per "
                            f"size or per stage), which export does not take: give "
                            f"--input-shapes, or --shape-mode symbolic")
    result = export_c(module, args.output, prefix=args.prefix, shared=bool(args.shared),
                      cc=args.cc, serial=args.serial)
    print(f"model:    {path}")
    print(f"folder:   {result.folder} ({', '.join(result.files)})")
    print(f"triple:   {result.triple}")
    print(f"arena:    {result.arena_bytes} bytes; weights: {result.weights_bytes} bytes; "
          f"{result.calls} kernel calls")
    if module.shape_vars is not None:
        print(f"sizes:    {module.shape_vars.describe()} (the C API's {args.prefix}_run_sized)")
    if args.shared:
        if result.shared_library is None:
            raise ArgumentError(f"--shared: {result.link_note}")
        target_file = Path(args.shared)
        if target_file.resolve() != result.shared_library.resolve():
            target_file.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(result.shared_library, target_file)
        print(f"library:  {target_file}")
    return 0
