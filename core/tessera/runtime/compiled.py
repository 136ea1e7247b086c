"""The compiled model: a partitioned graph with every region compiled by its backend.

``tessera.compile`` builds one from the partitioner's
:class:`~tessera.partition.regions.PartitionedGraph` and each backend's
:class:`~tessera.plugin.backend.CompiledRegion`; an artifact stores one and ``tessera.load``
reads it back. The planner (:mod:`tessera.runtime.planner`) turns it into the execution and
memory plans a :class:`~tessera.runtime.module.Module` runs.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from tessera.errors import CompileError, PluginArtifactError, TesseraError
from tessera.ir.graph import Function, Value
from tessera.ir.types import TensorType
from tessera.partition.regions import DeviceCopy, PartitionedGraph, Region
from tessera.partition.report import PartitionReport
from tessera.plugin import contract
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions


@dataclass
class CompiledModel:
    """The partitioned model (``partitioned``: graph, regions and copies in order, report,
    output names), each region's compiled form by region name, the backends that compiled
    them by name, the target text, and how it was compiled (pass timings, options)."""

    partitioned: PartitionedGraph
    compiled: dict[str, CompiledRegion]
    backends: dict[str, Backend]
    target: str = ""
    pass_timings: list[tuple[str, float]] = field(default_factory=list)
    options: CompileOptions | None = None

    def __post_init__(self) -> None:
        for r in self.partitioned.regions:
            if r.name not in self.compiled:
                raise CompileError(f"region {r.name} ({r.backend}) has no compiled form")
            if r.backend not in self.backends:
                raise CompileError(f"region {r.name} names backend {r.backend!r}, which is not "
                                   f"among the module's backends "
                                   f"({', '.join(self.backends) or 'none'})")

    @classmethod
    def from_graph(cls, graph: Function, compiled: dict[str, CompiledRegion],
                   backends: dict[str, Backend], target: str = "",
                   report: PartitionReport | None = None,
                   pass_timings: list[tuple[str, float]] | None = None,
                   options: CompileOptions | None = None) -> CompiledModel:
        """A compiled model from a partitioned graph whose regions are read back from its
        attributes (:meth:`PartitionedGraph.from_graph`)."""
        return cls(PartitionedGraph.from_graph(graph, report), compiled, backends, target,
                   list(pass_timings or []), options)

    # -- the partition's parts ------------------------------------------------------------------
    @property
    def graph(self) -> Function:
        return self.partitioned.graph

    @property
    def regions(self) -> list[Region]:
        return self.partitioned.regions

    @property
    def copies(self) -> list[DeviceCopy]:
        return self.partitioned.copies

    @property
    def report(self) -> PartitionReport:
        return self.partitioned.report

    @property
    def output_names(self) -> list[str]:
        return self.partitioned.output_names

    @property
    def input_types(self) -> dict[str, TensorType]:
        return self.partitioned.input_types

    def kept_constants(self, region: Region) -> set[str]:
        """The names of ``region``'s constants its backend keeps in the compiled form
        (``Backend.keeps_constants``, checked: constants of the region)."""
        backend, cr, body = self.backends[region.backend], self.compiled[region.name], \
            region.body
        kept = contract.call(backend, "keeps_constants()", backend.keeps_constants, cr,
                             region=body.name, cls=PluginArtifactError)
        names = {v.name for v in body.constants()}
        try:
            out = {str(k) for k in kept}
        except TypeError:
            out = None
        if out is None or not out <= names:
            raise contract.violation(backend, "keeps_constants() names constants of the region",
                                     f"keeps_constants() returned {kept!r:.200}", body.name,
                                     PluginArtifactError)
        return out

    def release_kept_constants(self) -> int:
        """Drop the graph's data of every region constant whose backend keeps it in the
        compiled form (:meth:`kept_constants`): the constant is then *held* by that backend,
        as in a module loaded from an artifact, and the weight lives once, in the form the
        kernels read (packed, transformed), instead of twice. A constant that another region
        reads from the graph (one value in two regions), or the graph outside regions, keeps
        its data; so do the constants of a region whose backend's ``keeps_constants`` breaks
        its contract (export says so). The bytes the graph no longer refers to."""
        votes: dict[int, list[bool]] = {}
        values: dict[int, tuple[Value, str]] = {}
        for region, _ in self.compiled_regions():
            try:
                kept = self.kept_constants(region)
            except TesseraError:
                kept = set()
            for v in region.body.constants():
                votes.setdefault(id(v), []).append(v.name in kept)
                values[id(v)] = (v, region.backend)
        for v in self.graph.constants():
            votes.setdefault(id(v), []).append(False)
        freed = 0
        for key, kept_by_all in votes.items():
            v, backend = values.get(key, (None, ""))
            if v is None or not all(kept_by_all) or v.is_held:
                continue
            data = v.data
            freed += 0 if data is None else int(data.nbytes)
            v.data = None
            v.held_by = backend
        return freed

    def compiled_regions(self) -> Iterator[tuple[Region, CompiledRegion]]:
        """Each region, in execution order, with its compiled form."""
        for r in self.partitioned.regions:
            yield r, self.compiled[r.name]

    def tuning_summary(self) -> tuple[int, int] | None:
        """With tuning records: how many schedules came from them and how many kept their
        template's defaults (over the regions whose backends report it); None without."""
        if self.options is None or not self.options.tuned:
            return None
        tuned = default = 0
        for cr in self.compiled.values():
            t = cr.info.get("tuning") or {}
            tuned += int(t.get("tuned", 0))
            default += int(t.get("default", 0))
        return tuned, default
