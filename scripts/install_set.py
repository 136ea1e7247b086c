"""What scripts/setup-env.sh installs: the core and every plugin under plugins/*/ that has a
pyproject.toml, each with those of the asked extras that it defines.

    python scripts/install_set.py test,libs    # ./run-tests.sh: .[test], plugins/cuda[libs,test]...
    python scripts/install_set.py ""           # ./run-demo.sh: ., plugins/cuda, ...

prints one editable requirement per line (setup-env.sh passes each to ``pip install -e``).
The extras: ``test`` (what the test suite needs) and ``libs`` (the NVIDIA libraries of the GPU
plugins: NVRTC, cuDNN, cuBLAS, about 1.6 GB, which a CPU-only demo does without).
tests/scripts/test_setup_env.py reads the same sets through :func:`install_set` and
:func:`requirements`. Standard library only (Python 3.11+: tomllib).
"""

from __future__ import annotations

import re
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_REQUIREMENT = re.compile(r"\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?")


def normalize(name: str) -> str:
    """A distribution name as pip compares it (PEP 503)."""
    return re.sub(r"[-_.]+", "-", name).lower()


def projects(root: Path = ROOT) -> list[Path]:
    """The folders with a pyproject.toml that the scripts install: the root, then the plugins."""
    plugins = sorted(p.parent for p in root.glob("plugins/*/pyproject.toml"))
    return [root, *plugins]


def _project(folder: Path) -> dict:
    with open(folder / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _split(extras: str | list[str]) -> list[str]:
    if isinstance(extras, str):
        extras = extras.strip().strip("[]").split(",")
    return [e.strip() for e in extras if e.strip()]


def install_set(extras: str | list[str], root: Path = ROOT) -> list[tuple[Path, list[str]]]:
    """(folder, the extras of ``extras`` that its pyproject defines) for each project."""
    wanted = _split(extras)
    out = []
    for folder in projects(root):
        defined = _project(folder).get("optional-dependencies", {})
        out.append((folder, [e for e in wanted if e in defined]))
    return out


def specs(extras: str | list[str], root: Path = ROOT) -> list[str]:
    """The install set as pip requirements relative to ``root``: ``.[test]``, ``plugins/llvm``."""
    lines = []
    for folder, chosen in install_set(extras, root):
        rel = folder.relative_to(root).as_posix()
        lines.append(rel + (f"[{','.join(chosen)}]" if chosen else ""))
    return lines


def requirements(extras: str | list[str], root: Path = ROOT) -> set[str]:
    """The normalized names of the third-party distributions the install set asks for directly:
    each project's dependencies and those of its chosen extras, following the extras one local
    project asks of another (``tessera-cuda[libs]``). Not their own dependencies (pip's)."""
    local = {normalize(_project(f)["name"]): f for f in projects(root)}
    names: set[str] = set()
    seen: set[tuple[str, str]] = set()

    def visit(dist: str, chosen: list[str]) -> None:
        project = _project(local[dist])
        lists = [project.get("dependencies", [])]
        for extra in chosen:
            if (dist, extra) not in seen:
                seen.add((dist, extra))
                lists.append(project.get("optional-dependencies", {}).get(extra, []))
        for requirement in (r for group in lists for r in group):
            match = _REQUIREMENT.match(requirement)
            if match is None:
                raise ValueError(f"{dist}: cannot read requirement {requirement!r}")
            name = normalize(match.group(1))
            if name in local:
                inner = _split(match.group(2) or "")
                if any((name, e) not in seen for e in inner):
                    visit(name, inner)
            else:
                names.add(name)

    for folder, chosen in install_set(extras, root):
        visit(normalize(_project(folder)["name"]), chosen)
    return names


if __name__ == "__main__":
    if len(sys.argv) > 2:
        sys.exit("usage: install_set.py [EXTRAS]   (comma-separated, e.g. test,libs)")
    print("\n".join(specs(sys.argv[1] if len(sys.argv) > 1 else "")))
