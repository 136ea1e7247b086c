"""Shape-only nodes (Reshape, Flatten, Squeeze, Unsqueeze) follow their data.

A convolution NPU whose memory the host cannot read claims Conv, Relu, Concat (allowing the
runtime to place the concatenated tensors in place, ``Kernel.concat_offsets``) and the
shape-only ops, on a SqueezeNet-like graph (pooling and the softmax run elsewhere). A Flatten
after a CPU pooling stays on the CPU instead of a round trip through the NPU; a Reshape
between two NPU convolutions that a GPU listed first in the target claimed runs on the NPU.
Each through ``tessera.compile``, its partition report, and the outputs against onnx's
reference. The light SqueezeNet's region and copy counts are those the guide quotes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import tessera
from tessera.ir.graph import Function, Node
from tessera.ops.registry import get_schema
from tessera.plugin import Backend, CompiledRegion, CompileOptions, Kernel, Pattern
from tessera.plugin.backend import contiguous_concat_offsets
from tessera.plugin.target import TargetKind
from tessera.testing.kit import register_backend
from tessera.testing.light_models import load_light_model
from tessera.testing.opaque import OpaqueDevice

VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
RNG = np.random.default_rng(46)


class DeviceBackend(Backend):
    """Runs the ops it is given with the registry's reference, inside an opaque device (its
    buffers are handles numpy cannot read; only the device's own kernels see the bytes)."""

    default_rank = -1

    def __init__(self, name: str, ops: tuple[str, ...]):
        self.name = name
        self.memory = OpaqueDevice(name)
        self.device = name
        self.ops = ops

    def device_api(self) -> OpaqueDevice:
        return self.memory

    def claims(self, target: TargetKind) -> list[Pattern]:
        return [Pattern(op) for op in self.ops]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        constants = {v.name: self.memory.from_host(np.asarray(v.data))
                     for v in region.constants()}
        kernels = [self._kernel(node) for node in region.nodes]
        return CompiledRegion(self.name, region, kernels, tensors, constants)

    def _kernel(self, node: Node) -> Kernel:
        ins = [v for v in node.inputs if v is not None]
        if node.op in VIEWS:  # the same bytes under the output's shape
            ins = ins[:1]
            fn: Callable[..., None] = _same_bytes
        else:
            fn = _reference(node)
        offsets = (contiguous_concat_offsets([v.type for v in ins], node.outputs[0].type)
                   if node.op == "Concat" else None)
        memory = self.memory

        def run(inputs: list[Any], outputs: list[Any]) -> None:
            memory.launch(fn, inputs, outputs)

        return Kernel(node.name, run, [v.name for v in ins], [o.name for o in node.outputs],
                      node.op, concat_offsets=offsets)


def _same_bytes(x: np.ndarray, out: np.ndarray) -> None:
    np.copyto(out, x.reshape(out.shape))


def _reference(node: Node) -> Callable[..., None]:
    schema = get_schema(node.op)

    def fn(*arrays: np.ndarray) -> None:
        *ins, out = arrays
        np.copyto(out, schema.evaluate(list(ins), node.attrs)[0])

    return fn


