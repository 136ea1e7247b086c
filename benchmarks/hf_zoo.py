"""Tessera against onnxruntime on today's architectures: the Hugging Face model zoo.

Every model of :mod:`tessera.testing.hf_zoo` (decoder and encoder LMs, the T5 and Whisper
encoders, ViT and Swin, ConvNeXt, ResNet-50, MobileNetV2, EfficientNet, SegFormer, wav2vec 2.0,
the two CLIP towers; random weights) at ``--size`` (default ``realistic``), exported by each
``--exporter`` (TorchScript, opset 17; dynamo, opset 18). The exports run first, each in a
child process (``python -m tessera.testing.hf_zoo export ...``: this process never imports
torch, whose thread pool would compete with the two runtimes'), and are cached (``--cache-dir``,
default ``~/.cache/tessera/hf_zoo``). Then, per model, Tessera compiles it for ``--target``
and both runtimes are checked and timed as ``cpu_vs_onnxruntime.py`` does (its ``measure``:
onnxruntime with ``--threads`` intra-op threads, sequential; measurements alternating after a
warm-up, medians). The table gives both medians, their ratio (Tessera over onnxruntime: below 1
is faster), the largest error relative to the output's scale (max |tessera - ort| over max
|ort|, per output), the other processes runnable during the measurement (``load``: above 0,
the times are suspect) and, below each row, the three kernels that take most of Tessera's time
(``module.profile``). A model that fails to export or compile is reported with its error's
first line. The geometric mean of the ratios closes the table.

    python benchmarks/hf_zoo.py                                   # realistic, both exporters
    python benchmarks/hf_zoo.py --models gpt2,resnet --exporter torchscript --repeat 5
    python benchmarks/hf_zoo.py --size small --json zoo.json
"""

from __future__ import annotations

import argparse
import gc
import json
import math
import os
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _common import Workload, cpu_name, geomean, json_safe, limit_threads, ort_session

EXPORTERS = ("torchscript", "dynamo")
SIZES = ("small", "realistic")
#: /proc/cpuinfo flags worth knowing when reading CPU kernel times.
FLAGS = ("avx2", "fma", "avx512f", "avx512bw", "avx512vl", "avx512_vnni", "avx512_bf16",
         "amx_tile")


@dataclass
class Row:
    """One model, size and exporter: what happened and the measurements (times in ms)."""

    model: str
    family: str
    size: str
    exporter: str
    nodes: int = 0
    export_s: float = float("nan")
    compile_s: float = float("nan")
    tessera_ms: float = float("nan")
    ort_ms: float = float("nan")
    max_rel_err: float = float("nan")
    fallback_nodes: int = 0
    load: int | None = None
    top_kernels: list[dict[str, Any]] = field(default_factory=list)
    error: str | None = None

    @property
    def ratio(self) -> float:
        if self.error or not (self.ort_ms > 0):
            return float("nan")
        return self.tessera_ms / self.ort_ms


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="", help="comma-separated zoo models (default: all)")
    ap.add_argument("--size", default="realistic", choices=(*SIZES, "both"))
    ap.add_argument("--exporter", default="both", choices=(*EXPORTERS, "both"))
    ap.add_argument("--target", default="llvm", help="Tessera target string (default: llvm)")
    ap.add_argument("--threads", type=int, default=2,
                    help="threads for onnxruntime and for Tessera's kernels (default 2)")
    ap.add_argument("--repeat", type=int, default=10,
                    help="measurements per model and runtime, interleaved (default 10)")
    ap.add_argument("--number", type=int, default=3,
                    help="runs averaged in each measurement, at least (default 3)")
    ap.add_argument("--min-ms", type=float, default=40.0,
                    help="least duration of one measurement (default 40 ms)")
    ap.add_argument("--warmup", type=int, default=2, help="untimed runs first (default 2)")
    ap.add_argument("--opt-level", type=int, default=3)
    ap.add_argument("--top", type=int, default=3, help="kernels listed per model (default 3)")
    ap.add_argument("--profile-runs", type=int, default=3,
                    help="runs the per-kernel profile averages, at least (default 3; more for "
                         "models under 33 ms, up to 100 ms of runs)")
    ap.add_argument("--seed", type=int, default=0, help="seed of the random inputs")
    ap.add_argument("--cache-dir", default=None,
                    help="where the exported .onnx files are kept (default "
                         "$TESSERA_ZOO_CACHE or ~/.cache/tessera/hf_zoo)")
    ap.add_argument("--json", default=None, metavar="PATH", help="also save the rows as JSON")
    args = ap.parse_args(argv)
    args.sizes = list(SIZES) if args.size == "both" else [args.size]
    args.exporters = list(EXPORTERS) if args.exporter == "both" else [args.exporter]
    return args


