"""A persistent cache of compiled code on disk, shared by every backend.

A backend whose code generation takes seconds (the llvm backend's LLVM optimisation and
emission, NVRTC for cuda) looks up what it is about to compile before compiling it: the
:class:`KernelCache` that :class:`~tessera.plugin.backend.CompileOptions` hands it
(``options.kernel_cache``; None when the cache is off). The backend decides what the key
holds: everything its output depends on (the code it would compile, the target CPU or GPU and
its features, the compiler's version and options). The cache adds the format version and
keeps the entry's bytes.

Where and how much:

- ``TESSERA_CACHE_DIR``: the folder (default ``~/.cache/tessera/kernels``); ``tessera.compile``'s
  ``kernel_cache`` setting (a folder, or False) overrides it for one compile.
- ``TESSERA_CACHE_MAX_MB``: the size limit (default 1024); past it, the least recently used
  entries are deleted until the cache is at 80% of the limit.
- ``TESSERA_KERNEL_CACHE=0`` (or ``off``, ``false``, ``no``) turns it off.

Entries are files ``<folder>/<namespace>/<key[:2]>/<key>``: written under a temporary name in
the same folder, then renamed into place, so processes that compile the same model at once
(test workers, a service's replicas) each see a whole entry or none; an entry's contents carry
their SHA-256, and one that does not match (a truncated or foreign file) is deleted and
counts as a miss. A cache that cannot be written (read-only folder, full disk) makes compiles
no slower than without one: the failure is reported once as a warning and the compile goes on.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import json
import os
import struct
import threading
import time
import warnings
import zlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from tessera.errors import CompileError

__all__ = ["KernelCache", "cache_from_setting", "default_kernel_cache", "source_fingerprint",
           "DEFAULT_MAX_MB"]

#: The size limit without ``TESSERA_CACHE_MAX_MB``.
DEFAULT_MAX_MB = 1024
#: First bytes of every entry; a new layout gets a new magic (old entries are then misses).
_MAGIC = b"TESSERA-KC1\n"
_OFF = {"0", "off", "false", "no"}
_warned: set[str] = set()
_warn_lock = threading.Lock()


def _warn_once(what: str, message: str) -> None:
    with _warn_lock:
        if what in _warned:
            return
        _warned.add(what)
    warnings.warn(message, RuntimeWarning, stacklevel=3)


@dataclass(frozen=True)
class KernelCache:
    """The cache in folder ``root``, at most ``max_bytes`` (see the module doc). Counts its
    ``hits``, ``misses`` and ``writes`` in this process."""

    root: Path
    max_bytes: int = DEFAULT_MAX_MB << 20
    stats: dict[str, int] = field(default_factory=lambda: {"hits": 0, "misses": 0,
                                                           "writes": 0},
                                  compare=False, repr=False)

    @staticmethod
    def key(*parts: str | bytes) -> str:
        """A key (hex SHA-256) over ``parts``, each length-prefixed (``("ab", "c")`` and
        ``("a", "bc")`` differ)."""
        h = hashlib.sha256(_MAGIC)
        for p in parts:
            b = p.encode() if isinstance(p, str) else bytes(p)
            h.update(struct.pack("<Q", len(b)))
            h.update(b)
        return h.hexdigest()

    def path(self, namespace: str, key: str) -> Path:
        """Where the entry ``key`` of ``namespace`` lives (whether or not it exists)."""
        if not namespace.replace("-", "").replace("_", "").isalnum() or \
                not key.isalnum() or len(key) < 8:
            raise ValueError(f"kernel cache: bad namespace {namespace!r} or key {key!r} "
                             "(letters, digits, '-' and '_'; keys from KernelCache.key)")
        return self.root / namespace / key[:2] / key

    def get(self, namespace: str, key: str) -> dict[str, bytes] | None:
        """The files stored under ``key``, or None (no entry, or one that fails its check,
        which is then deleted). A hit marks the entry as recently used."""
        path = self.path(namespace, key)
        try:
            data = path.read_bytes()
        except OSError:
            self.stats["misses"] += 1
            return None
        files = _decode(data)
        if files is None:
            _unlink(path)
            self.stats["misses"] += 1
            return None
        try:
            os.utime(path)
        except OSError:
            pass
        self.stats["hits"] += 1
        return files

    def put(self, namespace: str, key: str, files: Mapping[str, bytes]) -> bool:
        """Store ``files`` (name -> bytes) under ``key``, replacing any entry; then keep the
        cache under its limit. False (and one warning per process) when it cannot be
        written."""
        path = self.path(namespace, key)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_bytes(_encode(files))
            os.replace(tmp, path)
        except OSError as e:
            _unlink(tmp)
            _warn_once("write", f"kernel cache: cannot write {path.parent} ({e}); compiling "
                                "without storing the code (set TESSERA_CACHE_DIR to a "
                                "writable folder, or TESSERA_KERNEL_CACHE=0)")
            return False
        self.stats["writes"] += 1
        self.trim()
        return True

    def entries(self) -> list[tuple[Path, int, float]]:
        """Every entry: (path, bytes, last use)."""
        out: list[tuple[Path, int, float]] = []
        if not self.root.is_dir():
            return out
        for ns in os.scandir(self.root):
            if not ns.is_dir():
                continue
            for shard in os.scandir(ns.path):
                if not shard.is_dir():
                    continue
                for e in os.scandir(shard.path):
                    if e.name.startswith("."):
                        continue
                    try:
                        st = e.stat()
                    except OSError:  # deleted by another process meanwhile
                        continue
                    out.append((Path(e.path), st.st_size, st.st_mtime))
        return out

    def size(self) -> int:
        """Bytes held by the entries."""
        return sum(n for _, n, _ in self.entries())

    def trim(self) -> int:
        """Delete the least recently used entries while the cache is above its limit, down to
        80% of it; the bytes freed."""
        entries = self.entries()
        total = sum(n for _, n, _ in entries)
        if total <= self.max_bytes:
            return 0
        freed = 0
        for path, n, _ in sorted(entries, key=lambda e: e[2]):
            if total - freed <= self.max_bytes * 0.8:
                break
            if _unlink(path):
                freed += n
        return freed

    def clear(self) -> int:
        """Delete every entry; how many were deleted."""
        return sum(_unlink(p) for p, _, _ in self.entries())


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
        return True
    except OSError:
        return False


def _encode(files: Mapping[str, bytes]) -> bytes:
    payload = zlib.compress(b"".join(files.values()), 1)
    header = json.dumps({"files": [[name, len(b)] for name, b in files.items()],
                         "sha256": hashlib.sha256(payload).hexdigest(),
                         "written": time.time()}).encode()
    return _MAGIC + struct.pack("<Q", len(header)) + header + payload


def _decode(data: bytes) -> dict[str, bytes] | None:
    """An entry's files, None for bytes that are not a whole, intact entry."""
    start = len(_MAGIC) + 8
    if not data.startswith(_MAGIC) or len(data) < start:
        return None
    (n,) = struct.unpack_from("<Q", data, len(_MAGIC))
    try:
        header = json.loads(data[start:start + n])
        payload = data[start + n:]
        if hashlib.sha256(payload).hexdigest() != header["sha256"]:
            return None
        raw = zlib.decompress(payload)
        out: dict[str, bytes] = {}
        at = 0
        for name, size in header["files"]:
            out[str(name)] = raw[at:at + int(size)]
            at += int(size)
    except (ValueError, KeyError, TypeError, zlib.error):
        return None
    return out if at == len(raw) else None


