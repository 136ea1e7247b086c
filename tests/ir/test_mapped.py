"""Weights mapped from their files (tessera.ir.mapped): the right values, read-only, resident
only while read (release_resident drops the pages and keeps the values), and not sampled by
the constant pool; packing a mapped weight gives the same panels as packing it in memory."""

from __future__ import annotations

import mmap
import sys
from pathlib import Path

import numpy as np
import pytest

from tessera.ir.aligned import aligned_empty
from tessera.ir.mapped import (
    MAP_MIN_BYTES,
    as_aligned_unless_mapped,
    map_readonly,
    mapped_region,
    release_resident,
    resident_bytes,
)
from tessera.ops.layout import pack_conv_weight, pack_matmul_weight
from tessera.runtime.constant_pool import ConstantPool

RNG = np.random.default_rng(11)

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"),
                                reason="resident pages are read from /proc/self/smaps")


def _rss_kib(array: np.ndarray) -> int:
    """The resident KiB of the mapping holding ``array``."""
    resident = resident_bytes(array)
    assert resident is not None, "no mapping holds the array"
    return resident // 1024


def _file(tmp_path: Path, array: np.ndarray, before: int) -> Path:
    path = tmp_path / "weights.bin"
    path.write_bytes(bytes(RNG.integers(0, 256, before, dtype=np.uint8)) + array.tobytes())
    return path


@pytest.mark.parametrize("before", [0, 64, 4096 + 192, 3 * 65536 + 64])
def test_a_mapped_array_holds_the_files_bytes_read_only(tmp_path: Path, before: int) -> None:
    want = RNG.standard_normal((96, 80)).astype(np.float32)
    path = _file(tmp_path, want, before)
    got = map_readonly(path, before, want.shape, np.dtype("<f4"))
    np.testing.assert_array_equal(got, want)
    assert got.ctypes.data % 64 == 0  # the offset in the file was a multiple of 64
    assert not got.flags.writeable
    assert mapped_region(got) is not None and mapped_region(got[3:, 5:].T) is not None
    assert mapped_region(np.array(got)) is None
    with pytest.raises(ValueError, match="read-only"):
        got[0, 0] = 1.0


def test_release_resident_drops_the_pages_and_keeps_the_values(tmp_path: Path) -> None:
    want = RNG.standard_normal((1024, 512)).astype(np.float32)  # 2 MiB
    path = _file(tmp_path, want, 0)
    got = map_readonly(path, 0, want.shape, np.dtype("<f4"))
    assert float(got.sum()) == pytest.approx(float(want.sum()), rel=1e-4)  # every page read
    assert _rss_kib(got) >= 2000
    release_resident(got)
    assert _rss_kib(got) < 100
    np.testing.assert_array_equal(got, want)  # back from the file
    release_resident(np.ones(MAP_MIN_BYTES))  # ordinary memory: nothing happens


def test_packing_a_mapped_weight_gives_the_same_panels_and_lets_its_pages_go(
        tmp_path: Path) -> None:
    b = RNG.standard_normal((4096, 256)).astype(np.float32)  # 4 MiB, packed in parts of 8
    path = _file(tmp_path, b, 128)
    mapped = map_readonly(path, 128, b.shape, np.dtype("<f4"))
    packed = pack_matmul_weight(mapped, 32)
    np.testing.assert_array_equal(packed, pack_matmul_weight(b, 32))
    assert _rss_kib(mapped) < 100
    w = RNG.standard_normal((64, 32, 3, 3)).astype(np.float32)
    path = _file(tmp_path, w, 0)
    mapped = map_readonly(path, 0, w.shape, np.dtype("<f4"))
    np.testing.assert_array_equal(pack_conv_weight(mapped, 8, 16), pack_conv_weight(w, 8, 16))


def test_the_constant_pool_leaves_mapped_weights_alone(tmp_path: Path) -> None:
    want = RNG.standard_normal((2048, 512)).astype(np.float32)
    path = _file(tmp_path, want, 0)
    got = map_readonly(path, 0, want.shape, np.dtype("<f4"))
    pool = ConstantPool()
    assert pool.share(got) is got
    assert _rss_kib(got) < 100  # not sampled for a fingerprint
    copy = np.array(want)
    assert pool.share(copy) is copy and not copy.flags.writeable  # in memory: shared


def test_a_mapped_weight_is_kept_as_it_is_at_any_offset(tmp_path: Path) -> None:
    want = RNG.standard_normal((512, 256)).astype(np.float32)
    for offset in (4 * 5, 4 * 5 + 3):  # element-aligned, and not even that
        path = _file(tmp_path, want, offset)
        mapped = map_readonly(path, offset, want.shape, np.dtype("<f4"))
        assert as_aligned_unless_mapped(mapped) is mapped
    # not C-contiguous (or not in native byte order): copied, its pages let go
    odd = map_readonly(path, 4 * 5 + 3, want.shape, np.dtype("<f4")).T
    float(odd.sum())
    copy = as_aligned_unless_mapped(odd)
    assert copy is not odd and copy.ctypes.data % 64 == 0 and mapped_region(copy) is None
    np.testing.assert_array_equal(copy, want.T)
    assert _rss_kib(odd) < 100
    memory = np.ones(1000, np.float32)[1:]  # ordinary memory: as_aligned
    assert as_aligned_unless_mapped(memory).ctypes.data % 64 == 0


@pytest.mark.parametrize("kind", ["numpy", "anonymous mapping"])
def test_memory_of_our_own_is_never_taken_for_file_pages(kind: str) -> None:
    if kind == "numpy":
        a = aligned_empty((2048, 1024), np.float32)
    else:  # a mapping that is not a file's (its pages must never be dropped)
        region = mmap.mmap(-1, 8 << 20)
        a = np.frombuffer(region, dtype=np.float32).reshape(2048, 1024)
    a[...] = RNG.standard_normal(a.shape)
    want = a.copy()
    assert mapped_region(a) is None
    release_resident(a)  # must not drop (and so zero) anonymous pages
    np.testing.assert_array_equal(a, want)
    assert as_aligned_unless_mapped(a) is a
