"""Link object code into the process and call its kernels.

:func:`load_object` creates an MCJIT engine, adds the object file (no IR, no recompiling),
finalises it and looks up the exported functions: create -> add -> finalize -> get-function.
Each function has the signature ``void f(void **args)``; :class:`KernelFunction` calls it
through ctypes (which releases the GIL for the duration of the call).

Per-call cost (measured on the 2-core Zen 5 test machine, an empty 3-argument kernel):
``f.raw(packed)`` with a prepacked argument array about 0.2 us; ``f.call_addresses(addrs)``
about 0.6 us; ``f(arrays)`` with numpy arrays (pointer lookups, checks) about 2.6 us. A runtime
that calls the same kernel on the same buffers again and again should pack once with
:func:`pack_pointers` and call ``raw``.

A :class:`Library` owns the machine code: keep it (or any of its functions, which reference it)
alive while the code can run.
"""

from __future__ import annotations

import ctypes
import struct
from collections.abc import Sequence
from typing import Any

import llvmlite.binding as llvm
import numpy as np

from tessera.errors import CompileError, RunError
from tessera_llvm import machine, parallel

#: ``void f(void **args)``
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

Signature = list[tuple[str, int | None]]


_c_char = ctypes.c_char
_addressof = ctypes.addressof


def pack_pointers(args: Sequence[Any]) -> ctypes.Array:
    """A ``void *[n]`` holding the data pointers of ``args`` (numpy arrays, raw integer
    addresses or ctypes pointers), ready for :attr:`KernelFunction.raw`."""
    addrs = []
    for a in args:
        if isinstance(a, np.ndarray):
            try:  # 4x cheaper than a.ctypes.data, but only for writable contiguous arrays
                addrs.append(_addressof(_c_char.from_buffer(a)))
            except (TypeError, ValueError):
                addrs.append(a.ctypes.data)
        elif isinstance(a, int):
            addrs.append(a)
        elif isinstance(a, ctypes.c_void_p):
            addrs.append(a.value or 0)
        else:
            raise TypeError(f"kernel argument of type {type(a).__name__}: expected a numpy "
                            "array or an address")
    return (ctypes.c_void_p * len(addrs))(*addrs)


#: ELF e_machine values of the hosts this loader links for.
_ELF_MACHINES = {"x86_64": 62, "amd64": 62, "aarch64": 183, "arm64": 183}


