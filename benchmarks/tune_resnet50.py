"""Tuning's effect on the CPU: untuned and tuned Tessera against onnxruntime, in one run.

For each model (``--models``, default ResNet-50; the keys of ``cpu_vs_onnxruntime.py``):
tune it with ``tessera tune`` (``--tuner``, ``--trials`` per task, ``--time-budget`` per
model; records in ``--records``, resumed when the file exists), then measure the module with
the default schedules, the tuned one and onnxruntime, each built once and timed in turn for
``--rounds`` rounds (``tuned_vs_untuned.measure_three``: this machine's speed drifts over
minutes, so modules measured minutes apart do not compare), and print the untuned and tuned
ratios (Tessera over onnxruntime: below 1 is faster), the tuning wall time and the trials.

``--convergence N`` also runs each of xgb, ga and random for N trials on the three heaviest
convolution tasks of the first model and prints, per task and tuner, the trials it took to
come within 5% of the best time any of them found.

    python benchmarks/tune_resnet50.py --time-budget 600 --trials 64
    python benchmarks/tune_resnet50.py --models resnet50,squeezenet --convergence 48
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from _common import best_so_far, cpu_name, geomean, limit_threads, trials_to_within


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="resnet50", help="comma-separated benchmark keys")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--tuner", default="xgb", help="xgb, ga, random or gridsearch")
    ap.add_argument("--trials", type=int, default=64, help="trials per task (default 64)")
    ap.add_argument("--time-budget", type=float, default=900.0,
                    help="tuning seconds per model (default 900)")
    ap.add_argument("--early-stopping", type=int, default=24)
    ap.add_argument("--records", default=None,
                    help="folder of the records files (default: a temporary one)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=9,
                    help="rounds of the untuned, tuned and onnxruntime measurements in turn "
                         "(default 9)")
    ap.add_argument("--cache-flush", action=argparse.BooleanOptionalAction, default=True,
                    help="tune with the kernels' constants evicted from the caches before each "
                         "timed run (tessera tune --cache-flush; default on)")
    ap.add_argument("--convergence", type=int, default=0, metavar="N",
                    help="trials per tuner for the convergence table (0: none)")
    return ap.parse_args(argv)


def convergence(work, args: argparse.Namespace, folder: Path) -> None:  # noqa: ANN001
    """Trials to within 5% of the best, per conv task and tuner."""
    from tessera.autotune import extract_tasks, tune

    tasks = extract_tasks(work.model, target=args.target, input_shapes=work.input_shapes)
    convs = [i for i, t in enumerate(tasks) if "conv" in t.template and t.tunable][:3]
    curves: dict[tuple[int, str], list[float]] = {}
    for i in convs:
        for tuner in ("xgb", "ga", "random"):
            out = folder / f"conv{i}_{tuner}.jsonl"
            out.unlink(missing_ok=True)
            tune(work.model, target=args.target, output=out, trials=args.convergence,
                 tuner=tuner, tasks=[i], input_shapes=work.input_shapes, progress=None,
                 cache_flush=args.cache_flush)
            curves[(i, tuner)] = best_so_far(out)
    print(f"\ntrials to within 5% of the best time found ({args.convergence} trials per "
          f"tuner, {work.label}):")
    print(f"{'task':<58} {'xgb':>6} {'ga':>6} {'random':>7}")
    for i in convs:
        best = min(c[-1] for (j, _), c in curves.items() if j == i and c)
        row = []
        for tuner in ("xgb", "ga", "random"):
            curve = curves[(i, tuner)]
            hit = trials_to_within(curve, best)
            row.append(str(hit) if hit else "-")
        key = tasks[i].key if len(tasks[i].key) <= 56 else tasks[i].key[:53] + "..."
        print(f"{key:<58} {row[0]:>6} {row[1]:>6} {row[2]:>7}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_threads(args.threads)
    from cpu_vs_onnxruntime import load_workload
    from tuned_vs_untuned import measure_three

    import tessera
    from tessera.autotune import tune

    folder = Path(args.records or tempfile.mkdtemp(prefix="tessera-tune-"))
    folder.mkdir(parents=True, exist_ok=True)
    print(f"Tessera {tessera.__version__} {args.target!r} vs onnxruntime, {args.threads} "
          f"thread(s); {cpu_name()}; tuner {args.tuner}, {args.trials} trials per task, "
          f"{args.time_budget:g} s per model; records in {folder}")
    rows = []
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    for key in keys:
        work = load_workload(key, 0)
        out = folder / f"{key}.jsonl"
        start = time.perf_counter()
        summary = tune(work.model, target=args.target, output=out, trials=args.trials,
                       tuner=args.tuner, early_stopping=args.early_stopping,
                       time_budget=args.time_budget, input_shapes=work.input_shapes,
                       cache_flush=args.cache_flush)
        tuning_s = time.perf_counter() - start
        u, t, o = measure_three(work, out, args.target, args.threads, args.rounds)
        rows.append((work.label, u, t, o, tuning_s, summary.trials))
        print(f"  {work.label}: untuned {u / o:.2f}, tuned {t / o:.2f}, {tuning_s:.0f} s, "
              f"{summary.trials} trials", file=sys.stderr, flush=True)
    print(f"\n{'model':<18} {'untuned ms':>10} {'tuned ms':>9} {'ort ms':>8} {'untuned':>8} "
          f"{'tuned':>6} {'tuning s':>9} {'trials':>7}")
    for label, u, t, o, secs, trials in rows:
        print(f"{label:<18} {u:>10.2f} {t:>9.2f} {o:>8.2f} {u / o:>8.2f} {t / o:>6.2f} "
              f"{secs:>9.0f} {trials:>7}")
    print(f"{'geomean':<18} {'':>10} {'':>9} {'':>8} {geomean(r[1] / r[3] for r in rows):>8.2f} "
          f"{geomean(r[2] / r[3] for r in rows):>6.2f}")
    if args.convergence:
        convergence(load_workload(keys[0], 0), args, folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
