"""The kit's symbolic-shapes check (:func:`tessera.testing.kit.check_symbolic_shapes`): it
passes for Tessera's CPU backends, a third-party backend on a device of its own and a
Conv-only NPU (the kit's convolution models, and models of its own), and fails for a backend
that is wrong at one size, or that ran none of the nodes of any model (with the reasons it
declined them)."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import pytest
from conv_npu import ConvNPU
from onnx import TensorProto, helper, numpy_helper
from toy_backends import ToyBackend

from tessera.errors import TesseraError
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import CompiledRegion, CompileOptions
from tessera.plugin.manager import get_backends
from tessera.plugin.target import TargetKind
from tessera.testing.kit import SymbolicModel, check_symbolic_shapes, register_backend
from tessera.testing.kit.symbolic import SIZES

CPU = ["ref"] + (["llvm"] if "llvm" in get_backends() else [])


@pytest.mark.parametrize("target", CPU)
def test_tesseras_cpu_backends_pass(target: str) -> None:
    result = check_symbolic_shapes(target)
    assert result.backend == target and all(result.nodes_per_size)
    assert [c.model for c in result.checks] == ["kit_encoder", "kit_cache_step", "kit_conv",
                                                "kit_conv_step"]
    for check in result.checks:
        assert all(check.nodes), check  # the plans' compiled parts ran on it too
        if check.split:
            continue
        # ref and llvm take symbolic extents (convolutions and pooling over run-time image
        # sizes too): one compile for every size
        assert check.symbolic and (check.compiles, check.hits) == (1, 0), check
        assert not check.refused, check
    assert result.split_nodes > 0 and not result.skipped
    assert str(result).startswith(f"backend {target!r}: kit_encoder: ran")


def _ops(*ops: str) -> list[Pattern]:
    return [Pattern(op) for op in ops]


def test_a_third_party_backend_on_its_own_device_passes() -> None:
    toy = ToyBackend("toynpu", _ops("MatMul", "Add", "Relu", "Exp"), device="toynpu")
    with register_backend(toy):
        result = check_symbolic_shapes("toynpu, ref")
    assert result.backend == "toynpu" and all(result.nodes_per_size)
    assert result.split_nodes > 0
    # one region per size it met, and those of the split plan's compiled parts
    assert {tuple(r.inputs[0].type.shape) for r in toy.compiled_regions} >= \
        {(b, s, 8) for b, s in SIZES}


class _WrongAboveBatchOne(ToyBackend):
    """Right at a batch of 1, wrong above: what a kernel that bakes one size computes."""

    def compile(self, region: Any, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        compiled = super().compile(region, target, options)
        shape = region.inputs[0].type.shape
        if shape and shape[0] > 1:
            def wrong(run: Any) -> Any:
                def fn(ins: list[Any], outs: list[Any]) -> None:
                    run(ins, outs)
                    outs[0][...] = np.asarray(outs[0]) + 1
                return fn
            compiled.kernels[:] = [dataclasses.replace(k, fn=wrong(k.fn))
                                   for k in compiled.kernels]
        return compiled


def test_a_backend_wrong_at_one_size_fails() -> None:
    with register_backend(_WrongAboveBatchOne("wrongnpu", _ops("Relu"))), \
            pytest.raises(AssertionError, match="batch=2, seq=5"):
        check_symbolic_shapes("wrongnpu, ref")


def test_a_backend_that_claims_no_op_of_the_kit_models_and_brings_none_fails() -> None:
    with register_backend(ToyBackend("idlenpu", _ops("Gemm"))), \
            pytest.raises(AssertionError, match="claims none of the ops of the kit's models.*"
                          "no models of its own were given"):
        check_symbolic_shapes("idlenpu, ref")


# -- a Conv-only NPU (tests/conv_npu.py) --------------------------------------------------------

def test_a_conv_only_npu_is_checked_with_the_kit_convolution_models() -> None:
    npu = ConvNPU()
    with register_backend(npu):
        result = check_symbolic_shapes("convnpu")
    assert [c.model for c in result.checks] == ["kit_conv", "kit_conv_step"]
    assert result.skipped == ("kit_encoder", "kit_cache_step")  # no op of them it claims
    conv, step = result.checks
    assert conv.nodes == (2, 2, 2) and (conv.compiles, conv.hits) == (3, 3)
    assert step.split and step.nodes == (1,)  # the split plan's compiled part: its Conv
    assert all(result.nodes_per_size) and result.split_nodes == 1
    assert npu.calls == 2 * 3 * 2 + 3  # its own kernels ran: each size twice, each step once
    assert "height=11, width=7" in str(result)


def _pointwise_model() -> onnx.ModelProto:
    """A pointwise (1x1) convolution block, ``x: float32[n, 6, h, w]``: Conv, Relu, Conv."""
    rng = np.random.default_rng(11)
    inits = [numpy_helper.from_array(rng.standard_normal(shape).astype(np.float32), name)
             for name, shape in (("w1", (5, 6, 1, 1)), ("b1", (5,)), ("w2", (4, 5, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Conv", ["r", "w2"], ["y"])]
    graph = helper.make_graph(
        nodes, "vendor_pointwise",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 6, "h", "w"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 4, "h", "w"])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_a_backend_that_declines_every_node_fails_with_its_reason() -> None:
    with register_backend(ConvNPU("pointnpu", kernel=(1, 1))), \
            pytest.raises(AssertionError, match=r"ran none of the nodes of the models checked.*"
                          r"kit_conv: ops Conv, GlobalAveragePool, MaxPool, Relu.*it declined "
                          r"Conv: only 1x1 kernels \(this one is 3x3\)"):
        check_symbolic_shapes("pointnpu")


def test_a_backend_passes_with_models_of_its_own() -> None:
    npu = ConvNPU("pointnpu", kernel=(1, 1))
    own = SymbolicModel(_pointwise_model(), ({"n": 1, "h": 4, "w": 6}, {"n": 3, "h": 7, "w": 5}))
    with register_backend(npu):
        result = check_symbolic_shapes("pointnpu", models=[own, _pointwise_model()])
    by_model = [(c.model, c.nodes) for c in result.checks]
    # the kit's 3x3 convolutions it declined; its own model, at the given and default sizes
    assert by_model == [("kit_conv", (0, 0, 0)), ("kit_conv_step", (0,)),
                        ("vendor_pointwise", (2, 2)), ("vendor_pointwise", (2, 2, 2))]
    assert npu.calls == 2 * 2 * 2 + 2 * 3 * 2
    assert "n=3, h=5, w=8" in str(result)  # default sizes: each variable a different value


def _pointwise(node: Any) -> bool:
    return tuple(node.inputs[1].type.shape[2:]) == (1, 1)


def test_a_model_of_its_own_wrong_at_one_size_fails() -> None:
    # it claims only 1x1 convolutions: the kit's 3x3 ones run on ref, its own model does not
    with register_backend(_WrongAboveBatchOne("wrongnpu", [Pattern("Conv", check=_pointwise)])), \
            pytest.raises(AssertionError, match="vendor_pointwise, output 'y' at n=3, h=7, w=5"):
        check_symbolic_shapes("wrongnpu, ref", models=[SymbolicModel(
            _pointwise_model(), ({"n": 1, "h": 4, "w": 6}, {"n": 3, "h": 7, "w": 5}))])


def test_bad_models_are_tessera_errors_naming_what_was_expected() -> None:
    with register_backend(ConvNPU()):
        with pytest.raises(TesseraError, match=r"models=\.\.\.\)\[0\]: expected a "
                           r"tessera.testing.kit.SymbolicModel or an onnx.ModelProto, got str"):
            check_symbolic_shapes("convnpu", models=["pointwise.onnx"])
        with pytest.raises(TesseraError, match="expected a list of SymbolicModel"):
            check_symbolic_shapes("convnpu", models=_pointwise_model())  # type: ignore[arg-type]
        with pytest.raises(TesseraError, match="backend 'llvm' is not in target 'convnpu'"):
            check_symbolic_shapes("convnpu", backend="llvm")
    with pytest.raises(TesseraError, match=r"sizes\[1\] gives no size for w; expected every "
                       r"one of n, h, w"):
        SymbolicModel(_pointwise_model(), ({"n": 1, "h": 4, "w": 6}, {"n": 3, "h": 7}))
    with pytest.raises(TesseraError, match="symbolic_dims names batch, not variables"):
        SymbolicModel(_pointwise_model(), ({"n": 1, "h": 4, "w": 6},), symbolic_dims=("batch",))
    with pytest.raises(TesseraError, match="expected a mapping of n, h, w to positive ints"):
        SymbolicModel(_pointwise_model(), ({"n": 0, "h": 4, "w": 6},))
