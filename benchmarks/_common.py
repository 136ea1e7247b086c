"""Helpers the benchmark scripts share: thread limits, onnxruntime sessions, timing, summaries.

The scripts import this module as ``_common`` (``python benchmarks/<script>.py`` puts this folder
on ``sys.path``). Nothing here imports numpy, onnxruntime or Tessera at module level, so that
:func:`limit_threads` can run before their thread pools start.
"""

from __future__ import annotations

import atexit
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any


def fresh_kernel_cache() -> str:
    """A new, empty folder for Tessera's kernel cache (:mod:`tessera.plugin.kernel_cache`),
    removed when the process exits."""
    folder = tempfile.mkdtemp(prefix="tessera-bench-kernels-")
    atexit.register(shutil.rmtree, folder, True)
    return folder


# Compile times are cold: a benchmark run's kernel cache starts empty (a folder of its own)
# unless TESSERA_CACHE_DIR names one, so that what an earlier run compiled is not timed as
# a compile.
if "TESSERA_CACHE_DIR" not in os.environ:
    os.environ["TESSERA_CACHE_DIR"] = fresh_kernel_cache()


@dataclass
class Workload:
    """A model to benchmark with its inputs."""

    key: str
    label: str
    model: Any  # onnx.ModelProto
    inputs: dict[str, Any]

    @property
    def input_shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.inputs.items()}

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


def limit_threads(threads: int) -> None:
    """Pin the thread pools numpy's BLAS and Tessera's CPU kernels use (call before importing
    them)."""
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS",
                "TESSERA_NUM_THREADS"):
        os.environ[var] = str(threads)


def _run_child(args: Sequence[str], what: str) -> list[str]:
    """The lines ``python *args`` printed (a child process); a ``RuntimeError`` with the end
    of its output if it fails."""
    proc = subprocess.run([sys.executable, *args], capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        raise RuntimeError(f"exporting {what} failed: " + " | ".join(tail))
    return proc.stdout.strip().splitlines()


def child_export(args: Sequence[str], what: str) -> Path:
    """Run ``python *args`` in a child process (this one never imports torch) and return the
    path its last line of output names; a ``RuntimeError`` with the end of its output if it
    fails or prints nothing."""
    lines = _run_child(args, what)
    if not lines:
        raise RuntimeError(f"exporting {what} failed: the exporter printed no path")
    return Path(lines[-1])


def cached_export(path: Path, script: str, name: str) -> Path:
    """``path``, exported the first time by ``python script --export name path``."""
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        _run_child([script, "--export", name, str(path)], name)  # prints nothing
        if not path.exists():
            raise RuntimeError(f"exporting {name} failed: {path} was not written")
    return path


def export_text_model(model: Any, vocab_size: int, path: Any, output: str) -> None:
    """Export a transformers model taking ``input_ids`` and ``attention_mask`` (its first
    output named ``output``) to ONNX at ``path``: TorchScript, opset 17, symbolic ``batch``
    and ``seq``. Imports torch (call it in a child process)."""
    import torch

    class Wrapper(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask)[0]

    ids = torch.randint(0, vocab_size, (1, 16))
    mask = torch.ones(1, 16, dtype=torch.int64)
    axes = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
            output: {0: "batch", 1: "seq"}}
    with torch.no_grad():
        torch.onnx.export(Wrapper().eval(), (ids, mask), str(path), dynamo=False,
                          input_names=["input_ids", "attention_mask"], output_names=[output],
                          dynamic_axes=axes, opset_version=17, do_constant_folding=True)


def ort_session(model: Any, threads: int) -> Any:
    """An onnxruntime CPU session for an ``onnx.ModelProto`` (or the path of a model file, which
    onnxruntime then reads itself) with ``threads`` intra-op threads, one inter-op thread and
    sequential execution (onnxruntime's graph optimizations stay on)."""
    import onnxruntime as ort

    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    source = str(model) if isinstance(model, str | os.PathLike) else model.SerializeToString()
    return ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])


