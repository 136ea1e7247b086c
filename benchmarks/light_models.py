"""Benchmark the nine light model-zoo topologies against onnxruntime, in the same run.

Each model gets deterministic random weights (:mod:`tessera.testing.light_models`), is compiled
for ``--target`` and timed with ``Module.benchmark``; onnxruntime runs the same model with the
same number of threads. The table shows compile time, median latencies, their ratio (Tessera over
onnxruntime: below 1 is faster), the largest difference between the two outputs, and the memory
planner's arena against a buffer per tensor.

    python benchmarks/light_models.py --target llvm --threads 2
    python benchmarks/light_models.py --target ref --models squeezenet,resnet50 --repeat 3
"""

from __future__ import annotations

import argparse
import functools
import sys
import time

from _common import fmt_bytes, limit_threads, max_abs_diff, ort_session, time_ms


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="auto", help="Tessera target string (default: auto)")
    ap.add_argument("--models", default="",
                    help="comma-separated subset (e.g. resnet50,vgg19); default: all nine")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for onnxruntime and for Tessera's kernels (default 2)")
    ap.add_argument("--repeat", type=int, default=5, help="measurements per model (default 5)")
    ap.add_argument("--number", type=int, default=1,
                    help="runs averaged in each measurement (default 1)")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random weights and input")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_threads(args.threads)

    import numpy as np
    import onnxruntime as ort

    import tessera
    from tessera.testing.light_models import LIGHT_MODELS, load_light_model

    names = list(LIGHT_MODELS)
    if args.models:
        names = [m if m.startswith("light_") else f"light_{m}" for m in args.models.split(",")]
    header = (f"{'model':<20} {'compile s':>9} {'tessera ms':>11} {'ort ms':>9} {'ratio':>7} "
              f"{'max abs err':>11} {'planned':>11} {'no reuse':>11}")
    print(header, flush=True)
    target_text = args.target
    for name in names:
        light = load_light_model(name, seed=args.seed)
        start = time.perf_counter()
        mod = tessera.compile(light.model, target=args.target, input_shapes=light.input_shapes,
                              opt_level=args.opt_level)
        compile_s = time.perf_counter() - start
        target_text = mod.target
        got = mod.run(**light.inputs)
        ours = mod.benchmark(repeat=args.repeat, number=args.number, **light.inputs)

        session = ort_session(light.model, args.threads)
        want = session.run(None, light.inputs)
        for _ in range(args.number):  # warm up
            session.run(None, light.inputs)
        run_ort = functools.partial(session.run, None, light.inputs)
        times = [time_ms(run_ort, args.number) for _ in range(max(args.repeat, 1))]
        theirs = float(np.median(times))

        err = max_abs_diff(got, want, light.output_names)
        planned = sum(r[2] for r in mod.memory_report().rows)
        no_reuse = sum(r[3] for r in mod.memory_report().rows)
        row = (f"{name:<20} {compile_s:>9.2f} {ours.median:>11.2f} {theirs:>9.2f} "
               f"{ours.median / theirs:>7.2f} {err:>11.2g} {fmt_bytes(planned):>11} "
               f"{fmt_bytes(no_reuse):>11}")
        print(row, flush=True)
        del session, mod, light
    print(f"\ntarget {target_text!r}; onnxruntime {ort.__version__} with {args.threads} "
          f"thread(s); median of {args.repeat} x {args.number} run(s); ratio = tessera / ort; "
          f"planned = memory planner arena, no reuse = one buffer per tensor")
    return 0


if __name__ == "__main__":
    sys.exit(main())
