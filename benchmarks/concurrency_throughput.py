"""Throughput of one compiled module called from 1, 2 and 4 Python threads, against one
onnxruntime session called the same way, on the same machine and in the same run.

A service shares one model between the threads of its pool: ``Module.run(**inputs)`` gives each
concurrent call its own execution state, and ``InferenceSession.run`` is thread safe too. For
each model and number of calling threads, every thread calls ``run`` on an input of its own in
a loop for ``--seconds``; the table gives completed inferences per second for both runtimes,
the ratio of their mean time per inference (Tessera over onnxruntime: below 1 is faster) and
each runtime's scaling over one calling thread, the per-call latency (p50, p99) of both, and
Tessera's median latency over the lone caller's ("T slow") against the most the share of the
machine each caller gets allows ("share": n callers, 1/n of the machine each). Every result a
thread gets is checked against the single-threaded output for its input. Both runtimes'
kernels use ``--threads`` threads (``TESSERA_NUM_THREADS``; onnxruntime's intra-op threads);
with more calling threads than cores the calls compete for them, so scaling past the core
count is not expected.

    python benchmarks/concurrency_throughput.py                       # llvm, squeezenet,resnet50
    python benchmarks/concurrency_throughput.py --models squeezenet --callers 1,2,4,8 --seconds 5
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable
from typing import Any

from _common import cpu_name, limit_threads, ort_session


def _throughput(call: Callable[[int], Any], check: Callable[[int, Any], bool], callers: int,
                seconds: float) -> tuple[float, int, list[float]]:
    """(inferences per second, wrong results, every call's latency in ms) with ``callers``
    threads calling ``call(i)``."""
    start = threading.Barrier(callers + 1)
    stop = threading.Event()
    counts = [0] * callers
    wrong = [0] * callers
    latencies: list[list[float]] = [[] for _ in range(callers)]

    def worker(t: int) -> None:
        start.wait()
        while not stop.is_set():
            t0 = time.perf_counter()
            out = call(t)
            latencies[t].append((time.perf_counter() - t0) * 1e3)
            if not check(t, out):
                wrong[t] += 1
            counts[t] += 1

    threads = [threading.Thread(target=worker, args=(t,)) for t in range(callers)]
    for th in threads:
        th.start()
    start.wait()
    began = time.perf_counter()
    time.sleep(seconds)
    stop.set()
    for th in threads:
        th.join()
    return (sum(counts) / (time.perf_counter() - began), sum(wrong),
            [x for lat in latencies for x in lat])


def _model_rows(key: str, target: str, threads: int, callers: list[int],
                seconds: float) -> int:
    """Print one model's rows; returns how many of Tessera's results were wrong."""
    import numpy as np

    import tessera
    from tessera.testing.light_models import load_light_model

    light = load_light_model(key)
    mod = tessera.compile(light.model, target=target, input_shapes=light.input_shapes)
    session = ort_session(light.model, threads)
    (name, t), = mod.input_types.items()
    rng = np.random.default_rng(0)
    xs = [rng.standard_normal(t.shape).astype(np.float32) for _ in range(max(callers))]
    out = mod.output_names[0]
    want = [mod.run(**{name: x})[out] for x in xs]
    want_ort = [session.run(None, {name: x})[0] for x in xs]
    wrong = 0
    base: dict[str, float] = {}
    for n in callers:
        ours, bad, lat = _throughput(lambda i: mod.run(**{name: xs[i]})[out],
                                     lambda i, y: np.array_equal(y, want[i]), n, seconds)
        theirs, bad_ort, lat_ort = _throughput(
            lambda i: session.run(None, {name: xs[i]})[0],
            lambda i, y: np.array_equal(y, want_ort[i]), n, seconds)
        p50, p99 = np.percentile(lat, [50, 99])
        o50, o99 = np.percentile(lat_ort, [50, 99])
        base.setdefault("t", ours)
        base.setdefault("o", theirs)
        base.setdefault("p50", p50)
        # n callers share the machine: each gets 1/n of it, so its median latency may grow
        # by n over a lone caller's (which has every core), no more
        allowed = float(n)
        wrong += bad
        print(f"{key:<12} {n:>7} {ours:>13.1f} {theirs:>10.1f} {theirs / ours:>6.2f} "
              f"{ours / base['t']:>7.2f}x {theirs / base['o']:>8.2f}x {p50:>7.2f} {p99:>7.2f} "
              f"{o50:>7.2f} {o99:>7.2f} {p50 / base['p50']:>6.2f}x {allowed:>5.1f}x "
              f"{bad:>3}/{bad_ort}")
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--models", default="squeezenet,resnet50",
                        help="light models (names under onnx's light model folder)")
    parser.add_argument("--callers", default="1,2,4", help="numbers of calling threads")
    parser.add_argument("--threads", type=int, default=2, help="kernel threads per runtime")
    parser.add_argument("--seconds", type=float, default=3.0, help="per measurement")
    args = parser.parse_args(argv)
    limit_threads(args.threads)
    callers = [int(c) for c in args.callers.split(",")]
    print(f"machine: {cpu_name()}; target {args.target!r}; {args.threads} kernel threads per "
          f"runtime; {args.seconds:g} s per measurement")
    header = (f"{'model':<12} {'callers':>7} {'Tessera inf/s':>13} {'ort inf/s':>10} "
              f"{'ratio':>6} {'T scale':>8} {'ort scale':>9} {'T p50':>7} {'T p99':>7} "
              f"{'ort p50':>7} {'ort p99':>7} {'T slow':>7} {'share':>6} {'wrong':>6}")
    print(header)
    print("-" * len(header))
    total_wrong = 0
    for key in args.models.split(","):
        total_wrong += _model_rows(key, args.target, args.threads, callers, args.seconds)
    print("wrong: Tessera/onnxruntime results that differ from the single-threaded ones")
    return 1 if total_wrong else 0


if __name__ == "__main__":
    raise SystemExit(main())
