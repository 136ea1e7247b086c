"""Tuning records of a model with symbolic shapes compiled per size (``shape_mode=
"specialize"``) apply at every size: a specialisation whose workloads were tuned at another
(representative) size takes the nearest size's knob values, where they are valid at its own
size; a static compile still matches records exactly. (Compiled once for every size, the
default, the records become one kernel version per tuned size: the llvm plugin's
test_size_buckets.py.)"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.plugin.manager import get_backends
from tessera.plugin.records import ScheduleOverrides, record_for
from tessera.plugin.space import ScheduleConfig

pytestmark = pytest.mark.skipif("llvm" not in get_backends(), reason="needs tessera-llvm")

TUNED = {"nr": 16, "mr": 4, "vector_width": 8, "parallel_min_flops": 65536, "cols_outer": False}


def _model() -> onnx.ModelProto:
    w = np.random.default_rng(0).standard_normal((64, 128)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", 128])],
        [numpy_helper.from_array(w, "w")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _records(tmp_path: Path) -> Path:
    """One record of the dense workload tuned at batch 8."""
    record = record_for(ScheduleConfig("dense", ([8, 128], 64), dict(TUNED)), "llvm", "llvm",
                        costs=[1e-5])
    path = tmp_path / "records.jsonl"
    path.write_text(record.to_json() + "\n")
    return path


def _used(module: tessera.Module) -> dict[str, object]:
    (region,) = module.model.compiled.values()
    (schedule,) = region.info["schedules"].values()
    return dict(schedule["config"])


def test_a_size_nobody_tuned_takes_the_nearest_sizes_knobs(tmp_path: Path) -> None:
    mod = tessera.compile(_model(), "llvm", tuning_records=_records(tmp_path),
                          shape_mode="specialize")
    at5 = mod.specialize(batch=5)
    assert at5.tuning_summary() == (1, 0)
    used = _used(at5)
    # every knob value that is a candidate at batch 5 comes from the record; mr=4 is not
    # (batch 5's row tiles are 1 and 5), so it keeps its default
    assert {k: used[k] for k in TUNED if k != "mr"} == {k: v for k, v in TUNED.items()
                                                        if k != "mr"}
    assert used["mr"] != 4
    x = np.random.default_rng(1).standard_normal((5, 64)).astype(np.float32)
    w = numpy_helper.to_array(_model().graph.initializer[0])
    np.testing.assert_allclose(mod.run(x=x)["y"], x @ w, rtol=1e-5, atol=1e-5)
    # the tuned size itself uses its record exactly
    assert _used(mod.specialize(batch=8)) == TUNED


def test_static_compiles_match_records_exactly(tmp_path: Path) -> None:
    static = tessera.compile(_model(), "llvm", tuning_records=_records(tmp_path),
                             input_shapes={"x": [5, 64]})
    assert static.tuning_summary() == (0, 1)


def test_nearest_is_by_size_and_structure() -> None:
    overrides = ScheduleOverrides({
        '["dense", [[8, 128], 64]]': {"nr": 8},
        '["dense", [[64, 128], 64]]': {"nr": 64},
        '["dense", [[8, 128], 32]]': {"nr": 32},
        '["conv2d", [[8, 128], 64]]': {"nr": 1},
    }, nearest_sizes=True)
    assert overrides.nearest('["dense", [[5, 128], 64]]') == {"nr": 8}
    assert overrides.nearest('["dense", [[40, 128], 64]]') == {"nr": 64}
    assert overrides.nearest('["dense", [[5, 128, 1], 64]]') is None  # another structure
    assert overrides.nearest('["pool", [[5, 128], 64]]') is None  # another template
    assert ScheduleOverrides(dict(overrides)).nearest('["dense", [[5, 128], 64]]') is None
