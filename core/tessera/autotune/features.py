"""Loop-nest features moved next to the TIR they analyse (:mod:`tessera.tir.features`), so
that code-generating backends compute them without importing the tuner. Re-exported here so that
existing imports keep working."""

from tessera.tir.features import (
    FEATURE_NAMES,
    K_LOOPS,
    N_BUFFERS,
    loop_features,
)

__all__ = ["FEATURE_NAMES", "K_LOOPS", "N_BUFFERS", "loop_features"]
