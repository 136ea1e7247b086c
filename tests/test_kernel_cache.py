"""The persistent kernel cache (tessera.plugin.kernel_cache): entries round-trip, damaged ones
are misses and deleted, the size limit evicts the least recently used, processes writing at
once leave only whole entries, and the settings that turn it on, off or elsewhere."""

from __future__ import annotations

import os
import time
import warnings
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from tessera.errors import CompileError
from tessera.plugin import kernel_cache
from tessera.plugin.kernel_cache import (
    DEFAULT_MAX_MB,
    KernelCache,
    cache_from_setting,
    default_kernel_cache,
)

RNG = np.random.default_rng(3)


def blob(n: int) -> bytes:
    return RNG.integers(0, 256, n, dtype=np.uint8).tobytes()


def test_entries_round_trip(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    key = cache.key("ir text", "cpu", b"\x00\x01")
    assert cache.get("llvm", key) is None
    files = {"object": blob(5000), "llvm_ir": b"define void @f() {}", "empty": b""}
    assert cache.put("llvm", key, files)
    assert cache.get("llvm", key) == files
    assert cache.stats == {"hits": 1, "misses": 1, "writes": 1}
    # another namespace is another cache
    assert cache.get("cuda", key) is None
    (entry, size, _), = cache.entries()
    assert entry == cache.path("llvm", key) and size == entry.stat().st_size


def test_keys_separate_their_parts() -> None:
    k = KernelCache.key
    assert k("ab", "c") != k("a", "bc") and k("ab", "c") == k("ab", "c")
    assert k("x") != k("x", "") and k("x") == k(b"x")
    assert len(k("x")) == 64 and int(k("x"), 16) >= 0


@pytest.mark.parametrize("damage", ["truncate", "flip", "garbage", "empty"])
def test_a_damaged_entry_is_a_miss_and_removed(tmp_path: Path, damage: str) -> None:
    cache = KernelCache(tmp_path)
    key = cache.key(damage)
    cache.put("llvm", key, {"object": blob(3000)})
    path = cache.path("llvm", key)
    data = bytearray(path.read_bytes())
    if damage == "truncate":
        data = data[:-7]
    elif damage == "flip":
        data[-1] ^= 0xFF
    elif damage == "garbage":
        data = bytearray(blob(len(data)))
    else:
        data = bytearray()
    path.write_bytes(bytes(data))
    assert cache.get("llvm", key) is None
    assert not path.exists()


def test_the_size_limit_evicts_the_least_recently_used(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path, max_bytes=50_000)
    keys = [cache.key(str(i)) for i in range(4)]
    now = time.time()
    for i, key in enumerate(keys):  # incompressible: each entry holds about 12 kB
        cache.put("llvm", key, {"object": blob(12_000)})
        os.utime(cache.path("llvm", key), (now - 100 + i, now - 100 + i))
    assert cache.size() <= 50_000 and len(cache.entries()) == 4
    assert cache.get("llvm", keys[0]) is not None  # used now: the most recent
    cache.put("llvm", cache.key("new"), {"object": blob(12_000)})  # 60 kB: over the limit
    assert cache.size() <= 0.8 * 50_000
    left = {p.name for p, _, _ in cache.entries()}
    assert keys[0] in left and cache.key("new") in left
    assert keys[1] not in left and keys[2] not in left  # the two least recently used


def _writer(root: str, worker: int) -> list[str]:
    """Writes and reads the same ten keys as the other workers; the problems it saw."""
    cache = KernelCache(Path(root))
    problems = []
    for round_ in range(5):
        for i in range(10):
            key = cache.key("shared", str(i))
            data = {"object": bytes([i]) * (20_000 + i), "who": f"{worker}.{round_}".encode()}
            cache.put("llvm", key, data)
            got = cache.get("llvm", key)
            if got is None or got["object"] != data["object"]:
                problems.append(f"key {i}: {None if got is None else len(got['object'])}")
    return problems


def test_processes_writing_at_once_leave_whole_entries(tmp_path: Path) -> None:
    with ProcessPoolExecutor(4) as pool:
        results = list(pool.map(_writer, [str(tmp_path)] * 4, range(4)))
    assert results == [[]] * 4
    cache = KernelCache(tmp_path)
    assert len(cache.entries()) == 10
    for i in range(10):
        got = cache.get("llvm", cache.key("shared", str(i)))
        assert got is not None and got["object"] == bytes([i]) * (20_000 + i)
    leftovers = [p for p in tmp_path.rglob("*") if p.is_file() and p.name.startswith(".")]
    assert leftovers == []


def test_an_unwritable_cache_warns_once_and_changes_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(kernel_cache, "_warned", set())  # as in a fresh process
    not_a_folder = tmp_path / "file"
    not_a_folder.write_text("x")
    cache = KernelCache(not_a_folder)
    with pytest.warns(RuntimeWarning, match="cannot write"):
        assert not cache.put("llvm", cache.key("a"), {"object": b"1"})
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: a second failure is silent
        assert not cache.put("llvm", cache.key("b"), {"object": b"1"})
    assert cache.get("llvm", cache.key("a")) is None
    assert cache.entries() == [] and cache.stats["writes"] == 0


def test_bad_names_are_refused(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    for ns, key in [("../x", cache.key("a")), ("llvm", "../../etc"), ("llvm", "ab")]:
        with pytest.raises(ValueError, match="bad namespace"):
            cache.path(ns, key)


def test_clear(tmp_path: Path) -> None:
    cache = KernelCache(tmp_path)
    for i in range(3):
        cache.put("llvm", cache.key(str(i)), {"object": b"x"})
    assert cache.clear() == 3 and cache.entries() == []


def test_settings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("TESSERA_CACHE_DIR", str(tmp_path / "env"))
    monkeypatch.delenv("TESSERA_KERNEL_CACHE", raising=False)
    monkeypatch.delenv("TESSERA_CACHE_MAX_MB", raising=False)
    cache = default_kernel_cache()
    assert cache is not None and cache.root == tmp_path / "env"
    assert cache.max_bytes == DEFAULT_MAX_MB << 20
    assert cache_from_setting(None) == cache
    assert cache_from_setting(False) is None
    assert cache_from_setting(str(tmp_path / "mine")).root == tmp_path / "mine"
    monkeypatch.setenv("TESSERA_CACHE_MAX_MB", "1.5")
    assert default_kernel_cache().max_bytes == int(1.5 * (1 << 20))
    for off in ("0", "off", "False", " no "):
        monkeypatch.setenv("TESSERA_KERNEL_CACHE", off)
        assert default_kernel_cache() is None and cache_from_setting(None) is None
        assert cache_from_setting(True).root == tmp_path / "env"  # asked for by name
    monkeypatch.setenv("TESSERA_KERNEL_CACHE", "1")
    monkeypatch.setenv("TESSERA_CACHE_MAX_MB", "lots")
    with pytest.raises(CompileError, match="TESSERA_CACHE_MAX_MB must be a number"):
        default_kernel_cache()
    monkeypatch.setenv("TESSERA_CACHE_MAX_MB", "-1")
    with pytest.raises(CompileError, match="must not be negative"):
        default_kernel_cache()
    with pytest.raises(TypeError, match="kernel_cache must be"):
        cache_from_setting(3)  # type: ignore[arg-type]
