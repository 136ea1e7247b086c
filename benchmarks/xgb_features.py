"""Does the xgb tuner find a fast config sooner with loop-nest features than with knob values
alone? One convolution task, tuned with ``xgb`` both ways over a few seeds.

For each seed, ``tessera.autotune.tune`` runs ``--trials`` trials of the task with
``loop_features=False`` (the knob model alone) and ``loop_features=True`` (the knob model
ranks the pool, the backend's ``tuning_features`` featurise its best candidates, a second
model on knob + loop features picks among them). Printed: per seed, the trials each took to
come within 5% of the best time any run of the task found, the mean over seeds and its ratio
(with / without: below 1, the features help), and the featurising overhead: seconds spent in
``tuning_features`` per proposal against the measurement seconds per trial.

The default task is a 3x3 convolution with 64 channels on a 28x28 image (ResNet-50's 3x3
64-channel convolution at a quarter of its area, so that a run takes minutes); ``--model
resnet50 --task 0`` tunes ResNet-50's heaviest convolution instead.

    python benchmarks/xgb_features.py --trials 24 --seeds 3
    python benchmarks/xgb_features.py --model resnet50 --task 0 --trials 16 --seeds 1
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _common import best_so_far, cpu_name, limit_threads, trials_to_within


def conv_model(channels: int, size: int) -> tuple[Any, dict[str, list[int]]]:
    """A Conv 3x3 (pads 1) + Relu on a 1 x channels x size x size input, random weights."""
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(0)
    w = rng.standard_normal((channels, channels, 3, 3)).astype(np.float32) * 0.05
    shape = [1, channels, size, size]
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
         helper.make_node("Relu", ["c"], ["y"])], "conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, shape)],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model, {"x": shape}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="conv", help="conv (default) or a light model key "
                    "(resnet50)")
    ap.add_argument("--channels", type=int, default=64)
    ap.add_argument("--size", type=int, default=28)
    ap.add_argument("--task", type=int, default=0, help="task index (heaviest first)")
    ap.add_argument("--trials", type=int, default=24)
    ap.add_argument("--seeds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=3)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_threads(args.threads)
    import tessera
    from tessera.autotune import extract_tasks, tune

    if args.model == "conv":
        model, shapes = conv_model(args.channels, args.size)
        label = f"Conv 3x3 {args.channels}->{args.channels} {args.size}x{args.size}"
    else:
        from tessera.testing.light_models import load_light_model

        light = load_light_model(args.model, seed=0)
        model, shapes = light.model, {k: list(v.shape) for k, v in light.inputs.items()}
        label = args.model
    task = extract_tasks(model, target="llvm", input_shapes=shapes)[args.task]
    print(f"Tessera {tessera.__version__}, llvm, {args.threads} thread(s); {cpu_name()}")
    print(f"{label}, task {args.task}: {task.template} {task.key} ({task.space_size} configs)"
          f"; {args.trials} trials per run, {args.seeds} seed(s)", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="tessera-xgbf-"))
    curves: dict[tuple[bool, int], list[float]] = {}
    overhead: dict[bool, list[float]] = {False: [0.0, 0.0, 0.0], True: [0.0, 0.0, 0.0]}
    for seed in range(args.seeds):
        for loops in (False, True):
            out = folder / f"s{seed}_{int(loops)}.jsonl"
            start = time.perf_counter()
            summary = tune(model, target="llvm", output=out, trials=args.trials, tuner="xgb",
                           tasks=[args.task], input_shapes=shapes, seed=seed, progress=None,
                           repeat=args.repeat, loop_features=loops)
            wall = time.perf_counter() - start
            curve = curves[(loops, seed)] = best_so_far(out)
            best = curve[-1] if curve else math.inf
            o = overhead[loops]
            o[0] += summary.feature_seconds
            o[1] += summary.trials
            o[2] += wall - summary.feature_seconds
            print(f"  seed {seed} {'knob+loop' if loops else 'knob only'}: best "
                  f"{best * 1e3:.3f} ms, {summary.featurized} configs featurised in "
                  f"{summary.feature_seconds:.1f} s, {wall:.0f} s", file=sys.stderr,
                  flush=True)
    best = min(c[-1] for c in curves.values() if c)
    hits: dict[bool, list[int]] = {False: [], True: []}
    print(f"\ntrials to within 5% of the best time found ({best * 1e3:.3f} ms):")
    print(f"{'seed':>6} {'knob only':>10} {'knob+loop':>10}")
    for seed in range(args.seeds):
        row = []
        for loops in (False, True):
            curve = curves[(loops, seed)]
            hit = trials_to_within(curve, best) or args.trials + 1
            hits[loops].append(hit)
            row.append(str(hit) if hit <= args.trials else f">{args.trials}")
        print(f"{seed:>6} {row[0]:>10} {row[1]:>10}")
    mean = {k: sum(v) / len(v) for k, v in hits.items()}
    print(f"{'mean':>6} {mean[False]:>10.1f} {mean[True]:>10.1f}   ratio knob+loop / knob "
          f"only: {mean[True] / mean[False]:.2f} (misses count as {args.trials + 1})")
    secs, trials, rest = overhead[True]
    if trials:
        print(f"featurising: {secs / trials * 1e3:.0f} ms per proposal; the rest of tuning "
              f"(building, measuring, the knob model): {rest / trials * 1e3:.0f} ms per trial "
              f"({secs / max(rest, 1e-9) * 100:.0f}% overhead)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
