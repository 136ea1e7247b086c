"""The conformance tests use the backend test kit (contract warnings are errors; the end of
the run prints the nodes each backend ran) and print the pass count per target."""

from __future__ import annotations

import pytest

# the kit's pytest plugin, for this folder only (a vendor's conftest writes
# pytest_plugins = ["tessera.testing.kit.pytest_plugin"], which pytest allows at the root only)
from tessera.testing.kit.pytest_plugin import _tessera_strict_contracts  # noqa: F401
from tessera.testing.kit.pytest_plugin import pytest_terminal_summary as kit_summary

CASE_PREFIX = "test_onnx_node.py::test_onnx_node["


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    by_target: dict[str, dict[str, int]] = {}
    for outcome in ("passed", "failed", "xfailed", "skipped", "error"):
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
            f"({counts.get('xfailed', 0)} known failures, {counts.get('skipped', 0)} skipped: "
            f"not claimed or nothing to run, {counts.get('failed', 0)} failed)")
    kit_summary(terminalreporter)
