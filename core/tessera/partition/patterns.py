"""Claim patterns moved to the plugin contract (:mod:`tessera.plugin.patterns`); this module
re-exports them so that existing imports keep working."""

from tessera.plugin.patterns import (
    MATCHES_ATTR,
    Check,
    Pattern,
    PatternCheckError,
    PatternMatch,
    op,
    ops,
    record_matches,
    region_matches,
)

__all__ = ["MATCHES_ATTR", "Check", "Pattern", "PatternCheckError", "PatternMatch", "op", "ops",
           "record_matches", "region_matches"]
