"""ONNX node conformance: every generated node case with all-tensor inputs and outputs, compiled
with ``tessera.compile(..., target=T)`` and run, against the outputs the ``onnx`` package stores
with the case, for each installed CPU code generator T: ``ref`` always, ``llvm`` when tessera-llvm
is installed. Both run through the backend test kit a vendor uses
(:class:`tessera.testing.kit.NodeConformance`, claimed-only): a case counts for T only if T ran
some of its nodes; cases of ops T does not claim are skipped, and the end of the run prints the
nodes each backend ran.

Known failures live next to this file, one list per target (``known_failures.txt`` for ref,
``known_failures_<target>.txt`` for the others; one ``test_name  # reason`` per line); they are
xfailed with their reason, and a listed case that passes fails, so the lists stay true. Refresh
one with ``python -m tessera.testing.conformance --target llvm --write-known-failures
tests/conformance/known_failures_llvm.txt``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from tiers import slow_except

from tessera.testing.conformance import (
    CaseResult,
    all_tensor_cases,
    read_known_failures,
    write_known_failures,
)
from tessera.testing.kit import NodeConformance

KNOWN_FAILURES_FILE = Path(__file__).with_name("known_failures.txt")
KNOWN = read_known_failures(KNOWN_FAILURES_FILE)
CASES = all_tensor_cases()


def _installed_targets() -> list[str]:
    from tessera.plugin.manager import get_registry

    targets = ["ref"]
    backend = get_registry().backends.get("llvm")
    if backend is not None and backend.available() is None:
        targets.append("llvm")
    return targets


TARGETS = _installed_targets()


def known_failures_file(target: str) -> Path:
    if target == "ref":
        return KNOWN_FAILURES_FILE
    return Path(__file__).with_name(f"known_failures_{target}.txt")


KNOWN_BY_TARGET = {t: read_known_failures(known_failures_file(t)) for t in TARGETS}
SUITES = {t: NodeConformance(t, baseline=known_failures_file(t)) for t in TARGETS}
for _suite in SUITES.values():
    _suite.cases = CASES  # collected once for every target


def _first_case_of_each_op() -> set[str]:
    """The fast tier's cases: the first of each set of ops, not counting the ``_expanded``
    cases (an op's function body, many nodes): about 190 of the 1,855. The rest are slow
    (about a minute on two cores for both targets)."""
    first: dict[tuple[str, ...], str] = {}
    for case in CASES:
        if "_expanded" not in case.name:
            first.setdefault(tuple(sorted({n.op_type for n in case.model.graph.node})),
                             case.name)
    return set(first.values())


@pytest.mark.parametrize("target", TARGETS)
@pytest.mark.parametrize("case", slow_except(CASES, _first_case_of_each_op(),
                                             ids=lambda c: c.name))
def test_onnx_node(case, target: str) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cases feed inf/nan on purpose
        SUITES[target].check(case)


@pytest.mark.parametrize("target", TARGETS)
def test_known_failures_name_existing_cases(target: str) -> None:
    names = {c.name for c in CASES}
    stale = sorted(set(KNOWN_BY_TARGET[target]) - names)
    assert not stale, (f"{known_failures_file(target).name} lists cases that do not exist: "
                       f"{stale}")


def test_known_failures_file_round_trips(tmp_path: Path) -> None:
    """Rewriting the file from its own entries changes nothing: reasons and groups survive."""
    results = [CaseResult(name, False, "ignored: the listed reason wins") for name in KNOWN]
    out = tmp_path / "known_failures.txt"
    write_known_failures(out, results, KNOWN, [c.name for c in CASES])
    assert read_known_failures(out) == KNOWN


def test_writer_drops_passing_cases_and_classifies_new_ones(tmp_path: Path) -> None:
    out = tmp_path / "known.txt"
    out.write_text("## old group\ntest_a  # kept reason\ntest_b  # now passes\n")
    previous = read_known_failures(out)
    results = [
        CaseResult("test_a", False, "crash KeyError: 'x'"),
        CaseResult("test_b", True),
        CaseResult("test_c", False, "ModelImportError: the model has 1 node(s) with "
                   "unsupported ops (Foo):"),
        CaseResult("test_d", False, "ModelImportError: graph input 'x': element type BFLOAT16 "
                   "is not supported; expected one of float16"),
        CaseResult("test_e", False, "crash ValueError: bad"),
    ]
    write_known_failures(out, results, previous)
    entries = read_known_failures(out)
    assert sorted(entries) == ["test_a", "test_c", "test_d", "test_e"]
    assert (entries["test_a"].reason, entries["test_a"].group) == ("kept reason", "old group")
    assert entries["test_c"].reason == "no converter for Foo"
    assert entries["test_d"].reason == "element type BFLOAT16"
    assert entries["test_e"].group.startswith("crashes")
