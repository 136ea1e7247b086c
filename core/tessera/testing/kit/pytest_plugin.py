"""The backend test kit as a pytest plugin.

Enable it in a backend package's ``conftest.py``::

    pytest_plugins = ["tessera.testing.kit.pytest_plugin"]

Every test then runs with plugin contract warnings as errors (a pattern check that raises, a
device name that does not match the device API), and the end of the run prints, per backend,
how many nodes it ran in passing node-conformance cases and how many cases it did not claim.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tessera.plugin.contract import strict_contracts
from tessera.testing.kit.node_conformance import session_tally


@pytest.fixture(autouse=True)
def _tessera_strict_contracts() -> Iterator[None]:
    with strict_contracts():
        yield


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    tally = session_tally()
    if not tally:
        return
    terminalreporter.section("tessera backend kit")
    for backend, counts in sorted(tally.items()):
        terminalreporter.write_line(counts.line(backend))