def source_fingerprint(*packages: str) -> str:
    """A hash of the Python source of ``packages`` (importable names, e.g. ``"tessera"``): a
    key part for entries that depend on how the code generator works, so that any change to
    it (a new version, or an edit in a development tree) is a miss. Computed once per process
    and package set."""
    return _fingerprint(tuple(sorted(packages)))


@functools.lru_cache(maxsize=8)
def _fingerprint(packages: tuple[str, ...]) -> str:
    h = hashlib.sha256()
    for name in packages:
        spec = importlib.util.find_spec(name)
        folders = list(spec.submodule_search_locations or []) if spec else []
        if spec is not None and not folders and spec.origin:
            folders = [str(Path(spec.origin).parent)]
        for folder in folders:
            for path in sorted(Path(folder).rglob("*.py")):
                h.update(str(path.relative_to(folder)).encode())
                h.update(path.read_bytes())
    return h.hexdigest()


def default_kernel_cache() -> KernelCache | None:
    """The cache the environment asks for (module doc), None when it is off."""
    if os.environ.get("TESSERA_KERNEL_CACHE", "").strip().lower() in _OFF:
        return None
    return KernelCache(_default_root(), _max_bytes())


def cache_from_setting(setting: bool | str | os.PathLike[str] | None) -> KernelCache | None:
    """The cache for ``tessera.compile``'s ``kernel_cache`` setting: None (the environment's,
    :func:`default_kernel_cache`), False (off), True (on, in the environment's folder, even
    with ``TESSERA_KERNEL_CACHE=0``) or a folder."""
    if setting is None:
        return default_kernel_cache()
    if setting is False:
        return None
    if setting is True:
        return KernelCache(_default_root(), _max_bytes())
    if isinstance(setting, str | os.PathLike):
        return KernelCache(Path(setting), _max_bytes())
    raise TypeError(f"kernel_cache must be None, True, False or a folder, not "
                    f"{type(setting).__name__}")


def _default_root() -> Path:
    root = os.environ.get("TESSERA_CACHE_DIR")
    return Path(root) if root else Path.home() / ".cache" / "tessera" / "kernels"


def _max_bytes() -> int:
    text = os.environ.get("TESSERA_CACHE_MAX_MB", "").strip()
    if not text:
        return DEFAULT_MAX_MB << 20
    try:
        mb = float(text)
    except ValueError:
        raise CompileError(f"TESSERA_CACHE_MAX_MB must be a number of megabytes, got "
                           f"{text!r}") from None
    if mb < 0:
        raise CompileError(f"TESSERA_CACHE_MAX_MB must not be negative, got {text!r}")
    return int(mb * (1 << 20))
