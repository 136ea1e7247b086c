"""Tuning records (``tessera.autotune.records``) and ``apply_history_best``: JSON lines round
trip, malformed and foreign lines skipped with a warning, the best config per workload, and
``tessera.compile(tuning_records=...)`` / ``--tuning-records`` really using it (the schedule
changes, the output does not, the summary counts it)."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli.support import assert_error
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.autotune.records import (
    TuningHistory,
    TuningRecord,
    append_records,
    best_configs,
    load_records,
    record_for,
)
from tessera.autotune.space import ConfigSpace
from tessera.cli.main import main as cli_main
from tessera.errors import TesseraError, TuningRecordsError

RNG = np.random.default_rng(41)


def _space() -> ConfigSpace:
    space = ConfigSpace("dense", ((32, 48), 64, "float32"))
    space.define("mr", [4, 8, 12], 12)
    space.define("nr", [8, 16], 16)
    return space


def _record(cost: float | None, mr: int, backend: str = "llvm", target: str = "llvm",
            error: str | None = None) -> TuningRecord:
    cfg = _space().default_config()
    cfg.values["mr"] = mr
    costs = [] if cost is None else [cost, cost * 1.1]
    return record_for(cfg, backend, target, costs, error)


def test_records_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    recs = [_record(1e-3, 4), _record(None, 8, error="timeout")]
    append_records(path, recs)
    append_records(path, [_record(2e-3, 12)])  # appending keeps the earlier lines
    back = list(load_records(path))
    assert [r.config["mr"] for r in back] == [4, 8, 12]
    assert back[0] == recs[0] and back[0].ok and not back[1].ok
    assert back[0].cpu and back[0].tessera and back[0].timestamp > 0
    assert back[1].mean_cost == float("inf")


def test_malformed_lines_are_skipped_with_one_summary(tmp_path: Path) -> None:
    path = tmp_path / "r.jsonl"
    good = _record(1e-3, 4).to_json()
    lines = [good, "{not json", "[1, 2]", json.dumps({"key": "k"}),
             json.dumps({**json.loads(good), "costs": ["fast"]}), "", good[: len(good) // 2]]
    path.write_text("\n".join(lines) + "\n")
    with pytest.warns(UserWarning) as caught:
        back = list(load_records(path))
    assert len(back) == 1 and back[0].config["mr"] == 4
    (message,) = [str(w.message) for w in caught]  # one summary, not one warning per line
    assert "r.jsonl" in message and "skipped 5 line(s) that are not tuning records" in message
    assert "2 not JSON: lines 2, 7" in message and "1 not a JSON object: line 3" in message
    assert "1 missing template, config, backend: line 4" in message
    assert "1 costs is not a list of numbers: line 5" in message


def test_a_file_without_records_is_an_error_naming_its_first_line(tmp_path: Path) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_text("".join(f"hello line {i}\n" for i in range(445)))
    with pytest.raises(TuningRecordsError, match=r"'.*notes.txt' is not a tuning records "
                       r"file: line 1: not JSON \('hello line 0'\); expected one JSON object"):
        load_records(notes)
    binary = tmp_path / "model.bin"
    binary.write_bytes(b"\x08\x07\x12\x07pytorch\xbb\xff\n" + b"\x00" * 100)
    with pytest.raises(TuningRecordsError, match="line 1 is binary data, not text"):
        TuningHistory.load(binary)
    with pytest.raises(TuningRecordsError, match="line 3: missing key"):
        load_records(_write(tmp_path / "other.jsonl", "", "  ", '{"a": 1}'))
    # a run killed while writing its first record left half a line: a records file, empty
    half = _record(1e-3, 4).to_json()[:30]
    with pytest.warns(UserWarning, match="skipped 1 line"):
        assert list(load_records(_write(tmp_path / "killed.jsonl", half))) == []


def _write(path: Path, *lines: str) -> Path:
    path.write_text("\n".join(lines) + "\n")
    return path


def test_best_config_per_workload_and_backend() -> None:
    recs = [_record(3e-3, 4), _record(1e-3, 8), _record(None, 12, error="crash: SIGSEGV"),
            _record(1e-4, 12, backend="cuda"), _record(5e-4, 4, target="llvm -mcpu=znver3")]
    best = best_configs(recs, "llvm")
    (only,) = best.values()
    assert only.config["mr"] == 4 and only.target == "llvm -mcpu=znver3"  # fastest overall
    # records of the exact target win over faster ones of another -mcpu
    assert best_configs(recs, "llvm", "llvm")[only.key].config["mr"] == 8
    assert best_configs(recs, "cuda")[only.key].config["mr"] == 12


def test_pick_ignores_values_that_are_not_candidates() -> None:
    space = _space()
    key = space.default_config().key()
    assert space.pick({key: {"mr": 8}})["mr"] == 8 and space.pick({key: {"mr": 8}}).tuned
    with pytest.warns(UserWarning, match="value not a candidate mr=5"):
        cfg = space.pick({key: {"mr": 5, "nr": 8}})
    assert cfg.values == {"mr": 12, "nr": 8} and cfg.tuned
    with pytest.warns(UserWarning, match="unknown knob"):
        assert not space.pick({key: {"zz": 1}}).tuned


def _matmul_model() -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    w = RNG.standard_normal((64, 48)).astype(np.float32)
    g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["m"]), helper.make_node("Relu", ["m"], ["y"])],
        "mm", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [32, 48])],
        [numpy_helper.from_array(w, "W")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": RNG.standard_normal((32, 64)).astype(np.float32)}


def _other_config(schedule: dict) -> tuple[str, str, dict]:
    """A config of the kernel's first template with one knob changed to another candidate."""
    first = schedule["configs"][0]
    for name, cands in first["knobs"].items():
        other = [c for c in cands if c != first["config"][name]]
        if other:
            return first["key"], first["template"], {**first["config"], name: other[0]}
    raise AssertionError("no knob with two candidates")