def _conv(name: str, x: str, cin: int, cout: int, k: int, nodes: list, inits: list) -> str:
    w = RNG.standard_normal((cout, cin, k, k)).astype(np.float32) * np.float32(0.3)
    b = RNG.standard_normal(cout).astype(np.float32) * np.float32(0.1)
    inits += [numpy_helper.from_array(w, f"{name}_w"), numpy_helper.from_array(b, f"{name}_b")]
    nodes += [helper.make_node("Conv", [x, f"{name}_w", f"{name}_b"], [f"{name}_c"],
                               name=name, pads=[k // 2] * 4),
              helper.make_node("Relu", [f"{name}_c"], [f"{name}_r"], name=f"{name}_relu")]
    return f"{name}_r"


def squeezenet_like() -> onnx.ModelProto:
    """conv1 -> MaxPool -> a fire module (squeeze 1x1; expand 1x1 and 3x3; Concat) ->
    Reshape -> conv10 -> GlobalAveragePool -> Flatten -> Softmax."""
    nodes: list = []
    inits: list = []
    x = _conv("conv1", "x", 3, 16, 3, nodes, inits)
    nodes.append(helper.make_node("MaxPool", [x], ["pool1"], name="pool1", kernel_shape=[2, 2],
                                  strides=[2, 2]))
    s = _conv("fire_squeeze", "pool1", 16, 8, 1, nodes, inits)
    e1 = _conv("fire_e1", s, 8, 16, 1, nodes, inits)
    e3 = _conv("fire_e3", s, 8, 16, 3, nodes, inits)
    nodes.append(helper.make_node("Concat", [e1, e3], ["fire"], name="fire_concat", axis=1))
    inits.append(numpy_helper.from_array(np.array([1, 32, 32, 2], np.int64), "rows"))
    nodes.append(helper.make_node("Reshape", ["fire", "rows"], ["fire_rows"], name="rows"))
    c10 = _conv("conv10", "fire_rows", 32, 10, 1, nodes, inits)
    nodes += [helper.make_node("GlobalAveragePool", [c10], ["gap"], name="gap"),
              helper.make_node("Flatten", ["gap"], ["flat"], name="flatten"),
              helper.make_node("Softmax", ["flat"], ["y"], name="softmax")]
    graph = helper.make_graph(
        nodes, "squeezenet_like",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def npu() -> Iterator[DeviceBackend]:
    backend = DeviceBackend("convnpu", ("Conv", "Relu", "Concat", *VIEWS))
    with register_backend(backend):
        yield backend


def _compile_and_check(target: str) -> tuple[tessera.Module, Any]:
    model = squeezenet_like()
    x = RNG.standard_normal((1, 3, 16, 16)).astype(np.float32)
    mod = tessera.compile(model, target=target)
    expected = ReferenceEvaluator(model).run(None, {"x": x})[0]
    np.testing.assert_allclose(mod.run(x=x)["y"], expected, rtol=1e-5, atol=1e-6)
    return mod, mod.partition_report()


def test_a_flatten_after_a_cpu_pooling_stays_on_the_cpu(npu: DeviceBackend) -> None:
    mod, report = _compile_and_check("convnpu")
    # claimed by priority, the Flatten would run on the NPU between two CPU nodes: 6 regions,
    # 6 copies (gap to the NPU and flat back among them)
    assert len(report.regions) == 4, report.table()
    assert len(report.copies) == 4, report.table()
    host = [r for r in report.regions if r.device == "cpu"][-1]
    assert host.ops == ["GlobalAveragePool", "Reshape", "Softmax"]
    # (the graph passes write the Flatten as a Reshape)
    [(name, op, claimed, runs)] = report.placed
    assert name.startswith("flatten") and (op, claimed, runs) == ("Reshape", "convnpu",
                                                                   host.backend)
    npu_nodes = [n for r in report.regions if r.backend == "convnpu" for n in r.nodes]
    assert {"fire_concat", "rows"} <= set(npu_nodes)  # the Reshape of NPU data stays there
    assert "placed with their data" in report.table()
    assert npu.memory.stats.kernels > 0 and npu.memory.stats.device_to_host == 2


def test_a_reshape_between_npu_convolutions_runs_on_the_npu(npu: DeviceBackend) -> None:
    gpu = DeviceBackend("gpu", ("MaxPool", "GlobalAveragePool", "Softmax", *VIEWS))
    with register_backend(gpu):
        mod, report = _compile_and_check("gpu, convnpu")
    # the GPU, first in the target, claimed the Reshape of the fire module's output: a copy
    # to the GPU and one back to the NPU for conv10, unless it runs where its data is
    assert ("rows", "Reshape", "gpu", "convnpu") in report.placed, report.table()
    assert not any(c.value.startswith("fire") for c in report.copies), report.table()
    # the Flatten of the GPU's pooling stays on the GPU, which claimed it
    assert [r.ops for r in report.regions if r.backend == "gpu"][-1] == \
        ["GlobalAveragePool", "Reshape", "Softmax"]
    assert len(report.regions) == 4 and len(report.copies) == 5, report.table()
    assert not report.fallback


def test_a_view_of_a_model_input_stays_with_the_backend_that_claimed_it(
        npu: DeviceBackend) -> None:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 12])
    graph = helper.make_graph([helper.make_node("Flatten", ["x"], ["y"], name="flat")],
                              "flat", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, target="convnpu")
    report = mod.partition_report()
    assert [r.backend for r in report.regions] == ["convnpu"] and not report.placed
    data = RNG.standard_normal((2, 3, 4)).astype(np.float32)
    np.testing.assert_array_equal(mod.run(x=data)["y"], data.reshape(2, 12))


def test_squeezenet_keeps_its_fire_modules_on_an_npu_that_claims_concat() -> None:
    """What docs/writing-a-backend.md says: 20 regions and 28 copies on a Conv + Relu NPU,
    8 and 8 once it claims Concat (the pooling layers remain on the CPU)."""
    model = load_light_model("light_squeezenet").model
    counts = []
    for ops in (("Conv", "Relu"), ("Conv", "Relu", "Concat", *VIEWS)):
        with register_backend(DeviceBackend("convnpu", ops)):
            report = tessera.compile(model, target="convnpu").partition_report()
        counts.append((len(report.regions), len(report.copies)))
    assert counts == [(20, 28), (8, 8)]
