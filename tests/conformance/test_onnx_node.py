"""ONNX node conformance: every generated node case with all-tensor inputs and outputs, compiled
with ``tessera.compile(..., target="ref")`` and run, against the outputs the ``onnx`` package
stores with the case.

Known failures live in ``known_failures.txt`` next to this file (one ``test_name  # reason`` per
line); they are xfailed with their reason, and a listed case that passes fails, so the list stays
true. Refresh it with
``python -m tessera.testing.conformance --target ref --write-known-failures
tests/conformance/known_failures.txt``.
"""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest

from tessera.testing.conformance import (
    CaseResult,
    all_tensor_cases,
    read_known_failures,
    run_case,
    write_known_failures,
)

KNOWN_FAILURES_FILE = Path(__file__).with_name("known_failures.txt")
KNOWN = read_known_failures(KNOWN_FAILURES_FILE)
CASES = all_tensor_cases()


@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_onnx_node(case) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # cases feed inf/nan on purpose
        result = run_case(case, target="ref")
    known = KNOWN.get(case.name)
    if known is None:
        assert result.ok, result.reason
    elif result.ok:
        pytest.fail(f"{case.name} passes but is listed in {KNOWN_FAILURES_FILE.name} "
                    f"({known.reason}): remove that line")
    else:
        pytest.xfail(known.reason)


def test_known_failures_name_existing_cases() -> None:
    names = {c.name for c in CASES}
    stale = sorted(set(KNOWN) - names)
    assert not stale, f"{KNOWN_FAILURES_FILE.name} lists cases that do not exist: {stale}"


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
