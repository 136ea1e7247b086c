"""Tuning a model: its tasks, a search per task, every measurement appended to a records file.

:func:`tune` compiles the model once with the default schedules, extracts its tasks
(:mod:`.tasks`), and for each selected task that is tunable and whose backend can build its
kernels alone (``Backend.tuning_candidate``) measures the default config first, then the
tuner's proposals, up to ``trials`` per task, in worker processes
(:class:`~tessera.autotune.measure.Measurer`): the tuner proposes a batch of ``parallel``
configs, which are built in up to ``parallel`` processes at once and then timed one at a time
(tvmc's ``--parallel``). With ``ray_address`` they are built and timed on a Ray cluster's nodes
instead, a batch of ``parallel`` per node (:mod:`tessera.autotune.ray_measure`). Every result,
success or failure, is appended to ``output`` as soon as it is known, so an interrupted run
(Ctrl-C) keeps all of them and running again resumes: configs the file already holds for a task
are not measured again (nor configs that differ from them only in knobs without effect: the
tuners search canonical configs, :mod:`tessera.autotune.knobspace`). A task stops early after
``early_stopping`` trials without a better config (the rest of its batch is not measured).
The ``xgb`` tuner also sees the loop nests its best candidates lower to, through the task's
backend's ``Backend.tuning_features`` called here (:mod:`tessera.autotune.loop_ranker`).
Progress goes to stderr, one line per task: trials, the best GFLOP/s and time, elapsed
seconds (rewritten in place on a terminal; plain lines, at most one a second, in a log).

Then the whole model is measured with and without the records (:mod:`.model_check`): only
the records that make it faster are kept, and the verdict is appended to ``output``, so that
a tuned model is never slower than an untuned one (``model_check=False`` skips it).
"""

from __future__ import annotations

import dataclasses
import json
import math
import time
from pathlib import Path
from typing import Any, TextIO

import tessera
from tessera.autotune.config import TuneConfig, tune_config
from tessera.autotune.loop_ranker import Featurize
from tessera.autotune.measure import Measurer, MeasureResult
from tessera.autotune.model_check import check_model
from tessera.autotune.ray_measure import RayPool, require_ray
from tessera.autotune.records import TuningRecord, append_records, load_records, record_for
from tessera.autotune.space import ScheduleConfig
from tessera.autotune.tasks import Task, static_module, tasks_of_module
from tessera.autotune.tuners import make_tuner
from tessera.errors import TesseraError
from tessera.plugin.manager import get_registry
from tessera.plugin.records import ModelCheck, TuningHistory, best_configs
from tessera.plugin.target import Target
from tessera.progress import StatusLine

__all__ = ["TuneSummary", "tune"]


class TuneSummary:
    """What a tuning run did: per task, trials measured and the best cost."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Task, int, float]] = []
        self.interrupted = False
        self.records: list[TuningRecord] = []
        #: Seconds the xgb tuner spent in the backends' ``tuning_features`` (lowering configs
        #: to featurise their loop nests), and how many configs it featurised.
        self.feature_seconds = 0.0
        self.featurized = 0
        #: What the whole-model check found (None: not run, or no record for the model).
        self.check: ModelCheck | None = None
        #: (backend, workload key) of each selected task -> how many records the output file
        #: held for it before this run and the best mean cost among them (a resumed run).
        self.earlier: dict[tuple[str, str], tuple[int, float]] = {}

    def best_known(self, task: Task, best: float) -> tuple[int, float]:
        """How many records of ``task`` the output held before this run, and the best cost of
        this run's ``best`` and theirs."""
        count, before = self.earlier.get((task.backend, task.key), (0, math.inf))
        return count, min(best, before)

    @property
    def trials(self) -> int:
        return sum(n for _, n, _ in self.tasks)


def _plugin_versions(backend: Any) -> dict[str, str]:
    """The distribution and version of the plugin that provides ``backend``."""
    try:
        registry = get_registry()
        return {registry.owner(backend.name): registry.plugin_version(backend.name) or ""}
    except Exception:  # noqa: BLE001 - versions are a courtesy
        return {}


