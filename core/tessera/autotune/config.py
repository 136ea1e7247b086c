"""What a user asks of :func:`tessera.autotune.tune`, as objects: :class:`TuneConfig` (the
search) holding a :class:`MeasureConfig` (how each candidate is timed, TVM's
``measure_option``).

``tune(model, target, output, config)`` takes one; the same settings may also be given as
keyword arguments, the search's and the measurement's alike (``tune(m, "llvm", trials=20,
repeat=5)``), which override the config's fields.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from tessera.config import merge_config
from tessera.errors import TesseraError

__all__ = ["MeasureConfig", "TuneConfig", "tune_config"]


@dataclass(frozen=True)
class MeasureConfig:
    """How each candidate is timed: ``timeout`` seconds to build and run it, ``number`` runs
    per timing, ``repeat`` timings (their mean is the cost), each at least ``min_repeat_ms``
    long; ``cache_flush``: every timed run starts with the kernel's constants evicted from the
    caches and its other inputs loaded, as in a model whose weights do not stay in the caches
    between runs (``TuningCandidate.flush``; TVM's ``enable_cpu_cache_flush``)."""

    timeout: float = 10.0
    number: int = 1
    repeat: int = 3
    min_repeat_ms: float = 0.0
    cache_flush: bool = False

    def __post_init__(self) -> None:
        if self.timeout <= 0:
            raise TesseraError(f"timeout must be positive, not {self.timeout}")
        if self.number < 1 or self.repeat < 1:
            raise TesseraError(f"number and repeat must be at least 1, not {self.number} "
                               f"and {self.repeat}")


@dataclass(frozen=True)
class TuneConfig:
    """How to tune a model.

    - ``trials``: configs measured per task at most; ``tuner``: ``random``, ``grid``,
      ``ga`` or ``xgb``; ``seed``: the tuner's seed.
    - ``early_stopping``: a task stops after that many trials without a better config.
    - ``tasks``: which tasks, by their index in :func:`tessera.autotune.tasks_of_module`'s
      order (heaviest first); None: all.
    - ``prior_records``: the best config of each workload there is measured first (it may be
      from another model or machine).
    - ``input_shapes``: as for :func:`tessera.compile`.
    - ``time_budget`` (seconds for the whole model): tasks are interleaved, every task's
      default first, then always the task the model spends most time in (weight x best time),
      until the budget is spent; ``trials`` still caps each task.
    - ``parallel``: candidates built at once (each then timed alone); ``ray_address``
      (``HOST:PORT``, ``auto``; needs ``tessera[distributed]``): measure on that Ray
      cluster's nodes, ``parallel`` candidates per node at a time.
    - ``loop_features``: the ``xgb`` tuner also ranks its best candidates by the loop nests
      they lower to, where the backend has ``tuning_features``; False: by knob values alone.
    - ``progress``: where the per-task progress lines go (None: nowhere); ``on_task``:
      called with each task when its first trial starts.
    - ``model_check``: after tuning, measure the whole model with and without the records
      and keep only those that make it faster (:mod:`tessera.autotune.model_check`; the
      verdict is appended to the records file); ``check_budget``: seconds that check may
      spend trying records one workload at a time (None: 60).
    - ``measure``: a :class:`MeasureConfig`.
    """

    trials: int = 100
    tuner: str = "random"
    early_stopping: int | None = None
    tasks: Sequence[int] | None = None
    prior_records: str | Path | None = None
    input_shapes: Mapping[str, Sequence[int]] | None = None
    seed: int = 0
    progress: TextIO | None = field(default_factory=lambda: sys.stderr)
    time_budget: float | None = None
    on_task: Callable[[Any], None] | None = None
    parallel: int = 1
    ray_address: str | None = None
    loop_features: bool = True
    model_check: bool = True
    check_budget: float | None = None
    measure: MeasureConfig = field(default_factory=MeasureConfig)

    def __post_init__(self) -> None:
        if self.parallel < 1:
            raise TesseraError(f"parallel must be at least 1, not {self.parallel}")
        if self.trials < 1:
            raise TesseraError(f"trials must be at least 1, not {self.trials}")
        if self.time_budget is not None and self.time_budget <= 0:
            raise TesseraError(f"time_budget must be positive, not {self.time_budget}")
        if self.check_budget is not None and self.check_budget < 0:
            raise TesseraError(f"check_budget must not be negative, not {self.check_budget}")


_MEASURE_FIELDS = frozenset(f.name for f in dataclasses.fields(MeasureConfig))


def tune_config(config: TuneConfig | None, settings: Mapping[str, Any]) -> TuneConfig:
    """``config`` (default: ``TuneConfig()``) with the keyword arguments of
    :func:`~tessera.autotune.tune.tune` applied: the measurement's (``timeout``, ``number``,
    ``repeat``, ``min_repeat_ms``, ``cache_flush``) to its ``measure``, the others to the
    search."""
    measure = {k: v for k, v in settings.items() if k in _MEASURE_FIELDS}
    search = {k: v for k, v in settings.items() if k not in _MEASURE_FIELDS}
    cfg = merge_config(TuneConfig, config, search, "tune()")
    if measure:
        cfg = dataclasses.replace(cfg, measure=merge_config(MeasureConfig, cfg.measure,
                                                            measure, "tune()"))
    return cfg
