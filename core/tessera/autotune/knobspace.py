"""Conditional knob spaces moved to the plugin contract (:mod:`tessera.plugin.knobspace`);
re-exported here so that existing imports keep working."""

from tessera.plugin.knobspace import (
    Conditions,
    KnobSpace,
)

__all__ = ["Conditions", "KnobSpace"]
