"""The plugin contract: everything a backend needs from the core.

Hook specs, the plugin manager, the Backend/Device base classes, target strings and region
kinds, claim patterns, schedule config spaces and tuning records, tuning candidates, and the
helpers a backend's kernels rely on (concatenation offsets). It sits just above ``ir`` in the
layering (``docs/architecture.md``): it imports nothing but ``errors``, ``progress``, the
version and ``ir``, so a backend that imports it pulls in no partitioner, runtime or tuner.
"""

from tessera.ir.graph import COPY_OP, REGION_OP
from tessera.plugin.backend import (
    Backend,
    CompiledRegion,
    CompileOptions,
    Kernel,
    SavedBackend,
    contiguous_concat_offsets,
)
from tessera.plugin.candidate import TuningCandidate, random_array
from tessera.plugin.device import CPU, CPUDevice, Device
from tessera.plugin.hookspecs import hookimpl
from tessera.plugin.manager import get_backend, get_backends, get_registry, reload_plugins
from tessera.plugin.patterns import Pattern, PatternMatch, region_matches
from tessera.plugin.space import ConfigSpace, Knob, ScheduleConfig, schedule_info, tuning_info
from tessera.plugin.target import Target, TargetKind, kind_of_region

__all__ = [
    "COPY_OP", "CPU", "REGION_OP", "Backend", "CPUDevice", "CompileOptions", "CompiledRegion",
    "ConfigSpace", "Device", "Kernel", "Knob", "Pattern", "PatternMatch", "SavedBackend",
    "ScheduleConfig", "Target", "TargetKind", "TuningCandidate", "contiguous_concat_offsets",
    "get_backend", "get_backends", "get_registry", "hookimpl", "kind_of_region", "random_array",
    "region_matches", "reload_plugins", "schedule_info", "tuning_info",
]
