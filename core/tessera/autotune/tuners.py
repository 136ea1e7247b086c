"""Search strategies over a task's knobs: grid search, random search, a genetic search and
XGBoost-guided search (``TUNERS``: ``gridsearch``, ``random``, ``ga``, ``xgb``).

A tuner proposes configs (knob name -> value) of one :class:`~tessera.autotune.tasks.Task`,
never one it has already proposed or was told is measured (``visited``: resumed records), and
``update`` tells it the results. It searches a :class:`~tessera.autotune.knobspace.KnobSpace`:
configs are canonical (a knob that has no effect under the other knobs' values, ``when``, at
its default) and ``visited`` holds canonical configs, so a kernel is never measured twice
under two names. The canonical configs are numbered (``KnobSpace.config_at``), so a space of
any size is enumerated (grid) or sampled (random) without being built.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

from tessera.autotune.knobspace import Conditions, KnobSpace
from tessera.autotune.loop_ranker import Featurize, LoopFeatureRanker, rank_model
from tessera.errors import TesseraError

__all__ = ["GATuner", "GridSearchTuner", "RandomTuner", "TUNERS", "Tuner", "XGBTuner",
           "config_key", "make_tuner"]


def config_key(config: dict[str, Any]) -> str:
    """A config's identity (knob order does not matter)."""
    return json.dumps(config, sort_keys=True, default=str)


def _space(knobs: dict[str, list[Any]] | KnobSpace) -> KnobSpace:
    return knobs if isinstance(knobs, KnobSpace) else KnobSpace(knobs)


class Tuner:
    """Base: the task's space (knobs, or a :class:`KnobSpace` with conditions), the canonical
    configs already proposed or measured, results."""

    def __init__(self, knobs: dict[str, list[Any]] | KnobSpace, seed: int = 0) -> None:
        self.space = _space(knobs)
        self.knobs = list(self.space.knobs.items())
        self.size = self.space.size()
        self.visited: set[str] = set()
        #: How many configs of the space ``visited`` holds (it may hold others: records of
        #: another version of the template).
        self.covered = 0
        self.rng = random.Random(seed)
        self.results: list[tuple[dict[str, Any], float]] = []
        #: index -> (config_key of config_at(index), key of it): the space does not change,
        #: and the tuners look the same indices up again and again (small spaces)
        self._keys: dict[int, tuple[str, str]] = {}

    def config_at(self, index: int) -> dict[str, Any]:
        """The ``index``-th canonical config (``0 <= index < size``)."""
        return self.space.config_at(index)

    def _keys_at(self, index: int) -> tuple[str, str]:
        """``(config_key(config_at(index)), key(config_at(index)))``, remembered."""
        keys = self._keys.get(index)
        if keys is None:
            config = self.config_at(index)
            keys = self._keys[index] = (config_key(config), self.key(config))
        return keys

    def canonical(self, config: dict[str, Any]) -> dict[str, Any]:
        return self.space.canonical(config) if self.space.conditional else config

    def key(self, config: dict[str, Any]) -> str:
        """The identity of ``config``'s kernel: its canonical config's key."""
        return config_key(self.canonical(config))

    def seen(self, config: dict[str, Any]) -> bool:
        return self.key(config) in self.visited

    def mark(self, config: dict[str, Any]) -> None:
        key = self.key(config)
        if key not in self.visited:
            self.visited.add(key)
            self.covered += int(self.space.contains(self.canonical(config)))

    def has_next(self) -> bool:
        return self.covered < self.size

    def next(self) -> dict[str, Any] | None:
        """The next config to measure, None when the space is exhausted."""
        raise NotImplementedError

    def update(self, config: dict[str, Any], cost: float) -> None:
        """``cost``: mean seconds per run (infinite for a failed candidate)."""
        self.results.append((config, cost))


class GridSearchTuner(Tuner):
    """Every config in order (the last knob varying fastest)."""

    def __init__(self, knobs: dict[str, list[Any]] | KnobSpace, seed: int = 0) -> None:
        super().__init__(knobs, seed)
        self._index = 0

    def next(self) -> dict[str, Any] | None:
        while self._index < self.size:
            config = self.config_at(self._index)
            self._index += 1
            if not self.seen(config):
                self.mark(config)
                return config
        return None


class RandomTuner(Tuner):
    """Configs drawn uniformly without repetition."""

    def next(self) -> dict[str, Any] | None:
        if not self.has_next():
            return None
        if self.size <= 4 * max(len(self.visited), 1):
            # a mostly visited space: draw among what is left
            left = [i for i in range(self.size) if self._keys_at(i)[1] not in self.visited]
            if not left:
                return None
            config = self.config_at(self.rng.choice(left))
        else:
            while True:
                index = self.rng.randrange(self.size)
                if self._keys_at(index)[1] not in self.visited:
                    config = self.config_at(index)
                    break
        self.mark(config)
        return config


