"""Tuning records per size bucket (tessera_llvm.size_buckets): a symbolic model compiled with
records tuned at several sizes is one module whose kernels carry one version per tuned size,
chosen by each call's sizes. Checked: the records' buckets, the entry's choice between
versions (versions that write different values), and a whole model's results at sizes in
every bucket and at the boundary between two."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera import tir
from tessera.plugin.records import ScheduleOverrides, record_for
from tessera.plugin.space import ScheduleConfig
from tessera.tir import expr as E
from tessera_llvm.build import build_module
from tessera_llvm.size_buckets import MAX_BUCKETS

SMALL = {"nr": 16, "mr": 4, "vector_width": 16, "parallel_min_flops": 65536,
         "cols_outer": False}
LARGE = {"nr": 32, "mr": 8, "vector_width": 16, "parallel_min_flops": 262144,
         "cols_outer": True}


def _model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _records(tmp_path: Path, tuned: dict[int, dict[str, object]]) -> Path:
    """Records of the model's product tuned at each batch of ``tuned`` (as ``tessera tune
    --input-shapes x:[batch,64]`` writes them)."""
    lines = [record_for(ScheduleConfig("dense", ([b, 128], 64), dict(k)), "llvm", "llvm",
                        costs=[1e-5]).to_json() for b, k in tuned.items()]
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(lines) + "\n")
    return path


def _schedule(mod: tessera.Module) -> dict[str, object]:
    (region,) = mod.compiled.values()
    (schedule,) = region.info["schedules"].values()
    return schedule


def test_one_module_with_a_version_per_tuned_size(tmp_path: Path) -> None:
    mod = tessera.compile(_model(), "llvm", tuning_records=_records(tmp_path, {8: SMALL,
                                                                             256: LARGE}))
    assert isinstance(mod, tessera.Module) and mod.shape_vars is not None  # one compile
    schedule = _schedule(mod)
    assert schedule["key"] == '["dense", [["batch", 128], 64]]'
    assert schedule["size_buckets"] == [{"batch": 8}, {"batch": 256}]
    assert {k: schedule["config"][k] for k in LARGE} == LARGE  # the largest bucket's
    assert mod.tuning_summary() == (1, 0)
    w = numpy_helper.to_array(_model().graph.initializer[0])
    edge = math.isqrt(8 * 256)  # up to here the small version runs
    for b in (0, 1, 5, 8, edge, edge + 1, 100, 300):
        x = np.random.default_rng(b).standard_normal((b, 64)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=x)["y"], x @ w, rtol=1e-5, atol=1e-5,
                                   err_msg=f"batch {b}")


def test_one_tuned_size_is_one_version(tmp_path: Path) -> None:
    mod = tessera.compile(_model(), "llvm", tuning_records=_records(tmp_path, {8: SMALL}))
    schedule = _schedule(mod)
    assert schedule["size_buckets"] == [{"batch": 8}]
    assert {k: schedule["config"][k] for k in SMALL} == SMALL
    x = np.random.default_rng(3).standard_normal((77, 64)).astype(np.float32)
    w = numpy_helper.to_array(_model().graph.initializer[0])
    np.testing.assert_allclose(mod.run(x=x)["y"], x @ w, rtol=1e-5, atol=1e-5)


def test_buckets_of_the_records() -> None:
    """A bucket per record of the same template whose workload is the symbolic one at some
    sizes (equal static extents, one value per run-time extent's text), smallest first; a
    rejected workload has none."""
    key = '["dense", [["batch", "seq", 64], "seq"]]'
    overrides = ScheduleOverrides({
        '["dense", [[8, 32, 64], 32]]': {"mr": 4},
        '["dense", [[1, 7, 64], 7]]': {"mr": 1},
        '["dense", [[1, 7, 64], 8]]': {"mr": 2},     # seq 7 and 8 at once: not this workload
        '["dense", [[1, 7, 32], 7]]': {"mr": 3},     # another static extent
        '["softmax_rows", [[1, 7, 64], 7]]': {"mr": 5},  # another template
    })
    found = overrides.buckets(key)
    assert [b.sizes for b in found] == [(("batch", 1), ("seq", 7)), (("batch", 8), ("seq", 32))]
    assert [b.knobs for b in found] == [{"mr": 1}, {"mr": 4}]
    assert overrides.buckets('["dense", [[8, 32, 64], 32]]') == []  # a static key
    rejected = ScheduleOverrides(dict(overrides), rejected=[key])
    assert rejected.buckets(key) == []


def test_at_most_max_buckets_spread_over_the_sizes(tmp_path: Path) -> None:
    tuned = {b: dict(SMALL, mr=m) for b, m in ((1, 1), (2, 2), (4, 4), (8, 8), (16, 1),
                                               (32, 2), (64, 4))}
    mod = tessera.compile(_model(), "llvm", tuning_records=_records(tmp_path, tuned))
    sizes = [s["batch"] for s in _schedule(mod)["size_buckets"]]
    assert len(sizes) == MAX_BUCKETS and sizes[0] == 1 and sizes[-1] == 64
    w = numpy_helper.to_array(_model().graph.initializer[0])
    for b in (1, 3, 6, 11, 23, 45, 90):
        x = np.random.default_rng(b).standard_normal((b, 64)).astype(np.float32)
        np.testing.assert_allclose(mod.run(x=x)["y"], x @ w, rtol=1e-5, atol=1e-5)


def _fill(a: tir.Buffer, n: tir.Var, value: float) -> tir.PrimFunc:
    """``a[i] = value`` for i < n: a version of the kernel ``fill``."""
    i = tir.Var("i")
    body = tir.For(i, 0, n, tir.ForKind.SERIAL,
                   tir.BufferStore(a, tir.const(value, "float32"), [i]))
    return tir.PrimFunc("fill", [a], body, size_bounds={n: (0, 64)})


@pytest.mark.parametrize("n,want", [(0, None), (1, 1.0), (4, 1.0), (5, 2.0), (8, 2.0),
                                    (9, 3.0), (64, 3.0)])
def test_the_entry_runs_the_first_version_whose_condition_holds(n: int, want: float) -> None:
    """Code generation's ``variants``: versions that write 1, 2 and 3; the entry runs the
    first whose condition holds for the call's size (n <= 4, then n <= 8), else the
    function."""
    size = tir.Var("n")
    a = tir.decl_buffer((size,), "float32", "a")
    variants = [(E.LE(size, E.IntImm(4, size.dtype)), _fill(a, size, 1.0)),
                (E.LE(size, E.IntImm(8, size.dtype)), _fill(a, size, 2.0))]
    lib = build_module([_fill(a, size, 3.0)], "versions", variants={"fill": variants}).load()
    out = np.full(n, -1.0, np.float32)
    lib.get("fill")([out])
    if want is not None:
        np.testing.assert_array_equal(out, np.full(n, want, np.float32))


def test_knob_values_the_template_lacks_are_said_not_dropped(tmp_path: Path) -> None:
    """A bucket's knob value that is not a candidate keeps the default and counts in the
    compile's one warning about skipped record values."""
    bad = dict(SMALL, mr=999)
    with pytest.warns(UserWarning, match="mr=999"):
        mod = tessera.compile(_model(), "llvm",
                              tuning_records=_records(tmp_path, {8: bad, 256: LARGE}))
    assert _schedule(mod)["size_buckets"] == [{"batch": 8}, {"batch": 256}]
    x = np.random.default_rng(4).standard_normal((6, 64)).astype(np.float32)
    w = numpy_helper.to_array(_model().graph.initializer[0])
    np.testing.assert_allclose(mod.run(x=x)["y"], x @ w, rtol=1e-5, atol=1e-5)
