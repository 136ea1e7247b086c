"""``tessera tune``: search the schedules of a model's tasks and write tuning records.

tvmc's flags: ``--target``, ``--output``, ``--prior-records``, ``--trials`` (per task),
``--time-budget`` (for the whole model),
``--early-stopping``, ``--tuner``, ``--timeout``, ``--repeat``, ``--number``,
``--min-repeat-ms``, ``--parallel``, ``--tasks list|0,2-5``, ``--input-shapes``, and
``--ray ADDRESS`` (measure on a Ray cluster: ``pip install "tessera[distributed]"``). Records are
appended to ``--output`` as they are measured; running again resumes; Ctrl-C stops and keeps
them. Then the whole model is timed with and without the records and only those that make it
faster are kept (``--no-model-check`` skips it, ``--check-budget`` bounds it); the verdict is
appended to the file. Compile with ``tessera compile --tuning-records FILE`` to use them.
"""

from __future__ import annotations

import argparse
import math
import sys
from typing import Any

import tessera
from tessera.autotune import tasks_of_module
from tessera.autotune.config import MeasureConfig, TuneConfig
from tessera.autotune.tune import tune
from tessera.autotune.tuners import TUNERS
from tessera.cli.arrays import check_output_file
from tessera.cli.compile import check_model_file, progress
from tessera.cli.shapes import ArgumentError, parse_input_shapes
from tessera.plugin.manager import resolve_target


def parse_tasks(text: str) -> list[int]:
    """``0,2-5`` -> [0, 2, 3, 4, 5]."""
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            if "-" in part:
                lo, hi = (int(x) for x in part.split("-", 1))
                if hi < lo:
                    raise ValueError
                out.extend(range(lo, hi + 1))
            else:
                out.append(int(part))
        except ValueError:
            raise ArgumentError(f"--tasks: {part!r} is not an index or a range such as 2-5 "
                                f"(or 'list')") from None
    return out


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "tune", help="search schedules for a model's tasks, write tuning records",
        description="Extract the tasks (distinct workloads) of an ONNX model for a target, "
                    "measure candidate schedules of each in worker processes and append "
                    "every result to a JSON-lines records file; compile with "
                    "--tuning-records FILE to use the best ones.")
    parser.add_argument("model", metavar="MODEL", help="ONNX model file")
    parser.add_argument("--target", default=None, metavar="TARGET",
                        help="target string (default: the best installed CPU backend)")
    parser.add_argument("-o", "--output", default="tuning.jsonl", metavar="FILE",
                        help="records file to append to (default tuning.jsonl); existing "
                             "records are not measured again")
    parser.add_argument("--prior-records", default=None, metavar="FILE",
                        help="records whose best config per workload is measured first")
    parser.add_argument("--trials", type=int, default=100, metavar="N",
                        help="candidates measured per task (default 100)")
    parser.add_argument("--time-budget", type=float, default=None, metavar="S",
                        help="seconds for the whole model: tasks interleaved, each default "
                             "first, then the task the model spends most time in")
    parser.add_argument("--early-stopping", type=int, default=None, metavar="N",
                        help="stop a task after N trials without a better config")
    parser.add_argument("--tuner", default="random", choices=sorted(TUNERS),
                        help="search strategy (default random)")
    parser.add_argument("--timeout", type=float, default=10.0, metavar="S",
                        help="seconds to build one candidate, and again to measure it "
                             "(default 10)")
    parser.add_argument("--repeat", type=int, default=3, metavar="N",
                        help="measurements per candidate (default 3)")
    parser.add_argument("--number", type=int, default=1, metavar="N",
                        help="runs per measurement (default 1)")
    parser.add_argument("--min-repeat-ms", type=float, default=0.0, metavar="MS",
                        help="more runs per measurement until it lasts this long")
    parser.add_argument("--cache-flush", action="store_true",
                        help="time each run with the kernel's weights evicted from the CPU "
                             "caches and its inputs loaded, as in a large model (TVM's "
                             "enable_cpu_cache_flush)")
    parser.add_argument("--parallel", type=int, default=1, metavar="N",
                        help="candidates built at once, in N worker processes; each is then "
                             "measured alone (default 1)")
    parser.add_argument("--ray", default=None, metavar="ADDRESS",
                        help="build and measure on the nodes of the Ray cluster at ADDRESS "
                             "(HOST:PORT, or 'auto' for one started here with 'ray start'), "
                             "one measurement per node at a time, --parallel builds per node; "
                             "needs pip install 'tessera[distributed]'")
    parser.add_argument("--tasks", default=None, metavar="SPEC",
                        help="'list' to print the tasks, or which to tune: 0,2-5")
    parser.add_argument("--input-shapes", default=None, metavar="SHAPES",
                        help="static input shapes, e.g. \"data:[1,3,224,224]\"")
    parser.add_argument("--seed", type=int, default=0, help="tuner seed")
    parser.add_argument("--no-model-check", dest="model_check", action="store_false",
                        help="skip the whole-model check after tuning (by default the model is "
                             "timed with and without the records and only the records that "
                             "make it faster are kept)")
    parser.add_argument("--check-budget", type=float, default=None, metavar="S",
                        help="seconds the whole-model check may spend trying the records one "
                             "workload at a time when together they do not help (default 60)")
    parser.set_defaults(handler=run_tune)


