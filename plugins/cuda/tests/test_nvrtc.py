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
