"""tessera_llvm.parallel when threads are late: chunk claiming, stealing, stragglers, load.

The loop bodies here are Python functions called through ctypes (``void body(i64 begin,
i64 end, void *closure)``), launched with ``tessera_parallel_for`` directly, so a test can see
which thread ran which range and delay the workers: as a descheduled worker would be, before
it claims a chunk (:func:`parallel.inject_worker_delay`) or in the middle of one (the body
sleeps when a worker runs it). No assertion is about time: a worker that never comes costs
nothing exactly when the caller ran every chunk itself.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import threading
import time

import numpy as np
import pytest

from tessera.plugin import threads as host_threads
from tessera_llvm import parallel

BODY = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64, ctypes.c_void_p)
LAUNCH = ctypes.CFUNCTYPE(None, BODY, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64)


class Loop:
    """A parallel loop whose body records ``(begin, end, thread)`` of every range it runs and
    sleeps ``worker_sleep`` seconds when a worker (not the launching thread) runs it,
    ``caller_sleep`` when the launching thread does."""

    def __init__(self, worker_sleep: float = 0.0, caller_sleep: float = 0.0) -> None:
        self.ranges: list[tuple[int, int, int]] = []
        self.lock = threading.Lock()
        self.caller = 0
        self.worker_sleep = worker_sleep
        self.caller_sleep = caller_sleep
        self._body = BODY(self._run)
        self._launch = LAUNCH(parallel.runtime().parallel_for)

    def _run(self, begin: int, end: int, _closure: int) -> None:
        me = threading.get_ident()
        pause = self.caller_sleep if me == self.caller else self.worker_sleep
        if pause:
            time.sleep(pause)
        with self.lock:
            self.ranges.append((begin, end, me))

    def __call__(self, extent: int, grain: int = 1) -> list[tuple[int, int, int]]:
        self.ranges = []
        self.caller = threading.get_ident()
        self._launch(self._body, None, extent, grain)
        return self.ranges


def covered_once(ranges: list[tuple[int, int, int]], extent: int) -> bool:
    counts = np.zeros(extent, np.int64)
    for begin, end, _ in ranges:
        assert 0 <= begin < end <= extent, (begin, end)
        counts[begin:end] += 1
    return bool((counts == 1).all())


def no_sit_outs(pool) -> None:
    """Turn straggler detection off and let any sit-out of an earlier test end (they last
    320 ms at most), so every worker takes part."""
    pool.set_straggler_us(0)
    time.sleep(0.35)


@pytest.fixture
def pool():
    """The pool with its settings restored after the test (and no injected delay)."""
    saved = (parallel.get_num_threads(),
             parallel.get_spin_us() if parallel.spin_pinned() else None,
             parallel.get_chunks_per_thread(), parallel.get_straggler_us(),
             parallel.is_load_aware())
    parallel.set_load_aware(False)
    yield parallel
    parallel.inject_worker_delay(0)
    parallel.set_num_threads(saved[0])
    parallel.set_spin_us(saved[1])
    parallel.set_chunks_per_thread(saved[2])
    parallel.set_straggler_us(saved[3])
    parallel.set_load_aware(saved[4])


@pytest.mark.parametrize("nthreads", [2, 3, 4])
@pytest.mark.parametrize("chunks", [1, 4, 7])
def test_every_index_once_for_any_extent_grain_and_split(pool, nthreads, chunks):
    pool.set_num_threads(nthreads)
    pool.set_chunks_per_thread(chunks)
    loop = Loop()
    for extent in (1, 2, 3, 5, 8, 13, 64, 1000, 70001):
        for grain in (1, 3, 100):
            ranges = loop(extent, grain)
            assert covered_once(ranges, extent), (extent, grain)
            most = max(1, min(extent // grain, nthreads * chunks))
            if nthreads == 1 or extent // grain <= 1:
                assert len(ranges) == 1
            else:  # fewer when a worker sits out (a straggler of an earlier test)
                assert 1 <= len(ranges) <= most


def test_every_index_once_when_workers_are_late_to_claim(pool):
    """Workers that wake up late (injected delays of several sizes) still leave every index
    run exactly once: whoever claims a chunk first runs it."""
    pool.set_num_threads(4)
    loop = Loop()
    for delay_us in (0, 5, 50, 500):
        pool.inject_worker_delay(delay_us)
        for _ in range(30):
            assert covered_once(loop(257), 257)


def test_caller_does_not_wait_for_workers_that_never_come(pool):
    """With every worker held far longer than the loop takes, the calling thread claims and
    runs every chunk itself and returns: no chunk waits for a worker that has not started."""
    pool.set_num_threads(3)
    pool.set_chunks_per_thread(4)
    no_sit_outs(pool)
    loop = Loop()
    loop(64)  # start the workers
    pool.inject_worker_delay(300_000)  # 0.3 s before a worker claims anything
    time.sleep(0.01)
    for _ in range(20):
        ranges = loop(64)
        assert covered_once(ranges, 64)
        assert {t for _, _, t in ranges} == {threading.get_ident()}
        assert len(ranges) == 12  # the job's chunks, all run by the caller
    pool.inject_worker_delay(0)


def test_chunks_of_a_late_worker_are_stolen_from_the_back(pool):
    """The caller runs its own range first and then takes a late worker's chunks from the end
    of that worker's range: every range the caller ran is contiguous from 0, then from the
    end backwards."""
    pool.set_num_threads(2)
    pool.set_chunks_per_thread(4)
    no_sit_outs(pool)
    loop = Loop()
    loop(80)
    pool.inject_worker_delay(50_000)
    time.sleep(0.01)
    ranges = loop(80)
    assert covered_once(ranges, 80)
    mine = [(b, e) for b, e, t in ranges if t == threading.get_ident()]
    assert mine[:4] == [(0, 10), (10, 20), (20, 30), (30, 40)]  # its own slot, in order
    assert mine[4:] == [(70, 80), (60, 70), (50, 60), (40, 50)][:len(mine) - 4]
    pool.inject_worker_delay(0)


def test_a_worker_descheduled_in_a_chunk_sits_out_then_comes_back(pool):
    """A worker that sleeps in the middle of a chunk (as one the OS descheduled) makes the
    loop wait once; then it sits out: the next loops run on the caller alone, every index
    still once. After the sit-out it helps again."""
    pool.set_num_threads(2)
    pool.set_chunks_per_thread(2)
    no_sit_outs(pool)
    pool.set_straggler_us(200)
    loop = Loop(worker_sleep=0.05, caller_sleep=0.005)  # the worker starts a chunk in time
    before = pool.sit_outs()
    ranges = loop(40)
    assert covered_once(ranges, 40)
    assert {t for _, _, t in ranges} - {threading.get_ident()}, "the worker ran no chunk"
    assert pool.sit_outs() == before + 1
    loop.caller_sleep = 0.0
    for _ in range(5):  # within its first sit-out (10 ms)
        ranges = loop(40)
        assert covered_once(ranges, 40)
        assert {t for _, _, t in ranges} == {threading.get_ident()}
    assert pool.sit_outs() == before + 1
    loop.worker_sleep = 0.0
    loop.caller_sleep = 0.001  # time for the worker to wake up and claim a chunk
    pool.set_straggler_us(0)  # a busy test machine must not make it straggle again
    time.sleep(0.05)  # the sit-out is over
    seen: set[int] = set()
    for _ in range(100):
        ranges = loop(4000)
        assert covered_once(ranges, 4000)
        seen |= {t for _, _, t in ranges}
        if len(seen) > 1:
            break
    assert len(seen) == 2, "the worker never helped again"


def test_straggler_detection_off(pool):
    pool.set_num_threads(2)
    pool.set_straggler_us(0)
    loop = Loop(worker_sleep=0.005)
    before = pool.sit_outs()
    for _ in range(3):
        assert covered_once(loop(40), 40)
    assert pool.sit_outs() == before


def test_load_cap_follows_the_runnable_count(pool, monkeypatch):
    """adapt_to_load caps a 2-thread pool on 2 cores to 1 thread once one other task has been
    runnable in three samples in a row, and lifts the cap at the first sample without it; on a
    full machine (two others) it keeps both threads. The fewest others in the window decide."""
    rt = pool.runtime()
    monkeypatch.setattr(rt, "cores", 2)
    monkeypatch.setattr(parallel, "LOAD_SAMPLE_NS", 0)
    pool.set_num_threads(2)
    pool.set_load_aware(True)
    running = {"n": 1}
    monkeypatch.setattr(parallel, "runnable_tasks", lambda: running["n"])
    monkeypatch.setattr(rt, "awake_workers", lambda: 0)

    def sample() -> int:
        rt.next_sample = 0
        pool.adapt_to_load()
        return pool.load_cap()

    assert sample() == 0  # only this thread runs
    running["n"] = 2  # this thread and one neighbour
    assert [sample() for _ in range(3)] == [0, 0, 1]
    loop = Loop()
    for _ in range(5):
        ranges = loop(100)
        assert covered_once(ranges, 100)
        assert {t for _, _, t in ranges} == {threading.get_ident()}
    running["n"] = 1
    assert sample() == 0
    running["n"] = 3  # two neighbours: the free cores would give less than the fair share
    assert [sample() for _ in range(3)] == [0, 0, 0]
    running["n"] = 2  # one of the two leaves: fewer others count at once
    assert sample() == 1


def test_spin_follows_the_load(pool, monkeypatch):
    """Waiting threads spin IDLE_SPIN_US while no sample in the window saw another runnable
    task, 100 us from the first sample that does (and under a CPU quota, or with load
    awareness off); a spin set with set_spin_us stays until set_spin_us(None)."""
    rt = pool.runtime()
    monkeypatch.setattr(parallel, "LOAD_SAMPLE_NS", 0)
    monkeypatch.setattr(rt, "awake_workers", lambda: 0)
    monkeypatch.setattr(rt, "quota_limited", False)
    running = {"n": 1}
    monkeypatch.setattr(parallel, "runnable_tasks", lambda: running["n"])
    pool.set_spin_us(None)
    pool.set_load_aware(True)

    def sample() -> float:
        rt.next_sample = 0
        pool.adapt_to_load()
        return pool.get_spin_us()

    idle, busy = parallel.IDLE_SPIN_US, parallel.DEFAULT_SPIN_US
    assert sample() == idle and not pool.spin_pinned()
    running["n"] = 2  # a neighbour, seen once
    assert sample() == busy
    running["n"] = 1
    assert [sample() for _ in range(3)] == [busy, busy, idle]  # until it left the window
    monkeypatch.setattr(rt, "quota_limited", True)
    assert sample() == busy
    monkeypatch.setattr(rt, "quota_limited", False)
    assert sample() == idle
    pool.set_load_aware(False)
    assert pool.get_spin_us() == busy
    pool.set_load_aware(True)
    pool.set_spin_us(5)
    assert sample() == 5 and pool.spin_pinned()
    pool.set_spin_us(None)
    assert not pool.spin_pinned() and sample() == idle
    pool.set_load_aware(False)
    assert pool.load_cap() == 0


def test_threads_under_load_rule():
    rule = host_threads.threads_under_load
    assert rule(cores=2, threads=2, others=0) == 2
    assert rule(cores=2, threads=2, others=1) == 1
    assert rule(cores=2, threads=2, others=2) == 2  # full: keep the fair share
    assert rule(cores=16, threads=16, others=4) == 12
    assert rule(cores=16, threads=16, others=15) == 16  # 1 free core against ~8 by sharing
    assert rule(cores=16, threads=4, others=3) == 4  # enough free cores
    assert rule(cores=4, threads=4, others=-1) == 4


def test_concurrent_launches_while_workers_are_delayed(pool):
    """Several Python threads launching at once (one gets the pool, the others run their
    ranges serially) with late workers: every launch covers its range once."""
    pool.set_num_threads(3)
    pool.inject_worker_delay(200)
    failures = []

    def work() -> None:
        loop = Loop()
        for _ in range(50):
            if not covered_once(loop(301), 301):
                failures.append(threading.get_ident())

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not failures


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or (os.cpu_count() or 1) < 2,
                    reason="needs CPU affinity and two CPUs")
def test_load_awareness_is_off_under_an_affinity_mask():
    """With the process pinned to some CPUs, /proc/loadavg's runnable tasks may be on others:
    the pool then never caps its threads from it, and uses the pinned CPUs' count."""
    cpu = sorted(os.sched_getaffinity(0))[0]
    code = ("from tessera_llvm import parallel; "
            "print(parallel.is_load_aware(), parallel.get_num_threads(), "
            "parallel.thread_count_source())")
    env = {k: v for k, v in os.environ.items() if k != "TESSERA_NUM_THREADS"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}))
    assert out.returncode == 0, out.stderr
    assert out.stdout.split()[:2] == ["False", "1"]
    assert "CPU affinity (1 of" in out.stdout