TUNERS: dict[str, type[Tuner]] = {"random": RandomTuner, "gridsearch": GridSearchTuner}


def make_tuner(name: str, knobs: dict[str, list[Any]] | KnobSpace, seed: int = 0,
               prior: dict[str, list[tuple[dict[str, Any], float]]] | None = None,
               when: Conditions | None = None, default: dict[str, Any] | None = None,
               featurize: Featurize | None = None, rerank: int = 16) -> Tuner:
    """A tuner by name over ``knobs`` (name -> candidates, or a :class:`KnobSpace` such as
    ``Task.space``); ``when`` and ``default`` (with a dict of knobs): the task's conditional
    knobs and the values they keep where they have no effect; ``prior`` (workload key ->
    configs and costs measured for other workloads of the template) is what ``xgb`` learns
    from before the first measurement;
    ``featurize`` and ``rerank``: ``xgb``'s loop-nest features (:class:`XGBTuner`)."""
    if name not in TUNERS:
        raise TesseraError(f"unknown tuner {name!r}; available: {', '.join(TUNERS)}")
    space = knobs if isinstance(knobs, KnobSpace) else KnobSpace(knobs, when, default)
    if name == "xgb":
        try:
            import xgboost  # noqa: F401
        except ImportError:
            raise TesseraError("the xgb tuner needs XGBoost: pip install 'tessera[tune]' "
                               "(or xgboost)") from None
        return XGBTuner(space, seed, prior=prior, featurize=featurize, rerank=rerank)
    return TUNERS[name](space, seed)


def _knob_features(knobs: list[tuple[str, list[Any]]], config: dict[str, Any],
                   active: dict[str, bool] | None = None) -> list[float]:
    """A config as numbers: per knob, the value (log2 for positive numbers, so that tile sizes
    compare by ratio), its position among the candidates, and a one-hot of the position for
    knobs of few candidates (booleans, strings).

    A knob without effect in ``config`` (``active`` false) gives NaN for all of these:
    XGBoost takes NaN as a missing value and learns at each split which side such configs
    go, so the default value an inactive knob holds (``reg_n`` of a Winograd convolution)
    is not read as if it had been chosen, and splits learned on the configs where the knob
    matters do not sort the others by it."""
    out: list[float] = []
    for name, cands in knobs:
        n = 2 + (len(cands) if len(cands) <= 4 else 0)
        if active is not None and not active[name]:
            out.extend([math.nan] * n)
            continue
        v = config[name]
        pos = cands.index(v) if v in cands else -1
        if isinstance(v, bool) or not isinstance(v, int | float):
            out.append(float(pos))
        else:
            out.append(math.log2(v) if v > 0 else float(v))
        out.append(pos / max(len(cands) - 1, 1))
        if len(cands) <= 4:
            out.extend(1.0 if k == pos else 0.0 for k in range(len(cands)))
    return out


class GATuner(Tuner):
    """A genetic search (AutoTVM's ``ga``): a population of configs; each generation keeps
    the best ``elite`` and breeds the rest from parents drawn by fitness (knob-wise uniform
    crossover, then each knob mutated with probability ``mutation``)."""

    def __init__(self, knobs: dict[str, list[Any]] | KnobSpace, seed: int = 0,
                 population: int = 16, elite: int = 3, mutation: float = 0.1) -> None:
        super().__init__(knobs, seed)
        self.population, self.elite, self.mutation = population, elite, mutation
        self._pending: list[dict[str, Any]] = []

    def _breed(self) -> list[dict[str, Any]]:
        scored = sorted((c for c in self.results if math.isfinite(c[1])), key=lambda x: x[1])
        if len(scored) < 2:
            return []
        parents = [c for c, _ in scored[:self.population]]
        weights = [1.0 / (1 + i) for i in range(len(parents))]
        children = [dict(c) for c in parents[:self.elite]]
        for _ in range(4 * self.population):
            a, b = self.rng.choices(parents, weights, k=2)
            child = {n: (a if self.rng.random() < 0.5 else b)[n] for n, _ in self.knobs}
            for n, cands in self.knobs:
                if self.rng.random() < self.mutation:
                    child[n] = self.rng.choice(cands)
            children.append(self.canonical(child))
        return children

    def next(self) -> dict[str, Any] | None:
        while True:
            while self._pending:
                config = self._pending.pop(0)
                if not self.seen(config):
                    self.mark(config)
                    return config
            bred = self._breed()
            fresh = list({self.key(c): c for c in bred if not self.seen(c)}.values())
            if fresh:
                self._pending = fresh[:self.population]
                continue
            # too few results to breed, or a converged population: explore at random
            return RandomTuner.next(self)


