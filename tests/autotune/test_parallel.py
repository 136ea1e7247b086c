"""``tessera tune --parallel N`` (``Measurer(parallel=N)``): candidates are built in up to N
worker processes at the same time, then timed one at a time while the other workers wait; a
crashing, hanging, failing or wrong candidate in a batch costs one trial and its worker comes
back; records are those of a one-at-a-time run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from autotune.test_tune import _conv_model
from autotune.toy_parallel import LoggingBackend, read_log
from autotune.toy_tuning import MisbehavingBackend

from tessera.autotune.measure import Measurer
from tessera.autotune.records import load_records
from tessera.autotune.tune import tune
from tessera.autotune.tuners import config_key
from tessera.cli.main import main as cli_main
from tessera.errors import TesseraError


@pytest.mark.slow
def test_builds_overlap_and_measurements_run_alone(tmp_path: Path) -> None:
    log = tmp_path / "log.txt"
    region = {"log": str(log), "build_s": 0.6, "run_s": 0.01}
    modes = ["a", "b", "c", "d"]
    with Measurer(LoggingBackend(), region, None, None, timeout=20, repeat=2,
                  parallel=3) as m:
        assert m.batch_size == 3
        results = list(m.measure_batch("k", "key", [{"mode": x} for x in modes]))
    assert [i for i, _ in results] == [0, 1, 2, 3]  # in order
    assert all(r.error is None and len(r.costs) == 2 for _, r in results)
    rows = read_log(str(log))
    builds = {mode: (s, e) for _, mode, phase, s, e in rows if phase == "build"}
    assert set(builds) == set(modes)
    # a, b and c were built at the same time, in three processes; d after them (batch 2)
    first = [builds[x] for x in "abc"]
    assert max(s for s, _ in first) < min(e for _, e in first)
    assert len({pid for pid, mode, *_ in rows if mode in "abc"}) == 3
    assert builds["d"][0] >= max(e for _, e in first)
    # a timed run never overlaps anything another candidate does (build, check or timing)
    timed = [(mode, s, e) for _, mode, phase, s, e in rows if phase == "time"]
    assert len(timed) == 4 * (1 + 2)  # one untimed run, then two measurements, each
    for mode, s, e in timed:
        for _, other, _, s2, e2 in rows:
            if other != mode:
                assert e <= s2 or e2 <= s, (mode, other)


@pytest.mark.slow
def test_bad_candidates_in_a_parallel_batch_cost_one_trial_each() -> None:
    modes = ["ok", "crash", "hang", "wrong", "raise", "slow", "ok"]
    with Measurer(MisbehavingBackend(), {"scale": 2.0}, None, None, timeout=3.0, repeat=2,
                  parallel=4) as m:
        got = dict(m.measure_batch("k", "key", [{"mode": x} for x in modes]))
        assert sorted(got) == list(range(len(modes)))
        assert got[0].error is None and len(got[0].costs) == 2
        assert got[1].error == "crash: the worker exited with code 3" and not got[1].costs
        assert got[2].error == "timeout after 3 s"
        assert got[3].error.startswith("wrong result: output 0: max abs diff 1")
        assert got[4].error == "error: ValueError: this candidate does not build"
        assert got[5].error is None and got[5].mean >= 0.002
        assert got[6].error is None
        # the crashed and the hung workers were replaced: a full batch measures again
        again = dict(m.measure_batch("k", "key", [{"mode": "ok"}] * 4))
        assert all(r.error is None for r in again.values()) and len(again) == 4


def test_a_batch_stopped_early_leaves_the_workers_usable() -> None:
    with Measurer(MisbehavingBackend(), {"scale": 1.0}, None, None, timeout=10.0, repeat=1,
                  parallel=2) as m:
        batch = m.measure_batch("k", "key", [{"mode": "ok"}, {"mode": "slow"}])
        assert next(batch)[1].error is None
        batch.close()  # the second candidate was built, never timed
        assert m.measure("k", "key", {"mode": "slow"}).error is None
    with pytest.raises(ValueError, match="parallel must be at least 1"):
        Measurer(MisbehavingBackend(), {}, None, None, parallel=0)


@pytest.mark.slow
def test_tune_in_parallel_writes_the_same_records(tmp_path: Path) -> None:
    model, _ = _conv_model(tmp_path)
    serial, parallel = tmp_path / "serial.jsonl", tmp_path / "parallel.jsonl"
    tune(str(model), target="llvm", output=serial, trials=2, tasks=[0], repeat=1,
         timeout=30, progress=None, tuner="gridsearch", model_check=False)
    result = tune(str(model), target="llvm", output=parallel, trials=5, tasks=[0], repeat=1,
                  timeout=30, progress=None, tuner="gridsearch", parallel=2, model_check=False)
    assert result.trials == 5
    recs = list(load_records(parallel))
    assert len(recs) == 5 and all(r.ok for r in recs)
    assert recs[0].config == result.tasks[0][0].default  # the default still first
    assert [r.config for r in recs[:2]] == [r.config for r in load_records(serial)]

    def fields(path: Path) -> set[str]:
        return {k for line in path.read_text().splitlines() for k in json.loads(line)}

    assert fields(parallel) == fields(serial)  # no "host": measured here
    # resume: nothing measured twice
    tune(str(model), target="llvm", output=parallel, trials=3, tasks=[0], repeat=1,
         timeout=30, progress=None, tuner="gridsearch", parallel=2, model_check=False)
    keys = [config_key(r.config) for r in load_records(parallel)]
    assert len(keys) == 8 == len(set(keys))
    with pytest.raises(TesseraError, match="parallel must be at least 1"):
        tune(str(model), target="llvm", output=parallel, parallel=0, progress=None)


@pytest.mark.slow
def test_cli_parallel(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model, _ = _conv_model(tmp_path)
    out = tmp_path / "cli.jsonl"
    rc = cli_main(["tune", str(model), "--target", "llvm", "--tasks", "0", "--trials", "3",
                   "--parallel", "2", "--repeat", "1", "--timeout", "30", "-o", str(out)])
    assert rc == 0 and len(list(load_records(out))) == 3
    captured = capsys.readouterr()
    assert "3 trial(s) in 1 task(s)" in captured.out and "2 built at once" in captured.err
    assert cli_main(["tune", str(model), "--parallel", "0"]) != 0
    assert "--parallel must be at least 1" in capsys.readouterr().err
