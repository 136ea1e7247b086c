"""The whole-model check after tuning: records whose isolated gains do not carry over into the
model are rejected, ``tessera tune`` prints the whole model before and after, and a compile
with those records leaves them at their default schedules and says so."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.autotune import extract_tasks
from tessera.autotune.model_check import Timing, wins
from tessera.autotune.records import append_records, load_records
from tessera.cli.main import main
from tessera.errors import TuningRecordsError
from tessera.plugin.manager import get_backends
from tessera.plugin.records import MODEL_CHECK, ModelCheck, TuningHistory, TuningRecord

needs_llvm = pytest.mark.skipif("llvm" not in get_backends(), reason="needs the llvm backend")


def _model(path: Path) -> Path:
    """y = relu(x @ W1) @ W2, x [128, 256]: two dense workloads."""
    rng = np.random.default_rng(5)
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["y"])], "two_dense",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [128, 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [128, 256])],
        [numpy_helper.from_array(rng.standard_normal((256, 512)).astype(np.float32), "W1"),
         numpy_helper.from_array(rng.standard_normal((512, 256)).astype(np.float32), "W2")])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


def _record(key: str, template: str, config: dict, cost: float) -> TuningRecord:
    return TuningRecord(key=key, template=template, workload=json.loads(key)[1], config=config,
                        backend="llvm", target="llvm", costs=[cost] * 3)


def _misleading_records(model: Path, out: Path) -> list[str]:
    """Per dense workload: the default config, and the slowest schedule there is (scalar,
    1x1 register tile) recorded as ten times faster than the default: an isolated gain that
    the model will not see. Returns the workload keys."""
    keys = []
    for task in extract_tasks(str(model), "llvm"):
        worst = {name: values[0] for name, values in task.knobs.items()}
        worst["parallel_min_flops"] = max(task.knobs.get("parallel_min_flops", [0]))
        append_records(out, [_record(task.key, task.template, task.default, 1e-3),
                             _record(task.key, task.template, worst, 1e-4)])
        keys.append(task.key)
    return keys


@pytest.mark.slow
@needs_llvm
def test_records_that_lose_in_the_model_are_rejected_and_compile_says_so(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path / "two_dense.onnx")
    out = tmp_path / "records.jsonl"
    keys = _misleading_records(model, out)
    assert main(["tune", str(model), "--target", "llvm", "--trials", "1", "--repeat", "1",
                 "--timeout", "30", "-o", str(out)]) == 0
    printed = capsys.readouterr()
    assert "whole model:" in printed.out and f"with 0 of {len(keys)} kept" in printed.out
    assert "keep their default schedules" in printed.out
    assert "model check:" in printed.err  # what it measured, as it went
    history = TuningHistory.load(out)
    assert len(history.checks) == 1 and set(history.checks[0].rejected) == set(keys)
    check = history.checks[0]
    assert check.tuned_ms > check.untuned_ms  # the misleading records did lose

    # compiling with the file: default schedules for the rejected workloads, and a warning
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        tuned = tessera.compile(str(model), "llvm", tuning_records=str(out))
    assert tuned.tuning_summary() == (0, len(keys))
    said = [str(w.message) for w in caught if "left at their defaults" in str(w.message)]
    assert len(said) == 1 and f"{len(keys)} schedule(s)" in said[0] and "two_dense.onnx" in said[0]
    x = np.random.default_rng(0).standard_normal((128, 256)).astype(np.float32)
    untuned = tessera.compile(str(model), "llvm")
    np.testing.assert_allclose(tuned.run(x=x)["y"], untuned.run(x=x)["y"], rtol=1e-5, atol=1e-4)
    # without the verdict the misleading schedules would be used
    assert tessera.compile(str(model), "llvm", tuning_records=TuningHistory(
        history.records)).tuning_summary() == (len(keys), 0)


@pytest.mark.slow
@needs_llvm
def test_no_model_check_keeps_every_record(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    model = _model(tmp_path / "m.onnx")
    out = tmp_path / "records.jsonl"
    keys = _misleading_records(model, out)
    assert main(["tune", str(model), "--target", "llvm", "--trials", "1", "--repeat", "1",
                 "--no-model-check", "-o", str(out)]) == 0
    assert "whole model:" not in capsys.readouterr().out
    assert TuningHistory.load(out).checks == []
    assert tessera.compile(str(model), "llvm", tuning_records=str(out)).tuning_summary() == \
        (len(keys), 0)


def test_the_latest_check_decides_and_the_file_round_trips(tmp_path: Path) -> None:
    rec = _record('["dense", [[4, 8], 2]]', "dense", {"nr": 4}, 1e-5)
    other = _record('["dense", [[4, 8], 4]]', "dense", {"nr": 8}, 1e-5)
    old = ModelCheck("m.onnx", "llvm", 1.0, 1.2, 1.0, kept=[], rejected=[rec.key, other.key],
                     timestamp=1.0)
    new = ModelCheck("m.onnx", "llvm", 1.0, 0.9, 0.9, kept=[rec.key], rejected=[],
                     timestamp=2.0)
    out = tmp_path / "r.jsonl"
    append_records(out, [rec, other])
    with open(out, "a", encoding="utf-8") as f:
        f.write(new.to_json() + "\n" + old.to_json() + "\n")  # order of lines does not matter
    assert json.loads(new.to_json())["kind"] == MODEL_CHECK
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a check line is not a bad line
        assert len(list(load_records(out))) == 2
        history = TuningHistory.load(out)
    assert set(history.best("llvm")) == {rec.key}  # other rejected, rec kept again later
    assert set(history.rejected) == {other.key}
    overrides = history.overrides("llvm")
    assert overrides.get(other.key) is None and overrides.get(rec.key) == {"nr": 4}
    with pytest.warns(UserWarning, match=r"1 schedule\(s\) left at their defaults"):
        history.warn_rejected()
    assert history.warn_rejected() is None  # said once
    again = TuningHistory.from_text(history.to_text())
    assert len(again.checks) == 2 and set(again.rejected) == {other.key}
    only_checks = tmp_path / "checks.jsonl"
    only_checks.write_text(new.to_json() + "\n")
    assert list(load_records(only_checks)) == []  # a file of checks only is still a records file
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"kind": MODEL_CHECK, "model": "m", "target": "llvm",
                               "untuned_ms": 1, "tuned_ms": 1, "kept_ms": 1,
                               "kept": [1, 2]}) + "\n")
    with pytest.raises(TuningRecordsError, match="not lists of workload keys"):
        TuningHistory.load(bad)


def test_a_candidate_wins_only_clearly() -> None:
    base = [1.00, 1.01, 0.99, 1.00, 1.02, 0.98, 1.00]
    assert wins(Timing([base, [0.90] * 7]), 1, 0)
    assert not wins(Timing([base, [0.995] * 7]), 1, 0)  # within the margin
    assert not wins(Timing([base, [0.5, 0.5, 0.5, 2.0, 2.0, 2.0, 0.5]]), 1, 0)  # 4 of 7
    assert not wins(Timing([base, [1.1] * 7]), 1, 0)
    drifting = [1.0, 1.0, 3.0, 3.0, 3.0, 1.0, 1.0]  # the machine's speed changes under both
    assert wins(Timing([drifting, [0.9 * t for t in drifting]]), 1, 0)
    assert not wins(Timing([drifting, [1.05 * t for t in drifting]]), 1, 0)
