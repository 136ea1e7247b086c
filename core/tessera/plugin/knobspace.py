"""The search space of a task as plain data: knobs' candidates, their defaults and their
conditions; which configs are distinct, how many there are, and the i-th one.

A knob may be *conditional* (``ConfigSpace.define(..., when={other: [values]})``): it has an
effect only when every knob it names has one of the listed values (the Winograd knobs of a
convolution only with ``template=winograd``). A knob is active when it has no conditions, or
when every knob it names is active itself and has one of the listed values; an inactive knob's
value does not matter, so the *canonical* form of a config sets every inactive knob to its
default. Two configs with the same canonical form build the same kernel: tuners propose and
count canonical configs only.

The canonical configs are enumerated without building the product of all candidates: the
values of each controlling knob (one that conditions name) fall into classes that every
condition treats alike (``template``: ``direct`` and ``winograd``; a knob listed with three
of its ten values: those three and the other seven, or finer where several conditions name it).
A choice of one class per controlling knob decides which knobs are active, so it is a *group*
of canonical configs: the product of the active knobs' candidates (a controlling knob's within
its class), the inactive knobs at their defaults. The groups are few (the classes' product) and
disjoint, so ``size()`` is the sum of their products and ``config_at(i)`` a mixed-radix
index inside the group that holds ``i``.
"""

from __future__ import annotations

import bisect
import itertools
import math
from typing import Any

__all__ = ["Conditions", "KnobSpace"]

#: Per conditional knob: the knobs it depends on and, for each, the values under which it is
#: active.
Conditions = dict[str, dict[str, list[Any]]]


class KnobSpace:
    """``knobs``: name -> candidates, in the template's order (a knob's conditions name knobs
    before it); ``when``: the conditions (:data:`Conditions`); ``default``: the value of a
    knob that is inactive (its first candidate where not given; a default that is not a
    candidate becomes the first one, as :class:`~tessera.plugin.space.Knob` does)."""

    def __init__(self, knobs: dict[str, list[Any]], when: Conditions | None = None,
                 default: dict[str, Any] | None = None) -> None:
        self.when: Conditions = {k: {c: list(v) for c, v in conds.items()}
                                 for k, conds in (when or {}).items() if conds}
        self.knobs: dict[str, list[Any]] = {}
        self.default: dict[str, Any] = {}
        for name, cands in knobs.items():
            cands = list(cands)
            value = (default or {}).get(name, cands[0] if cands else None)
            if value not in cands:
                cands.insert(0, value)
            self.knobs[name], self.default[name] = cands, value
        order = list(self.knobs)
        for name, conds in self.when.items():
            if name not in self.knobs:
                raise ValueError(f"conditions for unknown knob {name!r}")
            for other in conds:
                if other not in self.knobs or order.index(other) >= order.index(name):
                    raise ValueError(f"knob {name!r} depends on {other!r}, which is not a "
                                     f"knob defined before it")
        self._groups: list[list[tuple[str, list[Any]]]] | None = None
        self._offsets: list[int] = []

    @property
    def conditional(self) -> bool:
        return bool(self.when)

    def active(self, config: dict[str, Any]) -> dict[str, bool]:
        """Per knob, whether it has an effect in ``config`` (a missing knob has its default)."""
        out: dict[str, bool] = {}
        for name in self.knobs:
            out[name] = all(out[other] and config.get(other, self.default[other]) in values
                            for other, values in self.when.get(name, {}).items())
        return out

    def canonical(self, config: dict[str, Any]) -> dict[str, Any]:
        """``config`` with every inactive knob at its default and every missing knob at its
        default, in the knobs' order; names that are not knobs are kept as they are."""
        active = self.active(config)
        out = {name: config.get(name, self.default[name]) if active[name]
               else self.default[name] for name in self.knobs}
        out.update((k, v) for k, v in config.items() if k not in self.knobs)
        return out

    def is_canonical(self, config: dict[str, Any]) -> bool:
        return config == self.canonical(config)

    def contains(self, config: dict[str, Any]) -> bool:
        """Whether ``config`` is one of the space's canonical configs: every knob and no
        other name, candidates only, inactive knobs at their defaults."""
        return (config.keys() == self.knobs.keys()
                and all(config[n] in cands for n, cands in self.knobs.items())
                and self.is_canonical(config))

    def size(self) -> int:
        """How many distinct canonical configs there are."""
        self._build()
        return self._offsets[-1]

    def config_at(self, index: int) -> dict[str, Any]:
        """The ``index``-th canonical config (``0 <= index < size()``): groups in order, each
        a mixed-radix product in the knobs' order, the last knob varying fastest."""
        self._build()
        assert self._groups is not None
        if not 0 <= index < self._offsets[-1]:
            raise IndexError(index)
        g = bisect.bisect_right(self._offsets, index) - 1
        index -= self._offsets[g]
        config: dict[str, Any] = {}
        for name, values in reversed(self._groups[g]):
            index, k = divmod(index, len(values))
            config[name] = values[k]
        return {name: config[name] for name in self.knobs}

    def _classes(self, name: str) -> list[list[Any]]:
        """The candidates of ``name`` grouped by the conditions that list them."""
        lists = [conds[name] for conds in self.when.values() if name in conds]
        classes: dict[tuple[bool, ...], list[Any]] = {}
        for v in self.knobs[name]:
            classes.setdefault(tuple(v in values for values in lists), []).append(v)
        return list(classes.values())

    def _build(self) -> None:
        if self._groups is not None:
            return
        controllers = [n for n in self.knobs if any(n in c for c in self.when.values())]
        choices = [self._classes(n) for n in controllers]
        self._groups, self._offsets = [], [0]
        for pick in itertools.product(*choices):
            chosen = dict(zip(controllers, pick))
            group: list[tuple[str, list[Any]]] = []
            active: dict[str, bool] = {}
            for name, cands in self.knobs.items():
                active[name] = all(active[other] and chosen[other][0] in values
                                   for other, values in self.when.get(name, {}).items())
                values = chosen.get(name, cands)
                if not active[name]:
                    if self.default[name] not in values:
                        break  # an inactive knob's class without its default: no configs
                    values = [self.default[name]]
                group.append((name, values))
            else:
                self._groups.append(group)
                self._offsets.append(self._offsets[-1] + math.prod(len(v) for _, v in group))
