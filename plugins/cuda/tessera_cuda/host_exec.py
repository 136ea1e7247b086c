"""Execute generated CUDA C on the host (no GPU), for tests and ``--emulate`` checks.

:class:`HostModule` compiles a :class:`~tessera_cuda.codegen.CudaSource`'s text with the host
C++ compiler (``g++ -std=c++20``) and the project's header ``host/cuda_host.h``, which runs each
block's threads as fibers with ``__syncthreads()`` as a real barrier, and adds one
``extern "C"`` launcher per kernel with its grid and block. The same text NVRTC compiles for
the GPU is what runs here, so the arithmetic, indexing and barriers of every kernel are
checked against the numpy reference in CI. ``sanitize="thread"`` builds with ThreadSanitizer
(and a block's threads as OS threads, whose races it reports).

Built libraries are cached by the hash of their source and flags (``TESSERA_CUDA_HOST_CACHE``,
default ``~/.cache/tessera/cuda-host``).

A static kernel's launcher is ``tessera_host_<name>(void **args)`` (its buffers' pointers; the
grid and block compiled in). A kernel with run-time extents has
``tessera_host_<name>(void **args, const long long *dims)``: ``dims`` holds the grid (x, y, z),
the block (x, y, z) and then the sizes in ``size_vars`` order, which the launcher passes to the
kernel after the buffers, as a GPU launch does with the kernel's ``long long`` parameters.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from tessera.errors import CompileError, RunError

from .codegen import CudaSource, DeviceKernel, GroupKernels, c_type, size_values

HEADER = Path(__file__).parent / "host" / "cuda_host.h"

__all__ = ["HEADER", "HostModule", "host_compiler"]


def host_compiler() -> str | None:
    """The C++ compiler used for host emulation (``CXX`` or g++), None when absent."""
    return shutil.which(os.environ.get("CXX", "g++"))


def _cache_dir() -> Path:
    root = os.environ.get("TESSERA_CUDA_HOST_CACHE")
    path = Path(root) if root else Path.home() / ".cache" / "tessera" / "cuda-host"
    path.mkdir(parents=True, exist_ok=True)
    return path


def _launcher(k: DeviceKernel) -> str:
    args = ", ".join(f"({c_type(p.dtype)}*)args[{i}]" for i, p in enumerate(k.params))
    if k.is_symbolic:
        sizes = ", ".join(f"dims[{6 + i}]" for i in range(len(k.size_vars)))
        return (f'extern "C" void tessera_host_{k.name}(void** args, const long long* dims) '
                f"{{\n  tessera_host::launch(dim3((unsigned)dims[0], (unsigned)dims[1], "
                f"(unsigned)dims[2]), dim3((unsigned)dims[3], (unsigned)dims[4], "
                f"(unsigned)dims[5]), [&] {{ {k.name}({args}{', ' if args else ''}{sizes}); "
                f"}});\n}}")
    g, b = k.launch.grid, k.launch.block
    return (f'extern "C" void tessera_host_{k.name}(void** args) {{\n'
            f"  tessera_host::launch(dim3({g[0]}, {g[1]}, {g[2]}), dim3({b[0]}, {b[1]}, {b[2]}),"
            f" [&] {{ {k.name}({args}); }});\n}}")


def host_dims(kernel: DeviceKernel, grid: Sequence[int], block: Sequence[int],
              sizes: Sequence[int]) -> ctypes.Array:
    """The ``dims`` argument of a symbolic kernel's host launcher."""
    return (ctypes.c_longlong * (6 + len(sizes)))(*grid, *block, *sizes)