def _list(args: argparse.Namespace, shapes: Any) -> int:
    module = tessera.compile(str(args.model), target=args.target or "auto",
                             input_shapes=shapes)
    tasks = tasks_of_module(module)
    print(f"{len(tasks)} task(s) for {module.target!r}, heaviest first:")
    print(f"{'task':>4}  {'backend':<8} {'template':<22} {'weight':>6} {'MFLOP':>9} "
          f"{'space':>8}  workload")
    for i, t in enumerate(tasks):
        workload = t.key if len(t.key) < 70 else t.key[:67] + "..."
        print(f"{i:>4}  {t.backend:<8} {t.template:<22} {t.weight:>6} {t.flops / 1e6:>9.1f} "
              f"{t.space_size:>8}  {workload}")
    return 0


def resolved_target(target: str | None) -> str:
    """The target text ``target`` resolves to (``'llvm' (auto: ...)`` for the default), for the
    header; a bad target is its error here, before anything is compiled."""
    text = ", ".join(str(kind) for _, kind in resolve_target(target or "auto"))
    auto = target is None or target.strip() == "auto"
    return f"{text!r}" + (" (auto: the best installed CPU backend)" if auto else "")


def task_result(summary: Any, task: Any, trials: int, best: float) -> str:
    """One task's line of the final table: trials and best time, saying when the records
    file had measured every config before this run (nothing left: already tuned)."""
    earlier, best = summary.best_known(task, best)
    best_text = f"{best * 1e3:.3f} ms" if math.isfinite(best) else "no success"
    if not task.tunable:
        return f"{trials:>4} trial(s)  (nothing to tune: no knob has a choice)"
    if trials == 0 and earlier:
        return f"   0 trial(s)  already tuned ({earlier} record(s) before), best {best_text}"
    before = f" (with {earlier} record(s) from before)" if earlier else ""
    return f"{trials:>4} trial(s)  best {best_text}{before}"


def run_tune(args: argparse.Namespace) -> int:
    check_model_file(args.model)
    shapes = parse_input_shapes(args.input_shapes) if args.input_shapes else None
    if shapes and any(not isinstance(d, int) for dims in shapes.values() for d in dims):
        raise ArgumentError("--input-shapes: tessera tune tunes kernels of fixed shapes; give "
                            "every dimension a size (the sizes the model will run at)")
    if args.tasks is not None and args.tasks.strip() == "list":
        return _list(args, shapes)
    if args.trials < 1:
        raise ArgumentError("--trials must be at least 1")
    if args.timeout <= 0:
        raise ArgumentError("--timeout must be positive")
    if args.time_budget is not None and args.time_budget <= 0:
        raise ArgumentError("--time-budget must be positive")
    if args.parallel < 1:
        raise ArgumentError("--parallel must be at least 1")
    if args.check_budget is not None and args.check_budget < 0:
        raise ArgumentError("--check-budget must not be negative")
    if args.ray is not None and not args.ray.strip():
        raise ArgumentError("--ray: expected a cluster address (HOST:PORT) or 'auto'")
    if args.prior_records is not None:
        check_model_file(args.prior_records)
    check_output_file(args.output, "-o", "tuning.jsonl")
    tasks = parse_tasks(args.tasks) if args.tasks is not None else None
    where = f" per node, on Ray at {args.ray}" if args.ray is not None else ""
    progress(f"tuning {args.model} for {resolved_target(args.target)}: {args.tuner}, "
             f"{args.trials} "
             f"trial(s) per task, {args.parallel} built at once{where}, records in "
             f"{args.output}")
    config = TuneConfig(trials=args.trials, tuner=args.tuner,
                        early_stopping=args.early_stopping, tasks=tasks,
                        prior_records=args.prior_records, input_shapes=shapes, seed=args.seed,
                        progress=sys.stderr, time_budget=args.time_budget,
                        parallel=args.parallel, ray_address=args.ray,
                        model_check=args.model_check, check_budget=args.check_budget,
                        measure=MeasureConfig(timeout=args.timeout, number=args.number,
                                              repeat=args.repeat,
                                              min_repeat_ms=args.min_repeat_ms,
                                              cache_flush=args.cache_flush))
    summary = tune(str(args.model), args.target or "auto", args.output, config)
    for task, n, best in summary.tasks:
        print(f"{task.template:<22} x{task.weight:<3} {task_result(summary, task, n, best)}")
    print(f"{summary.trials} trial(s) in {len(summary.tasks)} task(s); records in "
          f"{args.output}")
    check = summary.check
    if check is not None:
        print(f"whole model: {check.summary()}")
        if check.rejected:
            print(f"  {len(check.rejected)} workload(s) keep their default schedules: their "
                  f"records did not make the whole model faster (the verdict is in "
                  f"{args.output}; tessera compile --tuning-records leaves them out)")
    return 130 if summary.interrupted else 0
