"""The whole-model check after tuning: keep only the tuned schedules that make the model faster.

A tuner measures each kernel alone, in a worker process, with its own inputs in the caches.
In the model a kernel runs between its neighbours, on the real thread pool, with the caches
as they leave them; a schedule that wins alone (a larger tile, another packing, fewer
threads) can lose there, and a model tuned with such records runs slower than untuned.

:func:`check_model` compiles the model with the default schedules, with every workload's best
record, and times both in the model's own conditions (one process, warm, alternating blocks).
When every record together wins clearly, all are kept. Otherwise the records are tried one
workload at a time, the largest isolated saving first, each kept only when the model with it
wins clearly against the model without it, until every workload is tried or the check's
time is spent; the set kept that way must then win against the untuned model once more, over
more blocks, or none is kept. The result is a :class:`~tessera.plugin.records.ModelCheck`
that ``tune`` appends to the records file: the workloads not kept are rejected, and a compile
with the file leaves them at their default schedules and says so. Whatever the records, the
model it compiles is never slower than untuned by more than the measurement's noise.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

import numpy as np

from tessera._version import __version__
from tessera.plugin.records import (
    ModelCheck,
    TuningHistory,
    TuningRecord,
    best_configs,
    cpu_name,
)

__all__ = ["BLOCKS", "MARGIN", "check_model", "compare", "wins"]

#: A faster candidate must be faster by this fraction, as the median of its time over the
#: reference's block by block...
MARGIN = 0.02
#: ... over this many alternating blocks, and faster in at least two thirds of them.
BLOCKS = 9
#: Blocks of the last comparison, of the records kept one by one against the untuned model.
FINAL_BLOCKS = 15
#: Seconds one module runs in one block (a block is at least 3 runs).
BLOCK_S = 0.03

#: Compiles the model with these records (None: the default schedules).
Compiler = Callable[[TuningHistory | None], Any]


@dataclass
class Timing:
    """Per module: the mean milliseconds of a run in each block."""

    blocks: list[list[float]]

    def median(self, i: int) -> float:
        return float(np.median(self.blocks[i]))


def compare(modules: Sequence[Any], blocks: int = BLOCKS, block_s: float = BLOCK_S) -> Timing:
    """Time ``modules`` (anything with ``benchmark(repeat, number, warmup)``, on inputs set
    earlier or random ones) in ``blocks`` rounds, each running every module for about
    ``block_s`` seconds in a rotated order, so that a change of machine load meets all
    alike."""
    number = []
    for mod in modules:  # how many runs make a block
        mod.benchmark(repeat=1, number=1, warmup=2)
        once = mod.benchmark(repeat=3, number=1, warmup=0).median / 1000.0
        number.append(max(3, min(10_000, int(block_s / max(once, 1e-7)))))
    for mod, n in zip(modules, number):  # warm: a freshly compiled module's first runs are slow
        mod.benchmark(repeat=1, number=2 * n, warmup=0)
    times: list[list[float]] = [[] for _ in modules]
    order = list(range(len(modules)))
    for b in range(blocks):
        for i in order[b % len(order):] + order[:b % len(order)]:
            times[i].append(modules[i].benchmark(repeat=1, number=number[i], warmup=0).median)
    return Timing(times)


def wins(timing: Timing, candidate: int, reference: int, margin: float = MARGIN) -> bool:
    """Whether ``candidate`` is clearly faster than ``reference``, block by block (a VM's
    speed drifts over seconds; the two runs of a block share its state): the median of the
    blocks' time ratios below ``1 - margin``, and faster in at least two thirds of them."""
    ratios = [c / r for c, r in zip(timing.blocks[candidate], timing.blocks[reference])]
    faster = sum(x < 1 for x in ratios)
    return float(np.median(ratios)) < 1 - margin and faster * 3 >= 2 * len(ratios)


