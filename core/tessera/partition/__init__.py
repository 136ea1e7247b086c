"""Partitioning: claims, pattern matching, region merging, device copies, reports.

:func:`partition` returns a :class:`PartitionedGraph`: the graph and its regions and copies as
typed objects (:mod:`tessera.partition.regions`). The pictures of a partitioned graph moved to
:mod:`tessera.drawing` (``tessera.partition.dot``, ``.html`` and ``.layout`` re-export them).
"""

from tessera.partition.partitioner import COPY_OP, REGION_OP, PartitionResult, partition
from tessera.partition.patterns import Pattern, op, ops
from tessera.partition.regions import DeviceCopy, PartitionedGraph, Region
from tessera.partition.report import PartitionReport

__all__ = ["COPY_OP", "REGION_OP", "DeviceCopy", "PartitionReport", "PartitionResult",
           "PartitionedGraph", "Pattern", "Region", "op", "ops", "partition"]
