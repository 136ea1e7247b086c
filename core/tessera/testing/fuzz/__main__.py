"""``python -m tessera.testing.fuzz``: run a long fuzz, or replay one case."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import tessera
from tessera.testing.fuzz.runner import GOOD, Result, generate_case, run_fuzz, run_one
from tessera.testing.fuzz.seeds import load_seeds


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tessera.testing.fuzz", description=__doc__)
    p.add_argument("--cases", type=int, default=200, help="number of cases (default 200)")
    p.add_argument("--seed", type=int, default=0, help="fuzz seed (default 0)")
    p.add_argument("--first", type=int, default=0, help="index of the first case")
    p.add_argument("--targets", default="ref,llvm", help="comma-separated targets")
    p.add_argument("--timeout", type=float, default=30.0, help="seconds per case and target")
    p.add_argument("--memory-gb", type=float, default=3.0,
                   help="address space a worker may add (GiB; 0: no limit)")
    p.add_argument("--case", type=int, help="replay this case in this process, with traceback")
    p.add_argument("--save", type=Path, help="write each failing case's model into this folder")
    p.add_argument("-v", "--verbose", action="store_true", help="print every case")
    args = p.parse_args(argv)
    targets = [t.strip() for t in args.targets.split(",") if t.strip()]
    if args.case is not None:
        return _replay(args.seed, args.case, targets)

    def show(r: Result) -> None:
        if args.verbose or r.outcome not in GOOD:
            print(f"[{r.case} {r.target}] {r.outcome}: {r.seed_model}, {r.kind}: "
                  f"{r.description}\n    {r.message.strip()[:600]}", flush=True)

    report = run_fuzz(args.cases, args.seed, targets, args.timeout,
                      int(args.memory_gb * (1 << 30)), args.first, progress=show)
    print(report.summary())
    if args.save is not None:
        _save(report.failures(), args.seed, args.save)
    return 1 if report.failures() else 0


def _replay(seed: int, index: int, targets: list[str]) -> int:
    import traceback

    seed_name, mutant = generate_case(seed, index, load_seeds())
    print(f"case {index}: {seed_name}, {mutant.kind}: {mutant.description}")
    for target in targets:
        print(f"-- {target}: {run_one(mutant, target, index)}")
        try:
            tessera.compile(mutant.model if mutant.model is not None else mutant.data,
                            target=target)
        except Exception:  # noqa: BLE001 - show where it came from
            traceback.print_exc()
    return 0


def _save(failures: list[Result], seed: int, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    seeds = load_seeds()
    for case in sorted({r.case for r in failures}):
        _, mutant = generate_case(seed, case, seeds)
        data = mutant.data if mutant.model is None else mutant.model.SerializeToString()
        (folder / f"case{case}.onnx").write_bytes(data or b"")
    print(f"saved {len({r.case for r in failures})} failing model(s) in {folder}")


if __name__ == "__main__":
    sys.exit(main())
