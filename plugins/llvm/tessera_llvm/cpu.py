"""The CPU a build is for: the host's, or the one ``-mcpu`` names.

Schedules read a :class:`~tessera_llvm.schedules.common.CPUInfo`: vector width, the number of
vector registers (register tiles must fit: 16 with AVX2, 32 with AVX-512 and NEON), FMA
instructions per cycle and the data cache sizes. For the host they come from LLVM's view of the
CPU's features and from the operating system (Linux's ``/sys/devices/system/cpu``); for a named
CPU from :data:`KNOWN_CPUS` (by prefix), else from the ISA level the name implies; for a
``-mtriple`` of another architecture without ``-mcpu``, from that architecture's baseline (LLVM's
``generic`` CPU: SSE2 on x86_64, NEON on AArch64).
"""

from __future__ import annotations

import platform
from dataclasses import replace
from pathlib import Path

from tessera.plugin.threads import default_thread_count

from .schedules.common import CPUInfo
from .triple import is_foreign, triple_arch

#: -mcpu names (prefixes) with 512-bit vectors worth using.
_AVX512 = ("skylake-avx512", "cascadelake", "cooperlake", "cannonlake", "icelake",
           "tigerlake", "sapphirerapids", "graniterapids", "emeraldrapids", "znver4", "znver5",
           "x86-64-v4", "rocketlake", "alderlake-avx512")
#: -mcpu names with 128-bit vectors only.
_SSE = ("x86-64", "x86-64-v2", "core2", "nehalem", "westmere", "generic")
#: AArch64 CPU name prefixes (NEON: 128-bit vectors, 32 registers).
_ARM = ("cortex", "apple", "neoverse", "ampere", "a64fx", "thunderx", "carmel", "falkor",
        "kryo", "exynos", "tsv110", "oryon")

