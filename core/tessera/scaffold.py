"""``tessera new-plugin NAME``: a complete backend package that installs and passes its tests.

The package (``tessera-NAME``, module ``tessera_NAME``) has a pyproject with the entry point, a
backend that claims one op (Relu) and one fused composite (Add -> Relu, compiled as one kernel
found through :func:`tessera.plugin.patterns.region_matches`), ``save``/``load`` of its kernel
table, tests that use the backend test kit (:mod:`tessera.testing.kit`) and a README. Adding an
op is one line of its ``OPS`` table.

With ``own_device`` (``--own-device``) the backend runs on a device of its own whose memory the
host cannot read, keeps its constants packed in the artifact, and claims view ops and Concat
(:mod:`tessera.scaffold_device` holds those files).
"""

from __future__ import annotations

import re
from pathlib import Path

from tessera import plugin, scaffold_device
from tessera._version import __version__
from tessera.errors import TesseraError

_NAME = re.compile(r"^[a-z][a-z0-9_]*$")

#: Names a new backend cannot take, whether or not anything is installed: target keywords, the
#: built-in backend, and the backends and distributions (``tessera-NAME``) of Tessera's own
#: plugins, which a package of that name would replace or shadow.
RESERVED = {
    "auto": "the target that picks the best installed CPU backend",
    "ref": "the built-in numpy reference backend",
    "tessera": "the compiler itself",
    "llvm": "Tessera's CPU backend (tessera-llvm, plugins/llvm)",
    "cuda": "Tessera's NVIDIA GPU backend (tessera-cuda, plugins/cuda)",
    "cudnn": "a backend of tessera-cudnn (plugins/cudnn)",
    "cublas": "a backend of tessera-cudnn (plugins/cudnn)",
    "vta": "the distribution tessera-vta (plugins/vta_sim)",
    "vta_sim": "the VTA simulator backend (tessera-vta, plugins/vta_sim)",
}


def name_taken(name: str) -> str | None:
    """Why ``name`` cannot be a new plugin's name, or None: a reserved word, the name of an
    installed backend, or a name whose distribution (``tessera-NAME``) or module
    (``tessera_NAME``) is installed, which the new package would replace."""
    import importlib.metadata as md
    import importlib.util

    if name in RESERVED:
        return f"{name!r} is reserved: {RESERVED[name]}"
    try:
        registry = plugin.get_registry()
        if name in registry.backends:
            return f"{name!r} is an installed backend (from {registry.owner(name)})"
    except Exception:  # noqa: BLE001 - a broken plugin must not stop the scaffold
        pass
    try:
        dist = md.distribution(f"tessera-{name}")
        return f"the distribution tessera-{name} {dist.version} is installed"
    except md.PackageNotFoundError:
        pass
    try:
        if importlib.util.find_spec(f"tessera_{name}") is not None:
            return f"a module tessera_{name} is installed"
    except (ImportError, ValueError):
        pass
    return None

PYPROJECT = '''\
[build-system]
requires = ["setuptools>=64"]
build-backend = "setuptools.build_meta"

[project]
name = "tessera-{name}"
version = "0.1.0"
description = "A Tessera backend plugin: {name}"
requires-python = ">=3.11"
dependencies = ["tessera>={tessera_version}"]

[project.optional-dependencies]
test = ["pytest>=8"]

[project.entry-points."tessera.backends"]
{name} = "tessera_{name}.plugin"

[tool.setuptools.packages.find]
include = ["tessera_{name}*"]
'''

INIT = '''\
"""The {name} backend for Tessera."""

from tessera_{name}.backend import {cls}

__all__ = ["{cls}"]
'''

PLUGIN = '''\
"""The entry point Tessera loads (``[project.entry-points."tessera.backends"]``)."""

from tessera.plugin import Backend, hookimpl

from tessera_{name}.backend import {cls}


@hookimpl
def tessera_backends() -> list[Backend]:
    return [{cls}()]
'''

