"""Print the ONNX node conformance pass count at the end of a run that included it."""

from __future__ import annotations

import pytest

CASE_PREFIX = "test_onnx_node.py::test_onnx_node["


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    counts = {}
    for outcome in ("passed", "failed", "xfailed", "error"):
        counts[outcome] = sum(
            1 for report in terminalreporter.stats.get(outcome, [])
            if getattr(report, "when", "call") == "call" and CASE_PREFIX in report.nodeid)
    total = sum(counts.values())
    if total:
        terminalreporter.write_line(
            f"ONNX node conformance (ref): {counts['passed']} passed of {total} "
            f"({counts['xfailed']} known failures, {counts['failed']} failed)")
