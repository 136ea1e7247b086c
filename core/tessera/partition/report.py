"""What the partitioner decided, for people: regions, their backends and ops, copies, fallbacks."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field


@dataclass
class RegionInfo:
    name: str
    backend: str
    device: str
    nodes: list[str]
    ops: list[str]
    inputs: list[str]
    outputs: list[str]
    #: How the compiled region's kernels run, where its backend says
    #: (``CompiledRegion.info["execution"]``, e.g. "one CUDA graph (12 kernels)").
    execution: str = ""


@dataclass
class CopyInfo:
    value: str
    src: str
    dst: str
    #: a symbolic value's at its size variables' upper bounds (its expression's text when
    #: one has no bound)
    nbytes: int | str


@dataclass
class PartitionReport:
    """Regions in execution order, device copies, the nodes that fell back, and the
    shape-only nodes placed with their data."""

    target: str
    regions: list[RegionInfo] = field(default_factory=list)
    copies: list[CopyInfo] = field(default_factory=list)
    #: (node name, op, backend it fell back to) for nodes no backend of the target claimed.
    fallback: list[tuple[str, str, str]] = field(default_factory=list)
    #: (node name, op, backend, reason, backend that runs it) for nodes a backend earlier in
    #: the target left to a later one, with its reason (``Backend.declines``).
    declined: list[tuple[str, str, str, str, str]] = field(default_factory=list)
    #: (node name, op, backend that claimed it, backend that runs it) for shape-only nodes
    #: moved to the device their data lives on (:mod:`tessera.partition.views`).
    placed: list[tuple[str, str, str, str]] = field(default_factory=list)

    def backend_counts(self) -> dict[str, int]:
        """Number of nodes per backend."""
        counts: Counter[str] = Counter()
        for r in self.regions:
            counts[r.backend] += len(r.nodes)
        return dict(counts)

    def table(self, max_ops: int = 6) -> str:
        """A text table: one row per region, then copies and fallback nodes."""
        rows = [("region", "backend", "device", "nodes", "ops")]
        for r in self.regions:
            counts = Counter(r.ops)
            ops = ", ".join(f"{op}x{n}" if n > 1 else op for op, n in counts.most_common(max_ops))
            if len(counts) > max_ops:
                ops += f", ... ({len(counts) - max_ops} more kinds)"
            rows.append((r.name, r.backend, r.device, str(len(r.nodes)), ops))
        widths = [max(len(row[i]) for row in rows) for i in range(4)]
        lines = [f"target: {self.target}"]
        for i, row in enumerate(rows):
            lines.append("  ".join(c.ljust(w) for c, w in zip(row[:4], widths)) + "  " + row[4])
            if i == 0:
                lines.append("-" * (sum(widths) + 8 + len(row[4]) + 10))
        said = [r for r in self.regions if r.execution]
        if said:
            lines.append("execution:")
            lines.extend(f"  {r.name}: {r.execution}" for r in said)
        totals = ", ".join(f"{b}: {n}" for b, n in sorted(self.backend_counts().items()))
        lines.append(f"{len(self.regions)} region(s); nodes per backend: {totals or 'none'}")
        if self.copies:
            lines.append(f"device copies ({len(self.copies)}):")
            for c in self.copies:
                lines.append(f"  {c.value}: {c.src} -> {c.dst} ({c.nbytes} bytes)")
        else:
            lines.append("device copies: none")
        if self.fallback:
            lines.append(f"fallback nodes ({len(self.fallback)}), no backend of the target "
                         f"claimed them:")
            for name, op, backend in self.fallback:
                lines.append(f"  {name} ({op}) -> {backend}")
        if self.placed:
            lines.append(f"shape-only nodes placed with their data ({len(self.placed)}):")
            for name, op, claimed, runs in self.placed:
                lines.append(f"  {name} ({op}): claimed by {claimed}, runs on {runs}")
        if self.declined:
            lines.append(f"declined ({len(self.declined)}), left to a later backend:")
            grouped: dict[tuple[str, str, str, str], list[str]] = {}
            for name, op, backend, reason, went in self.declined:
                grouped.setdefault((backend, op, reason, went), []).append(name)
            for (backend, op, reason, went), names in grouped.items():
                shown = ", ".join(names[:3]) + (f", ... ({len(names)} nodes)"
                                                 if len(names) > 3 else "")
                lines.append(f"  {op} {shown}: {backend} declined ({reason}) -> {went}")
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.table()
