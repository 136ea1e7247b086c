"""The ranges activations are quantized over, from calibration (the CPU scheme).

Each tensor's values over the calibration batches give a range ``[low, high]``:

- ``minmax``: the smallest and largest value seen (symmetric: ``+-max|x|``);
- ``percentile``: the ``p``-th percentile (default 99.99) of ``|x|`` (symmetric), or the
  ``100 - p``-th and ``p``-th percentiles of ``x`` (asymmetric), from a histogram of
  :data:`BINS` bins: outliers are clipped instead of stretching the scale;
- ``entropy``: the threshold ``t`` of ``|x|`` whose 128-level quantization of the histogram
  loses the least information (the Kullback-Leibler divergence of the clipped distribution
  from its quantized copy, TensorRT's calibration), as ``+-t`` (asymmetric: clipped to the
  values seen).

Percentile and entropy read the calibration data twice: the extremes first, then the
histograms over them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

import numpy as np
import onnx

from tessera.quantization.calibration import CalibrationData, tensor_values

#: Calibration methods.
METHODS = ("minmax", "percentile", "entropy")
#: Histogram bins of the percentile and entropy methods.
BINS = 2048
#: Levels of a quantized non-negative half (int8: 0..127, one more as TensorRT counts).
LEVELS = 128


def calibrate_ranges(model: onnx.ModelProto, tensors: Iterable[str], data: CalibrationData,
                     method: str = "minmax", symmetric: bool = True,
                     percentile: float = 99.99,
                     batch_size: int = 64) -> dict[str, tuple[float, float]]:
    """The range ``(low, high)`` of each named tensor over the calibration data, by
    ``method`` (module doc)."""
    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}: expected one of "
                         f"{', '.join(METHODS)}")
    if not 0.0 < percentile <= 100.0:
        raise ValueError(f"percentile must be in (0, 100], got {percentile}")
    wanted = list(dict.fromkeys(tensors))
    if method != "minmax" and not isinstance(data, Mapping | np.ndarray):
        data = list(data)  # read twice
    low = dict.fromkeys(wanted, np.inf)
    high = dict.fromkeys(wanted, -np.inf)
    for values in tensor_values(model, wanted, data, batch_size):
        for name in wanted:
            v = values[name]
            if v.size:
                low[name] = min(low[name], float(np.min(v)))
                high[name] = max(high[name], float(np.max(v)))
    seen = {n: (low[n], high[n]) if low[n] <= high[n] else (0.0, 0.0) for n in wanted}
    if method == "minmax":
        return {n: _symmetric(lo, hi) if symmetric else (lo, hi) for n, (lo, hi) in seen.items()}
    on_abs = symmetric or method == "entropy"
    edges = {n: np.linspace(0.0, max(abs(lo), abs(hi)), BINS + 1) if on_abs
             else np.linspace(lo, hi, BINS + 1) for n, (lo, hi) in seen.items()}
    hists = {n: np.zeros(BINS, np.float64) for n in wanted}
    for values in tensor_values(model, wanted, data, batch_size):
        for name in wanted:
            v = np.asarray(values[name], np.float64).ravel()
            if v.size and edges[name][-1] > edges[name][0]:
                hists[name] += np.histogram(np.abs(v) if on_abs else v, edges[name])[0]
    out: dict[str, tuple[float, float]] = {}
    for name in wanted:
        lo, hi = seen[name]
        hist, e = hists[name], edges[name]
        if e[-1] <= e[0] or not hist.any():
            out[name] = _symmetric(lo, hi) if symmetric else (lo, hi)
        elif method == "percentile" and symmetric:
            t = _quantile(hist, e, percentile / 100.0)
            out[name] = (-t, t)
        elif method == "percentile":
            out[name] = (_quantile(hist, e, 1.0 - percentile / 100.0, upper=False),
                         _quantile(hist, e, percentile / 100.0))
        else:
            t = entropy_threshold(hist, e)
            out[name] = (-t, t) if symmetric else (max(lo, -t), min(hi, t))
    return out


def _symmetric(low: float, high: float) -> tuple[float, float]:
    bound = max(abs(low), abs(high))
    return -bound, bound


def _quantile(hist: np.ndarray, edges: np.ndarray, q: float, upper: bool = True) -> float:
    """The value below which a fraction ``q`` of the histogram's counts lie: the upper edge
    of the bin where the cumulative count reaches it (``upper`` False: its lower edge, for
    the low end of a range)."""
    cumulative = np.cumsum(hist)
    at = min(int(np.searchsorted(cumulative, q * cumulative[-1] * (1 - 1e-12))), len(hist) - 1)
    return float(edges[at + 1] if upper else edges[at])


def entropy_threshold(hist: np.ndarray, edges: np.ndarray, levels: int = LEVELS) -> float:
    """The clipping threshold of ``|x|`` (a histogram over ``edges`` from 0) that minimises
    ``KL(P || Q)``: ``P`` the first ``i`` bins with the counts beyond added to the last,
    ``Q`` those ``i`` bins quantized to ``levels`` levels and spread back over their non-empty
    bins, for every ``i`` from ``levels`` to all bins."""
    hist = np.asarray(hist, np.float64)
    n = len(hist)
    if n <= levels:
        return float(edges[-1])
    total_beyond = np.concatenate([np.cumsum(hist[::-1])[::-1], [0.0]])  # sum of hist[i:]
    best, best_i = np.inf, n
    for i in range(levels, n + 1):
        ref = hist[:i]
        p = ref.copy()
        p[-1] += total_beyond[i]
        nonzero = ref != 0
        level = (np.arange(i) * levels) // i
        sums = np.bincount(level, weights=ref, minlength=levels)
        counts = np.bincount(level, weights=nonzero, minlength=levels)
        q = np.where(nonzero, sums[level] / np.maximum(counts[level], 1), 0.0)
        ps, qs = p.sum(), q.sum()
        if ps <= 0 or qs <= 0:
            continue
        p, q = p / ps, q / qs
        mask = p > 0
        kl = float(np.sum(p[mask] * np.log(p[mask] / np.maximum(q[mask], 1e-12))))
        if kl < best:
            best, best_i = kl, i
    return float(edges[best_i])


def describe(method: str, percentile: float) -> str:
    """The method as the report names it."""
    return f"percentile {percentile:g}" if method == "percentile" else method
