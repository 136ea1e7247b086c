"""Search strategies and ``tessera tune``: grid and random search cover a space without
repeats; tuning a model appends one record per trial, resumes without measuring a config
twice, stops early, keeps its records when interrupted, and its records change the compiled
schedule; the CLI's flags."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from optional import needs

import tessera
from tessera.autotune.records import load_records
from tessera.autotune.tune import tune
from tessera.autotune.tuners import GridSearchTuner, RandomTuner, config_key, make_tuner
from tessera.cli.main import main as cli_main
from tessera.errors import TesseraError

KNOBS = {"a": [1, 2, 3], "b": [True, False], "c": ["x", "y"]}


def _drain(tuner: object) -> list[dict]:
    out = []
    while (c := tuner.next()) is not None:  # type: ignore[attr-defined]
        out.append(c)
    return out


def test_grid_search_enumerates_every_config_once_in_order() -> None:
    configs = _drain(GridSearchTuner(KNOBS))
    want = [dict(zip(KNOBS, v)) for v in itertools.product(*KNOBS.values())]
    assert configs == want


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_random_search_covers_the_space_without_repeats(seed: int) -> None:
    tuner = RandomTuner(KNOBS, seed)
    tuner.mark({"a": 2, "b": False, "c": "y"})  # measured before (a resumed run)
    configs = _drain(tuner)
    keys = [config_key(c) for c in configs]
    assert len(keys) == len(set(keys)) == 11 and config_key({"a": 2, "b": False, "c": "y"}) \
        not in keys
    assert not tuner.has_next()
    with pytest.raises(TesseraError, match="unknown tuner 'xgb2'"):
        make_tuner("xgb2", KNOBS)


def _conv_model(tmp_path: Path) -> tuple[Path, dict[str, np.ndarray]]:
    rng = np.random.default_rng(47)
    w = rng.standard_normal((16, 8, 3, 3)).astype(np.float32) * 0.2
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 12, 12])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 12, 12])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "conv.onnx"
    onnx.save(model, path)
    return path, {"x": rng.standard_normal((1, 8, 12, 12)).astype(np.float32)}


@pytest.mark.slow
def test_tune_records_resume_and_apply(tmp_path: Path) -> None:
    model, inputs = _conv_model(tmp_path)
    out = tmp_path / "records.jsonl"
    first = tune(str(model), target="llvm", output=out, trials=3, tasks=[0], repeat=1,
                 timeout=30, progress=None, model_check=False)
    recs = list(load_records(out))
    assert first.trials == 3 == len(recs) and all(r.ok for r in recs)
    task = first.tasks[0][0]
    assert recs[0].config == task.default  # the default is measured first
    assert {r.key for r in recs} == {task.key} and recs[0].backend == "llvm"
    again = tune(str(model), target="llvm", output=out, trials=4, tasks=[0], repeat=1,
                 timeout=30, progress=None, model_check=False)
    recs = list(load_records(out))
    assert again.trials == 4 and len(recs) == 7
    assert len({config_key(r.config) for r in recs}) == 7  # nothing measured twice
    # a new file seeded with --prior-records measures the prior best first
    seeded = tmp_path / "seeded.jsonl"
    tune(str(model), target="llvm", output=seeded, trials=1, tasks=[0], repeat=1,
         timeout=30, progress=None, prior_records=str(out), model_check=False)
    best = min((r for r in load_records(out) if r.ok), key=lambda r: r.mean_cost)
    assert [r.config for r in load_records(seeded)] == [best.config]
    mod = tessera.compile(str(model), target="llvm", tuning_records=str(out))
    assert mod.tuning_summary()[0] == 1  # (no model check ran: it may reject a record)
    want = tessera.compile(str(model), target="llvm").run(**inputs)["y"]
    np.testing.assert_allclose(mod.run(**inputs)["y"], want, rtol=1e-5, atol=1e-5)


@pytest.mark.slow
def test_early_stopping_and_interruption(tmp_path: Path) -> None:
    model, _ = _conv_model(tmp_path)
    out = tmp_path / "r.jsonl"
    stopped = tune(str(model), target="llvm", output=out, trials=50, tasks=[0],
                   early_stopping=1, repeat=1, timeout=30, progress=None, tuner="gridsearch",
                   model_check=False)
    assert 2 <= stopped.trials < 50
    seen: list[str] = []

    def interrupt(task: object) -> None:
        seen.append(task.template)  # type: ignore[attr-defined]
        if len(seen) > 1:
            raise KeyboardInterrupt

    before = len(list(load_records(out)))
    result = tune(str(model), target="llvm", output=out, trials=2, repeat=1, timeout=30,
                  progress=None, on_task=interrupt)
    assert result.interrupted and len(seen) == 2
    assert len(list(load_records(out))) == before + result.trials


@pytest.mark.slow
def test_cli_tune(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = _conv_model(tmp_path)
    assert cli_main(["tune", str(model), "--target", "llvm", "--tasks", "list"]) == 0
    listed = capsys.readouterr().out
    assert "task(s) for 'llvm'" in listed and "conv2d_NCHWc" in listed
    out = tmp_path / "cli.jsonl"
    rc = cli_main(["tune", str(model), "--target", "llvm", "--tasks", "0", "--trials", "2",
                   "--tuner", "gridsearch", "--repeat", "1", "--number", "2",
                   "--min-repeat-ms", "1", "--timeout", "30", "--early-stopping", "5",
                   "--cache-flush", "-o", str(out)])
    assert rc == 0 and len(list(load_records(out))) == 2
    assert "2 trial(s) in 1 task(s)" in capsys.readouterr().out
    assert cli_main(["tune", str(model), "--target", "llvm", "--tasks", "7"]) != 0
    assert "task 7 does not exist" in capsys.readouterr().err
    assert cli_main(["tune", str(model), "--tasks", "3-1"]) != 0
    assert cli_main(["tune", str(model), "--tuner", "annealing"]) != 0


def test_cli_tune_says_a_resumed_task_is_already_tuned(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """Resuming a task whose every config the records file holds measures nothing and says
    it was already tuned, with the best time from the file (not "0 trial(s) best no
    success"); the header names the target "auto" resolved to."""
    from tessera.autotune.records import append_records, record_for
    from tessera.autotune.space import ScheduleConfig
    from tessera.autotune.tasks import tasks_of_module
    from tessera.plugin.manager import default_cpu_target

    model, _ = _conv_model(tmp_path)
    tasks = tasks_of_module(tessera.compile(str(model), target="llvm"))
    index, task = next((i, t) for i, t in enumerate(tasks) if t.template == "injective")
    grid = make_tuner("gridsearch", task.space)
    out = tmp_path / "done.jsonl"
    records = []
    for n, config in enumerate(iter(grid.next, None), 1):
        rec = record_for(ScheduleConfig(task.template, (), config), task.backend, task.target,
                         costs=[n * 1e-3])
        rec.key = task.key
        records.append(rec)
    append_records(out, records)
    rc = cli_main(["tune", str(model), "--tasks", str(index), "--trials", "5", "-o", str(out)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert f"for {default_cpu_target()!r} (auto: the best installed CPU backend)" in captured.err
    assert "(already tuned: the records hold every config)" in captured.err
    assert (f"0 trial(s)  already tuned ({len(records)} record(s) before), best 1.000 ms"
            in captured.out)
    assert "no success" not in captured.out
    assert len(list(load_records(out))) == len(records)  # nothing measured again


SYNTH = {"a": [1, 2, 4, 8, 16, 32, 64, 3, 6, 12, 24, 48], "b": list(range(10)),
         "c": [True, False], "d": ["p", "q", "r", "s", "t", "u"]}


def synthetic_cost(cfg: dict, scale: float = 1.0) -> float:
    """A smooth cost over 1440 configs with one optimum: a=12, b=2, c=True, d='t'."""
    import math

    d = SYNTH["d"].index(cfg["d"])
    return scale * (1 + (math.log2(cfg["a"]) - 3.5) ** 2 + 0.5 * (cfg["b"] - 2) ** 2
                    + (0 if cfg["c"] else 3) + 0.8 * (d - 4) ** 2)


def trials_to_optimum(name: str, seed: int, prior: dict | None = None) -> int:
    tuner = make_tuner(name, SYNTH, seed, prior=prior)
    n = 0
    while (cfg := tuner.next()) is not None:
        n += 1
        tuner.update(cfg, synthetic_cost(cfg))
        if cfg == {"a": 12, "b": 2, "c": True, "d": "t"}:
            return n
    raise AssertionError(f"{name} exhausted the space without the optimum")


@pytest.mark.slow
@needs("xgboost")
def test_xgboost_finds_the_optimum_in_fewer_trials_than_random() -> None:
    seeds = range(5)
    xgb = [trials_to_optimum("xgb", s) for s in seeds]
    rnd = [trials_to_optimum("random", s) for s in seeds]
    ga = [trials_to_optimum("ga", s) for s in seeds]
    assert sum(xgb) < sum(rnd) / 4, (xgb, rnd)
    assert sum(ga) < sum(rnd), (ga, rnd)


@pytest.mark.slow
@needs("xgboost")
def test_xgboost_learns_from_records_of_other_workloads() -> None:
    """Transfer learning: measurements of a related workload (the same landscape at another
    scale) let the model start where the optimum is."""
    import random as pyrandom

    rng = pyrandom.Random(5)
    others = [GridSearchTuner(SYNTH).config_at(rng.randrange(1440)) for _ in range(80)]
    prior = {"other": [(c, synthetic_cost(c, 7.0)) for c in others]}
    seeds = range(5)
    cold = sum(trials_to_optimum("xgb", s) for s in seeds)
    warm = sum(trials_to_optimum("xgb", s, prior) for s in seeds)
    assert warm < cold, (warm, cold)


@pytest.mark.slow
@needs("xgboost")
def test_tune_with_xgb_and_ga(tmp_path: Path) -> None:
    model, _ = _conv_model(tmp_path)
    for name in ("xgb", "ga"):
        out = tmp_path / f"{name}.jsonl"
        result = tune(str(model), target="llvm", output=out, trials=3, tasks=[0], repeat=1,
                      timeout=30, progress=None, tuner=name, model_check=False)
        assert result.trials == 3 and len(list(load_records(out))) == 3


@pytest.mark.slow
def test_time_budget_measures_every_default_then_the_heaviest(tmp_path: Path) -> None:
    from autotune.test_tasks import _two_identical_convs_and_a_matmul

    path = tmp_path / "m.onnx"
    onnx.save(_two_identical_convs_and_a_matmul(), path)
    out = tmp_path / "budget.jsonl"
    start = __import__("time").perf_counter()
    result = tune(str(path), target="llvm", output=out, trials=1000, repeat=1, timeout=30,
                  progress=None, time_budget=6.0, model_check=False)
    elapsed = __import__("time").perf_counter() - start
    assert elapsed < 6.0 + 30  # the budget, the compile, at most one candidate past it
    tunable = [(t, n) for t, n, _ in result.tasks if t.tunable]
    assert tunable and all(n >= 1 for _, n in tunable)  # every default measured
    assert result.trials < 1000 * len(tunable)
    # the rest went to the task the model spends most time in (the two convolutions)
    conv = next(n for t, n in tunable if t.template == "conv2d_NCHWc")
    assert conv == max(n for _, n in tunable)


def test_progress_line_ends_before_another_tasks_trials() -> None:
    """Under a time budget tasks take turns: each task's trials go on a line of its own
    (rewritten in place while that task goes on), never over another task's line."""
    import io

    from tessera.autotune.tasks import Task
    from tessera.autotune.tune import _ProgressLine

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    out = Terminal()
    line = _ProgressLine(out)
    a = Task(key="a", template="conv_a", backend="llvm", target="llvm", knobs={}, default={})
    b = Task(key="b", template="dense_b", backend="llvm", target="llvm", knobs={}, default={})
    line.write(1, 2, a, 1, 10, 0.002, 0.0)
    line.write(1, 2, a, 2, 10, 0.001, 0.0)
    line.write(2, 2, b, 1, 10, 0.003, 0.0)
    line.write(1, 2, a, 3, 10, 0.001, 0.0, "\n")  # a finishes
    line.write(2, 2, b, 2, 10, 0.003, 0.0)
    shown = [row.split("\r")[-1] for row in out.getvalue().split("\n")]
    assert [row.split()[1] for row in shown if row] == ["conv_a", "dense_b", "conv_a",
                                                        "dense_b"]
    assert "trials    2/10" in out.getvalue().split("\n")[0].split("\r")[-1]
    assert "" not in shown[:-1]  # no empty line after a finished one


def test_progress_in_a_log_is_plain_throttled_lines(monkeypatch: pytest.MonkeyPatch) -> None:
    """Written to a file (not a terminal) the progress has no carriage returns: one plain
    line per update, at most one a second, and always the line that ends a task."""
    import io

    import tessera.progress
    from tessera.autotune.tasks import Task
    from tessera.autotune.tune import _ProgressLine

    now = [0.0]
    monkeypatch.setattr(tessera.progress, "_now", lambda: now[0])
    out = io.StringIO()
    line = _ProgressLine(out)
    a = Task(key="a", template="conv_a", backend="llvm", target="llvm", knobs={}, default={})
    b = Task(key="b", template="dense_b", backend="llvm", target="llvm", knobs={}, default={})
    for done in range(1, 21):  # 20 trials, 0.25 s apart: 5 s
        now[0] += 0.25
        line.write(1, 2, a, done, 20, 0.001, 0.0, "\n" if done == 20 else "")
    line.write(2, 2, b, 0, 20, float("inf"), 0.0, "  (nothing to tune)\n")
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text
    rows = text.splitlines()
    assert all(row.startswith("[") for row in rows)
    assert [r.split()[4] for r in rows[:-1]] == ["4/20", "8/20", "12/20", "16/20", "20/20"]
    assert rows[-1].split()[1] == "dense_b" and rows[-1].endswith("(nothing to tune)")
