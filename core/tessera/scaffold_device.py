"""The files ``tessera new-plugin NAME --own-device`` writes in place of the host-memory
backend's: a device whose memory the host cannot read, a backend on it with packed constants,
view ops and a concatenation the runtime may elide, a test of the device and a README (the
other files, ``tests/test_backend.py`` among them, are the host-memory backend's).

The device (``tessera_NAME/device.py``) keeps its memory in a private store of byte blocks and
gives Tessera handles numpy cannot read, so every tensor that crosses between the host and it
goes through the copies the runtime inserts, as on real hardware; a vendor replaces the store
with driver calls. Templates for ``str.format``: ``{name}`` (the backend), ``{cls}`` (its
class), ``{prefix}`` (the class names' stem); literal braces are doubled.
"""

DEVICE = '''\
"""The {name} device: memory of its own, which the host cannot read.

Tessera plans one arena per execution state on the device, asks it for buffers at planned
offsets (``view``), and moves tensors across with ``copy_from_host`` and ``copy_to_host``
(the copies it inserts between regions of different devices); it never reads a buffer
itself. Here the memory is a private store of byte blocks standing in for a driver: a buffer
is a handle (block, offset, type) that numpy refuses to read, and only the device's own
kernels (``run``) see the bytes. On hardware, each method is one driver call: ``allocate`` a
device malloc, ``copy_from_host`` a host-to-device copy, ``run`` a kernel launch.
"""

from __future__ import annotations

import threading
import weakref
from collections import Counter
from collections.abc import Callable
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.types import TensorType
from tessera.plugin import Device

#: A kernel as the device runs it: its input arrays and its output arrays, written in place.
DeviceKernel = Callable[[list[np.ndarray], list[np.ndarray]], None]


class Handle:
    """A tensor in device memory: a block of the store, a byte offset and a type."""

    __slots__ = ("block", "offset", "type", "__weakref__")

    def __init__(self, block: int, offset: int, type: TensorType):
        self.block = block
        self.offset = offset
        self.type = type

    def __array__(self, *args: Any, **kwargs: Any) -> np.ndarray:
        raise TypeError(f"{{self!r}} is in {name} memory, which the host cannot read; copy "
                        f"it to the host through the device")

    def __repr__(self) -> str:
        return f"<{name} buffer: block {{self.block}} +{{self.offset}} {{self.type}}>"


class {prefix}Device(Device):
    name = "{name}"
    alignment = 256       # every planned buffer starts at a multiple of it
    host_memory = False   # buffers are handles: Tessera copies through the methods below

    def __init__(self) -> None:
        self._blocks: dict[int, bytearray] = {{}}
        self._next = 0
        self._lock = threading.Lock()
        #: what the runtime asked for: "to_device", "to_host", "on_device" copies, "kernels"
        self.counts: Counter[str] = Counter()

    def _count(self, what: str) -> None:
        with self._lock:
            self.counts[what] += 1

    # -- memory -----------------------------------------------------------------------------
    def allocate(self, nbytes: int) -> int:
        with self._lock:
            self._next += 1
            self._blocks[self._next] = bytearray(max(nbytes, 1))
            return self._next

    def free(self, arena: int) -> None:
        with self._lock:
            if self._blocks.pop(arena, None) is None:
                raise RunError(f"{name}: arena {{arena}} freed twice or never allocated")

    def view(self, arena: int, offset: int, type: TensorType) -> Handle:
        if offset % self.alignment or offset + type.nbytes > len(self._blocks[arena]):
            raise RunError(f"{name}: {{type}} at byte {{offset}} is misaligned or outside arena "
                           f"{{arena}}")
        return Handle(arena, offset, type)

    def from_host(self, array: np.ndarray) -> Handle:
        """A constant's buffer: a block of its own, freed when the handle is dropped (with
        the compiled region that holds it)."""
        data = np.ascontiguousarray(array)
        handle = Handle(self.allocate(data.nbytes), 0, TensorType(data.shape, str(data.dtype)))
        self._array(handle)[...] = data
        weakref.finalize(handle, self._blocks.pop, handle.block, None)
        return handle

    # -- copies -----------------------------------------------------------------------------
    def copy_from_host(self, buffer: Handle, array: np.ndarray) -> None:
        self._count("to_device")
        np.copyto(self._array(buffer), array, casting="no")

    def copy_to_host(self, buffer: Handle, out: np.ndarray) -> None:
        self._count("to_host")
        np.copyto(out, self._array(buffer), casting="no")

    def copy(self, dst: Handle, src: Handle, type: TensorType) -> None:
        self._count("on_device")
        np.copyto(self._array(dst), self._array(src))

    # -- kernels ----------------------------------------------------------------------------
    def run(self, kernel: DeviceKernel, ins: list[Handle], outs: list[Handle]) -> None:
        """Run ``kernel`` on the device's own arrays of the buffers ``ins`` and ``outs``."""
        self._count("kernels")
        kernel([self._array(b) for b in ins], [self._array(b) for b in outs])

    def _array(self, buffer: Handle) -> np.ndarray:
        if not isinstance(buffer, Handle):
            raise RunError(f"{name}: {{type(buffer).__name__}} is not a buffer of this device")
        t = buffer.type
        return np.frombuffer(self._blocks[buffer.block], dtype=t.dtype.numpy, count=t.size,
                             offset=buffer.offset).reshape(t.shape)
'''

