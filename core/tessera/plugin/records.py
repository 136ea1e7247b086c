"""Tuning records: one JSON object per line, as AutoTVM's log files.

A record says how one config of one workload measured on one target::

    {"key": "[\\"conv2d_NCHWc\\", [...]]", "template": "conv2d_NCHWc", "workload": [...],
     "config": {"oc_bn": 16, ...}, "costs": [0.00123, 0.00121], "error": null,
     "backend": "llvm", "target": "llvm -mcpu=znver4", "cpu": "AMD EPYC ...",
     "tessera": "0.1.0", "plugins": {"tessera-llvm": "0.1.0"}, "timestamp": 1795000000.0}

``costs`` are seconds per run (one per repeat); a candidate that failed has ``error`` (why:
``"timeout"``, ``"crash: ..."``, ``"wrong result: ..."``) and no costs. ``key`` is
:meth:`~tessera.plugin.space.ScheduleConfig.key`, what a template matches its workload on.
``cpu`` is the CPU that measured; a record measured on another machine (a Ray worker:
``tessera tune --ray``) also has ``"host"``, that machine's name (a field written only then,
which readers that do not know it skip).

:func:`load_records` reads a file line by line. A file of which no line is a record (a model,
a binary file, notes) is a :class:`~tessera.errors.TuningRecordsError` naming the first bad line
and what was expected. In a records file, lines that are not records (a log appended by a
crashed run ends with half a line) are skipped with ONE warning counting them by reason.
A file may also hold a :class:`ModelCheck` line (``"kind": "model_check"``), written by
``tessera tune`` after it measured the whole model with and without the records: the
workloads whose tuned schedules it kept and those it rejected (they did not make the model
faster). A rejected workload's records are left out of :meth:`TuningHistory.best`, so a
compile uses its default schedule and says so (:meth:`TuningHistory.warn_rejected`).
:func:`best_configs` keeps, per backend and workload, the config with the lowest mean cost;
:class:`TuningHistory` is what ``tessera.compile(tuning_records=...)`` hands to backends
(``CompileOptions.schedule_overrides``); the knob values its records give that a template no
longer offers (``ConfigSpace.pick``) are counted there too, and ``compile`` warns once about
everything skipped (:meth:`TuningHistory.warn_skipped`).
"""

from __future__ import annotations

import json
import math
import time
import warnings
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tessera._version import __version__
from tessera.errors import TuningRecordsError

__all__ = ["MODEL_CHECK", "ModelCheck", "ScheduleOverrides", "SizeBucket", "TuningHistory",
           "TuningRecord",
           "append_records", "best_configs", "load_records", "record_for"]

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


#: The ``kind`` of a :class:`ModelCheck` line.
MODEL_CHECK = "model_check"


@dataclass
class ModelCheck:
    """What the whole-model check of ``tessera tune`` found
    (:mod:`tessera.autotune.model_check`): the model (``model``: its name and input shapes) ran
    ``untuned_ms`` with the default schedules, ``tuned_ms`` with every workload's best record
    and ``kept_ms`` with the records of ``kept`` only; the workloads in ``rejected`` keep their
    default schedules because their records did not make the whole model faster."""

    model: str
    target: str
    untuned_ms: float
    tuned_ms: float
    kept_ms: float
    kept: list[str] = field(default_factory=list)
    rejected: list[str] = field(default_factory=list)
    cpu: str = ""
    tessera: str = ""
    timestamp: float = 0.0

    def to_json(self) -> str:
        return json.dumps({"kind": MODEL_CHECK, **asdict(self)}, sort_keys=True)

    @staticmethod
    def from_json(data: dict[str, Any]) -> ModelCheck:
        known = ModelCheck.__dataclass_fields__
        check = ModelCheck(**{k: v for k, v in data.items() if k in known})
        if not all(isinstance(k, str) for k in [*check.kept, *check.rejected]):
            raise ValueError("model check: kept and rejected are not lists of workload keys")
        return check

    def summary(self) -> str:
        """``0.177 ms untuned, 0.218 ms with every record, 0.171 ms with 3 of 11 kept``."""
        total = len(self.kept) + len(self.rejected)
        return (f"{self.untuned_ms:.3f} ms untuned, {self.tuned_ms:.3f} ms with every "
                f"record, {self.kept_ms:.3f} ms with {len(self.kept)} of {total} kept")


