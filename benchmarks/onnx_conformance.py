"""ONNX node conformance of Tessera and onnxruntime on the same cases, in one run.

The cases are every one the ``onnx`` package generates (1,884 with onnx 1.23:
:func:`tessera.testing.conformance.all_node_cases`, sequence- and optional-typed ones included,
which Tessera, whose values are tensors, does not run; ``--tensor-only`` keeps the 1,855 whose
inputs and outputs are all tensors); both engines are compared with the expected outputs by the
same rule (dtype, shape, ``allclose`` with the case's tolerances; sequences element by
element).

    python benchmarks/onnx_conformance.py --target ref
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings

import numpy as np

from tessera.testing.conformance import all_node_cases, all_tensor_cases, run_case


def onnxruntime_engine(model, inputs: dict[str, np.ndarray], target: str,
                       freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Run a case with onnxruntime's CPU provider (``target`` and ``freeze`` are unused)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.log_severity_level = 4
    session = ort.InferenceSession(model.SerializeToString(), options,
                                   providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return session.run(names, inputs)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ref", help="Tessera target (default: ref)")
    ap.add_argument("--ops", default="", help="comma-separated op types to restrict to")
    ap.add_argument("--tensor-only", action="store_true",
                    help="only the cases whose inputs and outputs are all tensors")
    args = ap.parse_args(argv)
    collect = all_tensor_cases if args.tensor_only else all_node_cases
    cases = collect(set(args.ops.split(",")) if args.ops else None)
    rows = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        engines = (("tessera " + args.target, None), ("onnxruntime", onnxruntime_engine))
        for label, engine in engines:
            start = time.perf_counter()
            results = [run_case(c, args.target) if engine is None else run_case(c, "", engine)
                       for c in cases]
            passed = sum(r.ok for r in results)
            rows.append((label, passed, len(cases), time.perf_counter() - start,
                         {r.name for r in results if r.ok}))
    print(f"{'engine':<16} {'passed':>7} {'of':>6} {'time s':>8}")
    for label, passed, total, seconds, _ in rows:
        print(f"{label:<16} {passed:>7} {total:>6} {seconds:>8.1f}")
    ours, theirs = rows[0][4], rows[1][4]
    print(f"passed by both: {len(ours & theirs)}; only Tessera: {len(ours - theirs)}; "
          f"only onnxruntime: {len(theirs - ours)}")
    only_ort = collections.Counter(name.split("_expanded")[0].rsplit("_", 1)[0]
                                   for name in theirs - ours)
    if only_ort:
        print("cases only onnxruntime passes, by name prefix: " + ", ".join(
            f"{k} ({v})" for k, v in only_ort.most_common(12)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
