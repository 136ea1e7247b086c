"""Whole regions from the kernel cache: a second compile of a region skips its lowering.

LLVM's output is cached by the IR it is given (:mod:`.build`), but producing that IR, the TIR
lowering of every fused group, is most of what is left of a compile (a symbolic CNN's 5.4 s
of 7 s). A region whose fused groups are all described by
:func:`~tessera.kernel.group_key.group_key` is also cached whole, after its graph rewrites
(:func:`~tessera_llvm.lowering.prepare_region`, cheap: layouts, packed weights), under a key
of:

- per group, in order: its structural key, its kernel's name and the names of the values it
  reads and writes (the kernel table refers to them);
- the region's size variables and their bounds, the CPU facts the schedules read
  (:class:`~tessera_llvm.schedules.common.CPUInfo`), the CPU name and feature string the code
  is generated for (two hosts sharing a cache folder get their own code), ``-mcpu``,
  ``-mattr``, ``-mtriple`` and the optimisation level;
- a hash of the source of ``tessera`` and ``tessera_llvm`` (any change to how code is made is
  a miss), and of any other module that registered the compute of one of its ops, and LLVM's
  version.

The entry holds the object code and what the kernel table, the schedules report and the
loader need (:class:`Entry`), but no weights: on a hit the constants the kernels read are
made again from the graph, as a lowering would (packed and transformed weights), and an
entry whose constants do not match them in name, dtype and shape is a miss. Compiles with
tuning records or ``dump_code`` do not use it (they need the lowering itself).
"""

from __future__ import annotations

import hashlib
import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import llvmlite
import llvmlite.binding as llvm
import numpy as np

from tessera.ir.graph import Function
from tessera.kernel.group_key import group_key
from tessera.plugin.kernel_cache import KernelCache, source_fingerprint
from tessera.topi.registry import compute_for, has_compute

from .machine import cpu_and_features
from .schedules.common import CPUInfo

__all__ = ["NAMESPACE", "Entry", "region_key", "restore", "store"]

#: The kernel cache's namespace of whole regions.
NAMESPACE = "llvm-region"


@dataclass
class Entry:
    """A region's compiled form as the cache keeps it."""

    object_code: bytes
    #: The kernel table (as artifacts store it: ``kernels.json``).
    table: list[dict[str, Any]]
    #: ``info["schedules"]`` of the compile that stored it.
    schedules: dict[str, Any]
    cpu_name: str
    features: str
    #: name -> (dtype, shape) of every constant the kernels read.
    constants: dict[str, tuple[str, tuple[int, ...]]]


def region_key(cache: KernelCache, region: Function, groups: list[Any], names: list[str],
               cpu: CPUInfo, mcpu: str | None, mattr: str | None, triple: str | None,
               opt_level: int) -> str | None:
    """The key of ``region`` (prepared into ``groups``, whose kernels are named ``names``);
    None when a group has no structural key (it is then not cached)."""
    parts: list[str] = []
    for group, name in zip(groups, names, strict=True):
        key = group_key(group)
        if key is None:
            return None
        parts.append(json.dumps([name, key, [v.name for v in group.inputs],
                                 [v.name for v in group.outputs]]))
    sizes = {n: list(b) for n, b in (region.attrs.get("dim_bounds") or {}).items()}
    cpu_name, features = cpu_and_features(mcpu, mattr, triple)  # the code's instruction set
    return cache.key(
        "llvm-region/1", source_fingerprint("tessera", "tessera_llvm"), cpu_name, features,
        *_other_computes(sorted({n.op for g in groups for n in g.nodes})),
        f"{llvm.llvm_version_info}/{llvmlite.__version__}", repr(cpu), str(mcpu), str(mattr),
        str(triple), str(opt_level), json.dumps(list(region.used_size_variables)),
        json.dumps(sizes, sort_keys=True, default=str), *parts)


def _other_computes(ops: list[str]) -> list[str]:
    """A hash of the source of each module outside ``tessera`` and ``tessera_llvm`` that
    registered the compute of one of ``ops`` (another package's
    :func:`~tessera.topi.registry.register_compute`)."""
    out = []
    for op in ops:
        if not has_compute(op):
            continue
        module = sys.modules.get(getattr(compute_for(op), "__module__", "") or "")
        name, file = getattr(module, "__name__", ""), getattr(module, "__file__", None)
        if name.split(".")[0] not in ("tessera", "tessera_llvm") and file:
            out.append(f"{op}:{hashlib.sha256(Path(file).read_bytes()).hexdigest()}")
    return out


def store(cache: KernelCache, key: str, entry: Entry) -> None:
    """Keep ``entry`` under ``key`` (nothing when its reports are not JSON)."""
    try:
        meta = json.dumps({"table": entry.table, "schedules": entry.schedules,
                           "cpu_name": entry.cpu_name, "features": entry.features,
                           "constants": {n: [d, list(s)] for n, (d, s) in
                                         entry.constants.items()}})
    except (TypeError, ValueError):
        return
    cache.put(NAMESPACE, key, {"object": entry.object_code, "meta": meta.encode()})


def restore(cache: KernelCache, key: str) -> Entry | None:
    """The entry under ``key``, None for none (or one that cannot be read)."""
    files = cache.get(NAMESPACE, key)
    if files is None or not {"object", "meta"} <= files.keys():
        return None
    try:
        meta = json.loads(files["meta"])
        return Entry(files["object"], list(meta["table"]), dict(meta["schedules"]),
                     str(meta["cpu_name"]), str(meta["features"]),
                     {str(n): (str(d), tuple(int(x) for x in s))
                      for n, (d, s) in meta["constants"].items()})
    except (ValueError, KeyError, TypeError):
        return None


def constants_match(entry: Entry, constants: dict[str, np.ndarray]) -> bool:
    """Whether ``constants`` (made from the graph) are the ones the entry's kernels read."""
    return entry.constants.keys() == constants.keys() and all(
        entry.constants[n] == (str(a.dtype), tuple(a.shape)) for n, a in constants.items())
