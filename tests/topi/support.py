"""What the topi tests share: build a one-node graph, turn it into TE with ``build_te``,
evaluate it with the numpy oracle (:mod:`te_eval`) and compare with the op's numpy reference."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import Any

import numpy as np
from topi.te_eval import all_ops, evaluate

from tessera import te
from tessera.ir.graph import Function, Node
from tessera.ir.types import TensorType
from tessera.ops.registry import get_schema
from tessera.tir import expr as E
from tessera.tir.functor import post_order_visit
from tessera.topi import build_te
from tessera.topi.from_graph import GroupTE

RNG = np.random.default_rng(20250101)

#: (rtol, atol) per output dtype.
TOLERANCE = {
    np.dtype("float16"): (1e-2, 1e-2),
    np.dtype("float32"): (2e-5, 2e-5),
    np.dtype("float64"): (1e-10, 1e-10),
}


def random_data(rng: np.random.Generator, shape: tuple[int, ...], dtype: Any = "float32",
                lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Uniform random data from ``rng`` (integers in [lo, hi] clipped to the dtype; bool: coin
    flips)."""
    dt = np.dtype(dtype)
    if dt == np.bool_:
        return rng.random(shape) < 0.5
    if dt.kind in "iu":
        info = np.iinfo(dt)
        return rng.integers(max(int(lo), info.min), min(int(hi), info.max) + 1,
                            size=shape).astype(dt)
    return rng.uniform(lo, hi, shape).astype(dt)


def rand(*shape: int, dtype: Any = "float32", lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Uniform random data from this module's generator (see :func:`random_data`)."""
    return random_data(RNG, shape, dtype, lo, hi)


def one_node(op: str, inputs: Sequence[np.ndarray | None], attrs: dict | None = None,
             consts: Collection[int] = (), num_outputs: int | None = None
             ) -> tuple[Function, Node]:
    """A function with one ``op`` node; input i is a constant when i is in ``consts``."""
    g = Function("f")
    values = []
    for i, a in enumerate(inputs):
        if a is None:
            values.append(None)
        elif i in consts:
            values.append(g.constant(np.asarray(a), name=f"c{i}"))
        else:
            values.append(g.add_input(f"x{i}", TensorType.of(np.asarray(a))))
    node = g.add_node(op, values, attrs or {}, num_outputs=num_outputs)
    g.outputs = list(node.outputs)
    return g, node


def run_group(group: GroupTE, arrays: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Evaluate a group's outputs, its inputs bound by value name (constants from their data)."""
    feed = {}
    for value, ph in zip(group.inputs, group.placeholders):
        feed[ph] = value.data if value.data is not None else arrays[value.name]
    return evaluate(group.outputs, feed)  # type: ignore[return-value]


def run_op(op: str, inputs: Sequence[np.ndarray | None], attrs: dict | None = None,
           consts: Collection[int] = (), num_outputs: int | None = None,
           inline_scalars: bool = True) -> tuple[list[np.ndarray], list[np.ndarray], GroupTE]:
    """(TE results, reference results, the group) of one node."""
    g, node = one_node(op, inputs, attrs, consts, num_outputs)
    group = build_te(g.nodes, g.inputs, g.outputs, inline_scalars=inline_scalars)
    arrays = {f"x{i}": np.asarray(a) for i, a in enumerate(inputs) if a is not None}
    got = run_group(group, arrays)
    schema = get_schema(op)
    want = schema.evaluate([None if a is None else np.asarray(a) for a in inputs],
                           node.attrs)[:len(node.outputs)]
    return got, want, group


def assert_close(got: np.ndarray, want: np.ndarray, rtol: float | None = None,
                 atol: float | None = None, what: str = "") -> None:
    """Same dtype and shape; exact for integers and bools, tolerances for floats."""
    want = np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "fc":
        r, a = TOLERANCE[want.dtype]
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64),
                                   rtol=rtol if rtol is not None else r,
                                   atol=atol if atol is not None else a, err_msg=what,
                                   equal_nan=True)
    else:
        np.testing.assert_array_equal(got, want, err_msg=what)


def check_op(op: str, inputs: Sequence[np.ndarray | None], attrs: dict | None = None,
             consts: Collection[int] = (), num_outputs: int | None = None,
             rtol: float | None = None, atol: float | None = None,
             inline_scalars: bool = True) -> GroupTE:
    """Assert that the topi compute of ``op`` matches its numpy reference; returns the group."""
    got, want, group = run_op(op, inputs, attrs, consts, num_outputs, inline_scalars)
    assert len(got) == len(want)
    for k, (g_, w_) in enumerate(zip(got, want)):
        assert_close(g_, w_, rtol, atol, f"{op} output {k}")
    return group


def ops_of(group: GroupTE) -> list[te.Operation]:
    return all_ops(group.outputs)


def find_op(group: GroupTE, tag_kind: str) -> te.ComputeOp:
    """The one compute whose tag is ``tag_kind`` (exactly)."""
    found = [op for op in ops_of(group) if isinstance(op, te.ComputeOp) and op.tag == tag_kind]
    assert len(found) == 1, [op.tag for op in ops_of(group)]
    return found[0]


def index_nodes(op: te.ComputeOp) -> list[type]:
    """The classes of every node inside the indices of the body's tensor reads."""
    kinds: list[type] = []

    def visit(node: Any) -> None:
        if isinstance(node, E.ProducerLoad):
            for i in node.indices:
                post_order_visit(i, lambda n: kinds.append(type(n)))

    post_order_visit(op.body, visit)
    return kinds


def has_div_or_mod(op: te.ComputeOp) -> bool:
    """Whether any read index of ``op`` divides or takes a modulo."""
    return any(k in (E.FloorDiv, E.FloorMod) for k in index_nodes(op))