BACKEND = '''\
"""The {name} backend: which nodes it claims, and how it compiles a region into kernels that
run on its own device (``device.py``), whose memory the host cannot read.

Tessera inserts a copy wherever a tensor crosses between the host and the device, and hands
the kernels device buffers (handles); a kernel asks the device to run it on its own arrays.

Constants are *packed*: each goes to the device in the form its kernel reads (a MatMul's
constant weight transposed, one row per output column), ``save`` keeps exactly those arrays,
and ``keeps_constants`` names the constants they replace, so the artifact stores each weight
once, packed, and ``load`` uploads it without the graph's copy.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tessera.errors import CompileError
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.plugin import Backend, CompiledRegion, CompileOptions, Kernel
from tessera.plugin.artifact_files import ArtifactFiles
from tessera.plugin.backend import contiguous_concat_offsets
from tessera.plugin.patterns import Pattern, PatternMatch, region_matches
from tessera.plugin.target import TargetKind

from tessera_{name}.device import DeviceKernel, {prefix}Device

#: Single ops this backend runs: op name -> a function of the input arrays giving the output.
OPS: dict[str, Callable[..., np.ndarray]] = {{
    "Relu": lambda x: np.maximum(x, 0),
}}

#: Ops that only give their first input's bytes a new shape (Tessera inferred it): one copy
#: on the device runs them all, and reshaped data stays on the device. One that reads data
#: the host computed runs on the host instead when that saves copies.
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")


def _float32(node: Node) -> bool:
    return all(v is None or v.type.dtype.value == "float32" for v in node.inputs)


def _constant_weight(node: Node) -> bool:
    weight = node.inputs[1]
    return _float32(node) and weight.is_constant and weight.type.ndim == 2


#: Fused composites: pattern name -> (the pattern, a function of the inputs of its nodes).
FUSED: dict[str, tuple[Pattern, Callable[..., np.ndarray]]] = {{
    "AddRelu": (Pattern("Relu", inputs=[Pattern("Add", check=_float32)], check=_float32,
                        name="AddRelu"),
                lambda a, b: np.maximum(a + b, 0)),
}}
#: A MatMul by a constant matrix, which its kernel reads packed (transposed).
MATMUL_PACKED = Pattern("MatMul", check=_constant_weight, name="MatMulPacked")

#: A packed constant's key: the constant's name and this suffix.
PACKED = ".packed"
#: The saved region: kernels.json (the kernel table, the tensor types) and the packed
#: constants as arrays, which the artifact stores once each.
ARTIFACT = ArtifactFiles("kernels.json", keys=("kernels", "tensors"))
#: The one device object every backend on the {name} device returns.
DEVICE = {prefix}Device()


@dataclass
class Compiled:
    """What ``save`` needs: the kernel table and the packed constants, on the host."""

    table: list[dict[str, Any]]
    packed: dict[str, np.ndarray]


class {cls}(Backend):
    name = "{name}"
    device = "{name}"
    #: the version of what save() writes; change it when load() cannot read older files
    artifact_version = "1"

    def available(self) -> str | None:
        return None  # or the reason it cannot run here (no device, no driver)

    def device_api(self) -> {prefix}Device:
        return DEVICE

    def claims(self, target: TargetKind) -> list[Pattern]:
        fused = [pattern for pattern, _ in FUSED.values()]
        return (fused + [MATMUL_PACKED] + [Pattern(op, check=_float32) for op in OPS]
                + [Pattern(op) for op in (*VIEWS, "Concat")])

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        table = [_entry(match) for match in region_matches(region)]
        constants = {{v.name: v.data for v in region.constants()}}
        packed = {{}}
        for entry in table:
            for name in entry["inputs"]:
                if name.endswith(PACKED):  # a MatMul weight, one row per output column
                    packed[name] = np.ascontiguousarray(constants[name[:-len(PACKED)]].T)
                elif name in constants:
                    packed[name] = np.ascontiguousarray(constants[name])
        return self._assemble(region, Compiled(table, packed), options)

    def _assemble(self, region: Function, compiled: Compiled,
                  options: CompileOptions) -> CompiledRegion:
        device = self.device_instance(options)
        tensors = {{v.name: v.type for v in region.inputs}}
        for node in region.nodes:
            tensors.update({{o.name: o.type for o in node.outputs}})
        kernels = [_kernel(entry, device, tensors) for entry in compiled.table]
        on_device = {{name: device.from_host(array) for name, array in compiled.packed.items()}}
        return CompiledRegion(self.name, region, kernels, tensors, on_device,
                              info={{"kernels": len(kernels)}}, handle=compiled)

    def save(self, compiled: CompiledRegion) -> dict[str, bytes | np.ndarray]:
        held = ARTIFACT.handle(self, compiled, Compiled)
        return ARTIFACT.save(self, {{"kernels": held.table}}, {{}}, held.packed, compiled.tensors)

    def keeps_constants(self, compiled: CompiledRegion) -> list[str]:
        """The constants ``save`` keeps packed: the artifact holds no other copy of them."""
        held = compiled.handle
        if not isinstance(held, Compiled):
            return []
        names = {{v.name for v in compiled.region.constants()}}
        return sorted(names & {{key.removesuffix(PACKED) for key in held.packed}})

    def load(self, region: Function, files: dict[str, bytes | np.ndarray], target: TargetKind,
             options: CompileOptions) -> CompiledRegion:
        # the region's kept constants are *held* here: reading their data would raise
        saved = ARTIFACT.load(self, region.name, files)
        return self._assemble(region, Compiled(saved.table["kernels"], saved.constants),
                              options)


def _entry(match: PatternMatch) -> dict[str, Any]:
    """One kernel of the table: its kind, input and output names (and a Concat's axis)."""
    root = match.root
    entry: dict[str, Any] = {{"name": root.name, "kernel": match.pattern,
                             "outputs": [o.name for o in root.outputs]}}
    if match.pattern in FUSED:
        # the composite's inputs: those of its nodes that come from outside it
        inside = {{o.name for n in match.nodes for o in n.outputs}}
        entry["inputs"] = [v.name for n in reversed(match.nodes) for v in n.inputs
                           if v is not None and v.name not in inside]
        return entry
    inputs = [v for v in root.inputs if v is not None]
    entry["inputs"] = [v.name for v in inputs]
    if match.pattern == MATMUL_PACKED.name:
        entry["inputs"] = [inputs[0].name, inputs[1].name + PACKED]
    elif root.op in VIEWS:
        entry.update(kernel="View", inputs=[inputs[0].name])
    elif root.op == "Concat":
        entry.update(kernel="Concat", axis=int(root.attrs["axis"]))
    elif root.op not in OPS:
        raise CompileError(f"{name}: node {{root.name}} ({{root.op}}) was not claimed by this "
                           f"backend")
    return entry


def _kernel(entry: dict[str, Any], device: {prefix}Device, tensors: dict[str, TensorType]
            ) -> Kernel:
    kind = entry["kernel"]
    offsets = None
    if kind == "View":
        fn: DeviceKernel = _same_bytes
    elif kind == "Concat":
        fn = _writes(lambda *xs: np.concatenate(xs, axis=entry["axis"]))
        # inputs that are contiguous ranges of the output: the runtime may place them there
        # and skip this kernel (not a constant: it is not planned memory)
        if all(n in tensors for n in entry["inputs"]):
            offsets = contiguous_concat_offsets([tensors[n] for n in entry["inputs"]],
                                                tensors[entry["outputs"][0]])
    elif kind == "MatMulPacked":
        fn = _writes(lambda x, w_packed: x @ w_packed.T)
    else:
        fn = _writes(FUSED[kind][1] if kind in FUSED else OPS[kind])

    def run(ins: list[Any], outs: list[Any]) -> None:
        device.run(fn, ins, outs)  # ins and outs are device handles; a kernel returns nothing

    return Kernel(entry["name"], run, entry["inputs"], entry["outputs"], op=kind,
                  concat_offsets=offsets)


def _writes(fn: Callable[..., np.ndarray]) -> DeviceKernel:
    """A device kernel writing ``fn`` of its inputs into its one output."""
    def kernel(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
        np.copyto(outs[0], fn(*ins), casting="same_kind")

    return kernel


def _same_bytes(ins: list[np.ndarray], outs: list[np.ndarray]) -> None:
    np.copyto(outs[0], ins[0].reshape(outs[0].shape))
'''

