"""ONNX node conformance for one backend, claimed-only: what the backend itself ran.

Compiling a case for ``--target mynpu`` alone lets every node the backend does not claim fall
back to a CPU backend, so a plain pass count says nothing about the backend. Here each case
records how many of its nodes each backend ran; a case the backend under test took no node of
is *unclaimed*: not a pass. It is skipped when none of its ops is one the backend claims, and a
failure when one is (a check that refuses the nodes, a pattern that never matches), unless the
backend's baseline file lists it. The baseline has the format of Tessera's own known-failures
lists (``test_name  # reason`` under ``## group`` headers); a listed case that passes fails, so
the list stays true.
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
    """One case run for one backend: ``status`` is ``passed``, ``failed`` or ``unclaimed``;
    ``nodes`` counts the nodes each backend ran (of the last data set compiled) and ``ops``
    are the ops of the compiled graph (after Tessera's graph passes)."""

    name: str
    status: str
    reason: str = ""
    nodes: dict[str, int] = field(default_factory=dict)
    ops: tuple[str, ...] = ()

    def as_case_result(self) -> CaseResult:
        """The form the known-failures writer takes (an unclaimed case is a failure)."""
        return CaseResult(self.name, self.status == "passed", self.reason)


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

    def line(self, backend: str) -> str:
        others = ", ".join(f"{b} {n}" for b, n in sorted(self.others.items()))
        return (f"backend {backend!r}: ran {self.nodes} nodes in {self.passed} passing cases; "
                f"{self.failed} failed, {self.known} known failures, {self.unclaimed} skipped "
                f"(ops it does not claim, or no node left to run)"
                + (f"; nodes run by others: {others}" if others else ""))


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
        nodes: dict[str, int] = {}
        compiled_ops: set[str] = set()  # the ops left after Tessera's graph passes

        def engine(model: Any, inputs: dict[str, np.ndarray], target: str,
                   freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
            shapes = {k: list(v.shape) for k, v in inputs.items() if k not in freeze}
            mod = tessera.compile(model, target=target, input_shapes=shapes,
                                  freeze_inputs=freeze)
            nodes.clear()
            compiled_ops.clear()
            for region in mod.report.regions:
                nodes[region.backend] = nodes.get(region.backend, 0) + len(region.nodes)
                compiled_ops.update(region.ops)
            for name, value in inputs.items():
                if name not in freeze:
                    mod.set_input(name, value)
            mod.run()
            return [mod.get_output(i) for i in range(len(mod.output_names))]

        with strict_contracts(), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # cases feed inf/nan on purpose
            result = run_case(case, self.target, engine)
        ops = tuple(sorted(compiled_ops or {n.op_type for n in case.model.graph.node}))
        if not result.ok and not nodes and not result.reason.startswith("Plugin"):
            # it failed before any backend was involved (an op or type Tessera cannot
            # import): the case says nothing about this backend
            return ClaimedResult(case.name, "unclaimed", f"unclaimed: Tessera cannot compile "
                                 f"this case ({result.reason})", {}, ops)
        if not result.ok:
            return ClaimedResult(case.name, "failed", result.reason, dict(nodes), ops)
        if not any(nodes.values()):  # constant-folded or an identity: nothing to run
            return ClaimedResult(case.name, "unclaimed", "unclaimed: Tessera's graph passes "
                                 "leave no node to run", {}, ops)
        if not nodes.get(self.backend):
            return ClaimedResult(case.name, "unclaimed",
                                 f"unclaimed: {self.backend} ran none of its nodes (ops "
                                 f"{', '.join(ops)})", dict(nodes), ops)
        return ClaimedResult(case.name, "passed", "", dict(nodes), ops)

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
        if result.status == "unclaimed":
            expected = sorted(set(result.ops) & self.expected_ops())
            if not expected or result.reason.startswith("unclaimed: Tessera"):
                return "skip", result.reason
            return "fail", (f"{self.backend} claims {', '.join(expected)} but took none of this "
                            f"case's nodes (a check that refuses them?); list the case in "
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
