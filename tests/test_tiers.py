"""The test tiers and the order-independent random data of the root conftest.py, checked on a
small project of their own run by pytest in a subprocess: ``python -m pytest`` deselects the
tests marked slow or gpu and says so; ``--all-tiers``, ``-m`` and a node id select them; a
module-level generator gives a test the same data whichever tests ran before it."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

PYPROJECT = """\
[tool.pytest.ini_options]
addopts = "--import-mode=importlib -p no:cacheprovider -p no:xdist"
markers = ["gpu: needs a GPU", "slow: the slow tier"]
"""

TESTS = """\
import json
import os

import numpy as np
import pytest

RNG = np.random.default_rng(7)


def test_fast():
    pass


@pytest.mark.slow
def test_slow():
    pass


@pytest.mark.gpu
def test_gpu():
    pass


@pytest.mark.parametrize("n", [1, pytest.param(2, marks=pytest.mark.slow)])
def test_family(n):
    pass


def test_draws_first():
    RNG.standard_normal(100)


def test_draws_second():
    with open(os.environ["DRAWN"], "w") as f:
        json.dump(RNG.standard_normal(3).tolist(), f)
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    shutil.copy(ROOT / "conftest.py", tmp_path / "conftest.py")
    (tmp_path / "pyproject.toml").write_text(PYPROJECT)
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "test_it.py").write_text(TESTS)
    return tmp_path


def _pytest(project: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"PATH": "/usr/bin:/bin", "DRAWN": str(project / "drawn.json")}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *args], cwd=project, env=env,
                          capture_output=True, text=True, timeout=120)


def _selected(project: Path, *args: str) -> set[str]:
    done = _pytest(project, "--collect-only", *args)
    assert done.returncode == 0, done.stdout + done.stderr
    return {line.split("::", 1)[1] for line in done.stdout.splitlines() if "::" in line}


def test_fast_tier_and_the_ways_to_select_the_others(project: Path) -> None:
    everything = {"test_fast", "test_slow", "test_gpu", "test_family[1]", "test_family[2]",
                  "test_draws_first", "test_draws_second"}
    fast = everything - {"test_slow", "test_gpu", "test_family[2]"}
    assert _selected(project) == fast
    assert _selected(project, "--all-tiers") == everything
    assert _selected(project, "-m", "slow or not slow") == everything
    assert _selected(project, "-m", "slow") == {"test_slow", "test_family[2]"}
    assert _selected(project, "-m", "gpu") == {"test_gpu"}
    # a test named by its node id runs whatever its marks
    assert _selected(project, "tests/test_it.py::test_slow") == {"test_slow"}
    assert _selected(project, "tests/test_it.py::test_family") == {"test_family[1]",
                                                                   "test_family[2]"}
    done = _pytest(project)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "fast tier: 3 tests marked slow or gpu were deselected; --all-tiers" in done.stdout


def test_a_test_draws_the_same_data_whatever_ran_before(project: Path) -> None:
    drawn = []
    for args in (["tests"], ["-k", "draws_second"]):
        done = _pytest(project, "--all-tiers", *args)
        assert done.returncode == 0, done.stdout + done.stderr
        drawn.append(json.loads((project / "drawn.json").read_text()))
    assert drawn[0] == drawn[1]