def _region_of(module: Any, task: Task) -> Any:
    for cr in module.compiled.values():
        if task.kernels[0] in {k.name for k in cr.kernels}:
            return cr
    raise KeyError(task.kernels[0])


def _featurizer(module: Any, task: Task) -> Featurize | None:
    """The loop-nest features of ``task``'s configs, from its backend's
    ``tuning_features`` (in this process; the region ``compile`` got), or None for a backend
    without the hook."""
    cr = _region_of(module, task)
    backend = module.backends[cr.backend]
    hook = getattr(backend, "tuning_features", None)
    if hook is None:
        return None
    kind = Target.parse(task.target).kinds[0]

    def featurize(configs: list[dict[str, Any]]) -> Any:
        return hook(cr.region, task.kernels[0], configs, task.key, kind,
                    module.compile_options)

    return featurize


class _ProgressLine:
    """The progress line on ``out`` (None: none). On a terminal a task's line is rewritten in
    place while it is measured; when another task's trials come next (``--time-budget``
    moves between tasks), the line is ended first, so every line names the task whose trials
    it counts. In a log (a file, a pipe) every update is a plain line of its own, at most one
    a second, and the line that ends a task always (:class:`tessera.progress.StatusLine`)."""

    def __init__(self, out: TextIO | None) -> None:
        self.line = StatusLine(out, tty_interval=0.0) if out is not None else None
        self.index: int | None = None  # the task the unfinished line shows

    def write(self, index: int, total: int, task: Task, done: int, budget: int, best: float,
              start: float, end: str = "") -> None:
        if self.line is None:
            return
        if self.index is not None and self.index != index:
            self.line.finish()
        gflops = task.flops / best / 1e9 if math.isfinite(best) and task.flops else 0.0
        best_text = f"{gflops:8.1f} GFLOP/s ({best * 1e3:.3f} ms)" if math.isfinite(best) \
            else "       - GFLOP/s"
        note = end.rstrip("\n")
        text = (f"[{index}/{total}] {task.template:<22} x{task.weight:<3} trials "
                f"{done:>4}/{budget:<4} best {best_text}  "
                f"{time.perf_counter() - start:6.1f} s{note}")
        if end.endswith("\n"):
            self.line.end(text)
            self.index = None
        else:
            self.line.show(text)
            self.index = index

    def interrupted(self, message: str) -> None:
        """End the unfinished line and say ``message`` on a line of its own."""
        if self.line is not None:
            self.line.finish()
            self.line.print(message)


class _TaskState:
    """One task's search: its tuner, the configs to measure first, its best so far."""

    def __init__(self, index: int, task: Task, search: Any,
                 first: list[dict[str, Any]]) -> None:
        self.index, self.task, self.search, self.first = index, task, search, first
        self.best = math.inf
        self.done = self.since_best = 0
        self.finished = False
        self.start = time.perf_counter()
        self.workload = tuple(json.loads(task.key)[1])

    def propose(self) -> dict[str, Any] | None:
        while self.first:
            config = self.search.canonical({**self.task.default, **self.first.pop(0)})
            if not self.search.seen(config):
                self.search.mark(config)
                return config
        return self.search.next()

    def record(self, config: dict[str, Any], result: MeasureResult, plugins: dict[str, str]
               ) -> TuningRecord:
        self.done += 1
        self.search.update(config, result.mean)
        if result.mean < self.best:
            self.best, self.since_best = result.mean, 0
        else:
            self.since_best += 1
        rec = record_for(ScheduleConfig(self.task.template, self.workload, config),
                         self.task.backend, self.task.target, result.costs, result.error,
                         plugins, cpu=result.cpu or None, host=result.host)
        rec.key = self.task.key  # the workload exactly as the template wrote it
        return rec

    def show(self, out: _ProgressLine, total: int, budget: int, end: str = "") -> None:
        out.write(self.index, total, self.task, self.done, budget, self.best, self.start, end)

    def finish(self, out: _ProgressLine, total: int, note: str = "\n") -> None:
        self.finished = True
        self.show(out, total, self.done, note)


