"""Tuning's gain, measured in one process: the module with the default schedules, the module
compiled with tuning records and onnxruntime, each built once and timed in turn, round after
round (``cpu_vs_onnxruntime``'s method: each measurement the mean of enough runs to last
``--min-ms``, the median over ``--rounds``).

``tune_resnet50.py`` tunes and measures; this measures records already made (its
``--records`` folder holds ``<model>.jsonl``), so the three runtimes share one machine state:
on a VM whose speed drifts by a quarter over minutes, measurements made minutes apart do not
compare.

    python benchmarks/tuned_vs_untuned.py --records /tmp/tune --models resnet50,bert
"""

from __future__ import annotations

import argparse
import functools
import warnings
from pathlib import Path

from _common import cpu_name, geomean, interleaved_medians, limit_threads, ort_session


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--records", required=True, help="folder of <model>.jsonl records files")
    ap.add_argument("--models", default="resnet50,inception_v1,densenet121,squeezenet,"
                                        "shufflenet,bert")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--min-ms", type=float, default=40.0)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args(argv)
    limit_threads(args.threads)
    from cpu_vs_onnxruntime import load_workload

    import tessera

    print(f"Tessera {tessera.__version__} {args.target!r}, {args.threads} thread(s); "
          f"{cpu_name()}; median of {args.rounds} interleaved rounds, ms")
    print(f"{'model':<18} {'untuned':>8} {'tuned':>8} {'ort':>8} {'tuned/untuned':>14} "
          f"{'untuned/ort':>12} {'tuned/ort':>10}")
    rows = []
    for key in [k.strip() for k in args.models.split(",") if k.strip()]:
        work = load_workload(key, 0)
        u, t, o = measure_three(work, Path(args.records) / f"{key}.jsonl", args.target,
                                args.threads, args.rounds, args.min_ms)
        rows.append((work.label, u, t, o))
        print(f"{work.label:<18} {u:>8.2f} {t:>8.2f} {o:>8.2f} {t / u:>14.3f} {u / o:>12.2f} "
              f"{t / o:>10.2f}", flush=True)
    print(f"{'geomean':<18} {'':>8} {'':>8} {'':>8} "
          f"{geomean(r[2] / r[1] for r in rows):>14.3f} "
          f"{geomean(r[1] / r[3] for r in rows):>12.2f} "
          f"{geomean(r[2] / r[3] for r in rows):>10.2f}")
    return 0


def measure_three(work, records: Path, target: str, threads: int, rounds: int = 9,  # noqa: ANN001
                  min_ms: float = 40.0) -> tuple[float, float, float]:
    """Median ms per run of ``work``'s model with the default schedules, with ``records``,
    and in onnxruntime: each built once, then timed in turn for ``rounds`` rounds (the order
    reversed every other round), each measurement lasting ``min_ms``."""
    import tessera

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mods = [tessera.compile(work.model, target=target, input_shapes=work.input_shapes,
                                tuning_records=str(records) if tuned else None)
                for tuned in (False, True)]
    session = ort_session(work.model, threads)
    calls = []
    for m in mods:
        for name, value in work.inputs.items():
            m.set_input(name, value)
        calls.append(m.run)
    calls.append(functools.partial(session.run, None, work.inputs))
    u, t, o = interleaved_medians(calls, rounds, min_ms)
    return u, t, o


if __name__ == "__main__":
    raise SystemExit(main())
