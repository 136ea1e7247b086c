"""ONNX node conformance for one backend, claimed-only: what the backend itself ran.

Compiling a case for ``--target mynpu`` alone lets every node the backend does not claim fall
back to a CPU backend, so a plain pass count says nothing about the backend. Here each case
records how many of its nodes each backend ran; a case the backend under test took no node of
is never the backend's failure, whatever the backends that ran it did:

- *declined* when the backend said why it left some of the case's nodes to another backend
  (:meth:`~tessera.plugin.Backend.declines`, as the partition report lists them): skipped,
  with that reason;
- *fallback failed* when the backends that ran the case got it wrong, and *unclaimed* when they
  got it right: skipped when none of the case's ops is one the backend claims, a failure when
  one is (a check that refuses the nodes without a reason, a pattern that never matches).

A case the backend ran some nodes of and that fails is *failed*. The backend's baseline file
lists the cases it is known not to pass (xfailed); it has the format of Tessera's own
known-failures lists (``test_name  # reason`` under ``## group`` headers); a listed case that
passes fails, so the list stays true.
"""

from __future__ import annotations

import threading
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

import tessera
from tessera.api import partition_model
from tessera.partition.report import PartitionReport
from tessera.plugin.contract import strict_contracts
from tessera.plugin.manager import get_backend, resolve_target
from tessera.testing.conformance import (
    CaseResult,
    KnownFailure,
    all_tensor_cases,
    read_known_failures,
    run_case,
)


@dataclass
class ClaimedResult:
    """One case run for one backend: ``status`` is one of :data:`STATUSES`; ``nodes``
    counts the nodes each backend ran (of the last data set compiled; for a case that did not
    compile, the nodes each backend was given), ``ops`` are the ops of the compiled graph
    (after Tessera's graph passes) and ``declined`` the (node, op, reason) of each node the
    backend declined."""

    name: str
    status: str
    reason: str = ""
    nodes: dict[str, int] = field(default_factory=dict)
    ops: tuple[str, ...] = ()
    declined: tuple[tuple[str, str, str], ...] = ()

    def as_case_result(self) -> CaseResult:
        """The form the known-failures writer takes (only a pass is not a failure)."""
        return CaseResult(self.name, self.status == "passed", self.reason)


#: A case's status: the backend ran some of its nodes and it passed or failed; the backend
#: ran none of them and declined some with a reason, or gave none and the backends that ran
#: them failed (``fallback failed``) or passed (or Tessera could not compile it at all).
STATUSES = ("passed", "failed", "declined", "fallback failed", "unclaimed")


@dataclass
class Tally:
    """Per backend under test: cases by outcome and the nodes it ran in passing cases."""

    passed: int = 0
    failed: int = 0
    known: int = 0
    unclaimed: int = 0
    nodes: int = 0
    #: nodes other backends ran in those cases (fallbacks), by backend
    others: dict[str, int] = field(default_factory=dict)
    #: skipped cases whose nodes the backend declined with a reason
    declined: int = 0

    def line(self, backend: str) -> str:
        others = ", ".join(f"{b} {n}" for b, n in sorted(self.others.items()))
        return (f"backend {backend!r}: ran {self.nodes} nodes in {self.passed} passing cases; "
                f"{self.failed} failed, {self.known} known failures, {self.declined} declined "
                f"(with a reason), {self.unclaimed} skipped (ops it does not claim, or no "
                f"node left to run)" + (f"; nodes run by others: {others}" if others else ""))


_TALLY: dict[str, Tally] = {}
_TALLY_LOCK = threading.Lock()


def session_tally() -> dict[str, Tally]:
    """The counts of every :meth:`NodeConformance.check` in this process, by backend."""
    with _TALLY_LOCK:
        return dict(_TALLY)


def _unclaimed_group() -> str:
    return "not claimed (the backend's patterns or checks refuse these nodes)"