BACKEND = '''\
"""The {name} backend: which nodes it claims, and how it compiles a region into kernels.

Its kernels are numpy functions on host memory, so its device is ``"cpu"``: tensors pass to
and from the CPU backends with no copies. A backend with memory of its own would name its own
device and return a ``tessera.plugin.Device`` for it from ``device_api()``.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import ArtifactError, CompileError
from tessera.ir.graph import Function, Node
from tessera.plugin import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.patterns import Pattern, region_matches
from tessera.plugin.target import TargetKind

#: Single ops this backend runs: op name -> a function of the input arrays giving the output.
OPS: dict[str, Callable[..., np.ndarray]] = {{
    "Relu": lambda x: np.maximum(x, 0),
}}

#: Fused composites: pattern name -> (the pattern, a function of the inputs of its nodes).
FUSED: dict[str, tuple[Pattern, Callable[..., np.ndarray]]] = {{}}


def _float32(node: Node) -> bool:
    return all(v is None or v.type.dtype.value == "float32" for v in node.inputs)


FUSED["AddRelu"] = (Pattern("Relu", inputs=[Pattern("Add", check=_float32)], check=_float32,
                            name="AddRelu"),
                    lambda a, b: np.maximum(a + b, 0))

KERNELS_FILE = "kernels.json"


class {cls}(Backend):
    name = "{name}"
    device = "cpu"
    #: the version of what save() writes; change it when load() cannot read older files
    artifact_version = "1"

    def available(self) -> str | None:
        return None  # or the reason it cannot run here (no device, no driver)

    def claims(self, target: TargetKind) -> list[Pattern]:
        fused = [pattern for pattern, _ in FUSED.values()]
        return fused + [Pattern(op, check=_float32) for op in OPS]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        table = []
        for match in region_matches(region):
            root = match.root
            if match.pattern in FUSED:
                # the composite's inputs: those of its nodes that come from outside it
                inside = {{o.name for n in match.nodes for o in n.outputs}}
                inputs = [v.name for n in reversed(match.nodes) for v in n.inputs
                          if v is not None and v.name not in inside]
            elif root.op in OPS:
                inputs = [v.name for v in root.inputs if v is not None]
            else:
                raise CompileError(f"{{self.name}}: node {{root.name}} ({{root.op}}) was not "
                                   f"claimed by this backend")
            table.append({{"name": root.name, "kernel": match.pattern if match.pattern in FUSED
                          else root.op, "inputs": inputs,
                          "outputs": [o.name for o in root.outputs]}})
        return self._assemble(region, table)

    def _assemble(self, region: Function, table: list[dict[str, Any]]) -> CompiledRegion:
        kernels = [_kernel(entry) for entry in table]
        tensors = {{v.name: v.type for v in region.inputs}}
        for node in region.nodes:
            tensors.update({{o.name: o.type for o in node.outputs}})
        constants = {{v.name: v.data for v in region.constants()}}
        return CompiledRegion(self.name, region, kernels, tensors, constants,
                              info={{"kernels": len(kernels)}}, handle=table)

    def save(self, compiled: CompiledRegion) -> dict[str, bytes]:
        return {{KERNELS_FILE: json.dumps(compiled.handle).encode()}}

    def load(self, region: Function, files: dict[str, bytes], target: TargetKind,
             options: CompileOptions) -> CompiledRegion:
        try:
            table = json.loads(files[KERNELS_FILE])
        except (KeyError, ValueError) as e:
            raise ArtifactError(f"{{self.name}} region {{region.name}}: unreadable "
                                f"{{KERNELS_FILE}}: {{e}}") from None
        return self._assemble(region, table)


def _kernel(entry: dict[str, Any]) -> Kernel:
    kind = entry["kernel"]
    fn = FUSED[kind][1] if kind in FUSED else OPS[kind]

    def run(ins: list[Any], outs: list[Any]) -> None:
        # write into the buffer the runtime gives; a kernel returns nothing
        np.copyto(outs[0], fn(*ins), casting="same_kind")

    return Kernel(entry["name"], run, entry["inputs"], entry["outputs"], op=kind)
'''

CONFTEST = '''\
"""The backend test kit: contract warnings are errors, per-backend node counts at the end."""

from tessera.plugin import get_registry
from tessera.testing.kit import register_backend

from tessera_{name} import {cls}

pytest_plugins = ["tessera.testing.kit.pytest_plugin"]

if "{name}" not in get_registry().backends:  # not pip-installed: register it in-process
    register_backend({cls}())
'''

TEST_BACKEND = '''\
"""The {name} backend through Tessera: declarations, a model, an artifact round trip."""

from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper

import tessera
from tessera.plugin import get_backend
from tessera.testing.kit import check_backend, check_symbolic_shapes


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes = [helper.make_node("Add", ["x", "b"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Exp", ["r"], ["e"]), helper.make_node("Relu", ["e"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.exp(np.maximum(x + np.linspace(-1, 1, 8, dtype=np.float32), 0)), 0)


def test_declarations() -> None:
    claims = check_backend(get_backend("{name}"))
    assert "AddRelu" in [p.name for p in claims]


def test_model_runs_with_the_composite_fused(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    mod = tessera.compile(_model(), target="{name}")
    ours = [r for r in mod.partition_report().regions if r.backend == "{name}"]
    assert sum(len(r.nodes) for r in ours) == 3  # Add + Relu fused, and the last Relu
    kernels = [k.op for r in mod.compiled.values() if r.backend == "{name}" for k in r.kernels]
    assert kernels.count("AddRelu") == 1
    np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-6)
    loaded = tessera.load(mod.export(tmp_path / "model.tar"))
    np.testing.assert_allclose(loaded.run(x=x)["y"], _expected(x), rtol=1e-6)


def test_models_with_symbolic_shapes() -> None:
    # compiled per size on first use, and as a split plan's compiled parts: right at each
    # size (the kit's models whose ops {name} claims; pass your own with models=[...])
    result = check_symbolic_shapes("{name}")
    assert any(all(check.nodes) for check in result.checks)  # ran at every size of one
'''

