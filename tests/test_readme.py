"""Facts the README states that the code decides: the op counts, and the folders its Layout
section lists (every subpackage of core/tessera, every plugin under plugins/)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def _layout() -> str:
    section = README.split("\n## Layout\n", 1)[1].split("\n## ", 1)[0]
    return section.split("```", 2)[1]


def test_op_counts_match_the_registries() -> None:
    from tessera.ops.registry import all_ops
    from tessera.topi.registry import registered_ops

    counts = re.findall(r"\((\d+) of the registry's (\d+) ops", README)
    assert counts, "the README no longer states the op counts; update this test"
    for computes, ops in counts:
        assert (int(computes), int(ops)) == (len(registered_ops()), len(all_ops())), (
            f"README says {computes} of {ops} ops have a compute; the code has "
            f"{len(registered_ops())} of {len(all_ops())}")


def test_layout_lists_every_subpackage_and_plugin() -> None:
    layout = _layout()
    listed = set(re.findall(r"(?:^|\s)([a-z_]+)/", layout))
    packages = {p.parent.name for p in (ROOT / "core" / "tessera").glob("*/__init__.py")}
    plugins = {p.parent.name for p in (ROOT / "plugins").glob("*/pyproject.toml")}
    assert plugins and not plugins - listed, f"Layout lacks plugins {sorted(plugins - listed)}"
    assert not packages - listed, f"Layout lacks core/tessera/{sorted(packages - listed)}"
    for top in ("core", "plugins", "examples", "tests", "benchmarks", "scripts", "docs"):
        assert re.search(rf"^{top}/", layout, re.M), f"Layout lacks {top}/"
