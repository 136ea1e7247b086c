"""Shared by the CLI tests: checking a command's one-line error."""

from __future__ import annotations

import pytest


def assert_error(capsys: pytest.CaptureFixture[str], code: int, *fragments: str) -> str:
    """Exit code 1, one ``error:`` line on stderr without a traceback, naming ``fragments``."""
    err = capsys.readouterr().err
    assert code == 1, err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    for fragment in fragments:
        assert fragment in lines[0], err
    return lines[0]