TEST_CONFORMANCE = '''\
"""ONNX node conformance, claimed-only: each case counts only if {name} ran some of its
nodes. Known failures: known_failures.txt (regenerate with
``python -m tessera.testing.conformance --target {name} --claimed-only
--write-known-failures tests/known_failures.txt``)."""

from pathlib import Path

import pytest

from tessera.testing.kit import NodeConformance
from tessera_{name}.backend import FUSED, OPS

SUITE = NodeConformance("{name}", ops=set(OPS),
                        baseline=Path(__file__).with_name("known_failures.txt"))


@pytest.mark.parametrize("case", SUITE.cases, ids=SUITE.ids)
def test_onnx_node(case) -> None:
    SUITE.check(case)


def test_claims_every_op_of_its_table() -> None:
    assert set(OPS) <= SUITE.expected_ops()
    assert "AddRelu" in FUSED
'''

KNOWN_FAILURES = '''\
# Known failures of the {name} backend in the ONNX node conformance cases (claimed-only).
# One case per line: `test_name  # reason`, under `## group` headers.
'''

README = '''\
# tessera-{name}

A [Tessera](https://example.invalid/tessera) backend plugin, made with `tessera new-plugin {name}`.

```bash
pip install -e ".[test]"          # registers the backend (entry point); pytest for its tests
tessera plugins -v                 # lists {name}: device, options, what it claims
tessera compile model.onnx --target "{name}, llvm" -o model.tar
python -m pytest -q tests          # the backend test kit: contracts, model, conformance
```

- `tessera_{name}/backend.py`: the backend. `OPS` maps each single op it runs to a numpy
  function (add a line to claim another op); `FUSED` holds composite patterns (Add -> Relu)
  compiled as one kernel, found in `compile` through `region_matches(region)`.
- `save`/`load` keep the kernel table in the artifact, so `tessera.load` does not re-match.
- `tests/`: `conftest.py` enables the kit (`tessera.testing.kit.pytest_plugin`) and registers
  the backend in-process when it is not installed; `test_conformance.py` runs the ONNX node
  cases of its ops in claimed-only mode and prints how many nodes it ran;
  `known_failures.txt` is its baseline.

See Tessera's `docs/writing-a-backend.md` for the contract.
'''


def _files(name: str, tessera_version: str, own_device: bool = False) -> dict[str, str]:
    prefix = "".join(part.capitalize() for part in name.split("_"))
    fields = {"name": name, "cls": prefix + "Backend", "prefix": prefix,
              "tessera_version": tessera_version}
    files = {
        "pyproject.toml": PYPROJECT.format(**fields),
        "README.md": README.format(**fields),
        f"tessera_{name}/__init__.py": INIT.format(**fields),
        f"tessera_{name}/plugin.py": PLUGIN.format(**fields),
        f"tessera_{name}/backend.py": BACKEND.format(**fields),
        "tests/conftest.py": CONFTEST.format(**fields),
        "tests/test_backend.py": TEST_BACKEND.format(**fields),
        "tests/test_conformance.py": TEST_CONFORMANCE.format(**fields),
        "tests/known_failures.txt": KNOWN_FAILURES.format(**fields),
    }
    if own_device:
        files.update({
            "README.md": scaffold_device.README.format(**fields),
            f"tessera_{name}/device.py": scaffold_device.DEVICE.format(**fields),
            f"tessera_{name}/backend.py": scaffold_device.BACKEND.format(**fields),
            "tests/test_device.py": scaffold_device.TEST_DEVICE.format(**fields),
        })
    return files


def new_plugin(name: str, directory: str | Path | None = None, force: bool = False,
               own_device: bool = False) -> Path:
    """Write the package ``tessera-NAME`` into ``directory`` (default ``./tessera-NAME``);
    returns its folder. Refuses a name that is taken (:func:`name_taken`) and an existing
    non-empty folder unless ``force``. ``own_device``: a backend on a device of its own (see
    the module doc)."""
    if not _NAME.match(name):
        raise TesseraError(f"plugin name {name!r}: expected a lower-case identifier such as "
                           f"'mynpu' (letters, digits, underscores; it becomes the target kind)")
    taken = name_taken(name)
    if taken:
        raise TesseraError(f"plugin name {name!r} is taken: {taken}; a package tessera-{name} "
                           f"would replace it. Choose another name, e.g. 'my_{name}'")
    root = Path(directory) if directory is not None else Path(f"tessera-{name}")
    if root.exists() and any(root.iterdir()) and not force:
        raise TesseraError(f"{str(root)!r} exists and is not empty; choose another --dir or "
                           f"pass --force")
    version = __version__.split("+")[0]
    for rel, text in _files(name, version, own_device).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root
