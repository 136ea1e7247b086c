"""What a call and a kernel launch cost Tessera's runtime, against onnxruntime.

A chain of ``--kernels`` tiny Softmax nodes (a reduction each, so none fuse: one kernel per
node) over a ``1 x 16`` tensor is compiled for ``--target`` and timed with one node and with
all of them; the difference over ``kernels - 1`` is the cost of one more kernel (on llvm, a
region's kernels run from one native call, ``tessera_llvm.sequence``), the one-node time the
fixed cost of a call (input checks, an execution state, the outputs). onnxruntime runs the
same models in the same process, with the same threads::

    python benchmarks/launch_overhead.py --kernels 100 --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable
from typing import Any

from _common import cpu_name, limit_threads, ort_session


def chain(n: int) -> Any:
    """An ONNX model of ``n`` Softmax nodes in a row over a 1 x 16 tensor."""
    from onnx import TensorProto, helper

    nodes = [helper.make_node("Softmax", ["x" if i == 0 else f"t{i - 1}"],
                              ["y" if i == n - 1 else f"t{i}"], axis=-1) for i in range(n)]
    graph = helper.make_graph(nodes, f"softmax_chain_{n}",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def median_us(fn: Callable[[], object], runs: int) -> float:
    for _ in range(max(10, runs // 10)):
        fn()
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=100, help="nodes in the long chain")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--runs", type=int, default=2000, help="timed calls per model (median)")
    args = ap.parse_args()
    limit_threads(args.threads)
    import numpy as np

    import tessera

    feeds = {"x": np.random.default_rng(0).standard_normal((1, 16)).astype(np.float32)}
    print(f"{cpu_name()}; target {args.target!r}; {args.threads} thread(s); median of "
          f"{args.runs} calls")
    rows = []
    for n in (1, args.kernels):
        model = chain(n)
        module = tessera.compile(model, args.target)
        kernels = sum(len(cr.kernels) for cr in module.compiled.values())
        session = ort_session(model, args.threads)
        np.testing.assert_allclose(module.run(feeds)["y"], session.run(None, feeds)[0],
                                   rtol=1e-5, atol=1e-6)
        t = median_us(lambda m=module: m.run(feeds), args.runs)
        o = median_us(lambda s=session: s.run(None, feeds), args.runs)
        rows.append((n, kernels, t, o))
        print(f"{n:>4} node(s), {kernels:>4} kernel(s): tessera {t:8.1f} us   onnxruntime "
              f"{o:8.1f} us   ratio {t / o:5.2f}")
    (_, k1, t1, o1), (n2, k2, t2, o2) = rows
    per_kernel = (t2 - t1) / max(k2 - k1, 1)
    per_node_ort = (o2 - o1) / max(n2 - 1, 1)
    print(f"per call: tessera {t1:.1f} us, onnxruntime {o1:.1f} us; per extra kernel: tessera "
          f"{per_kernel:.2f} us, onnxruntime {per_node_ort:.2f} us per extra node")


if __name__ == "__main__":
    main()