def record_for(config: Any, backend: str, target: str, costs: Iterable[float] = (),
               error: str | None = None, plugins: dict[str, str] | None = None,
               cpu: str | None = None, host: str = "") -> TuningRecord:
    """A record of ``config`` (a :class:`~tessera.plugin.space.ScheduleConfig`) measured on
    this machine (its CPU name, Tessera's version and the time are filled in), or on the
    machine ``host`` whose CPU is ``cpu``."""
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


def _parse(line: str) -> TuningRecord | ModelCheck:
    """The record (or model check) of one line; ValueError/TypeError saying what is wrong
    (the reason is the text before any ``:``, what the skip summary groups by)."""
    try:
        data = json.loads(line)
    except ValueError:
        raise ValueError("not JSON") from None
    if not isinstance(data, dict):
        raise ValueError("not a JSON object")
    if data.get("kind") == MODEL_CHECK:
        return ModelCheck.from_json(data)
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


#: What a records file holds, for messages.
EXPECTED = (f"expected one JSON object per line with the fields {', '.join(REQUIRED)}, "
            "as 'tessera tune' writes")


def _decode(raw: bytes) -> str | None:
    """A line's text, or None for binary data (a NUL byte, or not UTF-8)."""
    if b"\0" in raw:
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _describe(n: int, reason: str, text: str | None) -> str:
    if text is None:
        return f"line {n} is binary data, not text"
    shown = text if len(text) <= 40 else text[:37] + "..."
    return f"line {n}: {reason} ({shown!r})"


def load_records(path: str | Path, skipped: list[tuple[int, str]] | None = None,
                 checks: list[ModelCheck] | None = None) -> Iterator[TuningRecord]:
    """The records of a JSON-lines file (its model checks appended to ``checks`` when
    given).

    A file none of whose lines is a record raises :class:`~tessera.errors.TuningRecordsError`
    naming the first bad line (a binary file at once, without reading on), unless that line
    is all it holds and is a cut-off JSON object (a run killed while writing its first
    record: a file ``tessera tune`` resumes). Otherwise lines
    that are not records are skipped: ``(line number, reason)`` appended to ``skipped`` when
    given, else one warning counting them by reason."""
    records: list[TuningRecord] = []
    found_check = False
    bad: list[tuple[int, str]] = []
    first_bad: tuple[int, str, str | None] | None = None
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            text = _decode(raw)
            if text is not None and not text.strip():
                continue
            try:
                if text is None:
                    raise ValueError("not text (binary data)")
                parsed = _parse(text.strip())
                if isinstance(parsed, ModelCheck):
                    found_check = True
                    if checks is not None:
                        checks.append(parsed)
                else:
                    records.append(parsed)
                continue
            except (ValueError, TypeError) as err:
                bad.append((n, str(err)))
                if first_bad is None:
                    first_bad = (n, str(err), None if text is None else text.strip())
            if text is None and not records:
                break  # a binary file: not a records file, whatever follows
    interrupted = len(bad) == 1 and first_bad is not None and first_bad[1] == "not JSON" \
        and (first_bad[2] or "").startswith('{"')  # a run killed while writing its first
    if first_bad is not None and not records and not found_check and not interrupted:
        raise TuningRecordsError(f"{str(path)!r} is not a tuning records file: "
                                 f"{_describe(*first_bad)}; {EXPECTED}")
    if bad:
        if skipped is not None:
            skipped.extend(bad)
        else:
            warnings.warn(f"tuning records {str(path)!r}: {skip_summary(bad, [])}",
                          stacklevel=2)
    return iter(records)


def _lines(numbers: list[int]) -> str:
    shown = ", ".join(str(n) for n in numbers[:3])
    more = f" and {len(numbers) - 3} more" if len(numbers) > 3 else ""
    return f"line{'s' if len(numbers) > 1 else ''} {shown}{more}"


