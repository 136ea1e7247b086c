"""compile() and tune() take option objects (CompileConfig, TuneConfig with MeasureConfig);
keyword arguments still work and override them; each backend receives its region's schedule
overrides already resolved from the tuning records."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from toy_backends import ToyBackend

import tessera
from tessera.autotune import MeasureConfig, TuneConfig
from tessera.autotune.config import tune_config
from tessera.errors import TesseraError
from tessera.ir.graph import Function
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import CompiledRegion, CompileOptions
from tessera.plugin.records import TuningHistory, TuningRecord, append_records
from tessera.plugin.target import TargetKind
from tessera.testing.kit.registration import register_backend


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 5])
    nodes = [helper.make_node("Relu", ["x"], ["r"], name="relu"),
             helper.make_node("Neg", ["r"], ["y"], name="neg")]
    graph = helper.make_graph(nodes, "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _record(backend: str, target: str, key: str, tile: int) -> TuningRecord:
    return TuningRecord(key=key, template="toy", workload=[], config={"tile": tile},
                        backend=backend, target=target, costs=[1e-4])


class Recording(ToyBackend):
    """Keeps the options each region was compiled with."""

    def __init__(self) -> None:
        super().__init__("toycfg", [Pattern("Relu"), Pattern("Neg")])
        self.options: list[CompileOptions] = []

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        self.options.append(options)
        return super().compile(region, target, options)


@pytest.fixture
def recording() -> Iterator[Recording]:
    backend = Recording()
    registered = register_backend(backend, "tessera-toycfg", "0.1")
    yield backend
    registered.remove()


def test_a_config_and_keywords_compile_the_same(rng: np.random.Generator) -> None:
    x = rng.standard_normal((3, 5)).astype(np.float32)
    config = tessera.CompileConfig(input_shapes={"x": [3, 5]}, opt_level=2)
    by_config = tessera.compile(_model(), "ref", config)
    by_keywords = tessera.compile(_model(), "ref", input_shapes={"x": [3, 5]}, opt_level=2)
    for module in (by_config, by_keywords):
        np.testing.assert_array_equal(module.run(x=x)["y"], -np.maximum(x, 0))
        assert module.model.options.opt_level == 2
    # a keyword overrides the config's field; the config itself is unchanged
    overridden = tessera.compile(_model(), "ref", config, opt_level=1)
    assert overridden.model.options.opt_level == 1 and config.opt_level == 2


def test_bad_settings_are_type_errors_naming_them() -> None:
    with pytest.raises(TypeError, match=r"compile\(\) got unexpected keyword.*'input_shape'.*"
                                        r"known: .*input_shapes"):
        tessera.compile(_model(), "ref", input_shape={"x": [3, 5]})
    with pytest.raises(TypeError, match="config must be a CompileConfig, not dict"):
        tessera.compile(_model(), "ref", {"x": [3, 5]})  # type: ignore[arg-type]
    from tessera.api import partition_model
    with pytest.raises(TypeError, match=r"partition_model\(\) got unexpected"):
        partition_model(_model(), "ref", shapes={"x": [3, 5]})


def test_partition_model_takes_the_same_config() -> None:
    from tessera.api import partition_model
    config = tessera.CompileConfig(input_shapes={"x": [2, 5]}, dump_code="ll")
    result = partition_model(_model(), "ref", config)
    assert [v.type.shape for v in result.partitioned.graph.inputs] == [(2, 5)]


def test_each_region_gets_its_overrides_resolved(recording: Recording, tmp_path: Path) -> None:
    path = tmp_path / "records.jsonl"
    append_records(path, [_record("toycfg", "toycfg", "k1", 8),
                          _record("toycfg", "toycfg -mcpu=other", "k2", 4),
                          _record("llvm", "llvm", "k1", 16)])
    tessera.compile(_model(), "toycfg", input_shapes={"x": [3, 5]},
                    tuning_records=str(path))
    (options,) = recording.options
    assert isinstance(options.tuning_records, TuningHistory)
    # resolved for this backend and target: records of exactly this target win, other
    # targets of the same backend fill in, another backend's never
    assert options.schedule == {"k1": {"tile": 8}, "k2": {"tile": 4}}
    assert options.schedule_for == ("toycfg", "toycfg")
    assert options.schedule_overrides("toycfg", "toycfg") is options.schedule
    assert options.schedule_overrides("llvm", "llvm") == {"k1": {"tile": 16}}
    assert options.tuned


def test_without_records_there_is_no_schedule(recording: Recording) -> None:
    tessera.compile(_model(), "toycfg", input_shapes={"x": [3, 5]})
    (options,) = recording.options
    assert options.schedule is None and not options.tuned
    assert options.schedule_overrides("toycfg", "toycfg") == {}


def test_unresolved_options_resolve_from_the_history() -> None:
    history = TuningHistory([_record("llvm", "llvm", "k", 2)])
    options = CompileOptions(tuning_records=history)  # as a backend's own test builds them
    assert options.schedule is None and options.tuned
    assert options.schedule_overrides("llvm", "llvm") == {"k": {"tile": 2}}
    region = options.for_region("llvm", "llvm")
    assert region.schedule == {"k": {"tile": 2}} and options.schedule is None


def test_tune_config_routes_measure_keywords() -> None:
    cfg = tune_config(None, {"trials": 7, "repeat": 5, "cache_flush": True})
    assert cfg.trials == 7
    assert cfg.measure == MeasureConfig(repeat=5, cache_flush=True)
    base = TuneConfig(tuner="xgb", measure=MeasureConfig(timeout=3.0))
    merged = tune_config(base, {"number": 4})
    assert merged.tuner == "xgb" and merged.measure == MeasureConfig(timeout=3.0, number=4)
    assert base.measure.number == 1
    assert tune_config(base, {}) is base
    with pytest.raises(TypeError, match=r"tune\(\) got unexpected keyword.*'trails'"):
        tune_config(None, {"trails": 3})


@pytest.mark.parametrize("bad, message", [
    ({"parallel": 0}, "parallel must be at least 1"),
    ({"trials": 0}, "trials must be at least 1"),
    ({"time_budget": -1.0}, "time_budget must be positive"),
    ({"timeout": 0.0}, "timeout must be positive"),
    ({"repeat": 0}, "number and repeat must be at least 1"),
])
def test_tune_settings_are_checked(bad: dict, message: str) -> None:
    with pytest.raises(TesseraError, match=message):
        tune_config(None, bad)


def test_backend_options_take_a_loaded_history() -> None:
    with pytest.raises(TypeError, match="must be a TuningHistory or None, not str"):
        CompileOptions(tuning_records="tuning.jsonl")
