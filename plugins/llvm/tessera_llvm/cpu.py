"""The CPU a build is for: the host's, or the one ``-mcpu`` names."""

from __future__ import annotations

import os
import platform

from .schedules.common import CPUInfo

#: -mcpu names (prefixes) with 512-bit vectors worth using.
_AVX512 = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake",
           "tigerlake", "sapphirerapids", "graniterapids", "emeraldrapids", "znver4", "znver5",
           "x86-64-v4", "rocketlake", "alderlake-avx512")
#: -mcpu names with 128-bit vectors only.
_SSE = ("x86-64", "x86-64-v2", "core2", "nehalem", "westmere", "generic")


def host_cpu_name() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def _host_lanes() -> int:
    import llvmlite.binding as llvm

    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return 4
    try:
        features = llvm.get_host_cpu_features()
        if features.get("avx512f"):
            return 16
        if features.get("avx2") or features.get("avx"):
            return 8
    except RuntimeError:
        pass
    return 4


def cpu_info(mcpu: str | None = None, num_threads: int | None = None) -> CPUInfo:
    """Vector width (float32 lanes) and thread count for schedules."""
    if mcpu is None or mcpu in ("native", "host"):
        lanes = _host_lanes()
    elif mcpu.startswith(_AVX512):
        lanes = 16
    elif mcpu in _SSE or mcpu.startswith(("cortex", "apple", "neoverse", "generic")):
        lanes = 4
    else:
        lanes = 8
    threads = num_threads or int(os.environ.get("TESSERA_NUM_THREADS", "0") or 0) \
        or os.cpu_count() or 1
    return CPUInfo(vector_lanes=lanes, num_threads=threads)
