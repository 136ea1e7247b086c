"""Tuning records: one JSON object per line, as AutoTVM's log files.

A record says how one config of one workload measured on one target::

    {"key": "[\\"conv2d_NCHWc\\", [...]]", "template": "conv2d_NCHWc", "workload": [...],
     "config": {"oc_bn": 16, ...}, "costs": [0.00123, 0.00121], "error": null,
     "backend": "llvm", "target": "llvm -mcpu=znver4", "cpu": "AMD EPYC ...",
     "tessera": "0.1.0", "plugins": {"tessera-llvm": "0.1.0"}, "timestamp": 1795000000.0}

``costs`` are seconds per run (one per repeat); a candidate that failed has ``error`` (why:
``"timeout"``, ``"crash: ..."``, ``"wrong result: ..."``) and no costs. ``key`` is
:meth:`~tessera.autotune.space.ScheduleConfig.key`, what a template matches its workload on.
``cpu`` is the CPU that measured; a record measured on another machine (a Ray worker:
``tessera tune --ray``) also has ``"host"``, that machine's name (a field written only then,
which readers that do not know it skip).

:func:`load_records` reads a file line by line: a line that is not JSON, or a record without
the fields above, is skipped with a warning naming the file and line, never an error (a log
appended by a crashed run ends with half a line). :func:`best_configs` keeps, per backend and
workload, the config with the lowest mean cost; :class:`TuningHistory` is what
``tessera.compile(tuning_records=...)`` hands to backends (``CompileOptions.schedule_overrides``).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

__all__ = ["TuningHistory", "TuningRecord", "append_records", "best_configs", "load_records",
           "record_for"]

#: Fields every record must have.
REQUIRED = ("key", "template", "config", "backend")


@dataclass
class TuningRecord:
    """One measured (or failed) candidate."""

    key: str
    template: str
    workload: list[Any]
    config: dict[str, Any]
    backend: str
    target: str = ""
    costs: list[float] = field(default_factory=list)
    error: str | None = None
    cpu: str = ""
    tessera: str = ""
    plugins: dict[str, str] = field(default_factory=dict)
    timestamp: float = 0.0
    #: The machine that measured, when it is not the one that tuned (else empty, not written).
    host: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.costs) and \
            all(math.isfinite(c) and c > 0 for c in self.costs)

    @property
    def mean_cost(self) -> float:
        """Mean seconds per run (infinite for a failed candidate)."""
        return sum(self.costs) / len(self.costs) if self.ok else math.inf

    def to_json(self) -> str:
        data = asdict(self)
        if not data["host"]:
            del data["host"]
        return json.dumps(data, default=str, sort_keys=True)


def record_for(config: Any, backend: str, target: str, costs: Iterable[float] = (),
               error: str | None = None, plugins: dict[str, str] | None = None,
               cpu: str | None = None, host: str = "") -> TuningRecord:
    """A record of ``config`` (a :class:`~tessera.autotune.space.ScheduleConfig`) measured on
    this machine (its CPU name, Tessera's version and the time are filled in), or on the
    machine ``host`` whose CPU is ``cpu``."""
    from tessera import __version__

    return TuningRecord(key=config.key(), template=config.template,
                        workload=json.loads(json.dumps(list(config.workload), default=str)),
                        config=dict(config.values),
                        backend=backend, target=target, costs=[float(c) for c in costs],
                        error=error, cpu=cpu_name() if cpu is None else cpu,
                        tessera=__version__, plugins=dict(plugins or {}),
                        timestamp=time.time(), host=host)


def cpu_name() -> str:
    """The host CPU's model name (``/proc/cpuinfo`` where there is one)."""
    import platform

    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def append_records(path: str | Path, records: Iterable[TuningRecord]) -> None:
    """Append records to ``path`` (one line each, flushed per record so that an interrupted
    run keeps every record it measured)."""
    with open(path, "a", encoding="utf-8") as f:
        for r in records:
            f.write(r.to_json() + "\n")
            f.flush()


def _parse(line: str) -> TuningRecord:
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ValueError(f"missing {', '.join(missing)}")
    if not isinstance(data["config"], dict):
        raise ValueError("config is not an object")
    known = TuningRecord.__dataclass_fields__
    rec = TuningRecord(**{k: v for k, v in data.items() if k in known and k != "workload"},
                       workload=list(data.get("workload") or []))
    if not isinstance(rec.costs, list) or not all(isinstance(c, int | float) for c in rec.costs):
        raise ValueError("costs is not a list of numbers")
    return rec


def load_records(path: str | Path) -> Iterator[TuningRecord]:
    """The records of a JSON-lines file, skipping (with a warning) lines that are not
    records."""
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            text = line.strip()
            if not text:
                continue
            try:
                yield _parse(text)
            except (ValueError, TypeError) as err:
                warnings.warn(f"{path}:{n}: not a tuning record, skipped ({err})",
                              stacklevel=2)


def best_configs(records: Iterable[TuningRecord], backend: str | None = None,
                 target: str | None = None) -> dict[str, TuningRecord]:
    """Workload key -> the successful record with the lowest mean cost, among records of
    ``backend`` (all when None). Records of ``target`` exactly are preferred to records of
    other targets of the same backend (another ``-mcpu``)."""
    best: dict[str, tuple[int, float, TuningRecord]] = {}
    for r in records:
        if not r.ok or (backend is not None and r.backend != backend):
            continue
        rank = (0 if target is not None and r.target == target else 1, r.mean_cost)
        cur = best.get(r.key)
        if cur is None or rank < cur[:2]:
            best[r.key] = (*rank, r)
    return {k: v[2] for k, v in best.items()}


class TuningHistory:
    """Tuning records loaded once for a compile: per backend, the best config of each
    workload (``apply_history_best``)."""

    def __init__(self, records: Iterable[TuningRecord], source: str = "") -> None:
        self.records = list(records)
        self.source = source
        self._best: dict[tuple[str, str | None], dict[str, TuningRecord]] = {}

    @classmethod
    def load(cls, path: str | Path) -> TuningHistory:
        p = Path(path)
        if not p.is_file():
            from tessera.errors import TesseraError

            raise TesseraError(f"tuning records: file {str(path)!r} does not exist")
        return cls(load_records(p), str(p))

    def best(self, backend: str, target: str | None = None) -> dict[str, TuningRecord]:
        k = (backend, target)
        if k not in self._best:
            self._best[k] = best_configs(self.records, backend, target)
        return self._best[k]

    def overrides(self, backend: str, target: str | None = None) -> dict[str, dict[str, Any]]:
        """Workload key -> the best knob values (what templates' ``pick`` reads)."""
        return {k: dict(r.config) for k, r in self.best(backend, target).items()}
