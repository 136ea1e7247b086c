"""Schedule configurations: the knobs a schedule template reads, with their defaults.

They live in the core so that every backend's templates (llvm, cuda) declare knobs the same
way and one tuner can search them.

Every template declares its knobs for one workload (the shapes and attributes of the group it
schedules) as a :class:`ConfigSpace`: each knob has candidate values and a default picked by a
rule that works well without tuning. A knob that has an effect only under some values of other
knobs says so (``when``: the Winograd knobs of a convolution only with ``template=winograd``);
configs that differ only in knobs without effect are one config (:meth:`ConfigSpace.canonical`,
:mod:`.knobspace`). A :class:`ScheduleConfig` is one choice of every knob; the template applies
it. The tuner (a later issue) searches the space and hands the best config back
through tuning records; without records the defaults are used.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tessera.plugin.knobspace import Conditions, KnobSpace

__all__ = ["ConfigSpace", "Knob", "ScheduleConfig", "divisors", "largest_divisor",
           "schedule_info", "tuning_info"]


@dataclass
class Knob:
    """One tunable choice: ``candidates`` in a stable order, ``default`` among them;
    ``when`` (other knob -> values): the knob has an effect only where every knob named has
    one of the values listed (and is active itself); empty: always."""

    name: str
    candidates: list[Any]
    default: Any
    doc: str = ""
    when: dict[str, list[Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.default not in self.candidates:
            self.candidates = [self.default, *self.candidates]


@dataclass
class ConfigSpace:
    """The knobs of one template for one workload."""

    template: str
    workload: tuple[Any, ...]
    knobs: dict[str, Knob] = field(default_factory=dict)
    #: For a workload with run-time extents (named in ``workload`` by their expression's
    #: text): text -> the expression (over the kernel's size variables), so that a backend
    #: can choose between configs tuned at different sizes at run time
    #: (:meth:`~tessera.plugin.records.ScheduleOverrides.buckets`).
    extents: dict[str, Any] = field(default_factory=dict, compare=False, repr=False)

    def define(self, name: str, candidates: list[Any], default: Any, doc: str = "",
               when: dict[str, list[Any]] | None = None) -> Any:
        """Declare a knob and return its default value. ``when`` (knob -> values): the knob
        has an effect only where each of those knobs, defined before it, has one of the
        values (a template's own knobs under ``template``); elsewhere tuners leave it at its
        default."""
        for other in when or {}:
            if other not in self.knobs:
                raise ValueError(f"knob {name!r} of {self.template} depends on {other!r}, "
                                 f"which is not defined before it")
        self.knobs[name] = Knob(name, list(candidates), default, doc,
                                {k: list(v) for k, v in (when or {}).items()})
        return default

    def conditions(self) -> Conditions:
        """The conditional knobs' ``when``: knob -> (other knob -> values)."""
        return {k.name: {o: list(v) for o, v in k.when.items()}
                for k in self.knobs.values() if k.when}

    def search_space(self) -> KnobSpace:
        """The knobs as a tuner sees them: candidates, conditions and defaults."""
        return KnobSpace({k.name: k.candidates for k in self.knobs.values()},
                         self.conditions(), {k.name: k.default for k in self.knobs.values()})

    def canonical(self, values: dict[str, Any]) -> dict[str, Any]:
        """``values`` with every knob that has no effect there (``when``) at its default."""
        return self.search_space().canonical(values)

    def default_config(self) -> ScheduleConfig:
        return ScheduleConfig(self.template, self.workload,
                              {k.name: k.default for k in self.knobs.values()})

    def pick(self, overrides: dict[str, dict[str, Any]] | None = None) -> ScheduleConfig:
        """The default config, with the knob values ``overrides`` (workload key -> knob
        values, from tuning records) gives this workload. Unknown knobs, and values that are
        not among a knob's candidates (a record from another version of the template), are
        ignored: that knob keeps its default. Overrides from a
        :class:`~tessera.plugin.records.TuningHistory` collect them (``ignored``: one
        warning for the whole compile); with a plain dict, each is a warning."""
        cfg = self.default_config()
        cfg.space = self
        chosen = (overrides or {}).get(cfg.key())
        if chosen is None and overrides:
            nearest = getattr(overrides, "nearest", None)
            chosen = nearest(cfg.key()) if nearest is not None else None
            if chosen is not None:  # another size's record: only values valid here count
                chosen = {k: v for k, v in chosen.items()
                          if k in self.knobs and v in self.knobs[k].candidates}
        ignored = getattr(overrides, "ignored", None)
        for name, value in (chosen or {}).items():
            knob = self.knobs.get(name)
            if knob is not None and value in knob.candidates:
                cfg.values[name] = value
                cfg.tuned = True
                continue
            reason = "unknown knob" if knob is None else "value not a candidate"
            if ignored is not None:
                ignored.add((reason, f"{self.template} {name}={value!r}", cfg.key()))
            else:
                import warnings

                warnings.warn(f"tuning record for {self.template} {list(self.workload)}: "
                              f"{reason} {name}={value!r} ignored", stacklevel=2)
        if any(k.when for k in self.knobs.values()):
            cfg.values = self.canonical(cfg.values)
        return cfg

    def size(self) -> int:
        """How many distinct configs the space has: canonical ones (:meth:`canonical`)."""
        return self.search_space().size()


@dataclass
class ScheduleConfig:
    """One point of a :class:`ConfigSpace`: knob name -> value."""

    template: str
    workload: tuple[Any, ...]
    values: dict[str, Any]
    #: The space it was picked from (its knobs' candidates), when it came from ``pick``.
    space: ConfigSpace | None = field(default=None, compare=False, repr=False)
    #: Whether tuning records chose any of its values (``pick``).
    tuned: bool = field(default=False, compare=False)

    def __getitem__(self, name: str) -> Any:
        return self.values[name]

    def get(self, name: str, default: Any = None) -> Any:
        return self.values.get(name, default)

    def key(self) -> str:
        """The workload key tuning records are matched on."""
        return json.dumps([self.template, list(self.workload)], default=str)

    def to_json(self) -> dict[str, Any]:
        return {"template": self.template, "workload": list(self.workload),
                "config": self.values}


def divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def largest_divisor(n: int, limit: int) -> int:
    """The largest divisor of ``n`` that is at most ``limit`` (at least 1)."""
    best = 1
    for d in range(1, min(n, limit) + 1):
        if n % d == 0:
            best = d
    return best


def schedule_info(template: str, configs: list[ScheduleConfig]) -> dict[str, Any]:
    """What a backend reports of one kernel's schedule (``CompiledRegion.info["schedules"]``):
    its template, its first config's values and workload key, and every config it read, with
    the candidates of its knobs and the conditions of its conditional ones (``"when"``: knob ->
    (other knob -> values)): what a tuner searches."""
    first = configs[0] if configs else None
    return {"template": template, "config": dict(first.values) if first else {},
            "key": first.key() if first else "",
            "configs": [{"template": c.template, "key": c.key(), "config": dict(c.values),
                         "tuned": c.tuned,
                         "knobs": ({k.name: list(k.candidates) for k in c.space.knobs.values()}
                                   if c.space is not None else {}),
                         "when": c.space.conditions() if c.space is not None else {}}
                        for c in configs]}


def tuning_info(configs: Any) -> dict[str, int]:
    """``{"tuned": n, "default": m}``: how many of ``configs`` tuning records chose."""
    cs = list(configs)
    tuned = sum(1 for c in cs if c.tuned)
    return {"tuned": tuned, "default": len(cs) - tuned}