class XGBTuner(Tuner):
    """A cost model guides the search (AutoTVM's ``xgb``): gradient-boosted trees with a
    pairwise rank loss learn which configs are faster from the measured ones (and from
    ``prior`` records of other workloads of the template: transfer learning), score a pool of
    unmeasured configs (random ones and mutations of the best so far), and propose the best
    scored; a fraction ``epsilon`` of proposals stays random. The first ``warmup`` proposals,
    before there is anything to learn from, are random.

    With ``featurize`` (configs -> a loop-nest feature vector each, None for one that does
    not lower; ``tessera.autotune.tune`` builds it from ``Backend.tuning_features``) the
    ranking has two stages: the knob model ranks the pool, and the ``rerank`` best (at most
    32) are featurised and ranked again by a second model trained on knob and loop features
    of the measured configs (:class:`~tessera.autotune.loop_ranker.LoopFeatureRanker`:
    cached by config; a callback that fails leaves the knob model alone)."""

    def __init__(self, knobs: dict[str, list[Any]] | KnobSpace, seed: int = 0,
                 warmup: int = 8, pool: int = 512, epsilon: float = 0.1,
                 prior: dict[str, list[tuple[dict[str, Any], float]]] | None = None,
                 featurize: Featurize | None = None, rerank: int = 16) -> None:
        super().__init__(knobs, seed)
        self.warmup, self.pool, self.epsilon = warmup, pool, epsilon
        #: The second stage (None without ``featurize``).
        self.ranker = LoopFeatureRanker(featurize, rerank, warmup) \
            if featurize is not None else None
        #: Measured configs of other workloads, per workload (each is ranked on its own):
        #: those whose knobs that matter are all candidates here.
        self.prior = {k: [(c, cost) for c, cost in rows if self._comparable(c)
                          and math.isfinite(cost)]
                      for k, rows in (prior or {}).items()}
        self.prior = {k: rows for k, rows in self.prior.items() if len(rows) >= 2}
        self._n_prior = sum(len(rows) for rows in self.prior.values())
        self._model: Any = None
        self._trained_on = -1

    def _comparable(self, config: dict[str, Any]) -> bool:
        active = self.space.active(config)
        return all(n in config and config[n] in cands
                   for n, cands in self.knobs if active[n])

    def _features(self, config: dict[str, Any]) -> list[float]:
        active = self.space.active(config) if self.space.conditional else None
        return _knob_features(self.knobs, config, active)

    def _train(self) -> None:
        import numpy as np

        data = [(c, cost) for c, cost in self.results if math.isfinite(cost)]
        if len(data) + self._n_prior == self._trained_on:
            return
        self._trained_on = len(data) + self._n_prior
        parts = [rows for rows in self.prior.values()] + ([data] if data else [])
        rows = [r for part in parts for r in part]
        if len(rows) < 2:
            return
        x = np.array([self._features(c) for c, _ in rows], dtype=np.float64)
        # ranked within each group (each prior workload, then this one)
        self._model = rank_model(x, [[cost for _, cost in part] for part in parts])

    def _candidates(self) -> list[dict[str, Any]]:
        pool: dict[str, dict[str, Any]] = {}
        best = sorted((c for c in self.results if math.isfinite(c[1])), key=lambda x: x[1])[:8]
        for config, _ in best:
            active = self.space.active(config)
            for name, cands in self.knobs:
                if not active[name]:  # changing it changes nothing
                    continue
                for v in cands:
                    child = self.canonical({**config, name: v})
                    pool.setdefault(config_key(child), child)
        tries = 0
        while len(pool) < self.pool and tries < 4 * self.pool:
            tries += 1
            index = self.rng.randrange(self.size)
            key = self._keys_at(index)[0]
            if key not in pool:
                pool[key] = self.config_at(index)
        return [c for k, c in pool.items() if k not in self.visited]

    def next(self) -> dict[str, Any] | None:
        if not self.has_next():
            return None
        measured = sum(1 for _, cost in self.results if math.isfinite(cost))
        if measured + self._n_prior < self.warmup or self.rng.random() < self.epsilon:
            return RandomTuner.next(self)
        self._train()
        pool = self._candidates()
        if self._model is None or not pool:
            return RandomTuner.next(self)
        import numpy as np
        import xgboost as xgb

        scores = self._model.predict(xgb.DMatrix(np.array(
            [self._features(c) for c in pool], dtype=np.float64)))
        order = np.argsort(-scores, kind="stable")
        config = pool[int(order[0])]
        if self.ranker is not None and self._train_loops():
            top = [pool[int(i)] for i in order[:self.ranker.top]]
            best = self.ranker.pick([self._features(c) for c in top],
                                    [self.key(c) for c in top], top)
            if best is not None:
                config = top[best]
        self.mark(config)
        return config

    def _train_loops(self) -> bool:
        """(Re)train the second stage on this workload's measured configs; whether it is
        ready."""
        assert self.ranker is not None
        data = [(c, cost) for c, cost in self.results if math.isfinite(cost)]
        return self.ranker.train([self._features(c) for c, _ in data],
                                 [self.key(c) for c, _ in data], [c for c, _ in data],
                                 [cost for _, cost in data])


TUNERS.update({"ga": GATuner, "xgb": XGBTuner})
