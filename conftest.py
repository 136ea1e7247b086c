"""Shared by every test folder (tests/ and plugins/*/tests): one BLAS thread, the ``rng``
fixture, and the test tiers.

Tiers. ``python -m pytest`` runs the fast tier: every test that is not marked ``slow`` (long
model runs, full op-family sweeps, subprocess-heavy CLI checks) or ``gpu`` (needs an NVIDIA
GPU); the others are deselected, and the summary says how many. ``--all-tiers`` runs them too
(``./run-tests.sh`` and CI do, in parallel with pytest-xdist); a ``-m EXPR`` of yours replaces
the rule (``-m slow``: the slow tier alone, ``-m gpu``: the GPU tests, ``-m "slow or not slow"``:
everything). A test named by its node id (``path/test_x.py::test_y``) always runs.

Where a test is marked ``slow``: at module level (``pytestmark = pytest.mark.slow``) when the
whole file is slow, else per test or per parameter (``pytest.param(..., marks=SLOW)``), keeping
at least one case of each family in the fast tier, so that every package keeps fast tests.
"""

from __future__ import annotations

import os

# One BLAS thread: the test machine has two cores shared by parallel work, and two OpenBLAS
# threads made the same matmul vary from 1 ms to 100+ ms there. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import shutil  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import zlib  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
import pytest  # noqa: E402

# The kernel cache (tessera.plugin.kernel_cache) is off unless TESSERA_KERNEL_CACHE says
# otherwise: its whole-region entries are keyed by the model and the compiler's source, which
# cannot see a test's monkeypatching of a schedule or a pass, so a model compiled earlier in the
# same process would come back with the code of before. The cache's own tests give it a folder
# (kernel_cache=tmp_path), which turns it on for them. With TESSERA_KERNEL_CACHE=1 the suite
# uses a folder of this test process's own, removed at its end (it passed so, December 2026).
_OWN_CACHE = None
if "TESSERA_KERNEL_CACHE" not in os.environ:
    os.environ["TESSERA_KERNEL_CACHE"] = "0"
elif "TESSERA_CACHE_DIR" not in os.environ:
    _OWN_CACHE = tempfile.mkdtemp(prefix="tessera-test-kernels-")
    os.environ["TESSERA_CACHE_DIR"] = _OWN_CACHE


def pytest_unconfigure(config: pytest.Config) -> None:
    if _OWN_CACHE is not None:
        shutil.rmtree(_OWN_CACHE, ignore_errors=True)


#: Markers whose tests the fast tier (no ``-m``, no ``--all-tiers``) deselects.
TIER_MARKERS = ("slow", "gpu")
_DESELECTED = pytest.StashKey[int]()


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)


# -- random data that does not depend on the order of the tests ---------------------------------
# Test modules and their helpers keep module-level generators (``RNG = np.random.default_rng(7)``)
# from which each test draws its data: what a test got depended on the tests that ran before it
# in the same process, which differs between the fast tier and every tier, and from run to run
# under pytest-xdist (its scheduling is dynamic), so a tolerance could pass in one order and
# fail in another. Before each test, every such generator restarts from a seed of the test's
# own (its node id), so a test sees the same data however and wherever it runs.

#: (generator, a number naming it: its module and global name)
_GENERATORS: list[tuple[np.random.Generator, int]] = []
_SCANNED: dict[str, int] = {}  # module name -> id of the module object scanned
_MODULES_SEEN = 0  # len(sys.modules) at the last scan


def _find_generators(config: pytest.Config) -> None:
    """Adds the np.random.Generator globals of the test folders' modules not scanned yet
    (modules that a test's body imports appear later: a scan runs when sys.modules grows)."""
    global _MODULES_SEEN
    _MODULES_SEEN = len(sys.modules)
    folders = (config.rootpath / "tests", *(config.rootpath / "plugins").glob("*/tests"))
    for name, module in list(sys.modules.items()):
        if _SCANNED.get(name) == id(module):
            continue
        _SCANNED[name] = id(module)
        file = getattr(module, "__file__", None)
        if not file or not any(Path(file).is_relative_to(f) for f in folders):
            continue
        for var, value in list(vars(module).items()):
            if isinstance(value, np.random.Generator) and \
                    not any(value is g for g, _ in _GENERATORS):
                _GENERATORS.append((value, zlib.crc32(f"{name}.{var}".encode())))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Before the test's fixtures (a module-scoped one set up for it draws the same data too)."""
    if len(sys.modules) != _MODULES_SEEN:
        _find_generators(item.config)
    seed = zlib.crc32(item.nodeid.encode())
    for generator, key in _GENERATORS:
        bits = type(generator.bit_generator)(np.random.SeedSequence([seed, key]))
        generator.bit_generator.state = bits.state


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("tessera").addoption(
        "--all-tiers", action="store_true", default=False,
        help="run every tier: the tests marked slow or gpu as well (./run-tests.sh does). "
             "Without it, and without -m, they are deselected.")


def _named_node_ids(config: pytest.Config) -> list[str]:
    """The node ids named on the command line (``path::test``), relative to the rootdir."""
    named = []
    for arg in config.args:
        if "::" not in arg:
            continue
        path, rest = arg.split("::", 1)
        full = (config.invocation_params.dir / path).resolve()
        try:
            rel = full.relative_to(config.rootpath).as_posix()
        except ValueError:
            continue
        named.append(f"{rel}::{rest}")
    return named


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--all-tiers") or config.getoption("markexpr"):
        return
    named = _named_node_ids(config)
    keep, drop = [], []
    for item in items:
        tiered = any(item.get_closest_marker(m) is not None for m in TIER_MARKERS)
        if tiered and not any(item.nodeid == n or item.nodeid.startswith((n + "::", n + "["))
                              for n in named):
            drop.append(item)
        else:
            keep.append(item)
    if drop:
        config.stash[_DESELECTED] = len(drop)
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter, config: pytest.Config) -> None:  # noqa: ANN001
    count = config.stash.get(_DESELECTED, 0)
    if count:
        terminalreporter.write_line(
            f"fast tier: {count} tests marked slow or gpu were deselected; --all-tiers (or "
            f"./run-tests.sh) runs every tier, -m slow the slow ones alone")

