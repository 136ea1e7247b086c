"""Winograd convolution's compute over run-time batch, height and width
(``conv2d_winograd_NCHWc`` on placeholders with ``tir.Var`` sizes): lowered once with the
default schedule and run by the TIR interpreter at sizes with partial last tiles along both
axes against a float64 direct convolution; its tile count and padded input are expressions of
the sizes that cover every tile."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import tessera  # noqa: F401 - installs what symbolic graph types need
from tessera import te, tir
from tessera.tir import interpreter
from tessera.topi.nn.winograd import conv2d_winograd_NCHWc, winograd_weight_transform

RNG = np.random.default_rng(5)
IB, OB, ICC, OCC = 4, 4, 2, 1


def _direct(x: np.ndarray, k: np.ndarray) -> np.ndarray:
    """3x3 stride-1 pad-1 convolution of blocked ``x (N, ICC, H, W, ib)`` with packed ``k
    (OCC, ICC, 3, 3, ib, ob)``, in float64."""
    n, _, h, w, _ = x.shape
    xp = np.pad(x.astype(np.float64), [(0, 0), (0, 0), (1, 1), (1, 1), (0, 0)])
    out = np.zeros((n, k.shape[0], h, w, k.shape[5]))
    for r in range(3):
        for s in range(3):
            out += np.einsum("ncyxi,ocip->noyxp", xp[:, :, r:r + h, s:s + w, :],
                             k[:, :, r, s].astype(np.float64))
    return out


def _eval(e: Any, env: dict[Any, int]) -> int:
    return int(interpreter.eval_expr(tir.convert(e), env))


@pytest.mark.parametrize("m", [2, 4])
def test_runtime_winograd_matches_direct_convolution(m: int) -> None:
    b, h, w = tir.Var("b"), tir.Var("h"), tir.Var("w")
    data = te.placeholder((b, ICC, h, w, IB), "float32", "data")
    alpha = m + 2
    weight = te.placeholder((alpha, alpha, OCC, ICC, IB, OB), "float32", "u")
    y = conv2d_winograd_NCHWc(data, weight, 1, m)
    th, tw, tiles = y.op.attrs["tiles"]
    pad = y.op.attrs["data_pad"]
    assert pad is not None
    func = te.lower(te.create_schedule([y.op]), [data, weight, y], "winograd")
    kernel = RNG.standard_normal((OCC, ICC, 3, 3, IB, OB)).astype(np.float32)
    u = winograd_weight_transform(kernel, m)
    for n, hh, ww in [(1, 1, 1), (2, 2, 3), (1, 5, 4), (2, 7, 6)]:
        env = {b: n, h: hh, w: ww}
        # the tiles cover the output, the padded input every tile's alpha x alpha window
        assert _eval(th, env) == -(-hh // m) and _eval(tw, env) == -(-ww // m)
        assert _eval(tiles, env) == n * -(-hh // m) * -(-ww // m)
        assert _eval(pad.shape[2], env) >= _eval(th, env) * m + 2
        assert _eval(pad.shape[3], env) >= _eval(tw, env) * m + 2
        x = RNG.standard_normal((n, ICC, hh, ww, IB)).astype(np.float32)
        out = np.full((n, OCC, hh, ww, OB), np.nan, np.float32)
        interpreter.run(func, [x, u, out], sizes={"b": n, "h": hh, "w": ww})
        want = _direct(x, kernel)
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(),
                                   err_msg=f"batch {n}, height {hh}, width {ww}")
