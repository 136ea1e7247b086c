"""The ``xgb`` tuner's second stage: a cost model over knob *and* loop-nest features.

Lowering a config to featurise its loop nest costs tens of milliseconds (hundreds for a
Winograd convolution), too much for the whole candidate pool the knob model scores for every
proposal. So the ranking has two stages: the knob-feature model ranks the whole pool, and a
:class:`LoopFeatureRanker` featurises only its ``top`` candidates (through the ``featurize``
callback the tuner got: configs -> one loop-feature vector each, or None for one that does
not lower; ``tessera.autotune.tune`` builds it from ``Backend.tuning_features``) and picks
among them with a second gradient-boosted ranking model trained on [knob features + loop
features] of the measured configs (their loop features are computed too). Vectors are cached
by config, so a config is lowered once per tuning run.

Failures never stop a search: a config without features (it does not lower, or its vector
has another length than the task's first one) gets missing values (NaN), which the trees send
down their learned default branches, so it is ranked by its knob features; a callback that
raises, or returns None (the backend has no loop-nest features), turns the second stage off
for the rest of the run (``disabled`` says why) and the knob model alone decides.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["Featurize", "LoopFeatureRanker", "rank_model"]

#: The callback: configs (knob values) -> one feature vector per config (None for a config
#: without features), or None when there are no loop-nest features at all.
Featurize = Callable[[list[dict[str, Any]]], "Sequence[Sequence[float] | None] | None"]


def rank_model(x: Any, costs: Sequence[Sequence[float]], rounds: int = 60) -> Any:
    """A gradient-boosted pairwise ranking model (XGBoost) of the rows ``x``: ``costs`` is a
    list of groups of costs (seconds, finite), one group per workload, in the rows' order;
    within a group, faster configs get higher labels and so higher scores."""
    import numpy as np
    import xgboost as xgb

    labels: list[int] = []
    for group in costs:
        order = sorted(range(len(group)), key=lambda i: group[i])
        rank = [0] * len(group)
        for r, i in enumerate(order):
            rank[i] = len(group) - r
        labels.extend(rank)
    dtrain = xgb.DMatrix(np.asarray(x, dtype=np.float64),
                         label=np.array(labels, dtype=np.float64), missing=np.nan)
    dtrain.set_group([len(g) for g in costs])
    params = {"objective": "rank:pairwise", "max_depth": 6, "eta": 0.3, "gamma": 1e-4,
              "min_child_weight": 1, "subsample": 1.0, "nthread": 1, "seed": 0,
              "verbosity": 0}
    return xgb.train(params, dtrain, num_boost_round=rounds)


class LoopFeatureRanker:
    """Loop features of configs (cached by config key) and the model that ranks the knob
    model's ``top`` candidates by knob and loop features together (module doc). It is used
    once ``min_measured`` configs were measured successfully."""

    def __init__(self, featurize: Featurize, top: int = 16, min_measured: int = 4) -> None:
        self.featurize = featurize
        self.top = max(1, min(top, 32))
        self.min_measured = min_measured
        self.cache: dict[str, list[float] | None] = {}
        #: Length of the task's loop-feature vectors (the first vector's).
        self.width: int | None = None
        #: Why the second stage is off (None while it is on).
        self.disabled: str | None = None
        #: Seconds spent in ``featurize`` and configs featurised, for overhead reports.
        self.seconds = 0.0
        self.featurized = 0
        self._model: Any = None
        self._trained_on = -1

    def features(self, keys: list[str], configs: list[dict[str, Any]]
                 ) -> list[list[float] | None]:
        """The loop features of ``configs`` (``keys``: their config keys), featurising the
        ones not cached in one call."""
        missing = [(k, c) for k, c in zip(keys, configs) if k not in self.cache]
        if missing and self.disabled is None:
            unique = dict(missing)
            start = time.perf_counter()
            try:
                got = self.featurize(list(unique.values()))
            except Exception as err:  # noqa: BLE001 - a search never stops for its features
                self._disable(f"featurize failed: {type(err).__name__}: {err}")
                got = None
            else:
                if got is None:
                    self.disabled = "no loop-nest features for this task"
                elif len(got) != len(unique):
                    self._disable(f"featurize returned {len(got)} vectors for "
                                  f"{len(unique)} configs")
                    got = None
            self.seconds += time.perf_counter() - start
            if got is not None:
                self.featurized += len(unique)
                for key, vec in zip(unique, got):
                    self.cache[key] = self._checked(vec)
        return [self.cache.get(k) for k in keys]

    def _disable(self, why: str) -> None:
        self.disabled = why
        warnings.warn(f"xgb tuner: ranking by knob features alone ({why})", stacklevel=3)

    def _checked(self, vec: Sequence[float] | None) -> list[float] | None:
        if vec is None:
            return None
        out = [float(v) for v in vec]
        if self.width is None:
            self.width = len(out)
        return out if len(out) == self.width else None

    def _rows(self, knob_rows: list[list[float]], loops: list[list[float] | None]) -> Any:
        import numpy as np

        width = self.width or 0
        return np.array([k + (v if v is not None else [math.nan] * width)
                         for k, v in zip(knob_rows, loops)], dtype=np.float64)

    def train(self, knob_rows: list[list[float]], keys: list[str],
              configs: list[dict[str, Any]], costs: list[float]) -> bool:
        """(Re)train on the measured configs (finite ``costs``) when they changed; whether a
        model is ready."""
        if self.disabled is not None or len(costs) < max(self.min_measured, 2):
            return False
        if len(costs) != self._trained_on:
            loops = self.features(keys, configs)
            if self.disabled is not None:
                return False
            if self.width is None:  # no measured config lowered: nothing to learn from
                return False
            self._model = rank_model(self._rows(knob_rows, loops), [costs])
            self._trained_on = len(costs)
        return self._model is not None

    def pick(self, knob_rows: list[list[float]], keys: list[str],
             configs: list[dict[str, Any]]) -> int | None:
        """The index of the best of ``configs`` (the knob model's top candidates) by the
        trained model, or None when the second stage is off."""
        if self._model is None or self.disabled is not None or not configs:
            return None
        loops = self.features(keys, configs)
        if self.disabled is not None:
            return None
        import numpy as np
        import xgboost as xgb

        scores = self._model.predict(xgb.DMatrix(self._rows(knob_rows, loops),
                                                 missing=np.nan))
        return int(np.argmax(scores))
