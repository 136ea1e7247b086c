"""The structural key of a fused group (tessera.kernel.group_key) and the sharing it drives in
``lower_groups``: groups that differ only in names and in their weights' data have one key;
any op, attribute, shape, dtype, symbolic dimension, wiring or constant compiled into the
code (a one-element constant) gives another; groups the key cannot describe have none."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera  # noqa: F401 - installs the dimension algebra symbolic types need
from tessera.ir.graph import Function, Value
from tessera.ir.types import TensorType
from tessera.kernel.fuse_ops import FusedGroup, fuse_ops
from tessera.kernel.group_key import group_key
from tessera.kernel.lowering import lower_groups

RNG = np.random.default_rng(5)


def _layer(fn: Function, x: Value, tag: str, width: int = 8, dtype: str = "float32",
           alpha: float = 0.1, scale: float = 2.0) -> Value:
    """``LeakyRelu(x @ W + B, alpha) * scale``, with random weights of its own."""
    w = fn.constant(RNG.standard_normal((x.type.shape[-1], width)).astype(dtype), f"W{tag}")
    b = fn.constant(RNG.standard_normal(width).astype(dtype), f"B{tag}")
    s = fn.constant(np.array(scale, dtype), f"s{tag}")
    y = fn.op("Add", fn.op("MatMul", x, w, name=f"mm{tag}"), b, name=f"add{tag}")
    return fn.op("Mul", fn.op("LeakyRelu", y, alpha=alpha, name=f"act{tag}"), s,
                 name=f"mul{tag}")


def _groups(shape: tuple[Any, ...] = (4, 8), layers: list[dict[str, Any]] | None = None,
            prefix: str = "", dtype: str = "float32") -> list[FusedGroup]:
    fn = Function("g")
    x = fn.add_input(f"{prefix}x", TensorType(shape, dtype))
    for k, kw in enumerate(layers or [{}, {}]):
        x = _layer(fn, x, f"{prefix}{k}", dtype=dtype, **kw)
    fn.outputs = [x]
    groups = fuse_ops(fn)
    assert len(groups) == len(layers or [{}, {}])
    return groups


def _key(**kw: Any) -> str | None:
    return group_key(_groups(layers=[kw])[0])


def test_identical_layers_with_other_names_and_weights_have_one_key() -> None:
    first, second = _groups()
    assert first.nodes[0].name != second.nodes[0].name
    assert group_key(first) == group_key(second) is not None
    assert group_key(_groups(prefix="other_")[0]) == group_key(first)


@pytest.mark.parametrize("change", [
    {"alpha": 0.2},          # an attribute
    {"width": 16},           # an output shape
    {"scale": 3.0},          # a one-element constant: compiled into the code
])
def test_a_change_the_code_sees_changes_the_key(change: dict[str, Any]) -> None:
    assert _key(**change) != _key()


def test_the_dtype_and_the_input_shape_enter_the_key() -> None:
    base = group_key(_groups()[0])
    assert group_key(_groups(dtype="float64")[0]) != base
    assert group_key(_groups(shape=(5, 8), layers=[{}])[0]) != base


def test_symbolic_dimensions_enter_the_key() -> None:
    seq = _groups(shape=("seq", 8))
    assert group_key(seq[0]) == group_key(seq[1]) != group_key(_groups()[0])
    assert group_key(_groups(shape=("tokens", 8))[0]) != group_key(seq[0])


def test_a_constant_and_an_input_of_one_type_differ() -> None:
    fn = Function("g")
    x = fn.add_input("x", TensorType((4, 8), "float32"))
    w = fn.add_input("w", TensorType((8, 8), "float32"))
    c = fn.constant(RNG.standard_normal((8, 8)).astype("float32"), "c")
    fn.outputs = [fn.op("Relu", fn.op("MatMul", x, w)), fn.op("Relu", fn.op("MatMul", x, c))]
    first, second = fuse_ops(fn)
    assert group_key(first) != group_key(second)


def test_the_wiring_enters_the_key() -> None:
    fn = Function("g")
    x = fn.add_input("x", TensorType((4, 8), "float32"))
    y = fn.add_input("y", TensorType((4, 8), "float32"))
    fn.outputs = [fn.op("Relu", fn.op("Sub", x, y)), fn.op("Relu", fn.op("Sub", y, x)),
                  fn.op("Relu", fn.op("Sub", x, x))]
    keys = [group_key(g) for g in fuse_ops(fn)]
    assert keys[0] == keys[1]  # inputs by position in the group: Sub(in0, in1) both times
    assert keys[2] != keys[0]  # Sub(in0, in0)


def test_an_attribute_of_unknown_kind_gives_no_key() -> None:
    group = _groups(layers=[{}])[0]
    group.nodes[-1].attrs["callback"] = object()
    assert group_key(group) is None


def test_lower_groups_shares_identical_groups() -> None:
    groups = _groups(layers=[{}, {"scale": 3.0}, {}, {}])
    lowered: list[str] = []
    shared: list[tuple[str, str]] = []

    def lower(group: FusedGroup, name: str) -> tuple[str, list[Value]]:
        lowered.append(name)
        return name, [v for v in group.inputs if v.is_constant]

    def share(first: str, group: FusedGroup, name: str) -> tuple[str, list[Value]] | None:
        shared.append((name, first))
        if len(shared) == 2:
            return None  # the backend declines: lowered after all
        return f"{name}->{first}", [v for v in group.inputs if v.is_constant]

    kernels, constants = lower_groups(groups, lower, share=share)
    assert [k.split("_")[0] for k in kernels] == ["k0", "k1", "k2", "k3"]
    assert lowered == [kernels[0], kernels[1], kernels[3]]
    assert kernels[2].startswith("k2_") and kernels[2].endswith(f"->{lowered[0]}")
    assert [f for _, f in shared] == [lowered[0], lowered[0]]  # the first lowered, always
    assert set(constants) == {v.name for g in groups for v in g.inputs if v.is_constant}
    # without share every group is lowered
    lowered.clear()
    assert lower_groups(groups, lower)[0] == lowered and len(lowered) == 4


def test_lower_groups_tells_of_each_kernel_with_its_shares_right_after_it() -> None:
    """``made`` hears of a first kernel, then of the kernels sharing its code, before any later
    group is lowered (a backend generating code as it goes keeps them together); the kernels
    come back in the groups' order all the same."""
    groups = _groups(layers=[{}, {"scale": 3.0}, {}, {"scale": 3.0}, {}])
    events: list[str] = []

    def lower(group: FusedGroup, name: str) -> tuple[str, list[Value]]:
        events.append(f"lower {name.split('_')[0]}")
        return name.split("_")[0], []

    def share(first: str, group: FusedGroup, name: str) -> tuple[str, list[Value]] | None:
        return f"{name.split('_')[0]}={first}", []

    kernels, _ = lower_groups(groups, lower, share=share,
                              made=lambda k: events.append(f"made {k}"))
    assert kernels == ["k0", "k1", "k2=k0", "k3=k1", "k4=k0"]
    assert events == ["lower k0", "made k0", "made k2=k0", "made k4=k0",
                      "lower k1", "made k1", "made k3=k1"]
