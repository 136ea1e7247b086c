"""Conv and matrix-product kernels of a profile against a peak rate: a roofline's compute roof.

Each kernel whose op (a fused group's ops joined by ``+``, e.g. ``ConvNCHWc+Add+Relu``)
contains a float convolution or matrix product and whose ``flops`` are known gets its GFLOP/s
and the fraction of ``peak_gflops`` it reaches; kernels are also summed per kind (the
convolution or matrix-product op by default, or any grouping the caller's ``kind`` function
picks, such as ``conv 3x3``). A kind's fraction is its total work over its total time at the
peak, which is the time-weighted mean of its kernels' fractions.

The peak is the caller's: a backend can measure its device's (``tessera_llvm.peak`` measures
the host's FMA peak with code from the llvm code generator); the core only divides.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from tessera.runtime.profiler import KernelProfile

#: Float ops whose kernels are compute-bound enough to compare with an FMA peak.
COMPUTE_OPS: frozenset[str] = frozenset({
    "Conv", "ConvNCHWc", "ConvTranspose", "DeformConv", "MatMul", "MatMulPacked", "Gemm",
    "BatchMatMul"})


def compute_op(op: str, ops: Iterable[str] = COMPUTE_OPS) -> str | None:
    """The first op of a (fused) kernel's ``op`` string that is in ``ops``, else None."""
    wanted = set(ops)
    return next((part for part in op.split("+") if part in wanted), None)


@dataclass(frozen=True)
class RooflineRow:
    """One kernel (or a kind's total: ``count`` kernels) with its time and work."""

    name: str
    op: str
    kind: str
    ms: float
    flops: int
    count: int = 1

    @property
    def gflops(self) -> float:
        """Achieved GFLOP/s (0 when the time is 0)."""
        return self.flops / (self.ms * 1e6) if self.ms > 0 else 0.0

    def fraction(self, peak_gflops: float) -> float:
        """Achieved rate over ``peak_gflops``."""
        return self.gflops / peak_gflops if peak_gflops > 0 else 0.0


def roofline_rows(kernels: Iterable[KernelProfile],
                  kind: Callable[[KernelProfile], str | None] | None = None,
                  ops: Iterable[str] = COMPUTE_OPS,
                  backend: str | None = None) -> list[RooflineRow]:
    """The kernels that contain one of ``ops`` and have ``flops > 0`` (of ``backend`` only,
    when given), each with its kind: ``kind(kernel)`` when given (None falls back to the op),
    else the op found."""
    rows = []
    for k in kernels:
        op = compute_op(k.op, ops)
        if op is None or k.flops <= 0 or (backend is not None and k.backend != backend):
            continue
        label = (kind(k) if kind is not None else None) or op
        rows.append(RooflineRow(k.name, k.op, label, k.ms, k.flops))
    return rows


def by_kind(rows: Iterable[RooflineRow]) -> list[RooflineRow]:
    """One row per kind (time and work summed), most time first."""
    totals: dict[str, tuple[float, int, int]] = {}
    for r in rows:
        ms, flops, count = totals.get(r.kind, (0.0, 0, 0))
        totals[r.kind] = (ms + r.ms, flops + r.flops, count + r.count)
    return sorted((RooflineRow(k, k, k, *t) for k, t in totals.items()), key=lambda r: -r.ms)


def roofline_table(kernels: list[KernelProfile], peak_gflops: float, *, top: int | None = 25,
                   kind: Callable[[KernelProfile], str | None] | None = None,
                   ops: Iterable[str] = COMPUTE_OPS, peak_label: str = "",
                   backend: str | None = None) -> str:
    """A report: the ``top`` conv/matmul kernels (of ``backend`` only, when given) by time
    with their GFLOP/s and % of ``peak_gflops``, then per kind the count, time, share of all
    kernels' time, GFLOP/s and time-weighted % of peak, and the same for all of them
    together."""
    if peak_gflops <= 0:
        raise ValueError(f"peak_gflops must be positive, got {peak_gflops}")
    rows = roofline_rows(kernels, kind, ops, backend)
    total_ms = sum(k.ms for k in kernels) or 1.0
    head = f"peak {peak_gflops:.1f} GFLOP/s" + (f" ({peak_label})" if peak_label else "")
    lines = [head, f"{'kernel':<40} {'kind':<18} {'ms':>8} {'GFLOP':>7} {'GFLOP/s':>8} "
                   f"{'% peak':>6}"]
    ranked = sorted(rows, key=lambda r: -r.ms)
    for r in ranked if top is None else ranked[:top]:
        lines.append(f"{r.name[:40]:<40} {r.kind[:18]:<18} {r.ms:8.3f} {r.flops / 1e9:7.3f} "
                     f"{r.gflops:8.1f} {100 * r.fraction(peak_gflops):5.1f}%")
    if top is not None and len(ranked) > top:
        lines.append(f"({len(ranked) - top} more)")
    lines.append("")
    lines.append(f"{'per kind':<22} {'kernels':>7} {'ms':>9} {'% time':>6} {'GFLOP/s':>8} "
                 f"{'% peak':>6}")
    summary = by_kind(rows)
    if rows:
        summary.append(RooflineRow("all", "all", "all", sum(r.ms for r in rows),
                                   sum(r.flops for r in rows), len(rows)))
    for r in summary:
        lines.append(f"  {r.kind[:20]:<20} {r.count:7d} {r.ms:9.3f} {100 * r.ms / total_ms:5.1f}% "
                     f"{r.gflops:8.1f} {100 * r.fraction(peak_gflops):5.1f}%")
    return "\n".join(lines)
