"""CUDA C -> cubin (and PTX) with NVRTC, through NVIDIA's ``cuda-bindings``.

NVRTC needs no GPU and no driver, so CI compiles every generated kernel to cubin for the
target architecture and sees compile and ptxas errors (too much shared memory, too many
registers) there. Cubin for the device's architecture is what the runtime loads: PTX from a
newer NVRTC than the driver (NVRTC 13.5's ``.version 9.5`` on a CUDA 13.0 driver) cannot be
JIT-compiled, cubin can always be loaded by a driver of the same major version.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

from tessera.errors import CompileError
from tessera.plugin.kernel_cache import KernelCache

__all__ = ["INSTALL_LIBS", "NvrtcResult", "compile_cuda", "nvrtc_missing", "nvrtc_version"]

#: The wheel with libnvrtc, and how to install it: the plugin's ``libs`` extra (not a plain
#: dependency, so that a CPU-only install does without its ~140 MB).
NVRTC_PACKAGE = "nvidia-cuda-nvrtc"
INSTALL_LIBS = 'pip install "tessera-cuda[libs]"'


@lru_cache(maxsize=1)
def _nvrtc():  # noqa: ANN202 - the cuda.bindings.nvrtc module
    from cuda.bindings import nvrtc

    return nvrtc


@lru_cache(maxsize=1)
def nvrtc_missing() -> str | None:
    """None when NVRTC can be called, else what is missing (for ``available()``)."""
    try:
        nvrtc = _nvrtc()
    except ImportError as err:
        return f"the cuda-bindings package is not installed ({err}); pip install cuda-bindings"
    try:
        status, _major, _minor = nvrtc.nvrtcVersion()
    except Exception as err:  # noqa: BLE001 - the library itself is missing
        return (f"NVRTC is missing: {INSTALL_LIBS} (NVIDIA's {NVRTC_PACKAGE} wheel; "
                f"{type(err).__name__}: {' '.join(str(err).split())})")
    if int(status) != 0:
        return f"NVRTC does not work: nvrtcVersion returned {status}"
    return None


def nvrtc_version() -> tuple[int, int] | None:
    if nvrtc_missing():
        return None
    _, major, minor = _nvrtc().nvrtcVersion()
    return int(major), int(minor)


#: NVRTC's options besides the architecture and the caller's.
_FLAGS = ("--std=c++17", "-default-device")
#: The kernel cache's namespace of NVRTC's output.
CACHE_NAMESPACE = "nvrtc"


@dataclass
class NvrtcResult:
    """What NVRTC produced: cubin for ``arch`` (``sm_90``), the PTX when asked, and the log."""

    arch: str
    cubin: bytes
    ptx: str | None
    log: str
    #: ``"hit"`` or ``"miss"`` in the kernel cache; None when compiled without one.
    cache: str | None = None


def _check(result: tuple, what: str) -> tuple:
    status = result[0]
    if int(status) != 0:
        raise CompileError(f"NVRTC {what} failed: {status}")
    return result[1:]


def _out_buffer(size: int) -> bytearray:
    """A writable buffer NVRTC fills. Never ``b" " * size``: for size 1 (an empty log is its
    terminating NUL) that is CPython's cached one-byte ``b" "``, and NVRTC writing into it made
    every later ``" ".encode()`` in the process return ``b"\\x00"``."""
    return bytearray(size)


def _log(nvrtc, prog) -> str:  # noqa: ANN001
    (size,) = _check(nvrtc.nvrtcGetProgramLogSize(prog), "log size")
    buf = _out_buffer(size)
    _check(nvrtc.nvrtcGetProgramLog(prog, buf), "log")
    return bytes(buf).rstrip(b"\0 ").decode(errors="replace")


def compile_cuda(source: str, arch: str = "sm_90", name: str = "tessera_kernels.cu",
                 options: list[str] | None = None, want_ptx: bool = False,
                 cache: KernelCache | None = None) -> NvrtcResult:
    """Compile ``source`` to cubin for ``arch`` (``sm_80``, ``sm_90``, ...); CompileError with
    NVRTC's log (errors of the source and of ptxas) when it fails. With ``cache`` (the kernel
    cache), the cubin and PTX are looked up under a key of the source, the architecture, the
    options and NVRTC's version first, and stored there after a miss."""
    if not re.fullmatch(r"sm_\d+[a-z]?", arch):
        raise CompileError(f"cuda: -arch must name a real architecture such as sm_90 (cubin "
                           f"is built for it), got {arch!r}")
    missing = nvrtc_missing()
    if missing:
        raise CompileError(f"cuda: cannot compile kernels: {missing}")
    if cache is None:
        return _compile(source, arch, name, options, want_ptx)
    key = cache.key(source, arch, name, *(options or []), str(nvrtc_version()),
                    str(_FLAGS))
    hit = cache.get(CACHE_NAMESPACE, key)
    if hit is not None and "cubin" in hit and (not want_ptx or "ptx" in hit):
        ptx = hit["ptx"].decode() if want_ptx else None
        return NvrtcResult(arch, hit["cubin"], ptx, hit.get("log", b"").decode(), "hit")
    result = _compile(source, arch, name, options, True)
    cache.put(CACHE_NAMESPACE, key, {"cubin": result.cubin, "ptx": (result.ptx or "").encode(),
                                     "log": result.log.encode()})
    return NvrtcResult(arch, result.cubin, result.ptx if want_ptx else None, result.log, "miss")


def _compile(source: str, arch: str, name: str, options: list[str] | None,
             want_ptx: bool) -> NvrtcResult:
    nvrtc = _nvrtc()
    (prog,) = _check(nvrtc.nvrtcCreateProgram(source.encode(), name.encode(), 0, [], []),
                     "program creation")
    try:
        opts = [f"--gpu-architecture={arch}", *_FLAGS, *(options or [])]
        (status,) = nvrtc.nvrtcCompileProgram(prog, len(opts), [o.encode() for o in opts])
        log = _log(nvrtc, prog)
        if int(status) != 0:
            raise CompileError(f"cuda: NVRTC could not compile the generated kernels for "
                               f"{arch} ({status}):\n{log[-6000:]}")
        (size,) = _check(nvrtc.nvrtcGetCUBINSize(prog), "cubin size")
        cubin = _out_buffer(size)
        _check(nvrtc.nvrtcGetCUBIN(prog, cubin), "cubin")
        ptx = None
        if want_ptx:
            (psize,) = _check(nvrtc.nvrtcGetPTXSize(prog), "PTX size")
            pbuf = _out_buffer(psize)
            _check(nvrtc.nvrtcGetPTX(prog, pbuf), "PTX")
            ptx = bytes(pbuf).rstrip(b"\0").decode()
        return NvrtcResult(arch, bytes(cubin), ptx, log)
    finally:
        nvrtc.nvrtcDestroyProgram(prog)
