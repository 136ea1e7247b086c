"""Per-kernel and per-backend profiles, and benchmark statistics."""

from __future__ import annotations

import time
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from tessera.plugin.backend import CompiledRegion
from tessera.runtime.plan import Step
from tessera.runtime.roofline import roofline_table


@dataclass
class BenchmarkResult:
    """Latency statistics of whole-model runs, in milliseconds."""

    results_ms: list[float]

    @property
    def median(self) -> float:
        return float(np.median(self.results_ms))

    @property
    def mean(self) -> float:
        return float(np.mean(self.results_ms))

    @property
    def std(self) -> float:
        return float(np.std(self.results_ms))

    @property
    def min(self) -> float:
        return float(np.min(self.results_ms))

    @property
    def max(self) -> float:
        return float(np.max(self.results_ms))

    @classmethod
    def measure(cls, run: Callable[[], object], repeat: int = 10, number: int = 10,
                warmup: int = 1) -> BenchmarkResult:
        """``warmup`` calls of ``run``, then ``repeat`` measurements, each the mean of
        ``number`` calls (ms): what every module's ``benchmark`` reports."""
        for _ in range(max(warmup, 0)):
            run()
        results = []
        for _ in range(max(repeat, 1)):
            start = time.perf_counter()
            for _ in range(max(number, 1)):
                run()
            results.append((time.perf_counter() - start) * 1000.0 / max(number, 1))
        return cls(results)

    def __str__(self) -> str:
        return (f"Execution time summary (ms):\n"
                f"  mean {self.mean:10.3f}  median {self.median:10.3f}  max {self.max:10.3f}"
                f"  min {self.min:10.3f}  std {self.std:10.3f}  ({len(self.results_ms)} repeats)")


@dataclass
class KernelProfile:
    name: str
    backend: str
    op: str
    ms: float
    flops: int = 0


@dataclass
class Profile:
    """Times of every step of one or more runs (mean per step), grouped for reading."""

    kernels: list[KernelProfile]
    total_ms: float
    counters: dict[str, dict[str, float]] = field(default_factory=dict)
    #: Region -> how its kernels run in ``Module.run`` (``CompiledRegion.info["execution"]``);
    #: a profile itself times them one by one.
    execution: dict[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, steps: Sequence[Step], step_ms: Sequence[float], total_ms: float,
           compiled: Mapping[str, CompiledRegion]) -> Profile:
        """The profile of a plan's ``steps`` timed ``step_ms`` each (means over the runs),
        with the counters the compiled regions report summed per backend and how each
        region's kernels run."""
        kernels = [KernelProfile(s.name, s.backend, s.op, t, s.flops)
                   for s, t in zip(steps, step_ms)]
        counters: dict[str, dict[str, float]] = {}
        for cr in compiled.values():
            c = cr.info.get("counters")
            if c:
                agg = counters.setdefault(cr.backend, {})
                for k, v in c.items():
                    agg[k] = agg.get(k, 0) + v
        execution = {name: str(cr.info["execution"]) for name, cr in compiled.items()
                     if cr.info.get("execution")}
        return cls(kernels, total_ms, counters, execution)

    def by_backend(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for k in self.kernels:
            out[k.backend] += k.ms
        return dict(out)

    def by_op(self) -> dict[str, float]:
        out: dict[str, float] = defaultdict(float)
        for k in self.kernels:
            out[k.op] += k.ms
        return dict(out)

    def table(self, top: int = 20) -> str:
        lines = [f"{'kernel':<40} {'backend':<8} {'op':<22} {'ms':>9} {'%':>6}"]
        total = sum(k.ms for k in self.kernels) or 1.0
        for k in sorted(self.kernels, key=lambda k: -k.ms)[:top]:
            lines.append(f"{k.name[:40]:<40} {k.backend:<8} {k.op[:22]:<22} {k.ms:9.3f} "
                         f"{100 * k.ms / total:5.1f}%")
        if len(self.kernels) > top:
            rest = sum(k.ms for k in sorted(self.kernels, key=lambda k: -k.ms)[top:])
            lines.append(f"{'(' + str(len(self.kernels) - top) + ' more)':<40} {'':<8} {'':<22} "
                         f"{rest:9.3f} {100 * rest / total:5.1f}%")
        lines.append("")
        lines.append("per backend:")
        for b, ms in sorted(self.by_backend().items(), key=lambda x: -x[1]):
            lines.append(f"  {b:<12} {ms:9.3f} ms  {100 * ms / total:5.1f}%")
        lines.append("per op:")
        for op, ms in sorted(self.by_op().items(), key=lambda x: -x[1])[:top]:
            lines.append(f"  {op:<22} {ms:9.3f} ms  {100 * ms / total:5.1f}%")
        for backend, counters in self.counters.items():
            lines.append(f"counters ({backend}):")
            for key, value in counters.items():
                lines.append(f"  {key:<28} {value:,.0f}")
        if self.execution:
            lines.append("execution in runs (the profile times kernels one by one):")
            for region, how in self.execution.items():
                lines.append(f"  {region}: {how}")
        lines.append(f"total {self.total_ms:.3f} ms")
        return "\n".join(lines)

    def roofline(self, peak_gflops: float, top: int | None = 25,
                 kind: Callable[[KernelProfile], str | None] | None = None,
                 peak_label: str = "", backend: str | None = None) -> str:
        """The conv and matmul kernels' GFLOP/s as a fraction of ``peak_gflops`` (the caller's,
        e.g. ``tessera_llvm.peak.measure_fma_peak(threads).gflops``), per kernel and per kind
        (``kind(kernel)``, default the op), for one ``backend``'s kernels or all; see
        :mod:`tessera.runtime.roofline`."""
        return roofline_table(self.kernels, peak_gflops, top=top, kind=kind,
                              peak_label=peak_label, backend=backend)

    def __str__(self) -> str:
        return self.table()
