"""Tuning a model: its tasks, a search per task, every measurement appended to a records file.

:func:`tune` compiles the model once with the default schedules, extracts its tasks
(:mod:`.tasks`), and for each selected task that is tunable and whose backend can build its
kernels alone (``Backend.tuning_candidate``) measures the default config first, then the
tuner's proposals, up to ``trials`` per task, each in a worker process
(:class:`~tessera.autotune.measure.Measurer`). Every result, success or failure, is appended to
``output`` as soon as it is known, so an interrupted run (Ctrl-C) keeps all of them and running
again resumes: configs the file already holds for a task are not measured again. A task stops
early after ``early_stopping`` trials without a better config. Progress goes to stderr, one
line per task: trials, the best GFLOP/s and time, elapsed seconds.
"""

from __future__ import annotations

import json
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TextIO

from tessera.autotune.measure import Measurer
from tessera.autotune.records import TuningRecord, append_records, load_records, record_for
from tessera.autotune.space import ScheduleConfig
from tessera.autotune.tasks import Task, tasks_of_module
from tessera.autotune.tuners import config_key, make_tuner

__all__ = ["TuneSummary", "tune"]


class TuneSummary:
    """What a tuning run did: per task, trials measured and the best cost."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Task, int, float]] = []
        self.interrupted = False
        self.records: list[TuningRecord] = []

    @property
    def trials(self) -> int:
        return sum(n for _, n, _ in self.tasks)


def _plugin_versions(backend: Any) -> dict[str, str]:
    """The distribution and version of the plugin that provides ``backend``."""
    try:
        from tessera.plugin.manager import get_registry

        registry = get_registry()
        return {registry.owner(backend.name): registry.plugin_version(backend.name) or ""}
    except Exception:  # noqa: BLE001 - versions are a courtesy
        return {}


def _region_of(module: Any, task: Task) -> Any:
    for cr in module.compiled.values():
        if task.kernels[0] in {k.name for k in cr.kernels}:
            return cr
    raise KeyError(task.kernels[0])


def _progress(out: TextIO | None, index: int, total: int, task: Task, done: int, budget: int,
              best: float, start: float, end: str = "") -> None:
    if out is None:
        return
    gflops = task.flops / best / 1e9 if math.isfinite(best) and task.flops else 0.0
    best_text = f"{gflops:8.1f} GFLOP/s ({best * 1e3:.3f} ms)" if math.isfinite(best) \
        else "       - GFLOP/s"
    out.write(f"\r[{index}/{total}] {task.template:<22} x{task.weight:<3} trials "
              f"{done:>4}/{budget:<4} best {best_text}  {time.perf_counter() - start:6.1f} s"
              f"{end}")
    out.flush()


def tune(model: Any, target: str | None = "auto", output: str | Path = "tuning.jsonl",
         trials: int = 100, tuner: str = "random", timeout: float = 10.0, number: int = 1,
         repeat: int = 3, min_repeat_ms: float = 0.0, early_stopping: int | None = None,
         tasks: Sequence[int] | None = None, prior_records: str | Path | None = None,
         input_shapes: dict[str, list[int]] | None = None, seed: int = 0,
         progress: TextIO | None = sys.stderr,
         on_task: Callable[[Task], None] | None = None) -> TuneSummary:
    """Tune ``model`` for ``target``, appending records to ``output`` (module doc).

    ``tasks`` selects tasks by their index in :func:`tessera.autotune.tasks_of_module`'s
    order (heaviest first); ``prior_records``: the best config of each workload there is
    measured first (it may be from another model or machine)."""
    import tessera
    from tessera.plugin.target import Target

    module = tessera.compile(model, target=target, input_shapes=input_shapes)
    all_tasks = tasks_of_module(module)
    chosen = list(range(len(all_tasks))) if tasks is None else list(tasks)
    for i in chosen:
        if not 0 <= i < len(all_tasks):
            from tessera.errors import TesseraError

            raise TesseraError(f"task {i} does not exist: the model has {len(all_tasks)} "
                               f"tasks for {module.target!r} (0 to {len(all_tasks) - 1})")
    out = Path(output)
    measured: dict[str, set[str]] = {}
    if out.is_file():
        for r in load_records(out):
            measured.setdefault(r.key, set()).add(config_key(r.config))
    prior: dict[str, dict[str, Any]] = {}
    # measured configs per template and workload (the prior file and what the output holds):
    # the xgb tuner's transfer learning
    history_rows: list[TuningRecord] = list(load_records(out)) if out.is_file() else []
    if prior_records is not None:
        from tessera.autotune.records import TuningHistory

        history = TuningHistory.load(prior_records)
        history_rows += history.records
        for t in all_tasks:
            prior.update({k: v for k, v in history.overrides(t.backend).items()
                          if k == t.key})
    summary = TuneSummary()
    selected = [all_tasks[i] for i in chosen]
    try:
        for n, task in enumerate(selected, 1):
            if on_task is not None:
                on_task(task)
            cr = _region_of(module, task)
            backend = module.backends[cr.backend]
            kind = Target.parse(task.target).kinds[0]
            start = time.perf_counter()
            best = math.inf
            done = 0
            if not task.tunable:
                _progress(progress, n, len(selected), task, 0, 0, best, start,
                          "  (nothing to tune)\n")
                summary.tasks.append((task, 0, best))
                continue
            related: dict[str, list[tuple[dict[str, Any], float]]] = {}
            for r in history_rows:
                if r.ok and r.template == task.template and r.backend == task.backend:
                    related.setdefault(r.key, []).append((r.config, r.mean_cost))
            search = make_tuner(tuner, task.knobs, seed, prior=related)
            search.visited |= measured.get(task.key, set())
            queue = [c for c in (prior.get(task.key), task.default) if c]
            since_best = 0
            workload = json.loads(task.key)[1]
            with Measurer(backend, cr.region, kind, module.compile_options, timeout=timeout,
                          number=number, repeat=repeat, min_repeat_ms=min_repeat_ms) as m:
                while done < trials:
                    if queue:
                        config = {**task.default, **queue.pop(0)}
                        if config_key(config) in search.visited:
                            continue
                        search.mark(config)
                    else:
                        config = search.next()
                        if config is None:
                            break
                    result = m.measure(task.kernels[0], task.key, config)
                    done += 1
                    search.update(config, result.mean)
                    rec = record_for(ScheduleConfig(task.template, tuple(workload), config),
                                     task.backend, task.target, result.costs, result.error,
                                     _plugin_versions(backend))
                    rec.key = task.key  # the workload exactly as the template wrote it
                    append_records(out, [rec])
                    summary.records.append(rec)
                    if result.mean < best:
                        best, since_best = result.mean, 0
                    else:
                        since_best += 1
                    _progress(progress, n, len(selected), task, done, trials, best, start)
                    if early_stopping and since_best >= early_stopping:
                        break
            _progress(progress, n, len(selected), task, done, trials, best, start, "\n")
            summary.tasks.append((task, done, best))
    except KeyboardInterrupt:
        summary.interrupted = True
        if progress is not None:
            progress.write(f"\ninterrupted: {len(summary.records)} record(s) of this run kept "
                           f"in {out}\n")
    return summary
