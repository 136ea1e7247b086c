"""Search strategies over a task's knobs: grid search and random search.

A tuner proposes configs (knob name -> value) of one :class:`~tessera.autotune.tasks.Task`,
never one it has already proposed or was told is measured (``visited``: resumed records), and
``update`` tells it the results. Configs are points of the knobs' mixed-radix product, so a
space of any size is enumerated (grid) or sampled (random) without being built.
"""

from __future__ import annotations

import json
import math
import random
from typing import Any

__all__ = ["GridSearchTuner", "RandomTuner", "TUNERS", "Tuner", "config_key", "make_tuner"]


def config_key(config: dict[str, Any]) -> str:
    """A config's identity (knob order does not matter)."""
    return json.dumps(config, sort_keys=True, default=str)


class Tuner:
    """Base: the task's knobs, the configs already proposed or measured, results."""

    def __init__(self, knobs: dict[str, list[Any]], seed: int = 0) -> None:
        self.knobs = list(knobs.items())
        self.size = math.prod(len(c) for _, c in self.knobs) if self.knobs else 1
        self.visited: set[str] = set()
        self.rng = random.Random(seed)
        self.results: list[tuple[dict[str, Any], float]] = []

    def config_at(self, index: int) -> dict[str, Any]:
        config = {}
        for name, cands in reversed(self.knobs):
            index, k = divmod(index, len(cands))
            config[name] = cands[k]
        return dict(reversed(list(config.items())))

    def mark(self, config: dict[str, Any]) -> None:
        self.visited.add(config_key(config))

    def has_next(self) -> bool:
        return len(self.visited) < self.size

    def next(self) -> dict[str, Any] | None:
        """The next config to measure, None when the space is exhausted."""
        raise NotImplementedError

    def update(self, config: dict[str, Any], cost: float) -> None:
        """``cost``: mean seconds per run (infinite for a failed candidate)."""
        self.results.append((config, cost))


class GridSearchTuner(Tuner):
    """Every config in order (the last knob varying fastest)."""

    def __init__(self, knobs: dict[str, list[Any]], seed: int = 0) -> None:
        super().__init__(knobs, seed)
        self._index = 0

    def next(self) -> dict[str, Any] | None:
        while self._index < self.size:
            config = self.config_at(self._index)
            self._index += 1
            if config_key(config) not in self.visited:
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
            left = [i for i in range(self.size)
                    if config_key(self.config_at(i)) not in self.visited]
            if not left:
                return None
            config = self.config_at(self.rng.choice(left))
        else:
            while True:
                config = self.config_at(self.rng.randrange(self.size))
                if config_key(config) not in self.visited:
                    break
        self.mark(config)
        return config


TUNERS: dict[str, type[Tuner]] = {"random": RandomTuner, "gridsearch": GridSearchTuner}


def make_tuner(name: str, knobs: dict[str, list[Any]], seed: int = 0) -> Tuner:
    if name not in TUNERS:
        from tessera.errors import TesseraError

        raise TesseraError(f"unknown tuner {name!r}; available: {', '.join(TUNERS)}")
    return TUNERS[name](knobs, seed)
