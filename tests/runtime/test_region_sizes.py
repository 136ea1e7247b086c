"""``CompiledRegion.size_names``: the runtime gives the kernels of a region with run-time sizes
one sizes array per execution state, written before each run, and the sequence binder too."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import PluginError
from tessera.plugin.contract import check_compiled
from tessera.runtime.executor import Executor
from tessera.runtime.module import Module


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 6])
    nodes = [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Neg", ["r"], ["y"])]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _rows_kernel(fn: Any, seen: list[tuple[int, ...]]) -> Any:
    """The reference kernel on the first ``rows`` rows only, ``rows`` read from the sizes."""
    def run(ins: list[Any], outs: list[Any], sizes: np.ndarray) -> None:
        seen.append(tuple(int(v) for v in sizes))
        rows = int(sizes[1])
        fn([a[:rows] for a in ins], [o[:rows] for o in outs])
    return run


def _sized(sequence: bool) -> tuple[Module, list[tuple[int, ...]], list[Any]]:
    base = tessera.compile(_model(), target="ref")
    (name, cr), = base.compiled.items()
    seen: list[tuple[int, ...]] = []
    kernels = [dataclasses.replace(k, fn=_rows_kernel(k.fn, seen)) for k in cr.kernels]
    bound: list[Any] = []

    def bind(calls: list[Any], sizes: np.ndarray) -> Any:
        bound.append(sizes)

        def run() -> None:
            for k, (ins, outs) in zip(kernels, calls):
                k.fn(ins, outs, sizes)
        return run

    compiled = {name: dataclasses.replace(cr, kernels=kernels, size_names=["batch", "rows"],
                                          bind_sequence=bind if sequence else None)}
    return Module(base.graph, compiled, base.backends, base.target, base.report), seen, bound


@pytest.mark.parametrize("sequence", [False, True])
def test_kernels_read_the_sizes_written_before_each_run(sequence: bool) -> None:
    mod, seen, bound = _sized(sequence)
    binds = len(bound)  # the module's own first state bound its sequence
    ex = Executor(mod.plan, mod.memory, mod._devices)
    assert ex.size_names == ["batch", "rows"]
    x = np.random.default_rng(0).standard_normal((4, 6)).astype(np.float32)
    for rows in (3, 1, 4):
        ex.set_input("x", x)
        ex.get("y")  # touch the buffer before: rows past ``rows`` keep what was there
        before = ex.get("y")
        ex.set_sizes({"rows": rows, "batch": 7})
        ex.run()
        got = ex.get("y")
        np.testing.assert_array_equal(got[:rows], -np.maximum(x[:rows], 0))
        np.testing.assert_array_equal(got[rows:], before[rows:])
        assert seen[-1] == (7, rows)
    if sequence:  # bound once, with the state's own array (rewritten in place)
        assert len(bound) == binds + 1 and bound[-1] is ex.sizes[next(iter(ex.sizes))]


def test_each_state_has_its_own_sizes() -> None:
    mod, _, _ = _sized(False)
    a = Executor(mod.plan, mod.memory, mod._devices)
    b = Executor(mod.plan, mod.memory, mod._devices)
    a.set_sizes({"batch": 1, "rows": 2})
    b.set_sizes({"batch": 3, "rows": 4})
    (ra,), (rb,) = a.sizes.values(), b.sizes.values()
    assert ra is not rb and list(ra) == [1, 2] and list(rb) == [3, 4]


@pytest.mark.parametrize("names", [["n", "n"], [""], "n", [3]])
def test_the_contract_checks_size_names(names: Any) -> None:
    base = tessera.compile(_model(), target="ref")
    (_name, cr), = base.compiled.items()
    backend = base.backends[cr.backend]
    with pytest.raises(PluginError, match="size_names"):
        check_compiled(backend, cr.region, dataclasses.replace(cr, size_names=names))
