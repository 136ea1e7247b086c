"""Print the ONNX node conformance pass count at the end of a run that included it."""

from __future__ import annotations

import pytest

CASE_PREFIX = "test_onnx_node.py::test_onnx_node["


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    by_target: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "xfailed", "error"):
        for report in terminalreporter.stats.get(outcome, []):
            if getattr(report, "when", "call") != "call" or CASE_PREFIX not in report.nodeid:
                continue
            # ids look like test_onnx_node[<case>-<target>]
            target = report.nodeid.rsplit("-", 1)[1].rstrip("]")
            counts = by_target.setdefault(target, {})
            counts[outcome] = counts.get(outcome, 0) + 1
    for target, counts in sorted(by_target.items()):
        total = sum(counts.values())
        terminalreporter.write_line(
            f"ONNX node conformance ({target}): {counts.get('passed', 0)} passed of {total} "
            f"({counts.get('xfailed', 0)} known failures, {counts.get('failed', 0)} failed)")
