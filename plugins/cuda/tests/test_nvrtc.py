"""tessera_cuda.nvrtc: compiling with NVRTC leaves the interpreter's cached objects alone."""

from __future__ import annotations

from plugins.cuda.tests.conftest import needs_nvrtc


@needs_nvrtc
def test_an_empty_log_does_not_overwrite_the_cached_one_byte_bytes():
    """A kernel that compiles without a word has a 1-byte log (its NUL). NVRTC used to write it
    into ``b" " * 1``, which is CPython's cached ``b" "``: afterwards every ``" ".encode()`` in
    the process returned ``b"\\x00"`` (and ``os.environ["X"] = " "`` failed)."""
    from tessera_cuda.nvrtc import compile_cuda

    out = compile_cuda('extern "C" __global__ void k(float *x) { x[0] = 1.0f; }', "sm_90",
                       want_ptx=True)
    assert out.log == ""
    assert out.cubin[:4] == b"\x7fELF"
    assert "k" in (out.ptx or "")
    space = " "
    assert b" "[0] == 32 and space.encode("utf-8")[0] == 32 and bytes([32])[0] == 32


@needs_nvrtc
def test_the_kernel_cache_holds_cubin_and_ptx(tmp_path, monkeypatch) -> None:  # noqa: ANN001
    """A second compile of the same source for the same architecture takes the cubin (and the
    PTX, when asked) from the kernel cache without calling NVRTC; another architecture or other
    options are another entry."""
    from tessera.plugin.kernel_cache import KernelCache
    from tessera_cuda import nvrtc

    src = 'extern "C" __global__ void k(float *x, int n) { if (threadIdx.x < n) x[0] = 2.0f; }'
    cache = KernelCache(tmp_path)
    first = nvrtc.compile_cuda(src, "sm_90", cache=cache)
    assert first.cache == "miss" and first.ptx is None

    def no_nvrtc(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise AssertionError("NVRTC ran on a kernel cache hit")

    with monkeypatch.context() as m:
        m.setattr(nvrtc, "_compile", no_nvrtc)
        again = nvrtc.compile_cuda(src, "sm_90", cache=cache, want_ptx=True)
    assert again.cache == "hit" and again.cubin == first.cubin
    assert again.ptx is not None and ".entry k" in again.ptx
    assert nvrtc.compile_cuda(src, "sm_80", cache=cache).cache == "miss"
    assert nvrtc.compile_cuda(src, "sm_90", cache=cache, options=["-lineinfo"]).cache == "miss"
    assert len(cache.entries()) == 3
    assert nvrtc.compile_cuda(src, "sm_90").cache is None  # no cache: NVRTC every time
