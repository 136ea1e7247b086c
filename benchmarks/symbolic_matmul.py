"""Matrix products with a run-time sequence length against static compiles of the same shape.

The three products of a transformer encoder layer (hidden 512, 8 heads of 64) over ``s``
tokens, each built once with a symbolic ``s`` the way the llvm lowering builds a group (topi
compute, the CPU's dense schedule, ``te.lower``, the tails of run-time extents, the TIR
pipeline, LLVM) and, for every ``--sizes`` value, once more for that static ``s`` (the
default static schedule):

- ``ffn_in``: ``X[s, 512] @ W[512, 2048] + bias``, W constant and packed in panels;
- ``scores``: ``Q[8, s, 64] @ K^T[8, 64, s]`` (rows and columns of run-time size);
- ``context``: ``P[8, s, s] @ V[8, s, 64]`` (rows and the reduction of run-time size).

Both kernels are called on the same arrays (the static one bound once, the symbolic one bound
with its size), timed alternately (interleaved medians); ``sym/st`` is the ratio. A timing
print, not a test: the goal is a geometric mean of at most 1.15 and no ratio above 1.4.

    python benchmarks/symbolic_matmul.py
    python benchmarks/symbolic_matmul.py --sizes 7,32,64,128,384 --threads 2 --cases scores
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from typing import Any

from _common import cpu_name, geomean, interleaved_medians, limit_threads

HIDDEN, FFN, HEADS, HEAD, PANEL = 512, 2048, 8, 64, 32


def case_tensors(name: str, s: Any) -> list[Any]:
    """Placeholders then the output of one case at length ``s`` (an int or a size var)."""
    from tessera import te
    from tessera.topi.nn.dense import batch_matmul, matmul_packed

    if name == "ffn_in":
        x = te.placeholder((s, HIDDEN), name="X")
        wp = te.placeholder((FFN // PANEL, HIDDEN, PANEL), name="W")
        bias = te.placeholder((FFN,), name="bias")
        y = matmul_packed(x, wp, "float32")
        out = te.compute(y.shape, lambda i, j: y[i, j] + bias[j], name="out", tag="broadcast")
        return [x, wp, bias, out]
    if name == "scores":
        q = te.placeholder((HEADS, s, HEAD), name="Q")
        kt = te.placeholder((HEADS, HEAD, s), name="KT")
        return [q, kt, batch_matmul(q, kt, out_dtype="float32")]
    p = te.placeholder((HEADS, s, s), name="P")
    v = te.placeholder((HEADS, s, HEAD), name="V")
    return [p, v, batch_matmul(p, v, out_dtype="float32")]


def case_arrays(name: str, s: int, rng: Any) -> tuple[list[Any], Any]:
    """Random inputs at length ``s`` and the numpy result."""
    import numpy as np

    from tessera.ops.layout import pack_matmul_weight

    def rand(*shape: int) -> Any:
        return rng.standard_normal(shape).astype(np.float32)

    if name == "ffn_in":
        x, w, b = rand(s, HIDDEN), rand(HIDDEN, FFN) * 0.05, rand(FFN)
        return [x, pack_matmul_weight(w, PANEL), b], x @ w + b
    if name == "scores":
        q, kt = rand(HEADS, s, HEAD), rand(HEADS, HEAD, s)
        return [q, kt], q @ kt
    p, v = rand(HEADS, s, s), rand(HEADS, s, HEAD)
    return [p, v], p @ v


def build(name: str, s: Any, fname: str, cpu: Any) -> tuple[Any, float]:
    """The compiled kernel of case ``name`` at ``s`` and its build seconds."""
    from tessera import te
    from tessera.tir.transform import lower_pipeline
    from tessera_llvm.build import build_module, size_spec
    from tessera_llvm.schedules import schedule_group
    from tessera_llvm.schedules.dense import specialize_tails

    start = time.perf_counter()
    tensors = case_tensors(name, s)
    sched = schedule_group([tensors[-1]], cpu)
    nest = te.lower(sched.schedule, tensors, fname)
    func = lower_pipeline(specialize_tails(nest))
    spec = size_spec(nest)
    built = build_module([func], fname, size_specs={fname: spec} if spec else None)
    return built.load().get(fname), time.perf_counter() - start


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="7,32,64,128,384")
    ap.add_argument("--cases", default="ffn_in,scores,context")
    ap.add_argument("--threads", type=int, default=0, help="kernel threads (0: the default)")
    ap.add_argument("--rounds", type=int, default=9)
    args = ap.parse_args()
    if args.threads:
        limit_threads(args.threads)

    import numpy as np

    from tessera import tir
    from tessera_llvm.cpu import cpu_info

    cpu = cpu_info(num_threads=args.threads or None)
    sizes = [int(x) for x in args.sizes.split(",")]
    rng = np.random.default_rng(0)
    print(f"# {cpu_name()} ({cpu.name}, {cpu.vector_lanes} lanes, {cpu.num_threads} threads)")
    print(f"{'case':8} {'s':>5} {'static us':>10} {'sym us':>10} {'sym/st':>7}")
    ratios: dict[str, list[float]] = {}
    for name in args.cases.split(","):
        sym, secs = build(name, tir.Var("s"), f"{name}_sym", cpu)
        print(f"# {name}: symbolic kernel built in {secs:.1f} s")
        for s in sizes:
            static, _ = build(name, s, f"{name}_{s}", cpu)
            inputs, want = case_arrays(name, s, rng)
            outs = [np.full(want.shape, np.nan, np.float32) for _ in range(2)]
            calls: list[Callable[[], object]] = [static.bind([*inputs, outs[0]]),
                                                 sym.bind([*inputs, outs[1]], sizes=[s])]
            for call, out in zip(calls, outs):
                call()
                scale = float(np.abs(want).max())
                np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-4 * scale)
            t_static, t_sym = interleaved_medians(calls, rounds=args.rounds, min_ms=20.0)
            ratio = t_sym / t_static
            ratios.setdefault(name, []).append(ratio)
            print(f"{name:8} {s:5d} {t_static * 1e3:10.1f} {t_sym * 1e3:10.1f} {ratio:7.3f}",
                  flush=True)
    every = [r for rs in ratios.values() for r in rs]
    for name, rs in ratios.items():
        print(f"# {name}: geomean {geomean(rs):.3f}, max {max(rs):.3f}")
    print(f"# all: geomean {geomean(every):.3f}, max {max(every):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
