"""Graph passes and the pass manager.

``PassManager(opt_level=3).run(fn)`` runs the standard pipeline (:func:`default_passes`); each
pass lives in its own module and can be switched off by name.
"""

from tessera.passes import dim_algebra as _dim_algebra  # noqa: F401  (installs the IR's)
from tessera.passes.canonicalize import Canonicalize
from tessera.passes.dce import DeadCodeElimination
from tessera.passes.fold_constants import FoldConstants
from tessera.passes.gather_before_matmul import GatherBeforeMatMul
from tessera.passes.manager import Pass, PassManager, check_pass_switches, default_passes
from tessera.passes.qdq_to_integer import QDQToInteger
from tessera.passes.simplify_inference import SimplifyInference

__all__ = [
    "Canonicalize",
    "DeadCodeElimination",
    "FoldConstants",
    "GatherBeforeMatMul",
    "Pass",
    "PassManager",
    "QDQToInteger",
    "SimplifyInference",
    "check_pass_switches",
    "default_passes",
]