def time_ms(fn: Callable[[], object], number: int = 1) -> float:
    """Mean wall-clock milliseconds of ``number`` calls of ``fn``."""
    number = max(number, 1)
    start = time.perf_counter()
    for _ in range(number):
        fn()
    return (time.perf_counter() - start) * 1000.0 / number


def interleaved_medians(calls: Sequence[Callable[[], object]], rounds: int = 9,
                        min_ms: float = 40.0) -> list[float]:
    """Median milliseconds per call of each of ``calls``, timed in turn for ``rounds`` rounds
    (the order reversed every other round, a short pause before each so that another
    runtime's spinning threads go to sleep), each measurement the mean of enough calls to
    last ``min_ms``: runtimes built once and measured in one machine state."""
    import statistics

    for call in calls:
        call()
        call()
    once = max(min(time_ms(c) for _ in range(3)) for c in calls)
    number = max(1, int(min_ms / max(once, 1e-3)))
    times: list[list[float]] = [[] for _ in calls]
    for r in range(rounds):
        for i in (range(len(calls)) if r % 2 == 0 else reversed(range(len(calls)))):
            time.sleep(0.05)
            calls[i]()
            times[i].append(time_ms(calls[i], number))
    return [statistics.median(ts) for ts in times]


def median_ms(fn: Callable[[], object], runs: int, warmup: int = 0,
              warm_s: float = 0.0) -> float:
    """Median wall-clock milliseconds of ``runs`` single calls of ``fn``, after ``warmup``
    calls and after calling it for ``warm_s`` seconds (a core that slept comes back slowly:
    on the 2-core EPYC VM the first millisecond or two of calls after a pause ran at up to
    twice their time, whichever engine came first)."""
    import statistics

    for _ in range(max(warmup, 0)):
        fn()
    end = time.perf_counter() + warm_s
    while time.perf_counter() < end:
        fn()
    times = []
    for _ in range(max(runs, 1)):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def max_abs_diff(got: Mapping[str, Any], want: Sequence[Any], names: Sequence[str]) -> float:
    """The largest absolute difference between Tessera's outputs (by name) and onnxruntime's
    (in output order), computed in float64."""
    import numpy as np

    diffs = [float(np.max(np.abs(np.asarray(got[n], np.float64) - np.asarray(w, np.float64))))
             for n, w in zip(names, want)]
    return max(diffs, default=0.0)


def geomean(values: Iterable[float]) -> float:
    """The geometric mean of positive numbers (NaN when there are none)."""
    vals = [v for v in values if v > 0 and math.isfinite(v)]
    if not vals:
        return float("nan")
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def best_so_far(records: Any) -> list[float]:
    """The best mean cost after each record of a records file (``tessera.autotune`` records
    path), in the order they were measured."""
    from tessera.autotune import load_records

    best, curve = math.inf, []
    for r in load_records(records):
        best = min(best, r.mean_cost)
        curve.append(best)
    return curve


def trials_to_within(curve: list[float], target: float, within: float = 0.05) -> int | None:
    """The trials a best-so-far ``curve`` took to come within ``within`` of ``target`` (None:
    it never did)."""
    return next((n + 1 for n, v in enumerate(curve) if v <= target * (1 + within)), None)


def json_safe(obj: Any) -> Any:
    """``obj`` with NaN and infinite floats replaced by None (strict JSON has no NaN), through
    dicts, lists and tuples."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    return obj


def fmt_bytes(n: int) -> str:
    """Bytes as MiB with one decimal."""
    return f"{n / (1 << 20):.1f} MiB"


def cpu_name() -> str:
    """The host CPU's model name (from /proc/cpuinfo where there is one), as tuning records
    write it."""
    from tessera.autotune.records import cpu_name as host_cpu

    return host_cpu()
