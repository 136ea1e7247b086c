"""The kit's symbolic-shapes check (:func:`tessera.testing.kit.check_symbolic_shapes`): it
passes for Tessera's CPU backends and a third-party backend on a device of its own, and fails
for a backend that is wrong at one size, or that ran none of its models' nodes."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from toy_backends import ToyBackend

from tessera.partition.patterns import Pattern
from tessera.plugin.backend import CompiledRegion, CompileOptions
from tessera.plugin.manager import get_backends
from tessera.plugin.target import TargetKind
from tessera.testing.kit import check_symbolic_shapes, register_backend
from tessera.testing.kit.symbolic import SIZES

CPU = ["ref"] + (["llvm"] if "llvm" in get_backends() else [])


@pytest.mark.parametrize("target", CPU)
def test_tesseras_cpu_backends_pass(target: str) -> None:
    result = check_symbolic_shapes(target)
    assert result.backend == target and all(result.nodes_per_size)
    assert (result.compiles, result.hits) == (len(SIZES), len(SIZES))
    assert result.split_nodes > 0  # the plan's compiled parts ran on it
    assert f"backend {target!r}: ran" in str(result)


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


def test_a_backend_that_ran_nothing_fails() -> None:
    with register_backend(ToyBackend("idlenpu", _ops("Conv"))), \
            pytest.raises(AssertionError, match="ran none of the kit model's nodes"):
        check_symbolic_shapes("idlenpu, ref")