class HostModule:
    """The kernels of ``source`` compiled for the host CPU."""

    def __init__(self, source: CudaSource, sanitize: str | None = None,
                 opt: str = "-O0") -> None:
        cxx = host_compiler()
        if cxx is None:
            raise CompileError("cuda host emulation needs a C++20 compiler (g++ 11 or later); "
                               "none found (set CXX)")
        self.source = source
        text = source.text + "\n" + "\n".join(_launcher(k) for k in source.kernels) + "\n"
        flags = ["-std=c++20", opt, "-fPIC", "-shared", "-pthread", "-w",
                 "-include", str(HEADER)]
        if sanitize:
            # ThreadSanitizer sees races between OS threads, not fibers
            flags += [f"-fsanitize={sanitize}", "-DTESSERA_HOST_OS_THREADS"]
        key = hashlib.sha256("\0".join([text, *flags, HEADER.read_text()]).encode()).hexdigest()
        lib = _cache_dir() / f"{key[:24]}.so"
        if not lib.exists():
            with tempfile.TemporaryDirectory() as tmp:
                src = Path(tmp) / "kernels.cu"
                src.write_text(text)
                # built beside the cache entry and renamed into it: another process (a
                # parallel test worker) sees a whole library or none, on any filesystem
                out = lib.with_name(f".{lib.name}.{os.getpid()}.{threading.get_ident()}.tmp")
                try:
                    proc = subprocess.run([cxx, *flags, "-x", "c++", str(src), "-o", str(out)],
                                          capture_output=True, text=True)
                    if proc.returncode != 0:
                        raise CompileError(f"cuda host emulation: {cxx} failed on the "
                                           f"generated CUDA C:\n{proc.stderr[-4000:]}")
                    os.replace(out, lib)
                finally:
                    out.unlink(missing_ok=True)
        self.text = text
        self.lib = ctypes.CDLL(str(lib))

    def launch(self, kernel: DeviceKernel, arrays: list[np.ndarray],
               sizes: Sequence[int] | Mapping[str, int] | None = None) -> None:
        """Run ``kernel`` on ``arrays`` (one C-contiguous array per parameter, in order); a
        symbolic kernel with ``sizes`` (in ``size_vars`` order or by name), which give its
        grid and block (:meth:`DeviceKernel.launch_dims`). An empty grid launches nothing."""
        if len(arrays) != len(kernel.params):
            raise RunError(f"cuda host kernel {kernel.name}: {len(kernel.params)} buffers "
                           f"expected, got {len(arrays)}")
        for a, p in zip(arrays, kernel.params):
            if not a.flags.c_contiguous:
                raise RunError(f"cuda host kernel {kernel.name}: buffer {p.name} is not "
                               f"contiguous")
        ptrs = (ctypes.c_void_p * max(1, len(arrays)))(*[a.ctypes.data for a in arrays])
        fn = getattr(self.lib, f"tessera_host_{kernel.name}")
        if not kernel.is_symbolic:
            fn(ptrs)
            return
        values = size_values(kernel.name, [v.name for v in kernel.size_vars], sizes)
        grid, block = kernel.launch_dims(values)
        if 0 in grid or 0 in block:
            return  # as the driver: an empty launch computes nothing
        fn(ptrs, host_dims(kernel, grid, block, values))

    def run_group(self, group: GroupKernels, arrays: Mapping[str, np.ndarray],
                  sizes: Sequence[int] | Mapping[str, int] | None = None) -> None:
        """Run a group's kernels in order; ``arrays`` maps the group function's parameter
        names to arrays, ``sizes`` gives a symbolic group's sizes. The group's workspace is
        allocated here."""
        workspace = np.empty(max(group.workspace_bytes, 1), dtype=np.uint8)
        by_name: dict[str, np.ndarray] = {}
        for p in group.func.params:
            if p.name not in arrays:
                raise RunError(f"cuda host group {group.func.name}: no array for {p.name}")
            by_name[p.name] = arrays[p.name]
        for kern in group.kernels:
            args = []
            for p in kern.params:
                if p.name in group.workspace:
                    off = group.workspace[p.name]
                    dt = np.dtype(p.dtype)
                    # the rest of the workspace (a symbolic buffer's size is planned at its
                    # bound; the kernel indexes only what it needs)
                    end = off + (len(workspace) - off) // dt.itemsize * dt.itemsize
                    args.append(workspace[off:end].view(dt))
                else:
                    args.append(by_name[p.name])
            self.launch(kern, args, sizes)
