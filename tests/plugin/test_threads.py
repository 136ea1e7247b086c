"""tessera.plugin.threads: the default thread count from the CPU affinity, cgroup quotas and
TESSERA_NUM_THREADS, read from fake /proc and /sys trees."""

from __future__ import annotations

from pathlib import Path

import pytest

from tessera.plugin import threads

V2_MOUNT = "30 23 0:26 / /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
V1_MOUNTS = (
    "31 23 0:28 / /sys/fs/cgroup tmpfs tmpfs rw - tmpfs tmpfs rw,mode=755\n"
    "32 31 0:29 / /sys/fs/cgroup/cpu,cpuacct rw,relatime - cgroup cgroup rw,cpu,cpuacct\n"
    "33 31 0:30 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory\n"
)


def fake(root: Path, cgroup: str, mountinfo: str, files: dict[str, str]) -> Path:
    (root / "proc/self").mkdir(parents=True)
    (root / "proc/self/cgroup").write_text(cgroup)
    (root / "proc/self/mountinfo").write_text(mountinfo)
    for name, text in files.items():
        path = root / name.lstrip("/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


@pytest.fixture
def cpus(monkeypatch):
    """Fake the affinity mask's size (and the machine's CPU count) and clear
    TESSERA_NUM_THREADS."""
    monkeypatch.delenv("TESSERA_NUM_THREADS", raising=False)

    def set_cpus(affinity: int, total: int | None = None) -> None:
        monkeypatch.setattr(threads, "affinity_cpus", lambda: affinity)
        monkeypatch.setattr(threads.os, "cpu_count", lambda: total or affinity)

    return set_cpus


def test_v2_quota_caps_the_affinity(tmp_path, cpus):
    cpus(8)
    root = fake(tmp_path, "0::/kubepods/pod1/ctr\n", V2_MOUNT, {
        "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max": "150000 100000\n",
        "/sys/fs/cgroup/kubepods/pod1/cpu.max": "max 100000\n",
    })
    quota = threads.cpu_quota(root)
    assert quota is not None and quota.cpus == 1.5
    assert quota.file == "/sys/fs/cgroup/kubepods/pod1/ctr/cpu.max"
    n, source = threads.default_thread_count(root)
    assert n == 2  # 1.5 CPUs rounded up
    assert "cgroup CPU quota 1.5 CPUs" in source


def test_v2_tightest_quota_on_the_way_up_wins(tmp_path, cpus):
    cpus(16)
    root = fake(tmp_path, "0::/a/b\n", V2_MOUNT, {
        "/sys/fs/cgroup/a/b/cpu.max": "800000 100000\n",
        "/sys/fs/cgroup/a/cpu.max": "300000 100000\n",
    })
    assert threads.default_thread_count(root)[0] == 3


def test_v2_no_limit_uses_the_cpu_count(tmp_path, cpus):
    cpus(4)
    root = fake(tmp_path, "0::/user.slice\n", V2_MOUNT,
                {"/sys/fs/cgroup/user.slice/cpu.max": "max 100000\n"})
    assert threads.cpu_quota(root) is None
    assert threads.default_thread_count(root) == (4, "CPU count (4)")


def test_quota_above_the_affinity_does_not_raise_it(tmp_path, cpus):
    cpus(2, total=64)
    root = fake(tmp_path, "0::/\n", V2_MOUNT, {"/sys/fs/cgroup/cpu.max": "400000 100000\n"})
    assert threads.default_thread_count(root) == (2, "CPU affinity (2 of 64 CPUs)")


def test_v1_quota_with_a_namespaced_path(tmp_path, cpus):
    """cgroup v1, as Docker shows it with a cgroup namespace: the process's path is "/" and
    the cpu,cpuacct hierarchy's folder is the container's."""
    cpus(8)
    root = fake(tmp_path, "12:memory:/\n4:cpu,cpuacct:/\n0::/\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "50000\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
    })
    quota = threads.cpu_quota(root)
    assert quota is not None and quota.cpus == 0.5
    assert threads.default_thread_count(root)[0] == 1