def skip_summary(lines: list[tuple[int, str]], values: Iterable[tuple[str, str, str]]) -> str:
    """One sentence on what was skipped: ``lines`` (line number, reason) that are not
    records, and record ``values`` (reason, ``template knob=value``, workload key) templates
    did not take."""
    parts: list[str] = []
    if lines:
        by_reason: dict[str, list[int]] = {}
        for n, reason in lines:
            by_reason.setdefault(reason.split(":", 1)[0], []).append(n)
        parts.append(f"skipped {len(lines)} line(s) that are not tuning records ("
                     + "; ".join(f"{len(ns)} {reason}: {_lines(ns)}"
                                 for reason, ns in by_reason.items()) + ")")
    values = sorted(set(values))
    if values:
        counts = Counter(reason for reason, _, _ in values)
        details = sorted({detail for _, detail, _ in values})
        examples = ", ".join(details[:3]) + (f" and {len(details) - 3} more"
                                             if len(details) > 3 else "")
        parts.append(f"ignored {len(values)} knob value(s) of records that the schedule "
                     f"templates no longer offer ("
                     f"{', '.join(f'{c} {r}' for r, c in counts.items())}: {examples}); "
                     f"those knobs kept their defaults")
    return "; ".join(parts)


class ScheduleOverrides(dict[str, dict[str, Any]]):
    """Workload key -> knob values, as :meth:`TuningHistory.overrides` gives them to
    backends. ``ConfigSpace.pick`` adds what it could not apply to ``ignored`` (reason,
    ``template knob=value``, workload key) instead of warning each time; the history says
    it once."""

    def __init__(self, values: dict[str, dict[str, Any]],
                 ignored: set[tuple[str, str, str]] | None = None,
                 nearest_sizes: bool = False, rejected: Iterable[str] = (),
                 rejected_used: set[str] | None = None) -> None:
        super().__init__(values)
        self.ignored: set[tuple[str, str, str]] = ignored if ignored is not None else set()
        #: workloads a model check rejected (not in the dict), and those a template asked for
        self.rejected = frozenset(rejected)
        self.rejected_used: set[str] = rejected_used if rejected_used is not None else set()
        #: whether a workload without a record of its own takes the knob values of the
        #: record of the nearest size (:meth:`nearest`)
        self.nearest_sizes = nearest_sizes
        self._shapes: list[tuple[str, Any, str]] | None = None

    def __bool__(self) -> bool:
        """True with records or rejected workloads (a template then asks, and a rejected
        workload is noted)."""
        return bool(len(self)) or bool(self.rejected)

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        """The knob values of workload ``key``; a key the model check rejected is noted
        (:meth:`TuningHistory.warn_rejected`) and has none."""
        if key in self.rejected:
            self.rejected_used.add(key)
            return default
        return super().get(key, default)

    def _parsed(self) -> list[tuple[str, Any, str]]:
        """(template, workload, key) of every record's key, parsed once."""
        if self._shapes is None:
            self._shapes = []
            for k in self:
                try:
                    t, w = json.loads(k)
                except (ValueError, TypeError):
                    continue
                self._shapes.append((t, w, k))
        return self._shapes

    def nearest(self, key: str) -> dict[str, Any] | None:
        """With ``nearest_sizes``, for a workload key without a record: the knob values of
        the record of the same template whose workload differs only in sizes, the nearest
        one (least sum of ``|log(a / b)|`` over the sizes that differ). What a module
        specialised at a size nobody tuned takes from records tuned at representative sizes;
        ``ConfigSpace.pick`` keeps only the values that are candidates at this size."""
        if not self.nearest_sizes or key in self.rejected:
            return None
        try:
            template, workload = json.loads(key)
        except (ValueError, TypeError):
            return None
        best: tuple[float, str] | None = None
        for t, w, k in self._parsed():
            if t != template:
                continue
            distance = _size_distance(workload, w)
            if distance is not None and (best is None or distance < best[0]):
                best = (distance, k)
        return None if best is None else self[best[1]]

    def buckets(self, key: str) -> list[SizeBucket]:
        """For a workload key with run-time extents (text where a size would be): one
        :class:`SizeBucket` per record of the same template whose workload is this one at
        some sizes (tuned at static sizes, ``tessera tune --input-shapes``), smallest first;
        [] when there is none. A backend compiles the kernel once per bucket and picks
        between them by the sizes of each call."""
        if key in self.rejected:
            return []
        try:
            template, workload = json.loads(key)
        except (ValueError, TypeError):
            return []
        if "\"" not in json.dumps(workload):  # no run-time extent
            return []
        found: dict[tuple[tuple[str, int], ...], SizeBucket] = {}
        for t, w, k in self._parsed():
            sizes: dict[str, int] = {}
            if t != template or not _bucket_sizes(workload, w, sizes) or not sizes:
                continue
            b = SizeBucket(tuple(sorted(sizes.items())), dict(self[k]))
            found.setdefault(b.sizes, b)
        return sorted(found.values(), key=lambda b: (b.size(), b.sizes))