def check_object(object_code: bytes) -> None:
    """Raise ValueError unless ``object_code`` is a well-formed 64-bit ELF relocatable object
    for this machine (header, section table and every section inside the data): a damaged
    object must not reach LLVM's linker, which does not check and may crash the process."""
    import platform

    size = len(object_code)
    if size < 64 or object_code[:4] != b"\x7fELF":
        raise ValueError("not an ELF object file")
    if object_code[4] != 2 or object_code[5] not in (1, 2):
        raise ValueError("not a 64-bit ELF object file")
    endian = "<" if object_code[5] == 1 else ">"
    e_type, e_machine = struct.unpack_from(endian + "HH", object_code, 0x10)
    if e_type != 1:
        raise ValueError(f"ELF type {e_type}, expected a relocatable object (1)")
    want = _ELF_MACHINES.get(platform.machine().lower())
    if want is not None and e_machine != want:
        raise ValueError(f"object code for ELF machine {e_machine}, this host is {want}")
    shoff, = struct.unpack_from(endian + "Q", object_code, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from(endian + "HHH", object_code, 0x3A)
    if shentsize != 64 or shnum == 0 or shoff + shnum * shentsize > size or shstrndx >= shnum:
        raise ValueError("the section header table is missing or outside the file")
    for i in range(shnum):
        sec = struct.unpack_from(endian + "IIQQQQIIQQ", object_code, shoff + i * shentsize)
        sh_type, offset, length = sec[1], sec[4], sec[5]
        if sh_type != 8 and offset + length > size:  # SHT_NOBITS occupies no file space
            raise ValueError(f"section {i} lies outside the file")


def undefined_symbols(object_code: bytes) -> list[str]:
    """The global symbols an ELF64 object file uses but does not define (empty for other
    formats)."""
    if object_code[:4] != b"\x7fELF" or object_code[4] != 2:
        return []
    endian = "<" if object_code[5] == 1 else ">"
    shoff, = struct.unpack_from(endian + "Q", object_code, 0x28)
    shentsize, shnum = struct.unpack_from(endian + "HH", object_code, 0x3A)
    sections = [struct.unpack_from(endian + "IIQQQQIIQQ", object_code, shoff + i * shentsize)
                for i in range(shnum)]
    names: list[str] = []
    for sec in sections:
        if sec[1] != 2:  # SHT_SYMTAB
            continue
        offset, size, link, entsize = sec[4], sec[5], sec[6], sec[9]
        str_off = sections[link][4]
        for pos in range(offset + entsize, offset + size, entsize):  # entry 0 is null
            st_name, st_info, _other, st_shndx = struct.unpack_from(endian + "IBBH",
                                                                      object_code, pos)
            if st_shndx != 0 or st_name == 0 or (st_info >> 4) not in (1, 2):  # GLOBAL, WEAK
                continue
            end = object_code.index(b"\0", str_off + st_name)
            names.append(object_code[str_off + st_name:end].decode())
    return names


def _missing_symbols(object_code: bytes) -> list[str]:
    process = ctypes.CDLL(None)
    missing = []
    for name in undefined_symbols(object_code):
        if llvm.address_of_symbol(name) is None and not hasattr(process, name):
            missing.append(name)
    return missing


class KernelFunction:
    """One exported kernel of a :class:`Library`.

    ``f(arrays)`` checks (when the signature is known) and calls with numpy arrays;
    ``f.call_addresses(addrs)`` takes integer data pointers; ``f.raw(packed)`` is the bare
    ctypes function taking a packed ``void *[]`` (see :func:`pack_pointers`)."""

    def __init__(self, library: Library, name: str, address: int,
                 signature: Signature | None = None, workspace_bytes: int = 0) -> None:
        self.library = library  # keeps the machine code alive
        self.name = name
        self.address = address
        self.signature = signature
        #: Scratch bytes the kernel needs: its last parameter (see ``Kernel.workspace_bytes``).
        self.workspace_bytes = workspace_bytes
        self.raw = KERNEL_TYPE(address)
        n = len(signature) if signature is not None else None
        self._array_type = ctypes.c_void_p * n if n is not None else None
        self._dtypes = [np.dtype(dt) for dt, _ in signature] if signature is not None else []

    def __call__(self, args: Sequence[Any]) -> None:
        """Call with numpy arrays (C-contiguous, the parameters' dtypes and sizes) or
        addresses, in parameter order (inputs, then outputs, then the workspace: when it is
        left out, a temporary one is allocated for this call)."""
        if (self.workspace_bytes and self.signature is not None
                and len(args) == len(self.signature) - 1):
            args = [*args, np.empty(self.workspace_bytes, dtype=np.uint8)]
        if self.signature is not None:
            self.check(args)
        self.raw(pack_pointers(args))

    def call_addresses(self, addresses: Sequence[int]) -> None:
        """Call with the parameters' data pointers."""
        if self._array_type is not None and len(addresses) == len(self.signature or ()):
            self.raw(self._array_type(*addresses))
        else:
            self.raw((ctypes.c_void_p * len(addresses))(*addresses))

    def check(self, args: Sequence[Any]) -> None:
        """Raise RunError when ``args`` do not match the kernel's parameters."""
        sig = self.signature or []
        if len(args) != len(sig):
            raise RunError(f"kernel {self.name} takes {len(sig)} buffers, got {len(args)}")
        for i, (a, (dtype, size), want) in enumerate(zip(args, sig, self._dtypes)):
            if not isinstance(a, np.ndarray):
                continue
            if a.dtype != want:
                raise RunError(f"kernel {self.name}: argument {i} has dtype {a.dtype}, "
                               f"expected {dtype}")
            if size is not None and a.size != size:
                raise RunError(f"kernel {self.name}: argument {i} has {a.size} elements, "
                               f"expected {size}")
            if not a.flags.c_contiguous:
                raise RunError(f"kernel {self.name}: argument {i} is not C-contiguous")

    def __repr__(self) -> str:
        return f"KernelFunction({self.name!r}, 0x{self.address:x})"


class Library:
    """Object code linked into this process by an MCJIT engine.

    The engine is created for ``mcpu`` (host by default), the object added and finalised;
    :meth:`get` returns the exported functions named in ``names``."""

    def __init__(self, object_code: bytes, names: Sequence[str], mcpu: str | None = None,
                 signatures: dict[str, Signature] | None = None,
                 workspaces: dict[str, int] | None = None) -> None:
        parallel.ensure_runtime()  # kernels link to tessera_parallel_for
        self.object_code = object_code
        self.names = list(names)
        self.signatures = dict(signatures or {})
        self.workspaces = dict(workspaces or {})
        missing = _missing_symbols(object_code)
        if missing:
            raise CompileError(f"llvm: the object code of {', '.join(self.names)} needs "
                               f"symbols this process does not have: {', '.join(missing)}")
        tm = machine.target_machine(mcpu)
        with machine.LLVM_LOCK:
            empty = llvm.parse_assembly("")
            empty.triple = tm.triple
            empty.data_layout = str(tm.target_data)
            self._engine = llvm.create_mcjit_compiler(empty, tm)
            self._object = llvm.ObjectFileRef.from_data(object_code)
            self._engine.add_object_file(self._object)
            self._engine.finalize_object()
            self._addresses = {}
            for name in self.names:
                addr = self._engine.get_function_address(name)
                if not addr:
                    raise CompileError(f"llvm: function {name!r} is not in the object code")
                self._addresses[name] = addr
        self._functions: dict[str, KernelFunction] = {}

    def get(self, name: str) -> KernelFunction:
        """The kernel ``name``."""
        fn = self._functions.get(name)
        if fn is None:
            if name not in self._addresses:
                raise KeyError(f"no function {name!r} in this library; it has "
                               f"{', '.join(self.names) or 'none'}")
            fn = KernelFunction(self, name, self._addresses[name], self.signatures.get(name),
                                self.workspaces.get(name, 0))
            self._functions[name] = fn
        return fn

    def get_raw(self, name: str) -> Any:
        """The bare ctypes function ``void f(void **)`` of ``name`` (keep the library alive)."""
        return self.get(name).raw

    def address(self, name: str) -> int:
        """The entry address of ``name``."""
        self.get(name)
        return self._addresses[name]

    def __contains__(self, name: str) -> bool:
        return name in self._addresses


def load_object(object_code: bytes, names: Sequence[str], mcpu: str | None = None,
                signatures: dict[str, Signature] | None = None,
                workspaces: dict[str, int] | None = None) -> Library:
    """Link ``object_code`` (from :func:`tessera_llvm.build.build_module`) into this process;
    ``names`` are the functions to look up, ``signatures`` optional (dtype, size) per parameter
    for argument checks, ``workspaces`` the workspace bytes of the functions that take one."""
    return Library(object_code, names, mcpu, signatures, workspaces)
