"""``tessera new-plugin NAME``: write a backend package that installs and passes its tests."""

from __future__ import annotations

import argparse
from typing import Any

from tessera.scaffold import new_plugin


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "new-plugin", help="write a new backend plugin package (tessera-NAME)",
        description="Write a complete backend plugin package: pyproject with the entry point, "
                    "a backend claiming Relu and a fused Add -> Relu, save/load, tests using "
                    "the backend test kit, README. Then: pip install -e 'tessera-NAME[test]' && "
                    "python -m pytest tessera-NAME/tests. NAME may not be a reserved word "
                    "(auto, ref) or an installed backend's or Tessera plugin's name. "
                    "--own-device writes a backend on a device of its own instead (memory the "
                    "host cannot read, packed constants, view ops and Concat).")
    parser.add_argument("name", help="the backend's name, which is its target kind (mynpu)")
    parser.add_argument("--dir", default=None,
                        help="folder to write (default: ./tessera-NAME)")
    parser.add_argument("--force", action="store_true",
                        help="write into an existing non-empty folder")
    parser.add_argument("--own-device", action="store_true",
                        help="a backend whose buffers live on a device of its own (memory the "
                             "host cannot read; Tessera copies tensors to and from it), with "
                             "packed constants in the artifact, view ops and Concat")
    parser.set_defaults(handler=run_new_plugin)


def run_new_plugin(args: argparse.Namespace) -> int:
    root = new_plugin(args.name, args.dir, args.force, own_device=args.own_device)
    files = sorted(p for p in root.rglob("*") if p.is_file())
    lines = sum(len(p.read_text().splitlines()) for p in files)
    print(f"wrote {root}/ ({len(files)} files, {lines} lines):")
    for p in files:
        print(f"  {p.relative_to(root)}")
    print(f"next: pip install -e '{root}[test]' && python -m pytest -q {root}/tests")
    return 0
