"""What a ``Loop`` costs against the same body unrolled by hand, for Tessera and onnxruntime.

``x = tanh(x @ W + b)`` is run ``--iterations`` times (default 100) as one ``Loop`` and as a
model with the body unrolled (``tessera.testing.control_flow_models.loop_or_unrolled``), for
each body size of ``--sizes`` (``rows x width``: the matrix product is ``rows x width x
width``). Both forms are compiled for ``--target``; onnxruntime runs the same two models in
the same process with the same threads. The table gives medians in ms, the Loop over the
unrolled time for each engine, and Tessera's cost per iteration beyond the body's::

    python benchmarks/control_flow.py --target llvm --threads 2
"""

from __future__ import annotations

import argparse
import time

from _common import cpu_name, limit_threads, median_ms, ort_session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--iterations", type=int, default=100)
    ap.add_argument("--sizes", default="4x64,16x256,64x256",
                    help="comma-separated body sizes rows x width (default 4x64,16x256,64x256)")
    ap.add_argument("--runs", type=int, default=60)
    args = ap.parse_args(argv)
    limit_threads(args.threads)

    import numpy as np

    import tessera
    from tessera.testing.control_flow_models import loop_or_unrolled

    print(f"machine: {cpu_name()}; {args.threads} threads; target {args.target}; "
          f"{args.iterations} iterations")
    print(f"{'body':>9} {'T loop':>8} {'T unrolled':>10} {'T ratio':>8} {'T us/iter':>9} "
          f"{'ort loop':>8} {'ort unrolled':>12} {'ort ratio':>9}")
    for size in args.sizes.split(","):
        rows, width = (int(v) for v in size.split("x"))
        x = np.random.default_rng(0).standard_normal((rows, width)).astype(np.float32)
        models = {kind: loop_or_unrolled(args.iterations, width, rows, unrolled=kind == "unrolled")
                  for kind in ("loop", "unrolled")}
        tessera_ms, ort_ms, outputs = {}, {}, []
        for kind, model in models.items():
            mod = tessera.compile(model, target=args.target)
            session = ort_session(model, args.threads)
            outputs += [mod.run(x=x)["y"], session.run(None, {"x": x})[0]]
            tessera_ms[kind] = median_ms(lambda mod=mod, x=x: mod.run(x=x), args.runs,
                                         warmup=max(3, args.runs // 10))
            time.sleep(0.2)  # onnxruntime's workers spin after its runs: let them stop
            ort_ms[kind] = median_ms(lambda s=session, x=x: s.run(None, {"x": x}), args.runs,
                                     warmup=max(3, args.runs // 10))
            time.sleep(0.2)
        worst = max(float(np.max(np.abs(o - outputs[1]))) for o in outputs)
        if worst > 1e-3:
            print(f"  {size}: outputs differ by {worst:.2e}")
        t_ratio = tessera_ms["loop"] / tessera_ms["unrolled"]
        per_iter = (tessera_ms["loop"] - tessera_ms["unrolled"]) * 1000.0 / args.iterations
        print(f"{size:>9} {tessera_ms['loop']:8.3f} {tessera_ms['unrolled']:10.3f} "
              f"{t_ratio:8.2f} {per_iter:9.2f} {ort_ms['loop']:8.3f} "
              f"{ort_ms['unrolled']:12.3f} {ort_ms['loop'] / ort_ms['unrolled']:9.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