class NodeConformance:
    """The ONNX node cases for ``backend``, run claimed-only.

    ``target`` defaults to the backend's name (unclaimed nodes then fall back to the best CPU
    backend); ``ops`` restricts the cases to those with one of these op types; ``expect_ops``
    (default: the op of every single-node pattern it claims; an op it takes only inside a
    composite is not expected alone) are the ops whose cases it must take;
    ``baseline`` is its known-failures file (absent: no known failures).
    """

    def __init__(self, backend: str, target: str | None = None,
                 ops: Iterable[str] | None = None, expect_ops: Iterable[str] | None = None,
                 baseline: str | Path | None = None):
        self.backend = backend
        self.target = target or backend
        self.ops = set(ops) if ops is not None else None
        self._expect = set(expect_ops) if expect_ops is not None else None
        self.baseline = Path(baseline) if baseline is not None else None
        self.known: dict[str, KnownFailure] = (read_known_failures(self.baseline)
                                               if self.baseline is not None else {})
        self.cases: list[Any] = all_tensor_cases(self.ops)

    @property
    def ids(self) -> list[str]:
        return [c.name for c in self.cases]

    def expected_ops(self) -> set[str]:
        """Ops whose cases the backend must take (its single-node patterns' ops unless
        given)."""
        if self._expect is None:
            kind = next(k for b, k in resolve_target(self.target) if b.name == self.backend)
            backend = get_backend(self.backend)
            self._expect = set()
            for p in backend.claims(kind):
                if not p.inputs or all(sub is None for sub in p.inputs):
                    self._expect |= {p.op} if isinstance(p.op, str) else set(p.op)
        return self._expect

    def run(self, case: Any) -> ClaimedResult:
        """Compile and run ``case`` for the target, with contract warnings as errors."""
        resolve_target(self.target)  # a backend that is not registered is an error, not a skip
        seen = _Partition(self.backend)

        def engine(model: Any, inputs: dict[str, np.ndarray], target: str,
                   freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
            shapes = {k: list(v.shape) for k, v in inputs.items() if k not in freeze}
            seen.clear()
            try:
                mod = tessera.compile(model, target=target, input_shapes=shapes,
                                      freeze_inputs=freeze)
            except Exception:
                seen.partition_again(model, target, shapes, freeze)
                raise
            try:
                for name, value in inputs.items():
                    if name not in freeze:
                        mod.set_input(name, value)
                mod.run()
            finally:  # after the run: a staged model's later stages compile then
                seen.note(mod.partition_report())
            return [mod.get_output(i) for i in range(len(mod.output_names))]

        with strict_contracts(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # cases feed inf/nan on purpose
            result = run_case(case, self.target, engine)
        return self._classify(case, result, seen)

    def _classify(self, case: Any, result: CaseResult, seen: _Partition) -> ClaimedResult:
        """The status of a case from its result and who was given its nodes."""
        nodes, declined = dict(seen.nodes), tuple(seen.declined)
        ops = tuple(sorted(seen.ops or {n.op_type for n in case.model.graph.node}))
        if not result.ok and not nodes and not result.reason.startswith("Plugin"):
            # it failed before any backend was involved (an op or type Tessera cannot
            # import): the case says nothing about this backend
            return ClaimedResult(case.name, "unclaimed", f"unclaimed: Tessera cannot compile "
                                 f"this case ({result.reason})", {}, ops)
        if nodes.get(self.backend) or not nodes:
            if result.ok and not nodes:  # constant-folded or an identity: nothing to run
                return ClaimedResult(case.name, "unclaimed", "unclaimed: Tessera's graph "
                                     "passes leave no node to run", {}, ops)
            return ClaimedResult(case.name, "passed" if result.ok else "failed",
                                 result.reason, nodes, ops, declined)
        # the backend ran none of the case's nodes: whatever happened is not its doing
        others = ", ".join(sorted(nodes))
        failed = "" if result.ok else f"; {others} ran it and failed: {result.reason}"
        if declined:
            said = "; ".join(f"{self.backend} declined {op}: {reason}" for op, reason in
                             dict.fromkeys((op, reason) for _, op, reason in declined))
            return ClaimedResult(case.name, "declined", f"declined: {said}{failed}", nodes,
                                 ops, declined)
        ran_none = f"{self.backend} ran none of its nodes (ops {', '.join(ops)})"
        status = "unclaimed" if result.ok else "fallback failed"
        return ClaimedResult(case.name, status, f"{status}: {ran_none}{failed}", nodes, ops)

    def outcome(self, result: ClaimedResult) -> tuple[str, str]:
        """What a test makes of a result: (``pass``|``fail``|``xfail``|``skip``, message)."""
        known = self.known.get(result.name)
        if result.status == "passed":
            if known is not None:
                return "fail", (f"{result.name} passes on {self.backend} but "
                                f"{self.baseline} lists it ({known.reason}): remove that line")
            return "pass", ""
        if known is not None:
            return "xfail", known.reason
        if result.status == "declined":
            return "skip", result.reason
        if result.status in ("unclaimed", "fallback failed"):
            expected = sorted(set(result.ops) & self.expected_ops())
            if not expected or result.reason.startswith("unclaimed: Tessera"):
                return "skip", result.reason
            return "fail", (f"{self.backend} claims {', '.join(expected)} but took none of this "
                            f"case's nodes and declines() gave no reason (a check that refuses "
                            f"them?); say why in declines(), or list the case in "
                            f"{self.baseline or 'a baseline file'} if that is intended")
        return "fail", result.reason

    def check(self, case: Any) -> ClaimedResult:
        """Run ``case`` as a pytest test: fails, xfails or skips as :meth:`outcome` says, and
        adds to the session's per-backend counts."""
        import pytest

        result = self.run(case)
        verdict, message = self.outcome(result)
        with _TALLY_LOCK:
            tally = _TALLY.setdefault(self.backend, Tally())
            if verdict == "pass":
                tally.passed += 1
                tally.nodes += result.nodes.get(self.backend, 0)
                for b, n in result.nodes.items():
                    if b != self.backend:
                        tally.others[b] = tally.others.get(b, 0) + n
            elif verdict == "xfail":
                tally.known += 1
            elif verdict == "skip" and result.status == "declined":
                tally.declined += 1
            elif verdict == "skip":
                tally.unclaimed += 1
            else:
                tally.failed += 1
        if verdict == "fail":
            pytest.fail(message, pytrace=False)
        if verdict == "xfail":
            pytest.xfail(message)
        if verdict == "skip":
            pytest.skip(message)
        return result

    def stale_baseline_entries(self) -> list[str]:
        """Baseline entries that name no case of this run."""
        names = {c.name for c in all_tensor_cases()}
        return sorted(set(self.known) - names)


class _Partition:
    """Who was given a case's nodes: the nodes per backend, the ops left after the graph
    passes, and the nodes the backend under test declined (from the compiled module's
    partition report, or, when the case did not compile, from partitioning it again)."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self.nodes: dict[str, int] = {}
        self.ops: set[str] = set()
        self.declined: list[tuple[str, str, str]] = []

    def clear(self) -> None:
        self.nodes.clear()
        self.ops.clear()
        self.declined.clear()

    def note(self, report: PartitionReport) -> None:
        for region in report.regions:
            self.nodes[region.backend] = self.nodes.get(region.backend, 0) + len(region.nodes)
            self.ops.update(region.ops)
        self.declined.extend((node, op, reason) for node, op, who, reason, _ in report.declined
                             if who == self.backend)

    def partition_again(self, model: Any, target: str, shapes: dict[str, list[int]],
                        freeze: dict[str, np.ndarray]) -> None:
        """After a failed compile: the partition it would have had (nothing when the model
        does not even partition)."""
        try:
            partitioned = partition_model(model, target, input_shapes=shapes,
                                          freeze_inputs=freeze)
        except Exception:  # noqa: BLE001 - the compile's own error is the one reported
            return
        self.note(partitioned.report)