def _history(records: Sequence[TuningRecord], keys: set[str]) -> TuningHistory:
    return TuningHistory([r for r in records if r.key in keys], "(the model check)")


def _savings(tasks: Sequence[Any], records: Sequence[TuningRecord],
             best: dict[str, TuningRecord]) -> list[str]:
    """The tuned workloads of ``tasks``, the largest isolated saving first: weight times the
    default config's cost less the best's (weight times work where the default was not
    measured)."""
    order = []
    for task in tasks:
        rec = best.get(task.key)
        if rec is None:
            continue
        default = [r.mean_cost for r in records
                   if r.key == task.key and r.ok and r.config == task.default]
        saving = task.weight * (min(default) - rec.mean_cost) if default else \
            task.weight * max(task.flops, 1) * 1e-12
        order.append((saving, task.key))
    return [key for _, key in sorted(order, key=lambda item: -item[0])]


def check_model(compile_with: Compiler, tasks: Sequence[Any], records: Sequence[TuningRecord],
                model: str, target: str, budget_s: float = 60.0,
                out: TextIO | None = None) -> ModelCheck | None:
    """Measure the model (``compile_with``) untuned and with the best of ``records`` for its
    ``tasks``, and decide which workloads keep their records (module doc); None when no
    record changes a schedule of the model (a best config that is the default is not
    judged). ``budget_s`` bounds the one-workload-at-a-time search;
    ``out`` hears what is measured."""
    def say(text: str) -> None:
        if out is not None:
            print(f"model check: {text}", file=out, flush=True)

    defaults = {t.key: t.default for t in tasks}
    best = {k: r for k, r in best_configs(records).items()  # records that change a schedule
            if k in defaults and r.config != defaults[k]}
    if not best:
        return None
    start = time.perf_counter()
    untuned, tuned = compile_with(None), compile_with(_history(records, set(best)))
    timing = compare([untuned, tuned])
    untuned_ms, tuned_ms = timing.median(0), timing.median(1)
    say(f"{untuned_ms:.4f} ms untuned, {tuned_ms:.4f} ms with the best record of each of "
        f"{len(best)} workload(s)")
    if wins(timing, 1, 0):
        kept: set[str] = set(best)
        kept_ms = tuned_ms
    else:
        say("the records do not make the whole model faster together; trying them one "
            "workload at a time")
        kept, current = set(), untuned
        order = _savings(tasks, records, best)
        for n, key in enumerate(order, 1):
            if time.perf_counter() - start > budget_s:
                say(f"time is up after {n - 1} of {len(order)} workload(s); the others keep "
                    f"their default schedules")
                break
            candidate = compile_with(_history(records, kept | {key}))
            step = compare([current, candidate])
            verdict = wins(step, 1, 0)
            say(f"[{n}/{len(order)}] {best[key].template}: {step.median(1):.4f} against "
                f"{step.median(0):.4f} ms: {'kept' if verdict else 'left at its default'}")
            if verdict:
                kept.add(key)
                current = candidate
        if kept:  # the kept set against the untuned model once more: it must win there too
            final = compare([untuned, current], blocks=FINAL_BLOCKS)
            kept_ms = final.median(1)
            if not wins(final, 1, 0):
                say(f"the {len(kept)} record(s) kept one by one do not win against the "
                    f"untuned model ({kept_ms:.4f} against {final.median(0):.4f} ms); none "
                    f"is kept")
                kept, kept_ms = set(), final.median(0)
        else:
            kept_ms = untuned_ms
    rejected = sorted(set(best) - kept)
    check = ModelCheck(model=model, target=target, untuned_ms=untuned_ms, tuned_ms=tuned_ms,
                       kept_ms=kept_ms if math.isfinite(kept_ms) else untuned_ms,
                       kept=sorted(kept), rejected=rejected, cpu=cpu_name(),
                       tessera=__version__, timestamp=time.time())
    say(f"{check.summary()} ({time.perf_counter() - start:.1f} s)")
    return check