@dataclass(frozen=True)
class SizeBucket:
    """The knob values a record tuned at one size gives a workload with run-time extents:
    ``sizes`` maps each run-time extent's text (as the workload names it) to the size the
    record was measured at."""

    sizes: tuple[tuple[str, int], ...]
    knobs: dict[str, Any] = field(hash=False, compare=False)

    def size(self) -> int:
        """The product of the sizes (what buckets are ordered and split by)."""
        return math.prod(max(v, 1) for _, v in self.sizes)


def _bucket_sizes(symbolic: Any, tuned: Any, out: dict[str, int]) -> bool:
    """Whether workload ``tuned`` (all ints) is ``symbolic`` at a size: equal at every
    static position, an int at each run-time one (the same int wherever the same text
    appears); collects text -> int in ``out``."""
    if isinstance(symbolic, str) and isinstance(tuned, int) and not isinstance(tuned, bool):
        return out.setdefault(symbolic, tuned) == tuned
    if isinstance(symbolic, list) and isinstance(tuned, list):
        return len(symbolic) == len(tuned) and all(
            _bucket_sizes(a, b, out) for a, b in zip(symbolic, tuned))
    return symbolic == tuned


def _size_distance(a: Any, b: Any) -> float | None:
    """How far two workloads are when they differ only in sizes (ints), or None."""
    if isinstance(a, bool) or isinstance(b, bool):
        return 0.0 if a == b else None
    if isinstance(a, int) and isinstance(b, int):
        return abs(math.log(max(a, 1)) - math.log(max(b, 1)))
    if isinstance(a, list) and isinstance(b, list):
        if len(a) != len(b):
            return None
        total = 0.0
        for x, y in zip(a, b):
            d = _size_distance(x, y)
            if d is None:
                return None
            total += d
        return total
    return 0.0 if a == b else None


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

    def __init__(self, records: Iterable[TuningRecord], source: str = "",
                 skipped_lines: Iterable[tuple[int, str]] = (),
                 checks: Iterable[ModelCheck] = ()) -> None:
        self.records = list(records)
        self.source = source
        #: The whole-model checks of ``tessera tune`` (oldest first): the latest that judged a
        #: workload decides whether its records are used (:attr:`rejected`).
        self.checks = sorted(checks, key=lambda c: c.timestamp)
        self.rejected: dict[str, ModelCheck] = {}
        for check in self.checks:
            for key in check.kept:
                self.rejected.pop(key, None)
            for key in check.rejected:
                self.rejected[key] = check
        #: Rejected workloads a compile asked for, not yet reported (:meth:`warn_rejected`).
        self.rejected_used: set[str] = set()
        self._best: dict[tuple[str, str | None], dict[str, TuningRecord]] = {}
        #: Lines of the file that are not records (line number, reason), not yet reported.
        self.skipped_lines: list[tuple[int, str]] = list(skipped_lines)
        #: Knob values of records that templates did not take (reason, detail, key), not yet
        #: reported (``ConfigSpace.pick`` fills it through :class:`ScheduleOverrides`).
        self.ignored_values: set[tuple[str, str, str]] = set()
        #: Whether workloads without a record of their own take the nearest size's (what a
        #: dynamic module's specialisations do: records tuned at representative sizes apply
        #: at every size).
        self.nearest_sizes = False

    @classmethod
    def load(cls, path: str | Path) -> TuningHistory:
        """The records of ``path``; lines that are not records are counted for
        :meth:`warn_skipped` (a file that is not a records file at all is an error)."""
        p = Path(path)
        if not p.is_file():
            raise TuningRecordsError(f"tuning records: file {str(path)!r} does not exist")
        skipped: list[tuple[int, str]] = []
        checks: list[ModelCheck] = []
        records = list(load_records(p, skipped, checks))
        return cls(records, str(p), skipped, checks)

    def to_text(self) -> str:
        """The records and model checks as JSON lines (what :meth:`from_text` reads back)."""
        return "".join(r.to_json() + "\n" for r in [*self.records, *self.checks])

    @classmethod
    def from_text(cls, text: str, source: str = "") -> TuningHistory:
        """Records written by :meth:`to_text` (an artifact's copy); a line that is not a
        record is a :class:`~tessera.errors.TuningRecordsError`."""
        records: list[TuningRecord] = []
        checks: list[ModelCheck] = []
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                parsed = _parse(line.strip())
            except (ValueError, TypeError) as e:
                raise TuningRecordsError(f"tuning records of {source or 'an artifact'}: "
                                         f"{_describe(n, str(e), line)}") from None
            (checks if isinstance(parsed, ModelCheck) else records).append(parsed)  # type: ignore[arg-type]
        return cls(records, source, checks=checks)

    def warn_skipped(self) -> str | None:
        """Warn once about the lines and knob values skipped since the last call (what
        ``compile`` calls when it is done); the message, or None when nothing was."""
        if not self.skipped_lines and not self.ignored_values:
            return None
        message = (f"tuning records {self.source or '(in memory)'!r}: "
                   f"{skip_summary(self.skipped_lines, self.ignored_values)}")
        self.skipped_lines.clear()
        self.ignored_values.clear()  # the set the overrides handed out share
        warnings.warn(message, stacklevel=2)
        return message

    def warn_rejected(self) -> str | None:
        """Warn once about the workloads of this compile whose records a model check
        rejected (they kept their default schedules); the message, or None."""
        if not self.rejected_used:
            return None
        checks = {id(self.rejected[k]): self.rejected[k] for k in self.rejected_used}
        found = "; ".join(f"{c.model} on {c.cpu or 'this CPU'}: {c.summary()}"
                          for c in checks.values())
        message = (f"tuning records {self.source or '(in memory)'!r}: "
                   f"{len(self.rejected_used)} schedule(s) left at their defaults: the "
                   f"whole-model check of 'tessera tune' found that their records do not make "
                   f"the model faster ({found})")
        self.rejected_used.clear()
        warnings.warn(message, stacklevel=2)
        return message

    def best(self, backend: str, target: str | None = None) -> dict[str, TuningRecord]:
        """Workload key -> its best record (:func:`best_configs`), without the workloads a
        model check rejected."""
        k = (backend, target)
        if k not in self._best:
            self._best[k] = {key: r for key, r in best_configs(self.records, backend,
                                                                 target).items()
                             if key not in self.rejected}
        return self._best[k]

    def overrides(self, backend: str, target: str | None = None) -> ScheduleOverrides:
        """Workload key -> the best knob values (what templates' ``pick`` reads; values it
        cannot use are collected for :meth:`warn_skipped`). With :attr:`nearest_sizes`, a
        workload without a record takes the nearest size's (:meth:`ScheduleOverrides.nearest`)."""
        best = self.best(backend, target)
        return ScheduleOverrides({k: dict(r.config) for k, r in best.items()},
                                 self.ignored_values, self.nearest_sizes, self.rejected,
                                 self.rejected_used)
