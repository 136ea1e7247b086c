"""``tessera inspect``: how a model is split over backends and how much memory it plans.

For an ONNX model, it compiles with the given compile options first; for a ``.tar`` it loads the
module. It prints the module summary, the partition table (each region with its backend, device
and ops, the device copies, the nodes that fell back) and the memory plan per device.
``--dot`` and ``--html`` also write a picture of the partitioned graph.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from tessera.cli.compile import add_compile_options, load_or_compile, reports, summary


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "inspect", help="show the partition and memory plan of a model",
        description="Show how a model is partitioned over backends (regions, device copies, "
                    "fallback nodes) and its memory plan. An ONNX model is compiled first.")
    parser.add_argument("model", metavar="MODEL", help="ONNX model or module .tar")
    parser.add_argument("--dot", metavar="FILE", default=None,
                        help="also write the partitioned graph as a Graphviz picture (regions as "
                             "colored clusters, copies as diamonds); render with "
                             "`dot -Tsvg FILE -o graph.svg`")
    parser.add_argument("--html", metavar="FILE", default=None,
                        help="also write the partitioned graph as a self-contained HTML page "
                             "(nodes colored by backend, region outlines, device copies, "
                             "fallback nodes, tooltips); open it in a browser")
    add_compile_options(parser, "compile options (for an ONNX model)")
    parser.set_defaults(handler=run_inspect)


def run_inspect(args: argparse.Namespace) -> int:
    module = load_or_compile(args.model, args)
    print(f"model:   {args.model}")
    print(summary(module))
    print()
    print(reports(module))
    if args.dot:
        from tessera.partition.dot import to_dot

        Path(args.dot).write_text(to_dot(module.graph))
        print(f"\npartition picture written to {args.dot}")
    if args.html:
        from tessera.partition.html import to_html

        Path(args.html).write_text(to_html(module.graph, title=Path(args.model).name,
                                           report=module.partition_report()), encoding="utf-8")
        print(f"\npartition page written to {args.html}")
    return 0
