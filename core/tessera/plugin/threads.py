"""How many threads a CPU backend should use by default: the CPUs this process may really run on.

``os.cpu_count()`` counts the machine's CPUs. In a container, under ``taskset`` or in a
Kubernetes pod that is often far more than the process gets: its CPU affinity mask may allow
only some CPUs, and a cgroup CPU quota (cgroup v2 ``cpu.max``, v1 ``cpu.cfs_quota_us`` over
``cpu.cfs_period_us``) may allow, say, 1.5 CPUs of time per period across all of them. Threads
beyond that only wait for each other: a parallel loop's threads are throttled or descheduled
in turn. As recent onnxruntime and PyTorch do, the default is therefore

    min(CPUs in the affinity mask, ceil(the tightest quota on the way to the cgroup root))

and ``TESSERA_NUM_THREADS`` (a positive integer) overrides it. :func:`default_thread_count`
says where its number came from, so ``tessera plugins -v`` and profiles can show it.

Every reader takes a ``root`` folder (``/`` by default) under which ``proc/self/cgroup``,
``proc/self/mountinfo`` and the cgroup files are looked up, so tests can fake a machine.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

ENV_VAR = "TESSERA_NUM_THREADS"


@dataclass(frozen=True)
class CPUQuota:
    """A cgroup CPU bandwidth limit: ``cpus`` CPUs of time (quota over period) set by
    ``file``."""

    cpus: float
    file: str

    def describe(self) -> str:
        return f"cgroup CPU quota {self.cpus:g} CPUs ({self.file})"


def affinity_cpus() -> int:
    """CPUs in this process's affinity mask (``os.cpu_count()`` where the OS has no mask)."""
    if hasattr(os, "sched_getaffinity"):
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except OSError:
            pass
    return max(1, os.cpu_count() or 1)


def _mounts(root: Path) -> list[tuple[str, str, str, set[str]]]:
    """(mount root, mount point, fs type, super options) of the cgroup mounts in
    ``proc/self/mountinfo``."""
    try:
        text = (root / "proc/self/mountinfo").read_text()
    except OSError:
        return []
    mounts = []
    for line in text.splitlines():
        pre, sep, post = line.partition(" - ")
        fields, tail = pre.split(), post.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or not tail[0].startswith("cgroup"):
            continue
        mounts.append((_unescape(fields[3]), _unescape(fields[4]), tail[0],
                       set(tail[2].split(","))))
    return mounts


def _unescape(path: str) -> str:
    """mountinfo writes spaces, tabs, newlines and backslashes as octal escapes."""
    for code, char in (("\\040", " "), ("\\011", "\t"), ("\\012", "\n"), ("\\134", "\\")):
        path = path.replace(code, char)
    return path


def _cgroup_dirs(root: Path, cgroup_path: str, mount_root: str, mount_point: str) -> list[Path]:
    """The cgroup folders from the process's own up to the mount's root, on this machine."""
    rel = cgroup_path
    if mount_root != "/" and (rel == mount_root or rel.startswith(mount_root.rstrip("/") + "/")):
        rel = rel[len(mount_root.rstrip("/")):]
    elif mount_root != "/":
        rel = "/"  # a path outside the mount (a namespace): only the mount's own folder is seen
    base = root / mount_point.lstrip("/")
    parts = [p for p in rel.split("/") if p]
    return [base.joinpath(*parts[:i]) for i in range(len(parts), -1, -1)]


def _read_v2(folder: Path) -> float | None:
    try:
        quota, period = (folder / "cpu.max").read_text().split()[:2]
    except (OSError, ValueError):
        return None
    if quota == "max":
        return None
    try:
        q, p = int(quota), int(period)
    except ValueError:
        return None
    return q / p if q > 0 and p > 0 else None


def _read_v1(folder: Path) -> float | None:
    try:
        q = int((folder / "cpu.cfs_quota_us").read_text())
        p = int((folder / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return q / p if q > 0 and p > 0 else None


def cpu_quota(root: str | Path = "/") -> CPUQuota | None:
    """The tightest cgroup CPU quota on the way from this process's cgroup to the root (v2
    and v1 hierarchies both read), or None when there is none (or no cgroups: not Linux)."""
    root = Path(root)
    try:
        lines = (root / "proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    v2_path, v1_path = None, None
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if controllers == "":
            v2_path = path
        elif "cpu" in controllers.split(","):
            v1_path = path
    best: CPUQuota | None = None
    for mount_root, mount_point, fstype, options in _mounts(root):
        if fstype == "cgroup2" and v2_path is not None:
            path, read, name = v2_path, _read_v2, "cpu.max"
        elif fstype == "cgroup" and "cpu" in options and v1_path is not None:
            path, read, name = v1_path, _read_v1, "cpu.cfs_quota_us"
        else:
            continue
        for folder in _cgroup_dirs(root, path, mount_root, mount_point):
            cpus = read(folder)
            if cpus is not None and (best is None or cpus < best.cpus):
                shown = "/" + str((folder / name).relative_to(root))
                best = CPUQuota(cpus, shown)
    return best


def default_thread_count(root: str | Path = "/") -> tuple[int, str]:
    """(threads, where the number came from) for a CPU backend's pool: ``TESSERA_NUM_THREADS``
    when it is a positive integer, else the CPU affinity mask capped by the cgroup quota
    (rounded up)."""
    env = os.environ.get(ENV_VAR, "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n >= 1:
            return n, f"{ENV_VAR}={env}"
    cpus = affinity_cpus()
    total = os.cpu_count() or cpus
    quota = cpu_quota(root)
    if quota is not None and math.ceil(quota.cpus - 1e-9) < cpus:
        return max(1, math.ceil(quota.cpus - 1e-9)), quota.describe()
    if cpus < total:
        return cpus, f"CPU affinity ({cpus} of {total} CPUs)"
    return cpus, f"CPU count ({cpus})"


def runnable_tasks(root: str | Path = "/") -> int | None:
    """Tasks running or waiting for a CPU on the whole machine right now (the fourth field of
    ``/proc/loadavg``, ``runnable/total``; the reading thread counts itself), or None where
    there is no such file."""
    try:
        field = (Path(root) / "proc/loadavg").read_text().split()[3]
        return int(field.split("/")[0])
    except (OSError, IndexError, ValueError):
        return None


#: A pool consolidates onto the free cores only when they give it at least this share of the
#: CPU time its full thread count would get by fair sharing (see :func:`threads_under_load`).
CONSOLIDATE_SHARE = 0.6


def threads_under_load(cores: int, threads: int, others: int) -> int:
    """How many of a parallel pool's ``threads`` to use on ``cores`` CPUs while ``others``
    tasks that are not the pool's are runnable on them.

    A parallel loop waits for its slowest thread, and a thread that shares a core with a
    CPU-bound neighbour is descheduled for whole time slices, so ``threads`` threads on
    fewer free cores run at the pace of their descheduled ones. When ``cores - others``
    free cores remain, using that many threads gives each one a core. Fair sharing would give
    ``threads`` threads ``threads * cores / (threads + others)`` cores' worth of time, though:
    the pool consolidates only while the free cores are at least :data:`CONSOLIDATE_SHARE` of
    that (one neighbour on 2 cores: 1 free core against 1.33, so 1 thread; a full machine
    leaves none free, and every thread keeps its fair share instead)."""
    threads = max(1, threads)
    free = cores - max(0, others)
    if free >= threads or free < 1:
        return threads
    fair = threads * min(1.0, cores / (threads + others))
    return free if free >= CONSOLIDATE_SHARE * fair else threads
