"""Candidates measured in a worker process (``tessera.autotune.measure``): a crashing, a
hanging, a failing and a wrong-result candidate each cost one trial with the reason, and the
worker comes back for the next; timing and the output check."""

from __future__ import annotations

import time

import numpy as np
import pytest
from autotune.toy_tuning import MisbehavingBackend

from tessera.autotune.measure import (
    Measurer,
    TuningCandidate,
    check_outputs,
    time_candidate,
)


@pytest.mark.slow
def test_bad_candidates_cost_one_trial_each() -> None:
    with Measurer(MisbehavingBackend(), {"scale": 2.0}, None, None, timeout=3.0,
                  repeat=2) as m:
        ok = m.measure("k", "key", {"mode": "ok"})  # starts the worker, builds the reference
        assert ok.error is None and len(ok.costs) == 2 and all(c > 0 for c in ok.costs)
        crash = m.measure("k", "key", {"mode": "crash"})
        assert crash.error == "crash: the worker exited with code 3" and not crash.costs
        m.measure("k", "key", {"mode": "ok"})  # a new worker, which has the reference again
        hang = m.measure("k", "key", {"mode": "hang"})
        assert hang.error == "timeout after 3 s"
        m.measure("k", "key", {"mode": "ok"})
        wrong = m.measure("k", "key", {"mode": "wrong"})
        assert wrong.error.startswith("wrong result: output 0: max abs diff 1")
        failed = m.measure("k", "key", {"mode": "raise"})
        assert failed.error == "error: ValueError: this candidate does not build"
        slow = m.measure("k", "key", {"mode": "slow"})
        assert slow.error is None and slow.mean > ok.mean and slow.mean >= 0.002


def test_time_candidate_and_min_repeat_ms() -> None:
    calls = []
    c = TuningCandidate(lambda: calls.append(1), lambda: [])
    costs = time_candidate(c, number=3, repeat=2)
    assert len(costs) == 2 and len(calls) == 1 + 3 * 2
    calls.clear()
    time_candidate(c, number=1, repeat=1, min_repeat_ms=5.0)
    assert len(calls) > 3  # one untimed, one to size the measurement, then enough for 5 ms


def test_check_outputs() -> None:
    a = np.arange(6, dtype=np.float32)
    assert check_outputs([a + 1e-7], [a]) is None
    assert "max abs diff" in check_outputs([a + 1], [a])
    assert "elements differ" in check_outputs([np.arange(3)], [np.array([0, 1, 3])])
    assert "float32[6], expected float32[3]" in check_outputs([a], [a[:3]])
    with pytest.raises(TypeError):
        check_outputs([a], None)  # type: ignore[arg-type]


def test_deep_regions_reach_the_worker() -> None:
    """A region as deep as ResNet-50's (each node linked to its inputs' producers) travels as
    JSON plus its constants: pickling the linked graph would recurse past Python's limit."""
    from tessera.autotune.measure import _pack_region, _unpack_region
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType

    fn = Function("deep")
    x = fn.add_input("x", TensorType((4,), "float32"))
    c = fn.constant(np.arange(4, dtype=np.float32), name="c")
    for i in range(1500):
        x = fn.op("Add", x, c) if i % 2 else fn.op("Relu", x)
    fn.outputs = [x]
    back = _unpack_region(_pack_region(fn))
    assert len(back.nodes) == 1500 and [n.op for n in back.nodes[:2]] == ["Relu", "Add"]
    np.testing.assert_array_equal(back.nodes[1].inputs[1].data, np.arange(4))


def test_cache_flush_runs_before_each_timed_run_outside_the_time() -> None:
    events: list[str] = []

    def flush() -> None:
        events.append("flush")
        time.sleep(0.005)

    c = TuningCandidate(lambda: events.append("run"), lambda: [], flush=flush)
    costs = time_candidate(c, number=2, repeat=3, cache_flush=True)
    assert events == ["run"] + ["flush", "run"] * 6  # one untimed run, then flushed ones
    assert len(costs) == 3 and max(costs) < 0.004  # the flush's 5 ms are not timed
    events.clear()
    time_candidate(c, number=2, repeat=3)
    assert "flush" not in events  # only when asked
    events.clear()
    time_candidate(TuningCandidate(lambda: events.append("run"), lambda: []), 2, 3,
                   cache_flush=True)  # a candidate without a flush is timed as it is
    assert events == ["run"] * 7


@pytest.mark.slow
def test_measurer_passes_cache_flush_to_the_worker() -> None:
    region = {"scale": 2.0}
    with Measurer(MisbehavingBackend(), region, None, None, timeout=10.0, repeat=2) as warm, \
            Measurer(MisbehavingBackend(), region, None, None, timeout=10.0, repeat=2,
                     cache_flush=True) as cold:
        hot = warm.measure("k", "key", {"mode": "cold"})
        flushed = cold.measure("k", "key", {"mode": "cold"})
    assert hot.error is None and flushed.error is None
    assert flushed.mean >= 0.003 > hot.mean