def test_compile_applies_the_best_records(tmp_path: Path) -> None:
    model, inputs = _matmul_model()
    plain = tessera.compile(model, target="llvm")
    assert plain.tuning_summary() is None
    (cr,) = plain.compiled.values()
    (schedule,) = cr.info["schedules"].values()
    key, template, chosen = _other_config(schedule)
    rec = TuningRecord(key=key, template=template, workload=[], config=chosen,
                       backend="llvm", target="llvm", costs=[1e-4])
    slower = TuningRecord(key=key, template=template, workload=[],
                          config=dict(schedule["config"]), backend="llvm", costs=[5e-4])
    path = tmp_path / "tuned.jsonl"
    append_records(path, [slower, rec])
    tuned = tessera.compile(model, target="llvm", tuning_records=str(path))
    (cr2,) = tuned.compiled.values()
    (schedule2,) = cr2.info["schedules"].values()
    assert schedule2["config"] == chosen and schedule2["configs"][0]["tuned"]
    assert tuned.tuning_summary() == (1, len(schedule2["configs"]) - 1)
    np.testing.assert_allclose(tuned.run(**inputs)["y"], plain.run(**inputs)["y"],
                               rtol=1e-5, atol=1e-5)
    # records of another backend leave the llvm schedule alone
    other = tmp_path / "cuda.jsonl"
    append_records(other, [TuningRecord(key=key, template=template, workload=[],
                                        config=chosen, backend="cuda", costs=[1e-5])])
    again = tessera.compile(model, target="llvm", tuning_records=TuningHistory.load(other))
    assert again.tuning_summary() == (0, len(schedule2["configs"]))


def test_cli_tuning_records(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = _matmul_model()
    src = tmp_path / "mm.onnx"
    onnx.save(model, src)
    path = tmp_path / "empty.jsonl"
    path.write_text("")
    rc = cli_main(["compile", str(src), "--target", "llvm", "--tuning-records", str(path),
                   "-o", str(tmp_path / "mm.tar")])
    assert rc == 0
    assert "tuning:  0 schedule(s) from the tuning records" in capsys.readouterr().out
    with pytest.raises(TesseraError, match="does not exist"):
        tessera.compile(model, target="llvm", tuning_records=str(tmp_path / "missing.jsonl"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert list(load_records(path)) == []


def test_cli_refuses_a_file_that_is_not_records(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """``--tuning-records`` given the model itself (binary) or a text file of notes: one
    ``error:`` line naming the file and its first line, no traceback, no warning per line;
    ``tessera tune -o`` such a file refuses to append to it."""
    model, _ = _matmul_model()
    src = tmp_path / "mm.onnx"
    onnx.save(model, src)
    out = ["-o", str(tmp_path / "mm.tar")]
    rc = cli_main(["compile", str(src), "--target", "llvm", "--tuning-records", str(src), *out])
    assert_error(capsys, rc, "mm.onnx' is not a tuning records file",
                 "line 1 is binary data, not text", "expected one JSON object per line")
    notes = _write(tmp_path / "notes.txt", *(f"hello world line {i}" for i in range(445)))
    rc = cli_main(["compile", str(src), "--target", "llvm", "--tuning-records", str(notes),
                   *out])
    err = assert_error(capsys, rc, "notes.txt' is not a tuning records file",
                       "line 1: not JSON ('hello world line 0')")
    assert "warning" not in err
    before = src.read_bytes()
    rc = cli_main(["tune", str(src), "--target", "llvm", "--trials", "1", "-o", str(src)])
    assert_error(capsys, rc, "mm.onnx' is not a tuning records file")
    assert src.read_bytes() == before


def test_cli_summarizes_bad_and_stale_records_in_one_warning(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A real records file with broken lines and a knob value the template no longer offers:
    the good records are applied, and ONE warning counts what was skipped and why."""
    model, _ = _matmul_model()
    src = tmp_path / "mm.onnx"
    onnx.save(model, src)
    (cr,) = tessera.compile(model, target="llvm").compiled.values()
    (schedule,) = cr.info["schedules"].values()
    key, template, chosen = _other_config(schedule)
    good = TuningRecord(key=key, template=template, workload=[], config=chosen,
                        backend="llvm", target="llvm", costs=[1e-4])
    stale_knob = next(iter(chosen))
    stale = TuningRecord(key=key, template=template, workload=[],
                         config={**chosen, stale_knob: 12345}, backend="llvm",
                         target="llvm", costs=[1e-5])
    path = _write(tmp_path / "r.jsonl", good.to_json(), "{half a li", "[1]", "{oops")
    rc = cli_main(["compile", str(src), "--target", "llvm", "--tuning-records", str(path),
                   "-o", str(tmp_path / "a.tar")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (warning,) = [ln for ln in captured.err.splitlines() if ln.startswith("warning:")]
    assert "r.jsonl" in warning and "skipped 3 line(s)" in warning
    assert "2 not JSON: lines 2, 4" in warning and "1 not a JSON object: line 3" in warning
    assert "tuning:  1 schedule(s) from the tuning records" in captured.out
    append_records(path, [stale])  # now the best record has a value the template lacks
    rc = cli_main(["compile", str(src), "--target", "llvm", "--tuning-records", str(path),
                   "-o", str(tmp_path / "b.tar")])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    (warning,) = [ln for ln in captured.err.splitlines() if ln.startswith("warning:")]
    assert "skipped 3 line(s)" in warning
    assert (f"ignored 1 knob value(s) of records that the schedule templates no longer offer "
            f"(1 value not a candidate: {template} {stale_knob}=12345)") in warning