def machine() -> str:
    """The CPU's model name, core count and the vector flags it has."""
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                flags = set(line.split(":", 1)[1].split())
                break
    except OSError:
        pass
    have = [f for f in FLAGS if f in flags]
    return (f"{cpu_name()}; {os.cpu_count()} CPUs; flags: {' '.join(have) or 'none of avx2/avx512'}"
            + ("" if "avx512f" in flags else " (no AVX-512)"))


def source_tree() -> str:
    """The commit of the checkout this script runs from, and whether files differ from it."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=here,
                              capture_output=True, text=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=here, capture_output=True, text=True, timeout=30).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (head or "unknown") + (" with uncommitted changes" if dirty else "")


def others_runnable() -> int | None:
    """Tasks other than this one running or waiting for a CPU now (None: unknown)."""
    from tessera.plugin.threads import runnable_tasks

    n = runnable_tasks()
    return None if n is None else max(n - 1, 0)


def _first_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[0] if lines else ""


def export_all(names: list[str], args: argparse.Namespace) -> dict[tuple[str, str, str],
                                                                    tuple[Path | None, str, float]]:
    """Every (model, size, exporter) found in the cache or exported in a child process: key ->
    (path or None, error, seconds)."""
    from tessera.testing.hf_zoo import cache_name, default_cache_dir

    folder = Path(args.cache_dir) if args.cache_dir else default_cache_dir()
    out = {}
    for size in args.sizes:
        for exporter in args.exporters:
            for name in names:
                cached = folder / cache_name(name, size, exporter)
                if cached.exists():
                    out[name, size, exporter] = (cached, "", 0.0)
                    continue
                cmd = [sys.executable, "-m", "tessera.testing.hf_zoo", "export", name, size,
                       exporter] + (["--cache-dir", args.cache_dir] if args.cache_dir else [])
                start = time.perf_counter()
                proc = subprocess.run(cmd, capture_output=True, text=True)
                took = time.perf_counter() - start
                lines = [ln for ln in proc.stdout.splitlines() if ln.strip()]
                last = lines[-1] if lines else ""
                if proc.returncode == 0 and last and Path(last).exists():
                    out[name, size, exporter] = (Path(last), "", took)
                else:
                    err = last.removeprefix("ERROR: ") if last.startswith("ERROR: ") else \
                        _first_line(proc.stderr) or f"exit status {proc.returncode}"
                    out[name, size, exporter] = (None, err, took)
                status = "ok" if out[name, size, exporter][0] else "FAILED"
                print(f"  export {name} {size} {exporter}: {status} ({took:.1f} s)",
                      file=sys.stderr, flush=True)
    return out


def relative_error(got: dict[str, Any], want: list[Any], names: list[str]) -> float:
    """max |got - want| / max |want|, the largest over the outputs (float64)."""
    import numpy as np

    errs = []
    for n, w in zip(names, want):
        w64 = np.asarray(w, np.float64)
        scale = float(np.max(np.abs(w64))) if w64.size else 0.0
        diff = float(np.max(np.abs(np.asarray(got[n], np.float64) - w64))) if w64.size else 0.0
        errs.append(diff / scale if scale > 0 else diff)
    return max(errs, default=0.0)


def top_kernels(mod: Any, feeds: dict[str, Any], runs: int, top: int) -> list[dict[str, Any]]:
    """The ``top`` kernels by time in Tessera's profile: name, op, ms and share of the total."""
    profile = mod.profile(runs=max(runs, 1), **feeds)
    total = sum(k.ms for k in profile.kernels) or 1.0
    ranked = sorted(profile.kernels, key=lambda k: -k.ms)[:top]
    return [{"name": k.name, "op": k.op, "ms": k.ms, "share": k.ms / total} for k in ranked]


def measure_row(row: Row, path: Path, args: argparse.Namespace) -> None:
    """Compile, check, time and profile one exported model, filling ``row``."""
    import onnx
    from cpu_vs_onnxruntime import measure

    from tessera.testing.hf_zoo import inputs

    model = onnx.load(str(path))
    row.nodes = len(model.graph.node)
    feeds = inputs(row.model, row.size, seed=args.seed)
    work = Workload(row.model, f"{row.model} {row.size} {row.exporter}", model, feeds)
    loads = [others_runnable()]
    result, mod = measure(work, args)
    loads.append(others_runnable())
    known = [n for n in loads if n is not None]
    row.load = max(known) if known else None
    if result.error or mod is None:
        row.error = result.error or "compile failed"
        return
    row.compile_s = result.compile_s
    row.fallback_nodes = result.fallback_nodes
    row.tessera_ms, row.ort_ms = result.tessera_median, result.ort_median
    want = ort_session(model, args.threads).run(None, feeds)
    row.max_rel_err = relative_error(mod.run(feeds), want, work.output_names)
    # short models: enough runs for ~100 ms of profile, so timer noise does not rank kernels
    runs = max(args.profile_runs, min(200, math.ceil(100.0 / max(row.tessera_ms, 0.05))))
    row.top_kernels = top_kernels(mod, feeds, runs, args.top)


