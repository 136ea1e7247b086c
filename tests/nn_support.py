"""What the neural-network op tests (conv, pool, norm, linalg, sampling, nn) share: random data
and their comparison policy (float16 outputs compare to 1e-2 whatever a test asks for)."""

from __future__ import annotations

from functools import partial

import numpy as np
import onnx_node

RNG = np.random.default_rng(20240611)
F32 = np.float32
F16 = np.float16


def rand(*shape: int, dtype=F32, lo: float = -1.0, hi: float = 1.0) -> np.ndarray:
    """Uniform random data in [lo, hi) of ``dtype``."""
    return RNG.uniform(lo, hi, shape).astype(dtype)


check = partial(onnx_node.check, rtol=1e-3, atol=1e-4, tolerances={F16: (1e-2, 1e-2)})