_K, _M = 1 << 10, 1 << 20
#: Facts for CPUs by LLVM name prefix (longest prefix wins): fma_units, l1d, l2, l3 per core.
#: Zen 4 splits a 512-bit FMA over its two 256-bit pipes, so it issues one 16-lane FMA a cycle;
#: Zen 1 likewise one 8-lane FMA over its two 128-bit pipes.
KNOWN_CPUS: dict[str, dict[str, int]] = {
    "znver1": dict(fma_units=1, l1d_bytes=32 * _K, l2_bytes=512 * _K, l3_bytes=2 * _M),
    "znver2": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=512 * _K, l3_bytes=4 * _M),
    "znver3": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=512 * _K, l3_bytes=4 * _M),
    "znver4": dict(fma_units=1, l1d_bytes=32 * _K, l2_bytes=1 * _M, l3_bytes=4 * _M),
    "znver5": dict(fma_units=2, l1d_bytes=48 * _K, l2_bytes=1 * _M, l3_bytes=4 * _M),
    "haswell": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=256 * _K, l3_bytes=2 * _M),
    "broadwell": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=256 * _K, l3_bytes=2 * _M),
    "skylake": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=256 * _K, l3_bytes=2 * _M),
    "skylake-avx512": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "cascadelake": dict(fma_units=2, l1d_bytes=32 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "icelake": dict(fma_units=1, l1d_bytes=48 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "icelake-server": dict(fma_units=2, l1d_bytes=48 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "sapphirerapids": dict(fma_units=2, l1d_bytes=48 * _K, l2_bytes=2 * _M, l3_bytes=2 * _M),
    "alderlake": dict(fma_units=2, l1d_bytes=48 * _K, l2_bytes=1 * _M, l3_bytes=2 * _M),
    "neoverse-n1": dict(fma_units=2, l1d_bytes=64 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "neoverse-v1": dict(fma_units=4, l1d_bytes=64 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "neoverse-n2": dict(fma_units=2, l1d_bytes=64 * _K, l2_bytes=1 * _M, l3_bytes=1 * _M),
    "neoverse-v2": dict(fma_units=4, l1d_bytes=64 * _K, l2_bytes=2 * _M, l3_bytes=2 * _M),
    "apple-m1": dict(fma_units=4, l1d_bytes=128 * _K, l2_bytes=3 * _M, l3_bytes=2 * _M),
    "apple": dict(fma_units=4, l1d_bytes=128 * _K, l2_bytes=4 * _M, l3_bytes=2 * _M),
    "cortex-a76": dict(fma_units=2, l1d_bytes=64 * _K, l2_bytes=512 * _K, l3_bytes=1 * _M),
}


#: Features a CPU named by ``-mcpu`` is known to have (by prefix, longest wins), as LLVM names
#: them: what exported code built for it may use, and what its C check asks of the machine. A
#: name not listed implies nothing (only ``-mattr`` features are checked for it).
_X86_V2 = ("sse4.1", "sse4.2", "popcnt")
_X86_AVX = _X86_V2 + ("avx",)
_X86_V3 = _X86_AVX + ("avx2", "fma", "bmi", "bmi2")
_X86_AVXVNNI = _X86_V3 + ("avxvnni",)
_X86_V4 = _X86_V3 + ("avx512f", "avx512cd", "avx512vl", "avx512bw", "avx512dq")
_X86_VNNI = _X86_V4 + ("avx512vnni",)
_ARM_DOT = ("neon", "fullfp16", "dotprod")
_ARM_V84 = _ARM_DOT + ("i8mm", "bf16", "sve")
IMPLIED_FEATURES: dict[str, tuple[str, ...]] = {
    "x86-64-v2": _X86_V2, "nehalem": _X86_V2, "westmere": _X86_V2, "silvermont": _X86_V2,
    "sandybridge": _X86_AVX, "ivybridge": _X86_AVX,
    "x86-64-v3": _X86_V3, "haswell": _X86_V3, "broadwell": _X86_V3, "skylake": _X86_V3,
    "alderlake": _X86_AVXVNNI, "raptorlake": _X86_AVXVNNI, "meteorlake": _X86_AVXVNNI,
    "znver1": _X86_V3,
    "znver2": _X86_V3, "znver3": _X86_V3,
    "x86-64-v4": _X86_V4, "skylake-avx512": _X86_V4, "cannonlake": _X86_V4,
    "cascadelake": _X86_VNNI, "cooperlake": _X86_VNNI, "icelake": _X86_VNNI,
    "tigerlake": _X86_VNNI, "rocketlake": _X86_VNNI, "sapphirerapids": _X86_VNNI,
    "emeraldrapids": _X86_VNNI, "graniterapids": _X86_VNNI, "znver4": _X86_VNNI,
    "znver5": _X86_VNNI,
    "generic": ("neon",), "cortex-a53": ("neon",), "cortex-a72": ("neon",),
    "cortex-a76": _ARM_DOT, "cortex-a78": _ARM_DOT, "neoverse-n1": _ARM_DOT,
    "apple-m1": _ARM_DOT, "apple-m2": _ARM_DOT + ("i8mm", "bf16"),
    "neoverse-v1": _ARM_V84, "neoverse-n2": _ARM_V84, "neoverse-v2": _ARM_V84,
}


def required_features(cpu: str, features: str, arch: str) -> list[str]:
    """The CPU features code built for ``cpu`` (an LLVM name) with the feature string
    ``features`` (``"+avx2,-avx512f"``) needs: the ones the name implies
    (:data:`IMPLIED_FEATURES`; "generic" means NEON on AArch64 and nothing on x86_64),
    those the string adds, less those it removes."""
    best = max((p for p in IMPLIED_FEATURES if cpu.startswith(p)), key=len, default=None)
    implied = set(IMPLIED_FEATURES[best]) if best else set()
    if ("neon" in implied) != (arch == "aarch64"):
        implied = set()
    if arch == "aarch64":
        implied.add("neon")
    flags = [f.strip() for f in features.split(",") if f.strip()]
    added = {f[1:] for f in flags if f.startswith("+")}
    removed = {f[1:] for f in flags if f.startswith("-")}
    return sorted((implied | added) - removed)


def host_cpu_name() -> str:
    import llvmlite.binding as llvm

    return llvm.get_host_cpu_name()


def _host_isa() -> tuple[int, int, str]:
    """(float32 lanes, vector registers, arch) of the host."""
    import llvmlite.binding as llvm

    machine = platform.machine().lower()
    if machine in ("aarch64", "arm64"):
        return 4, 32, "aarch64"
    try:
        features = llvm.get_host_cpu_features()
        if features.get("avx512f"):
            return 16, 32, "x86_64"
        if features.get("avx2") or features.get("avx"):
            return 8, 16, "x86_64"
    except RuntimeError:
        pass
    return 4, 16, "x86_64"


def _named_isa(mcpu: str) -> tuple[int, int, str]:
    """(float32 lanes, vector registers, arch) of a CPU named by ``-mcpu``."""
    if mcpu.startswith(_ARM):
        return 4, 32, "aarch64"
    if mcpu.startswith(_AVX512):
        return 16, 32, "x86_64"
    if mcpu in _SSE:
        return 4, 16, "x86_64"
    return 8, 16, "x86_64"


def _table_entry(name: str) -> dict[str, int]:
    best = max((p for p in KNOWN_CPUS if name.startswith(p)), key=len, default=None)
    return dict(KNOWN_CPUS[best]) if best else {}


def _sysfs_caches(root: Path = Path("/sys/devices/system/cpu/cpu0/cache")) -> dict[str, int]:
    """Data cache sizes of CPU 0 from Linux's sysfs, divided by the CPUs sharing each (what
    one core can count on); empty where there is no such folder."""
    found: dict[str, int] = {}
    try:
        for index in sorted(root.glob("index*")):
            kind = (index / "type").read_text().strip()
            if kind not in ("Data", "Unified"):
                continue
            level = int((index / "level").read_text())
            size = _parse_size((index / "size").read_text().strip())
            shared = _count_cpus((index / "shared_cpu_list").read_text().strip()) \
                if (index / "shared_cpu_list").exists() else 1
            key = {1: "l1d_bytes", 2: "l2_bytes", 3: "l3_bytes"}.get(level)
            if key and size:
                found[key] = size // max(shared, 1) if level == 3 else size
    except (OSError, ValueError):
        return {}
    return found


def _parse_size(text: str) -> int:
    units = {"K": _K, "M": _M, "G": 1 << 30}
    if text and text[-1].upper() in units:
        return int(text[:-1]) * units[text[-1].upper()]
    return int(text) if text.isdigit() else 0


def _count_cpus(cpu_list: str) -> int:
    """How many CPUs a list like ``0-3,8`` names."""
    count = 0
    for part in cpu_list.split(","):
        if "-" in part:
            lo, hi = part.split("-")
            count += int(hi) - int(lo) + 1
        elif part:
            count += 1
    return count


def _generic_isa(arch: str) -> tuple[int, int, str]:
    """(float32 lanes, vector registers, arch) of LLVM's ``generic`` CPU of ``arch``."""
    return (4, 32, "aarch64") if arch == "aarch64" else (4, 16, "x86_64")


def parse_features(features: str) -> frozenset[str]:
    """The features a feature string (``"+avx2,-avx512f,+fma"``) enables; a later entry
    for a name overrides an earlier one."""
    on: dict[str, bool] = {}
    for f in features.split(","):
        f = f.strip()
        if len(f) > 1 and f[0] in "+-":
            on[f[1:]] = f[0] == "+"
    return frozenset(name for name, enabled in on.items() if enabled)


def _host_features(mattr: str | None) -> frozenset[str]:
    import llvmlite.binding as llvm

    try:
        host = llvm.get_host_cpu_features().flatten()
    except RuntimeError:
        host = ""
    return parse_features(f"{host},{mattr or ''}")


def cpu_info(mcpu: str | None = None, num_threads: int | None = None,
             triple: str | None = None, mattr: str | None = None) -> CPUInfo:
    """The CPU facts schedules read, for the host (``mcpu`` None, ``native`` or ``host``) or
    for the CPU ``mcpu`` names; with a ``triple`` of another architecture than the host's
    and no ``mcpu``, for that architecture's generic CPU. ``mattr`` (``"+avx2,-avx512f"``)
    changes the features."""
    threads = num_threads or default_thread_count()[0]
    host = mcpu is None or mcpu in ("native", "host")
    if host and is_foreign(triple):
        lanes, registers, arch = _generic_isa(triple_arch(str(triple)))
        return CPUInfo(vector_lanes=lanes, num_threads=threads, vector_registers=registers,
                       arch=arch, name="generic",
                       features=frozenset(required_features("generic", mattr or "", arch)))
    if host:
        lanes, registers, arch = _host_isa()
        name = host_cpu_name()
    else:
        lanes, registers, arch = _named_isa(mcpu)
        name = mcpu
    features = (_host_features(mattr) if host
                else frozenset(required_features(name, mattr or "", arch)))
    info = CPUInfo(vector_lanes=lanes, num_threads=threads, vector_registers=registers,
                   arch=arch, name=name, features=features)
    facts = _table_entry(name)
    if host:
        facts.update(_sysfs_caches())
    return replace(info, **facts)
