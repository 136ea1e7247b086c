"""Partitioning: claims, pattern matching, region merging, device copies, reports."""

from tessera.partition.partitioner import COPY_OP, REGION_OP, PartitionResult, partition
from tessera.partition.patterns import Pattern, op, ops
from tessera.partition.report import PartitionReport

__all__ = ["COPY_OP", "REGION_OP", "PartitionReport", "PartitionResult", "Pattern", "op", "ops",
           "partition"]