def test_v1_host_path_inside_the_mount(tmp_path, cpus):
    """cgroup v1 without a namespace: the mount's root is "/", the process's path names its
    folder; an unlimited quota (-1) counts as none."""
    cpus(8)
    root = fake(tmp_path, "4:cpu,cpuacct:/docker/abc\n", V1_MOUNTS, {
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "250000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n",
    })
    assert threads.default_thread_count(root)[0] == 3


def test_mount_root_prefix_is_stripped(tmp_path, cpus):
    """A mount whose root is the container's own folder (``/docker/abc`` mounted at
    /sys/fs/cgroup/cpu): the process's path below it is read from the mount point."""
    cpus(8)
    mounts = "40 31 0:29 /docker/abc /sys/fs/cgroup/cpu rw - cgroup cgroup rw,cpu\n"
    root = fake(tmp_path, "4:cpu:/docker/abc/inner\n", mounts, {
        "/sys/fs/cgroup/cpu/inner/cpu.cfs_quota_us": "200000\n",
        "/sys/fs/cgroup/cpu/inner/cpu.cfs_period_us": "100000\n",
    })
    assert threads.default_thread_count(root)[0] == 2


def test_hybrid_hierarchy_reads_both(tmp_path, cpus):
    cpus(8)
    mounts = V1_MOUNTS + "41 31 0:38 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
    root = fake(tmp_path, "4:cpu,cpuacct:/\n0::/\n", mounts, {
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
        "/sys/fs/cgroup/cpu,cpuacct/cpu.cfs_period_us": "100000\n",
        "/sys/fs/cgroup/unified/cpu.max": "200000 100000\n",
    })
    assert threads.default_thread_count(root)[0] == 2


@pytest.mark.parametrize("text", ["", "garbage", "max", "0 100000", "100000 0", "x y\n"])
def test_malformed_or_zero_quota_files_are_ignored(tmp_path, cpus, text):
    cpus(4)
    root = fake(tmp_path, "0::/\n", V2_MOUNT, {"/sys/fs/cgroup/cpu.max": text})
    assert threads.default_thread_count(root) == (4, "CPU count (4)")


def test_no_proc_files(tmp_path, cpus):
    cpus(3)
    assert threads.cpu_quota(tmp_path) is None
    assert threads.default_thread_count(tmp_path) == (3, "CPU count (3)")
    assert threads.runnable_tasks(tmp_path) is None


def test_environment_overrides(tmp_path, cpus, monkeypatch):
    cpus(8)
    root = fake(tmp_path, "0::/\n", V2_MOUNT, {"/sys/fs/cgroup/cpu.max": "100000 100000\n"})
    monkeypatch.setenv("TESSERA_NUM_THREADS", "6")
    assert threads.default_thread_count(root) == (6, "TESSERA_NUM_THREADS=6")
    for bad in ("0", "-2", "many", " "):
        monkeypatch.setenv("TESSERA_NUM_THREADS", bad)
        assert threads.default_thread_count(root)[0] == 1  # the quota's 1 CPU


def test_escaped_mount_points(tmp_path, cpus):
    cpus(8)
    mounts = r"30 23 0:26 / /sys/fs/cgroup\040x rw - cgroup2 cgroup2 rw" + "\n"
    root = fake(tmp_path, "0::/\n", mounts, {"/sys/fs/cgroup x/cpu.max": "100000 50000\n"})
    assert threads.default_thread_count(root)[0] == 2


def test_runnable_tasks(tmp_path):
    (tmp_path / "proc").mkdir()
    (tmp_path / "proc/loadavg").write_text("0.52 0.58 0.59 3/467 12345\n")
    assert threads.runnable_tasks(tmp_path) == 3
    (tmp_path / "proc/loadavg").write_text("bad\n")
    assert threads.runnable_tasks(tmp_path) is None


def test_this_machine():
    n, source = threads.default_thread_count()
    assert 1 <= n <= threads.affinity_cpus() or source.startswith("TESSERA_NUM_THREADS")
    assert source