TEST_DEVICE = '''\
"""The {name} device through Tessera: memory the host cannot read, a model across the host and
the device with the copies counted, packed constants in an artifact. (test_backend.py checks
the declarations, the fused composite and symbolic shapes, as for any backend.)"""

import io
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.plugin import get_backend

W = np.linspace(-1, 1, 48, dtype=np.float32).reshape(8, 6)
B = np.linspace(-0.5, 0.5, 6, dtype=np.float32)


def _model() -> onnx.ModelProto:
    """Relu(x @ W + b) on the device, Exp of it on the host, both concatenated and reshaped
    on the device."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])
    inits = [numpy_helper.from_array(W, "w"), numpy_helper.from_array(B, "b"),
             numpy_helper.from_array(np.array([4, 6], np.int64), "shape")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["m"]),
             helper.make_node("Add", ["m", "b"], ["s"]), helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Concat", ["r", "e"], ["c"], axis=1),
             helper.make_node("Reshape", ["c", "shape"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    r = np.maximum(x @ W + B, 0)
    return np.concatenate([r, np.exp(r)], axis=1).reshape(4, 6)


def test_device_memory_is_not_the_hosts() -> None:
    backend = get_backend("{name}")
    device = backend.device_api()
    assert device.name == backend.device == "{name}" and not device.host_memory
    array = np.arange(6, dtype=np.float32).reshape(2, 3)
    buffer = device.from_host(array)
    with pytest.raises(TypeError, match="cannot read"):
        np.asarray(buffer)
    out = np.empty_like(array)
    device.copy_to_host(buffer, out)
    np.testing.assert_array_equal(out, array)


def test_model_runs_across_the_host_and_the_device(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((2, 8)).astype(np.float32)
    mod = tessera.compile(_model(), target="{name}")
    report = mod.partition_report()
    assert [r.device for r in report.regions] == ["{name}", "cpu", "{name}"]
    # x to the device, r to the host for Exp, e back for the Concat, y to the host
    assert len(report.copies) == 4
    kernels = {{k.op for r in mod.compiled.values() if r.backend == "{name}" for k in r.kernels}}
    assert {{"MatMulPacked", "AddRelu", "Concat", "View"}} <= kernels
    device = get_backend("{name}").device_api()
    before = dict(device.counts)
    np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-6)
    assert device.counts["to_device"] - before.get("to_device", 0) == 2
    assert device.counts["to_host"] - before.get("to_host", 0) == 2

    path = mod.export(tmp_path / "model.tar")
    np.testing.assert_allclose(tessera.load(path).run(x=x)["y"], _expected(x), rtol=1e-6)
    with tarfile.open(path) as tar:  # the weight is stored once, packed
        arrays = [np.load(io.BytesIO(tar.extractfile(m).read())) for m in tar.getmembers()
                  if m.name.endswith(".npy")]
    assert any(np.array_equal(a, W.T) for a in arrays)
    assert not any(a.shape == W.shape and np.array_equal(a, W) for a in arrays)
'''