def _next_task(states: list[_TaskState], by_time: bool) -> _TaskState | None:
    """The task to measure next: in order, each to its end; with a time budget, first every
    task's default (what the model spends in it), then the task where the model spends the
    most time (weight x best time so far)."""
    live = [st for st in states if not st.finished]
    if not live:
        return None
    if not by_time:
        return live[0]
    fresh = [st for st in live if st.done == 0]
    if fresh:
        return fresh[0]
    return max(live, key=lambda st: st.task.weight * (st.best if math.isfinite(st.best)
                                                      else 0.0))


def tune(model: Any, target: str | None = "auto", output: str | Path = "tuning.jsonl",
         config: TuneConfig | None = None, **settings: Any) -> TuneSummary:
    """Tune ``model`` for ``target``, appending records to ``output`` (module doc).

    How to tune is a :class:`~tessera.autotune.config.TuneConfig` (trials, tuner, tasks,
    prior records, time budget, parallel builds, a Ray cluster, ...) holding a
    :class:`~tessera.autotune.config.MeasureConfig` (timeout, number, repeat, cache flush),
    given as ``config``, as keyword arguments of either (``trials=20, repeat=5``), or both (the
    keywords win); their docs say what each setting does."""
    cfg = tune_config(config, settings)
    trials, tuner, progress = cfg.trials, cfg.tuner, cfg.progress
    if cfg.ray_address is not None:
        require_ray()  # before compiling: a missing extra is said at once

    # the tasks' candidates lower the module's regions again: the graph keeps its weights
    compiled = tessera.compile(model, target=target, input_shapes=cfg.input_shapes,
                               keep_graph_weights=True)
    module = static_module(compiled)
    if module is not compiled and progress is not None:
        print(f"tuning the part of the model compiled once (before its data-dependent nodes, "
              f"{compiled.host_text()}); what follows them compiles per shape at run time "
              f"and takes the nearest tuned workload's knobs", file=progress)
    if module.missing_devices and cfg.ray_address is None:
        # every candidate would fail to run: say so once instead of once per trial
        raise TesseraError(f"cannot tune for {module.target!r} here: {module.missing_devices}; "
                           f"tune on a machine that has the device (or measure on a Ray "
                           f"cluster that has it, --ray)")
    all_tasks = tasks_of_module(module)
    chosen = list(range(len(all_tasks))) if cfg.tasks is None else list(cfg.tasks)
    for i in chosen:
        if not 0 <= i < len(all_tasks):
            raise TesseraError(f"task {i} does not exist: the model has {len(all_tasks)} "
                               f"tasks for {module.target!r} (0 to {len(all_tasks) - 1})")
    out = Path(output)
    # what the output already holds (not measured again), then the prior file: measured
    # configs per template and workload, the xgb tuner's transfer learning
    history_rows: list[TuningRecord] = list(load_records(out)) if out.is_file() else []
    measured: dict[str, list[dict[str, Any]]] = {}
    earlier: dict[tuple[str, str], tuple[int, float]] = {}
    for r in history_rows:
        measured.setdefault(r.key, []).append(r.config)
        count, cost = earlier.get((r.backend, r.key), (0, math.inf))
        earlier[(r.backend, r.key)] = (count + 1, min(cost, r.mean_cost))
    prior: dict[str, dict[str, Any]] = {}
    if cfg.prior_records is not None:
        history = TuningHistory.load(cfg.prior_records)
        history.warn_skipped()
        history_rows += history.records
        for t in all_tasks:  # the best measured alone, whatever a model check said of it
            best = best_configs(history.records, t.backend)
            if t.key in best:
                prior[t.key] = dict(best[t.key].config)
    summary = TuneSummary()
    selected = [all_tasks[i] for i in chosen]
    summary.earlier = earlier
    states: list[_TaskState] = []
    for n, task in enumerate(selected, 1):
        related: dict[str, list[tuple[dict[str, Any], float]]] = {}
        for r in history_rows:
            if r.ok and r.template == task.template and r.backend == task.backend:
                related.setdefault(r.key, []).append((r.config, r.mean_cost))
        featurize = _featurizer(module, task) if cfg.loop_features and tuner == "xgb" \
            and task.tunable else None
        search = make_tuner(tuner, task.space, cfg.seed, prior=related, featurize=featurize,
                            rerank=min(32, max(16, 4 * cfg.parallel))) if task.tunable else None
        for config in measured.get(task.key, []) if search is not None else []:
            search.mark(config)  # canonically: a config named otherwise is measured too
        states.append(_TaskState(n, task, search,
                                 [c for c in (prior.get(task.key), task.default) if c]))
    measurers: dict[int, Any] = {}
    pool: Any = None
    deadline = None if cfg.time_budget is None else time.perf_counter() + cfg.time_budget
    line = _ProgressLine(progress)
    try:
        if cfg.ray_address is not None:
            pool = RayPool(cfg.ray_address, parallel=cfg.parallel, progress=progress)
        while True:
            state = _next_task(states, deadline is not None)
            if state is None or (deadline is not None and time.perf_counter() > deadline):
                break
            if state.done == 0 and cfg.on_task is not None:
                cfg.on_task(state.task)
            if state.search is None:
                state.finish(line, len(states), "  (nothing to tune)\n")
                continue
            cr = _region_of(module, state.task)
            m = measurers.get(id(cr))
            if m is None:
                args = (module.backends[cr.backend], cr.region,
                        Target.parse(state.task.target).kinds[0], module.compile_options)
                params = dataclasses.asdict(cfg.measure)
                m = measurers[id(cr)] = pool.measurer(*args, **params) if pool is not None \
                    else Measurer(*args, **params, parallel=cfg.parallel)
            configs: list[dict[str, Any]] = []
            while len(configs) < min(m.batch_size, trials - state.done):
                config = state.propose()
                if config is None:
                    break
                configs.append(config)
            if not configs:  # every config measured: in this run, or all before it
                state.finish(line, len(states), "\n" if state.done else
                             "  (already tuned: the records hold every config)\n")
                continue
            plugins = _plugin_versions(module.backends[cr.backend])
            results = m.measure_batch(state.task.kernels[0], state.task.key, configs)
            try:
                for i, result in results:
                    rec = state.record(configs[i], result, plugins)
                    append_records(out, [rec])
                    summary.records.append(rec)
                    state.show(line, len(states), trials)
                    if state.done >= trials or \
                            (cfg.early_stopping and state.since_best >= cfg.early_stopping):
                        state.finish(line, len(states))
                        break
                    if deadline is not None and time.perf_counter() > deadline:
                        break
            finally:
                results.close()
    except KeyboardInterrupt:
        summary.interrupted = True
        line.interrupted(f"interrupted: {len(summary.records)} record(s) of this run kept "
                         f"in {out}")
    finally:
        for m in measurers.values():
            m.close()
        if pool is not None:
            pool.close()
    summary.tasks = [(st.task, st.done, st.best) for st in states if st.done or st.finished]
    for st in states:
        ranker = getattr(st.search, "ranker", None)
        if ranker is not None:
            summary.feature_seconds += ranker.seconds
            summary.featurized += ranker.featurized
    if cfg.model_check and not summary.interrupted and module.missing_devices is None:
        summary.check = _check_whole_model(model, target, cfg, all_tasks, out)
    return summary


def _check_whole_model(model: Any, target: str | None, cfg: TuneConfig, tasks: list[Task],
                       out: Path) -> ModelCheck | None:
    """The whole-model check of the records in ``out`` (:mod:`.model_check`), appended to
    ``out``; None when none of them is for the model's tasks."""
    records = list(load_records(out)) if out.is_file() else []

    def compile_with(history: TuningHistory | None) -> Any:
        return tessera.compile(model, target=target, input_shapes=cfg.input_shapes,
                               tuning_records=history)

    name = Path(model).name if isinstance(model, str | Path) else "the model"
    if cfg.input_shapes:
        name += " at " + ", ".join(f"{k}:{list(v)}".replace(" ", "")
                                   for k, v in cfg.input_shapes.items())
    target_text = ", ".join(sorted({t.target for t in tasks}))
    budget = 60.0 if cfg.check_budget is None else cfg.check_budget
    check = check_model(compile_with, tasks, records, name, target_text, budget, cfg.progress)
    if check is not None:
        with open(out, "a", encoding="utf-8") as f:
            f.write(check.to_json() + "\n")
    return check
