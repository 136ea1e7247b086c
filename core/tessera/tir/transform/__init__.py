"""TIR lowering passes (TVM's ``tir.transform``): one module per pass, and
:class:`Pipeline`: the order a backend runs them in (:func:`default_pipeline` for the CPU)."""

from tessera.tir.transform.flatten import flatten_buffers
from tessera.tir.transform.loop_partition import loop_partition
from tessera.tir.transform.pipeline import (
    DEFAULT_OPTIONS,
    Pass,
    Pipeline,
    default_pipeline,
    lower_pipeline,
)
from tessera.tir.transform.remove_checks import remove_redundant_checks
from tessera.tir.transform.storage_rewrite import storage_rewrite
from tessera.tir.transform.thread_sync import thread_sync
from tessera.tir.transform.unroll import unroll
from tessera.tir.transform.vectorize import vectorize

__all__ = [
    "DEFAULT_OPTIONS", "Pass", "Pipeline", "default_pipeline", "flatten_buffers",
    "loop_partition", "lower_pipeline", "remove_redundant_checks", "storage_rewrite",
    "thread_sync", "unroll", "vectorize",
]