README = '''\
# tessera-{name}

A [Tessera](https://example.invalid/tessera) backend plugin with a device of its own, made with
`tessera new-plugin {name} --own-device`.

```bash
pip install -e ".[test]"          # registers the backend (entry point); pytest for its tests
tessera plugins -v                 # lists {name}: device, options, what it claims
tessera compile model.onnx --target "{name}, llvm" -o model.tar
python -m pytest -q tests          # the backend test kit: contracts, model, conformance
```

- `tessera_{name}/device.py`: the device. Its memory is a private store the host cannot read
  (a buffer is a handle numpy refuses), so Tessera copies every tensor that crosses between
  the host and the device through `copy_from_host` and `copy_to_host`. Replace the store with
  your driver's calls: `allocate`/`free`, the copies, and `run`, which launches a kernel.
- `tessera_{name}/backend.py`: the backend. `OPS` maps each single op to a numpy function run
  on the device's arrays; `FUSED` holds composites (Add -> Relu); `VIEWS` (Reshape, Flatten,
  Squeeze, Unsqueeze) run as one copy of the same bytes, so reshaped data stays on the
  device; `Concat` sets `Kernel.concat_offsets`, so the runtime can place its inputs inside
  its output and skip it; a MatMul by a constant matrix reads the matrix packed.
- Packed constants: `compile` uploads each constant in the form its kernel reads, `save`
  returns those arrays (the artifact stores each once), `keeps_constants` names the
  constants they replace (the artifact keeps no other copy) and `load` uploads them again.
- `tests/`: `conftest.py` enables the kit (`tessera.testing.kit.pytest_plugin`) and registers
  the backend in-process when it is not installed; `test_backend.py` checks its
  declarations, a model with the composite fused and models with symbolic shapes;
  `test_device.py` runs a model across the host and the device, counts the copies, and
  checks the artifact holds the packed weight; `test_conformance.py` runs the ONNX node
  cases of `OPS` in claimed-only mode; `known_failures.txt` is its baseline.

See Tessera's `docs/writing-a-backend.md` for the contract (section 6: devices).
'''