HEADER = (f"{'model':<16} {'size':<9} {'exporter':<11} {'nodes':>5} {'compile s':>9} "
          f"{'tessera ms':>10} {'ort ms':>8} {'ratio':>6} {'max rel err':>11} {'load':>4}")


def format_row(r: Row) -> str:
    head = f"{r.model:<16} {r.size:<9} {r.exporter:<11}"
    if r.error:
        return f"{head} FAILED: {r.error}"[:240]
    load = "?" if r.load is None else str(r.load)
    line = (f"{head} {r.nodes:>5} {r.compile_s:>9.1f} {r.tessera_ms:>10.2f} {r.ort_ms:>8.2f} "
            f"{r.ratio:>6.2f} {r.max_rel_err:>11.1e} {load:>4}")
    if r.fallback_nodes:
        line += f"  ({r.fallback_nodes} nodes fell back)"
    if r.top_kernels:
        tops = ", ".join(f"{k['op']} {k['ms']:.2f} ms ({100 * k['share']:.0f}%)"
                         for k in r.top_kernels)
        line += f"\n{'':<16}   top kernels: {tops}"
    return line


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    limit_threads(args.threads)

    import onnxruntime as ort

    import tessera
    from tessera.testing.hf_zoo import ZOO, missing

    names = [n.strip() for n in args.models.split(",") if n.strip()] or list(ZOO)
    unknown = [n for n in names if n not in ZOO]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(ZOO)}")
    absent = missing()
    if absent:
        raise SystemExit(f"the zoo needs {', '.join(absent)}: pip install -e '.[zoo]'")
    args.tuning_records = None

    print(f"machine: {machine()}; source tree {source_tree()}")
    loadavg = Path("/proc/loadavg")
    print(f"Tessera {tessera.__version__} target {args.target!r} vs onnxruntime {ort.__version__}"
          f"; {args.threads} thread(s) each; load average at start "
          f"{loadavg.read_text().split()[0] if loadavg.exists() else '?'}")
    print(f"median of {args.repeat} interleaved measurements, each the mean of {args.number}+ "
          f"runs lasting {args.min_ms:g}+ ms; ratio = tessera / ort; max rel err = max abs error "
          f"/ max abs of onnxruntime's output; load = other runnable tasks during the "
          f"measurement\n", flush=True)
    print("exporting what the cache lacks:", file=sys.stderr, flush=True)
    exported = export_all(names, args)
    print(HEADER, flush=True)
    rows: list[Row] = []
    for size in args.sizes:
        for exporter in args.exporters:
            for name in names:
                row = Row(name, ZOO[name].family, size, exporter)
                path, err, took = exported[name, size, exporter]
                row.export_s = took
                if path is None:
                    row.error = f"export failed: {err}"
                else:
                    try:
                        measure_row(row, path, args)
                    except Exception as e:  # noqa: BLE001 - report the model and go on
                        row.error = f"{type(e).__name__}: {_first_line(str(e))}"
                rows.append(row)
                print(format_row(row), flush=True)
                gc.collect()

    ratios = [r.ratio for r in rows if not r.error]
    failed = [r for r in rows if r.error]
    slow = [r for r in rows if not r.error and r.ratio > 1.2]
    print(f"\ngeomean ratio {geomean(ratios):.2f} over {len(ratios)} of {len(rows)} model "
          f"exports; {len(failed)} failed; {len(slow)} slower than onnxruntime by over 1.2x"
          + (f": {', '.join(f'{r.model}/{r.exporter}/{r.size}' for r in slow)}" if slow else ""))
    for exporter in args.exporters:
        sub = [r.ratio for r in rows if not r.error and r.exporter == exporter]
        if sub and len(args.exporters) > 1:
            print(f"  {exporter}: geomean {geomean(sub):.2f} over {len(sub)}")
    if args.json:
        report = {"machine": machine(), "target": args.target, "threads": args.threads,
                  "repeat": args.repeat, "number": args.number, "min_ms": args.min_ms,
                  "tessera": tessera.__version__, "onnxruntime": ort.__version__,
                  "rows": [{**asdict(r), "ratio": r.ratio} for r in rows],
                  "geomean": geomean(ratios)}
        with open(args.json, "w") as f:
            json.dump(json_safe(report), f, indent=2)
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
