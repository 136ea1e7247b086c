"""Finding and loading cuDNN and cuBLASLt from NVIDIA's wheels, with version checks.

The libraries come from the ``nvidia-cudnn-cu13`` and ``nvidia-cublas`` wheels, the plugin's
``libs`` extra (``pip install "tessera-cudnn[libs]"``; not plain dependencies, so that a CPU-only
install does without their ~1.4 GB), or a CUDA installation ``cuda-pathfinder`` knows about
(``CUDNN_PATH``, ``CUDA_HOME``, the loader path).
They are loaded with ctypes on first use, never at import or registration, so that a machine
without them can still list the backends and be told what is missing. Neither library needs a
GPU to load: descriptors can be created and checked on any machine (only handles need one).
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from typing import Self

from tessera.errors import TesseraError

#: The cuDNN major version these bindings are written for (the v9 API: legacy convolution,
#: pooling and softmax calls, which cuDNN 9 still exports).
CUDNN_MAJOR = 9
#: The cuBLASLt major version (CUDA 13's cuBLAS; the CUDA 13.0 driver of the GPU machines).
CUBLAS_MAJOR = 13

_PACKAGES = {"cudnn": "nvidia-cudnn-cu13", "cublasLt": "nvidia-cublas"}
#: How to install both (with NVRTC for the cuda backend): the plugin's ``libs`` extra.
INSTALL_LIBS = 'pip install "tessera-cudnn[libs]"'


class LibraryMissing(TesseraError):
    """A library the backend calls cannot be loaded (or is of a version it cannot use)."""


@dataclass(frozen=True)
class Library:
    """A loaded shared library: its ctypes handle, path and version (``major.minor.patch``)."""

    name: str
    lib: ctypes.CDLL
    path: str
    version: tuple[int, int, int]

    @property
    def version_text(self) -> str:
        return ".".join(str(v) for v in self.version)


_lock = threading.Lock()
_loaded: dict[str, Library | LibraryMissing] = {}


def _locate(name: str) -> str:
    """The absolute path of library ``name`` (``cudnn``, ``cublasLt``) by cuda-pathfinder."""
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib
    except ImportError as err:
        raise LibraryMissing(f"cuda-pathfinder (a dependency of cuda-bindings) is not "
                             f"installed, so {name} cannot be found: pip install "
                             f"cuda-bindings ({err})") from err
    try:
        return str(load_nvidia_dynamic_lib(name).abs_path)
    except Exception as err:  # noqa: BLE001 - pathfinder's not-found errors vary by version
        raise LibraryMissing(f"lib{name} is missing: {INSTALL_LIBS} (NVIDIA's "
                             f"{_PACKAGES[name]} wheel; {type(err).__name__}: "
                             f"{' '.join(str(err).split())})") from err


def _version(name: str, lib: ctypes.CDLL) -> tuple[int, int, int]:
    if name == "cudnn":
        lib.cudnnGetVersion.restype = ctypes.c_size_t
        v = int(lib.cudnnGetVersion())  # major*10000 + minor*100 + patch (cuDNN 9)
        return v // 10000, v // 100 % 100, v % 100
    lib.cublasLtGetVersion.restype = ctypes.c_size_t
    v = int(lib.cublasLtGetVersion())  # major*10000 + minor*100 + patch
    return v // 10000, v // 100 % 100, v % 100


def load(name: str, locate: object = None) -> Library:
    """Library ``name`` (``cudnn`` or ``cublasLt``), loaded once per process; LibraryMissing
    saying what to install when it cannot be found or its major version is not the one these
    bindings are for. ``locate`` replaces the finder (tests)."""
    with _lock:
        known = _loaded.get(name)
        if known is None:
            known = _loaded[name] = _load(name, locate)
    if isinstance(known, LibraryMissing):
        raise known
    return known


def _load(name: str, locate: object = None) -> Library | LibraryMissing:
    if name not in _PACKAGES:
        raise ValueError(f"unknown library {name!r}; expected one of {sorted(_PACKAGES)}")
    try:
        path = locate(name) if callable(locate) else _locate(name)
        lib = ctypes.CDLL(path)
        version = _version(name, lib)
    except LibraryMissing as err:
        return err
    except (OSError, AttributeError) as err:
        return LibraryMissing(f"lib{name} cannot be loaded ({err}); reinstall "
                              f"{_PACKAGES[name]}")
    major = CUDNN_MAJOR if name == "cudnn" else CUBLAS_MAJOR
    if version[0] != major:
        return LibraryMissing(f"lib{name} {'.'.join(map(str, version))} at {path}: tessera-cudnn "
                              f"needs major version {major} (pip install '{_PACKAGES[name]}')")
    return Library(name, lib, path, version)


def missing(name: str) -> str | None:
    """Why library ``name`` cannot be used here, or None."""
    try:
        load(name)
    except LibraryMissing as err:
        return str(err)
    return None


def forget() -> None:
    """Drop what :func:`load` remembered (tests that fake a missing library)."""
    with _lock:
        _loaded.clear()


class Functions:
    """The functions of library ``name`` that a binding declares (``signatures``: function
    name -> ctypes argument types; every one returns a status int), bound on first use, and
    the library's status-to-text function ``describe``."""

    def __init__(self, name: str, signatures: dict[str, list[object]], describe: str) -> None:
        self.name, self.signatures, self.describe = name, signatures, describe
        self._bound: dict[str, object] = {}
        self._lock = threading.Lock()

    def __call__(self, function: str) -> object:
        f = self._bound.get(function)
        if f is None:
            with self._lock:
                f = getattr(load(self.name).lib, function)
                f.argtypes = self.signatures[function]
                f.restype = ctypes.c_int
                self._bound[function] = f
        return f

    def status_text(self, status: int) -> str:
        f = getattr(load(self.name).lib, self.describe)
        f.restype = ctypes.c_char_p
        f.argtypes = [ctypes.c_int]
        return (f(status) or b"?").decode()


class PerDevice:
    """A library handle made once per device (``of``): each subclass keeps its own table."""

    _handles: dict[int, PerDevice]
    _table_lock: threading.Lock

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        cls._handles, cls._table_lock = {}, threading.Lock()

    def __init__(self, device: object) -> None:
        raise NotImplementedError

    @classmethod
    def of(cls, device: object) -> Self:
        """The handle of ``device`` (a ``tessera_cuda`` CUDADevice), created on first use."""
        with cls._table_lock:
            handle = cls._handles.get(id(device))
            if handle is None:
                handle = cls._handles[id(device)] = cls(device)
            return handle
