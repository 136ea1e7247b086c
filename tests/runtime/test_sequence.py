"""``CompiledRegion.bind_sequence``: the executor runs a region's kernels through one bound
call, profiles still call them one by one, and failures name the region."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import RunError
from tessera.runtime.module import Module


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 5])
    nodes = [helper.make_node("Relu", ["x"], ["r"]),
             helper.make_node("Exp", ["r"], ["e"]),
             helper.make_node("Neg", ["e"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


class Recorder:
    """A binder that runs the kernels in order and records what it was given."""

    def __init__(self, kernels: list[Any], fail_bind: bool = False, fail_run: bool = False):
        self.kernels = kernels
        self.fail_bind = fail_bind
        self.fail_run = fail_run
        self.bound: list[list[tuple[list[Any], list[Any]]]] = []
        self.runs = 0

    def __call__(self, calls: list[tuple[list[Any], list[Any]]]):
        if self.fail_bind:
            raise ValueError("no such buffer")
        self.bound.append(calls)

        def run() -> None:
            if self.fail_run:
                raise OSError("device lost")
            self.runs += 1
            for k, (ins, outs) in zip(self.kernels, calls):
                k.fn(ins, outs)

        return run


def _module(**kw: Any) -> tuple[Module, Recorder]:
    base = tessera.compile(_model(), target="ref")
    (name, cr), = base.compiled.items()
    rec = Recorder(cr.kernels, **kw)
    compiled = {name: dataclasses.replace(cr, bind_sequence=rec)}
    return Module(base.graph, compiled, base.backends, base.target, base.report), rec


def test_run_goes_through_the_bound_sequence():
    mod, rec = _module()
    assert len(rec.bound) == 1 and len(rec.bound[0]) == 3  # bound once, at construction
    steps = mod.plan.steps
    for (ins, outs), step in zip(rec.bound[0], steps):
        assert ins == [mod.executor.buffers[n] for n in step.inputs]
        assert outs == [mod.executor.buffers[n] for n in step.outputs]
    x = np.random.default_rng(0).standard_normal((3, 5)).astype(np.float32)
    for i in range(3):
        np.testing.assert_allclose(mod.run(x=x * (i + 1))["y"], -np.exp(np.maximum(x * (i + 1), 0)),
                                   rtol=1e-6)
    assert rec.runs == 3
    assert len(mod.executor.runs) == 1


def test_profile_calls_each_kernel():
    mod, rec = _module()
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    mod.set_input("x", x)
    before = rec.runs
    prof = mod.profile(runs=2)
    assert [k.op for k in prof.kernels] == ["Relu", "Exp", "Neg"]
    assert rec.runs - before == 1  # the warm-up run only
    np.testing.assert_allclose(mod.get_output(0), -np.exp(np.maximum(x, 0)), rtol=1e-6)


def test_binding_failure_names_the_region():
    with pytest.raises(RunError, match=r"backend 'ref'.* in region region0_ref: "
                       r"bind_sequence\(\) of its 3 kernels raised ValueError: no such buffer"):
        _module(fail_bind=True)


def test_run_failure_names_the_region():
    mod, _ = _module(fail_run=True)
    with pytest.raises(RunError, match=r"backend 'ref'.* in region region0_ref: its bound kernel "
                       r"sequence failed: OSError: device lost"):
        mod.run(x=np.ones((3, 5), np.float32))
