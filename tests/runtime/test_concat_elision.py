"""Elided concatenations: the memory planner places each input of a concatenation inside its
output (``Kernel.concat_offsets``), so producers write the result directly and the copy is
skipped; the outputs stay those of numpy, and no unrelated live tensors share memory."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera.ir.graph import Function, Value
from tessera.ir.types import DType, TensorType
from tessera.runtime.memory import concat_aliases, contiguous_concat_offsets, lifetimes

F32 = DType.float32


def t(*shape: int, dtype: DType = F32) -> TensorType:
    return TensorType(shape, dtype)


def test_contiguous_concat_offsets() -> None:
    assert contiguous_concat_offsets([t(1, 2, 3), t(1, 5, 3)], t(1, 7, 3)) == [0, 24]
    assert contiguous_concat_offsets([t(4, 3), t(2, 3)], t(6, 3)) == [0, 48]
    assert contiguous_concat_offsets([t(1, 1, 4, 2), t(1, 1, 4, 2)], t(1, 1, 4, 4)) is None
    assert contiguous_concat_offsets([t(2, 2, 3), t(2, 5, 3)], t(2, 7, 3)) is None  # batch 2
    assert contiguous_concat_offsets([t(1, 2, 3)], t(1, 2, 3)) == [0]
    assert contiguous_concat_offsets([t(1, 2, 3), t(1, 2, 4)], t(1, 4, 3)) is None
    assert contiguous_concat_offsets([t(1, 2, dtype=DType.int32)], t(1, 2)) is None


WEIGHTS = [np.random.default_rng(i).standard_normal((16, 16 * (i + 1), 1, 1)).astype(np.float32)
           * 0.2 for i in range(3)]


def _dense_block(out_too: bool = False, twice: bool = False, batch: int = 1
                 ) -> tuple[Function, dict[str, np.ndarray]]:
    """A DenseNet-like block: three times ``feats = Concat(feats, Relu(Conv1x1(feats)))``."""
    fn = Function("block")
    x = fn.add_input("x", t(batch, 16, 4, 4))
    feats: Value = fn.op("Neg", x, name="stem")
    extra = []
    for i in range(3):
        width = 16 * (i + 1) + (16 if twice and i == 2 else 0)
        w = WEIGHTS[i] if width == WEIGHTS[i].shape[1] else np.concatenate(
            [WEIGHTS[i], WEIGHTS[i][:, -16:]], axis=1)
        new = fn.op("Relu", fn.op("Conv", feats, fn.constant(w, f"w{i}"), name=f"conv{i}"),
                    name=f"layer{i}")
        extra.append(new)
        parts = [feats, new, new] if (twice and i == 1) else [feats, new]
        feats = fn.op("Concat", *parts, axis=1, name=f"concat{i}")
    fn.outputs = [fn.op("Tanh", feats, name="head")] + ([extra[0]] if out_too else [])
    fn.attrs["output_names"] = ["y"] + (["first"] if out_too else [])
    data = {"x": np.random.default_rng(3).standard_normal((batch, 16, 4, 4)).astype(np.float32)}
    return fn, data


def _numpy(data: dict[str, np.ndarray], twice: bool = False) -> np.ndarray:
    feats = -data["x"]
    for i in range(3):
        w = WEIGHTS[i][:, :, 0, 0]
        if twice and i == 2:
            w = np.concatenate([w, w[:, -16:]], axis=1)
        new = np.maximum(np.einsum("oc,nchw->nohw", w, feats), 0)
        parts = [feats, new, new] if (twice and i == 1) else [feats, new]
        feats = np.concatenate(parts, axis=1)
    return np.tanh(feats)


def _check_placement(mod: tessera.Module) -> None:
    """Tensors live at the same time share memory only inside one concatenation group."""
    plan, memory = mod.plan, mod.memory
    parent, _ = concat_aliases(plan)

    def group(n: str) -> str:
        while n in parent:
            n = parent[n][0]
        return n

    life = lifetimes(plan)
    for dp in memory.devices.values():
        names = list(dp.offsets)
        for i, a in enumerate(names):
            for b in names[i + 1:]:
                (s1, e1), (s2, e2) = life[a], life[b]
                o1, o2 = dp.offsets[a], dp.offsets[b]
                size_a = plan.tensors[a].type.nbytes
                size_b = plan.tensors[b].type.nbytes
                overlap = not (o1 + size_a <= o2 or o2 + size_b <= o1)
                if overlap and not (e1 < s2 or e2 < s1):
                    assert group(a) == group(b), (a, b)
        for child, (par, off) in parent.items():
            assert dp.offsets[child] == dp.offsets[par] + off


@pytest.mark.parametrize("target", ["ref", "llvm"])
def test_chained_concatenations_are_elided(target: str) -> None:
    fn, data = _dense_block()
    mod = tessera.compile(fn, target=target)
    # llvm fuses the last concatenation with the Tanh after it: that one is a kernel
    concats = [i for i, s in enumerate(mod.plan.steps) if s.op == "Concat"]
    assert len(concats) == (3 if target == "ref" else 2)
    assert mod.memory.elided == set(concats)
    _check_placement(mod)
    for _ in range(2):
        np.testing.assert_allclose(mod.run(**data)["y"], _numpy(data), rtol=1e-5, atol=1e-6)
    prof = mod.profile(runs=1, **data)
    assert [k.op for k in prof.kernels].count("Concat") == len(concats)


@pytest.mark.parametrize("target", ["ref", "llvm"])
@pytest.mark.parametrize("case", ["output", "twice", "batch2"])
def test_concatenations_that_must_copy(target: str, case: str) -> None:
    """An input that is a model output, an input given twice, or a batch of 2 (the inputs are
    not contiguous in the output): that concatenation copies, the others may still be elided."""
    fn, data = _dense_block(out_too=case == "output", twice=case == "twice",
                            batch=2 if case == "batch2" else 1)
    mod = tessera.compile(fn, target=target)
    steps = mod.plan.steps
    elided_names = {steps[i].name for i in mod.memory.elided}
    if case == "batch2":
        assert not elided_names
    elif case == "twice":
        assert not any(n.endswith("concat1") for n in elided_names)
    elif target == "ref":  # layer0's output is returned: concat0 copies (llvm returns a
        # layout-transformed copy of it, so there concat0 may still be elided)
        assert not any(n.endswith("concat0") for n in elided_names)
    _check_placement(mod)
    got = mod.run(**data)
    np.testing.assert_allclose(got["y"], _numpy(data, twice=case == "twice"),
                               rtol=1e-5, atol=1e-6)


def test_overlapping_offsets_from_a_backend_are_not_trusted() -> None:
    """Offsets that would put two inputs on the same bytes leave the concatenation a copy."""
    fn, data = _dense_block()
    mod = tessera.compile(fn, target="ref")
    step = next(s for s in mod.plan.steps if s.op == "Concat")
    step.concat_offsets = [0, 0]
    parent, elided = concat_aliases(mod.plan)
    assert mod.plan.steps.index(step) not in elided
    assert not any(p == step.outputs[0] for p, _ in parent.values())
