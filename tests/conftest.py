"""Shared fixtures: deterministic random data and small graph builders."""

from __future__ import annotations

import os

# One BLAS thread: the test machine has two cores shared by parallel work, and two OpenBLAS
# threads made the same matmul vary from 1 ms to 100+ ms there. Set before numpy loads.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest


@pytest.fixture
def rng() -> np.random.Generator:
    return np.random.default_rng(1234)
