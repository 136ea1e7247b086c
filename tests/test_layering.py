"""The layering of docs/architecture.md, checked: imports point down only.

Every module under ``core/tessera`` and ``plugins/*/tessera_*`` is parsed with ``ast``; each
import of a project module, at module level (``if TYPE_CHECKING:`` blocks included) or inside
a function, is an edge from the importing package to the imported one, and must be allowed by
:data:`MAY_IMPORT`. Known violations that are not fixed yet are listed in :data:`ALLOWED` with
the reason; an entry that no longer matches an import is stale and fails too. Function-local
imports of project modules are counted against a ceiling that may only go down.

``python tests/test_layering.py`` prints the violations and the count.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: Distributions' top-level packages: the core and the plugins.
PLUGIN_PACKAGES = ("tessera_llvm", "tessera_cuda", "tessera_cudnn", "tessera_vta")
PROJECT = ("tessera", *PLUGIN_PACKAGES)

#: The layers, bottom-up (docs/architecture.md). A package may import the packages of the
#: layers below its own, never those of its own layer or above, except where MAY_IMPORT
#: says otherwise. "tessera" is the package root (``tessera/__init__.py``: the public API
#: facade, which also imports ``ops`` so that every op schema is registered).
LAYERS: list[tuple[str, ...]] = [
    ("errors", "_version", "progress"),
    ("ir",),
    ("plugin", "ops", "tir", "drawing"),
    ("te",),
    ("topi",),
    ("passes", "partition", "frontend", "config"),
    ("kernel",),
    ("backends",),
    ("runtime", "quantization"),
    ("api", "deploy"),
    ("tessera",),
    ("scaffold_device",),
    ("autotune", "scaffold"),
    ("cli", "testing"),
]
LAYER_OF = {pkg: i for i, layer in enumerate(LAYERS) for pkg in layer}

#: What the kernel package (what code-generating backends share: the lowering chain, the
#: graph passes only they run) may import: the contract, IR, op registry, TE/TIR/TOPI and the
#: default pass pipeline, never the partitioner or frontend (nor anything above).
KERNEL_MAY_IMPORT = frozenset({"errors", "_version", "progress", "ir", "plugin", "ops", "tir",
                               "te", "topi", "passes"})

#: What a backend (core's reference backend, every plugin) may import from the core: the
#: contract and what code-generating backends share (IR, op registry, TE/TIR/TOPI, the
#: default passes, the kernel package), never the partitioner, frontend, runtime, API or tuner.
BACKEND_MAY_IMPORT = KERNEL_MAY_IMPORT | {"kernel"}

#: Modules that only re-export a module that moved up a layer, so that its old import path
#: keeps working: (old module, new module). They import nothing else.
REEXPORTS = frozenset({
    ("tessera.passes.fuse_ops", "tessera.kernel.fuse_ops"),
    ("tessera.passes.alter_layout", "tessera.kernel.alter_layout"),
    ("tessera.passes.grouped_pointwise", "tessera.kernel.grouped_pointwise"),
    ("tessera.passes.conv_match", "tessera.kernel.conv_match"),
})

#: Plugins that build on another plugin name it as a dependency in their pyproject.toml.
PLUGIN_DEPENDS = {"tessera_cudnn": {"tessera_cuda"}}


def may_import(src: str, dst: str) -> bool:
    """Whether package ``src`` may import package ``dst`` (packages as :func:`package_of`
    names them)."""
    if src == dst:
        return True
    src_backend = src in PLUGIN_PACKAGES or src.startswith("backends.")
    dst_backend = dst in PLUGIN_PACKAGES or dst.startswith("backends.")
    if src_backend:
        if dst_backend:
            return dst in PLUGIN_DEPENDS.get(src, set())
        return dst in BACKEND_MAY_IMPORT
    if dst in PLUGIN_PACKAGES:
        return False  # the core never imports a plugin package by name
    if src == "kernel":
        return dst in KERNEL_MAY_IMPORT
    if dst_backend:
        dst = "backends"
    return LAYER_OF[dst] < LAYER_OF[src]


#: Known violations not fixed yet: (importing module, imported module) -> why it is still there.
#: Keep each reason to one line; remove the entry when the import goes.
ALLOWED: dict[tuple[str, str], str] = {
}

#: Function-local imports of project modules: the count may only go down (136 on main before
#: the layering step, docs/architecture.md; 103 after its first commits). Each one says why it
#: is local in a comment that starts with LOCAL_REASON, on its line or the line above.
LOCAL_IMPORT_CEILING = 6
LOCAL_REASON = "# local import:"


@dataclass(frozen=True)
class Import:
    module: str      # the importing module, "tessera.ir.graph"
    target: str      # the imported module, "tessera.ops.registry"
    line: int
    local: bool      # inside a function
    reason: str = ""  # a local import's LOCAL_REASON comment, without the marker

    @property
    def where(self) -> str:
        return f"{self.module}:{self.line} imports {self.target}"


def source_files(root: Path = ROOT) -> Iterator[tuple[str, Path]]:
    """(module name, path) of every module of the core and the plugins."""
    bases = [root / "core"] + sorted(p.parent for p in (root / "plugins").glob("*/tessera_*")
                                     if p.is_dir() and not p.name.endswith(".egg-info"))
    for base in bases:
        tops = [base / "tessera"] if base.name == "core" else \
            sorted(p for p in base.glob("tessera_*") if p.is_dir() and
                   not p.name.endswith(".egg-info"))
        for top in tops:
            for path in sorted(top.rglob("*.py")):
                if "build" in path.relative_to(base).parts:
                    continue
                parts = list(path.relative_to(base).with_suffix("").parts)
                if parts[-1] == "__init__":
                    parts.pop()
                yield ".".join(parts), path


def imports_of(module: str, path: Path, known: set[str]) -> Iterator[Import]:
    """The imports of project modules in one file; ``from pkg import name`` names the module
    ``pkg.name`` when that is a module, else ``pkg``."""
    text = path.read_text()
    lines = text.splitlines()
    tree = ast.parse(text, str(path))
    local: set[int] = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            local.update(id(n) for n in ast.walk(fn) if isinstance(n, (ast.Import, ast.ImportFrom)))
    is_package = path.name == "__init__.py"
    for node in ast.walk(tree):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".") if is_package else module.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                parent = ".".join(base + ([node.module] if node.module else []))
            else:
                parent = node.module or ""
            for alias in node.names:
                sub = f"{parent}.{alias.name}"
                targets.append(sub if sub in known else parent)
        else:
            continue
        for target in dict.fromkeys(targets):
            if target.split(".")[0] in PROJECT:
                is_local = id(node) in local
                yield Import(module, target, node.lineno, is_local,
                             _reason(lines, node.lineno) if is_local else "")


def _reason(lines: list[str], lineno: int) -> str:
    """The LOCAL_REASON comment on line ``lineno`` (1-based) or the line above, else ''."""
    for text in (lines[lineno - 1], lines[lineno - 2] if lineno > 1 else ""):
        at = text.find(LOCAL_REASON)
        if at >= 0:
            return text[at + len(LOCAL_REASON):].strip()
    return ""


def package_of(module: str) -> str:
    """The layering unit of a module: ``tessera.ir.graph`` -> ``ir``,
    ``tessera.backends.reference.backend`` -> ``backends.reference``, ``tessera`` ->
    ``tessera``, ``tessera_llvm.backend`` -> ``tessera_llvm``."""
    parts = module.split(".")
    if parts[0] != "tessera":
        return parts[0]
    if len(parts) == 1:
        return "tessera"
    if parts[1] == "backends" and len(parts) > 2:
        return f"backends.{parts[2]}"
    return parts[1]


def all_imports(root: Path = ROOT) -> list[Import]:
    files = list(source_files(root))
    known = {m for m, _ in files}
    return [imp for m, p in files for imp in imports_of(m, p, known)]


def violations(imports: list[Import]) -> list[Import]:
    return [i for i in imports
            if not may_import(package_of(i.module), package_of(i.target))
            and (i.module, i.target) not in REEXPORTS]


def local_imports(imports: list[Import]) -> list[Import]:
    """Function-local imports of project modules, one per import statement and target."""
    return [i for i in imports if i.local]


# -- tests ---------------------------------------------------------------------------------------

def test_every_package_has_a_layer() -> None:
    imports = all_imports()
    packages = {package_of(i.module) for i in imports} | {package_of(i.target) for i in imports}
    unknown = sorted(p for p in packages
                     if p not in LAYER_OF and p not in PLUGIN_PACKAGES
                     and not p.startswith("backends."))
    assert not unknown, f"packages without a layer in docs/architecture.md: {unknown}"


def test_imports_point_down() -> None:
    found = [i for i in violations(all_imports()) if (i.module, i.target) not in ALLOWED]
    assert not found, "imports against the layering (docs/architecture.md):\n" + "\n".join(
        f"  {i.where} ({package_of(i.module)} may not import {package_of(i.target)})"
        for i in found)


def test_allow_list_has_no_stale_entries() -> None:
    present = {(i.module, i.target) for i in violations(all_imports())}
    stale = sorted(set(ALLOWED) - present)
    assert not stale, f"ALLOWED entries that no longer occur (remove them): {stale}"


def test_function_local_imports_only_go_down() -> None:
    count = len(local_imports(all_imports()))
    print(f"function-local imports of project modules: {count} (ceiling "
          f"{LOCAL_IMPORT_CEILING})")
    assert count <= LOCAL_IMPORT_CEILING, (
        f"{count} function-local imports of project modules, more than the ceiling "
        f"{LOCAL_IMPORT_CEILING}: import at module level (a cycle is a design bug, see "
        f"docs/architecture.md)")


def test_each_function_local_import_says_why() -> None:
    silent = [i for i in local_imports(all_imports()) if not i.reason]
    assert not silent, (f"function-local imports without a '{LOCAL_REASON} <why>' comment on "
                        "their line or the line above (or import at module level):\n" +
                        "\n".join(f"  {i.where}" for i in silent))


def test_reexports_only_reexport() -> None:
    """Each module of REEXPORTS imports its new module and nothing else of the project."""
    imports = all_imports()
    for old, new in REEXPORTS:
        assert {i.target for i in imports if i.module == old} == {new}, old


def test_the_checker_sees_both_kinds_of_import(tmp_path: Path) -> None:
    pkg = tmp_path / "core" / "tessera" / "ir"
    pkg.mkdir(parents=True)
    (tmp_path / "plugins").mkdir()
    (tmp_path / "core" / "tessera" / "__init__.py").write_text("")
    (tmp_path / "core" / "tessera" / "ops.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "graph.py").write_text("from tessera.errors import IRError\n"
                                  "def f():\n    from tessera import ops\n"
                                  "def g():\n    # local import: a reason\n"
                                  "    from tessera import ops\n")
    imports = all_imports(tmp_path)
    assert [(i.module, i.target, i.local, i.reason) for i in imports] == [
        ("tessera.ir.graph", "tessera.errors", False, ""),
        ("tessera.ir.graph", "tessera.ops", True, ""),
        ("tessera.ir.graph", "tessera.ops", True, "a reason")]
    assert [i.target for i in violations(imports)] == ["tessera.ops", "tessera.ops"]


if __name__ == "__main__":
    imps = all_imports()
    bad = violations(imps)
    for i in bad:
        mark = "allowed" if (i.module, i.target) in ALLOWED else "VIOLATION"
        print(f"{mark:9} {i.where}{' (local)' if i.local else ''}")
    for i in local_imports(imps):
        print(f"local     {i.where}: {i.reason or 'NO REASON GIVEN'}")
    print(f"{len(bad)} against the layering, {len(local_imports(imps))} function-local",
          file=sys.stderr)
