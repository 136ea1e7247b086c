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

Calling convention (:mod:`tessera_llvm.codegen`): ``args[i]`` is the data pointer of parameter
``i``; ``args[n]`` (``n`` buffer parameters) the workspace, null when the kernel needs none; and
for a kernel with run-time extents (``PrimFunc.size_vars``) ``args[n + 1]`` points to the
``int64`` sizes in ``size_vars`` order. Such a kernel has a :class:`SizeSpec` (its size
variables' names and bounds and its buffers' shapes in terms of them): ``f(arrays, sizes=...)``
takes the sizes as a sequence or a dict by name, or derives them from the arrays' shapes (a
dimension that is exactly a size variable, or a flattened buffer whose element count is linear in
the one size variable it uses), checks them against the bounds and the arrays, and packs them.
The fast path packs once and updates the sizes in place per call::

    call = f.bind(arrays, sizes=[n0])   # checks the arrays can hold the data (at most bounds)
    call.sizes[0] = n; call()           # or call([n]): writes the sizes, one ctypes call

or, at the lowest level, ``pointers, sizes = pack_pointers([*buffers, workspace_or_None],
sizes=[...])``: ``sizes`` is a writable ``int64`` array the pointer array points into (kept
alive by it); write it and call ``f.raw(pointers)``. The fast paths do not check the sizes:
each must be within its bound (memory is planned at the bound) and the buffers large enough.
"""

from __future__ import annotations

import ctypes
import math
import operator
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, overload

import llvmlite.binding as llvm
import numpy as np

from tessera.errors import CompileError, RunError
from tessera.tir.size_expr import Dim, dim_vars, eval_dim
from tessera_llvm import machine, parallel

#: ``void f(void **args)``
KERNEL_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

Signature = list[tuple[str, int | None]]


_c_char = ctypes.c_char
_addressof = ctypes.addressof


#: Sizes as a caller gives them: one int per size variable in ``size_vars`` order, or a dict
#: by size variable name (the missing ones derived from the arrays).
Sizes = Sequence[int] | Mapping[str, int]


@overload
def pack_pointers(args: Sequence[Any]) -> ctypes.Array: ...


@overload
def pack_pointers(args: Sequence[Any], sizes: Sequence[int]) -> tuple[ctypes.Array, np.ndarray]:
    ...


def pack_pointers(args: Sequence[Any], sizes: Sequence[int] | None = None
                  ) -> ctypes.Array | tuple[ctypes.Array, np.ndarray]:
    """A ``void *[n]`` holding the data pointers of ``args`` (numpy arrays, raw integer
    addresses, ctypes pointers or None for a null pointer), ready for
    :attr:`KernelFunction.raw`.

    With ``sizes`` (a symbolic kernel's size values, in ``size_vars`` order; ``args`` must then
    run up to the workspace slot, None when the kernel has no workspace), one more pointer is
    appended, to a new ``int64`` array holding them, and ``(pointers, sizes_array)`` is
    returned: write ``sizes_array`` in place to call again with other sizes (the pointer array
    keeps it alive)."""
    if sizes is None:
        return _pack(args)
    table = np.array([operator.index(v) for v in sizes], dtype=np.int64)
    packed = _pack([*args, table.ctypes.data])
    packed._tessera_sizes = table  # type: ignore[attr-defined]  # keeps the sizes alive
    return packed, table


def _pack(args: Sequence[Any]) -> ctypes.Array:
    addrs = []
    for a in args:
        if a is None:
            addrs.append(0)
        elif isinstance(a, np.ndarray):
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


@dataclass(frozen=True)
class SizeSpec:
    """The run-time extents of a symbolic kernel: the size variables' ``names`` (in
    ``size_vars`` order, the order of the sizes array), their ``bounds`` ((low, high), high None
    when unbounded) and each buffer parameter's shape in terms of them (encoded :data:`Dim` s;
    None for a shape that cannot be encoded: not checked). :meth:`to_json` /
    :meth:`from_json` store it in a kernel table."""

    names: tuple[str, ...]
    bounds: tuple[tuple[int | None, int | None], ...]
    shapes: tuple[tuple[Dim, ...] | None, ...]

    def to_json(self) -> dict[str, Any]:
        return {"names": list(self.names), "bounds": [list(b) for b in self.bounds],
                "shapes": [None if sh is None else list(sh) for sh in self.shapes]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> SizeSpec:
        return cls(tuple(data["names"]), tuple((b[0], b[1]) for b in data["bounds"]),
                   tuple(None if sh is None else tuple(sh) for sh in data["shapes"]))

    def elements(self, param: int, values: Sequence[int | None]) -> int | None:
        """Elements of buffer ``param`` for these sizes (None when not known)."""
        shape = self.shapes[param] if param < len(self.shapes) else None
        if shape is None:
            return None
        dims = [eval_dim(d, values) for d in shape]
        if any(d is None for d in dims):
            return None
        return math.prod(max(d, 0) for d in dims if d is not None)

    def resolve(self, args: Sequence[Any], sizes: Sizes | None, where: str) -> list[int]:
        """The size values for a call with ``args``: ``sizes`` (a sequence in order or a dict
        by name), the ones not given derived from the numpy arrays' shapes; checked against
        the bounds. RunError when one cannot be derived, the arrays disagree, or a value is out
        of bounds."""
        k = len(self.names)
        values: list[int | None] = [None] * k
        given = [False] * k
        if isinstance(sizes, Mapping):
            for name, v in sizes.items():
                if name not in self.names:
                    raise RunError(f"{where}: no size variable {name!r}; it has "
                                   f"{', '.join(self.names)}")
                i = self.names.index(name)
                values[i], given[i] = _size_int(v, name, where), True
        elif sizes is not None:
            if isinstance(sizes, str | bytes) or len(sizes) != k:
                raise RunError(f"{where}: expected {k} size(s) ({', '.join(self.names)}), got "
                               f"{sizes!r}")
            values = [_size_int(v, n, where) for v, n in zip(sizes, self.names)]
            given = [True] * k
        if not all(given):
            self._derive(args, values, given, where)
        missing = [n for n, v in zip(self.names, values) if v is None]
        if missing:
            raise RunError(f"{where}: cannot derive size(s) {', '.join(missing)} from the "
                           f"arguments (no array dimension is exactly it); pass sizes=")
        out = [int(v) for v in values if v is not None]
        for name, v, (lo, hi) in zip(self.names, out, self.bounds):
            if v < max(lo or 0, 0) or (hi is not None and v > hi):
                raise RunError(f"{where}: size {name}={v} is outside its bounds "
                               f"[{max(lo or 0, 0)}, {'inf' if hi is None else hi}]")
        return out

    def _derive(self, args: Sequence[Any], values: list[int | None], given: list[bool],
                where: str) -> None:
        arrays = [(i, a, sh) for i, (a, sh) in enumerate(zip(args, self.shapes))
                  if isinstance(a, np.ndarray) and sh is not None]
        # a dimension that is exactly a size variable
        for i, a, shape in arrays:
            if a.ndim != len(shape):
                continue
            for d, extent in zip(shape, a.shape):
                if isinstance(d, list | tuple) and d[0] == "var":
                    k = d[1]
                    if values[k] is None:
                        values[k] = int(extent)
                    elif values[k] != extent:
                        how = "was given as" if given[k] else "is"
                        raise RunError(f"{where}: argument {i} has shape {a.shape}, but size "
                                       f"{self.names[k]} {how} {values[k]} (the arrays "
                                       f"disagree)")
        # an element count linear in the one size variable still unknown (a flattened buffer)
        progress = True
        while progress and any(v is None for v in values):
            progress = False
            for i, a, shape in arrays:
                unknown = {k for d in shape for k in dim_vars(d) if values[k] is None}
                if len(unknown) != 1:
                    continue
                k = unknown.pop()
                v = self._solve(i, k, values, a.size)
                if v is not None:
                    values[k] = v
                    progress = True

    def _solve(self, param: int, k: int, values: list[int | None], size: int) -> int | None:
        def count(x: int) -> int | None:
            trial = list(values)
            trial[k] = x
            return self.elements(param, trial)

        c0, c1, c2 = count(0), count(1), count(2)
        if c0 is None or c1 is None or c2 is None:
            return None
        step = c1 - c0
        if step <= 0 or c2 - c1 != step or (size - c0) % step:
            return None
        x = (size - c0) // step
        return x if x >= 0 and count(x) == size else None


def _size_int(v: Any, name: str, where: str) -> int:
    try:
        return operator.index(v)
    except TypeError:
        raise RunError(f"{where}: size {name} must be an integer, got {v!r}") from None


class KernelFunction:
    """One exported kernel of a :class:`Library`.

    ``f(arrays)`` checks (when the signature is known) and calls with numpy arrays;
    ``f.call_addresses(addrs)`` takes integer data pointers; ``f.raw(packed)`` is the bare
    ctypes function taking a packed ``void *[]`` (see :func:`pack_pointers`). A kernel with
    run-time extents (``size_spec`` not None) takes ``sizes=`` in each of them (derived from
    the arrays' shapes when left out of ``f(arrays)``); :meth:`bind` packs once for calls that
    only change the sizes."""

    def __init__(self, library: Library, name: str, address: int,
                 signature: Signature | None = None, workspace_bytes: int = 0,
                 size_spec: SizeSpec | None = None) -> None:
        self.library = library  # keeps the machine code alive
        self.name = name
        self.address = address
        self.signature = signature
        #: Scratch bytes the kernel needs: its last parameter (see ``Kernel.workspace_bytes``).
        self.workspace_bytes = workspace_bytes
        #: The run-time extents of a symbolic kernel (None: a static kernel).
        self.size_spec = size_spec if size_spec is not None and size_spec.names else None
        self.raw = KERNEL_TYPE(address)
        n = len(signature) if signature is not None else None
        self._array_type = ctypes.c_void_p * n if n is not None else None
        self._dtypes = [np.dtype(dt) for dt, _ in signature] if signature is not None else []

    @property
    def is_symbolic(self) -> bool:
        """Whether the kernel takes run-time sizes."""
        return self.size_spec is not None

    @property
    def n_buffers(self) -> int | None:
        """The number of buffer parameters (without the workspace), None when unknown."""
        if self.size_spec is not None:
            return len(self.size_spec.shapes)
        if self.signature is not None:
            return len(self.signature) - (1 if self.workspace_bytes else 0)
        return None

    def _with_workspace(self, args: Sequence[Any]) -> list[Any]:
        args = list(args)
        if self.workspace_bytes and len(args) == self.n_buffers:
            args.append(np.empty(self.workspace_bytes, dtype=np.uint8))
        return args

    def _slots(self, args: Sequence[Any]) -> list[Any]:
        """``args`` up to and including the workspace slot (None when there is none)."""
        args = list(args)
        n = self.n_buffers
        if n is not None and len(args) == n:
            args.append(None)
        if n is not None and len(args) != n + 1:
            raise RunError(f"kernel {self.name} takes {n} buffers"
                           f"{' and a workspace' if self.workspace_bytes else ''}, got "
                           f"{len(args)} arguments")
        return args

    def resolve_sizes(self, args: Sequence[Any], sizes: Sizes | None = None) -> list[int]:
        """The size values of a call with ``args`` (see :meth:`SizeSpec.resolve`); [] for a
        static kernel (RunError when it is given sizes)."""
        if self.size_spec is None:
            if sizes:
                raise RunError(f"kernel {self.name} has no run-time sizes, got {sizes!r}")
            return []
        return self.size_spec.resolve(args, sizes, f"kernel {self.name}")

    def _check_static(self, args: Sequence[Any], sizes: Sizes | None) -> None:
        """The checks of a call to a kernel without run-time sizes."""
        if sizes:
            raise RunError(f"kernel {self.name} has no run-time sizes, got {sizes!r}")
        if self.signature is not None:
            self.check(args)

    def __call__(self, args: Sequence[Any], sizes: Sizes | None = None) -> None:
        """Call with numpy arrays (C-contiguous, the parameters' dtypes and sizes) or
        addresses, in parameter order (inputs, then outputs, then the workspace: when it is
        left out, a temporary one is allocated for this call). A symbolic kernel takes
        ``sizes`` (in ``size_vars`` order, or a dict by name); those not given are derived
        from the arrays' shapes, and the arrays must have the sizes' element counts."""
        args = self._with_workspace(args)
        if self.size_spec is None:
            self._check_static(args, sizes)
            self.raw(pack_pointers(args))
            return
        values = self.resolve_sizes(args, sizes)
        self.check(args, values)
        packed, _table = pack_pointers(self._slots(args), sizes=values)
        self.raw(packed)

    def bind(self, args: Sequence[Any], sizes: Sizes | None = None) -> BoundCall:
        """``args`` checked and packed once (with a workspace allocated here when left out),
        for calls that change only the sizes (:class:`BoundCall`): the arrays must hold at
        least what ``sizes`` (derived from their shapes when left out) needs; to call later
        with larger sizes, bind arrays allocated for the largest (the bounds)."""
        args = self._with_workspace(args)
        if self.size_spec is None:
            self._check_static(args, sizes)
            return BoundCall(self, args, pack_pointers(args), None)
        values = self.resolve_sizes(args, sizes)
        self.check(args, values, exact=False)
        packed, table = pack_pointers(self._slots(args), sizes=values)
        return BoundCall(self, args, packed, table)

    def pack_shared(self, args: Sequence[Any], sizes: np.ndarray) -> ctypes.Array:
        """``args`` packed with a pointer to ``sizes`` itself: a caller-owned ``int64`` array
        in ``size_vars`` order that the caller rewrites between calls (one array may serve
        several kernels taking the same sizes). The buffers must hold what the largest sizes
        need: they are checked at the upper bounds (at the values ``sizes`` holds now for a
        size without one); the caller keeps each value within its bounds."""
        spec = self.size_spec
        if spec is None:
            raise RunError(f"kernel {self.name} has no run-time sizes")
        if not (isinstance(sizes, np.ndarray) and sizes.dtype == np.int64
                and sizes.shape == (len(spec.names),) and sizes.flags.c_contiguous
                and sizes.flags.writeable):
            raise RunError(f"kernel {self.name}: the shared sizes must be a writable int64 "
                           f"array of {len(spec.names)} values ({', '.join(spec.names)})")
        values = [int(v) if hi is None else hi for v, (_, hi) in zip(sizes, spec.bounds)]
        self.check(args, values, exact=False)
        packed = _pack([*self._slots(args), sizes.ctypes.data])
        packed._tessera_sizes = sizes  # type: ignore[attr-defined]  # keeps the sizes alive
        return packed

    def call_addresses(self, addresses: Sequence[int], sizes: Sizes | None = None) -> None:
        """Call with the parameters' data pointers (and, for a symbolic kernel, its sizes:
        required, they cannot be derived from addresses)."""
        if self.size_spec is not None:
            values = self.resolve_sizes(addresses, sizes)
            packed, _table = pack_pointers(self._slots(addresses), sizes=values)
            self.raw(packed)
        elif sizes:
            raise RunError(f"kernel {self.name} has no run-time sizes, got {sizes!r}")
        elif self._array_type is not None and len(addresses) == len(self.signature or ()):
            self.raw(self._array_type(*addresses))
        else:
            self.raw((ctypes.c_void_p * len(addresses))(*addresses))

    def check(self, args: Sequence[Any], sizes: Sequence[int] | None = None,
              exact: bool = True) -> None:
        """Raise RunError when ``args`` do not match the kernel's parameters: count, dtypes,
        contiguity, element counts (of a symbolic buffer, those of ``sizes``: equal, or with
        ``exact=False`` at least that many). A symbolic kernel must be checked with its sizes:
        arguments packed without them would leave it reading sizes from nowhere."""
        sig = self.signature or []
        spec = self.size_spec
        if spec is not None and sizes is None:
            raise RunError(f"kernel {self.name} takes run-time sizes "
                           f"({', '.join(spec.names)}): call it with f(arrays, sizes=...) or "
                           f"f.bind(arrays, sizes=...), which pass them after the workspace")
        if self.signature is not None and len(args) != len(sig):
            raise RunError(f"kernel {self.name} takes {len(sig)} buffers, got {len(args)}")
        for i, a in enumerate(args):
            if not isinstance(a, np.ndarray):
                continue
            if i < len(sig):
                dtype, size = sig[i]
                if a.dtype != self._dtypes[i]:
                    raise RunError(f"kernel {self.name}: argument {i} has dtype {a.dtype}, "
                                   f"expected {dtype}")
            else:
                size = None
            if size is None and spec is not None and sizes is not None:
                size = spec.elements(i, sizes)
                if size is not None and not exact and a.size >= size:
                    size = None
            if size is not None and a.size != size:
                what = "at least " if not exact else ""
                for_sizes = "" if spec is None or sizes is None or i >= len(spec.shapes) else \
                    " for sizes " + ", ".join(f"{n}={v}" for n, v in zip(spec.names, sizes))
                raise RunError(f"kernel {self.name}: argument {i} has {a.size} elements, "
                               f"expected {what}{size}{for_sizes}")
            if not a.flags.c_contiguous:
                raise RunError(f"kernel {self.name}: argument {i} is not C-contiguous")

    def __repr__(self) -> str:
        return f"KernelFunction({self.name!r}, 0x{self.address:x})"


class BoundCall:
    """A kernel with its arguments packed once (:meth:`KernelFunction.bind`): ``call()`` runs
    it, ``call(sizes)`` first writes new sizes (in ``size_vars`` order) into :attr:`sizes`, the
    writable ``int64`` array the kernel reads them from (None for a static kernel). No checks
    per call: sizes must be within their bounds and the bound buffers large enough."""

    def __init__(self, fn: KernelFunction, args: list[Any], packed: ctypes.Array,
                 sizes: np.ndarray | None) -> None:
        self.fn = fn
        self.args = args  # the arrays stay referenced while the pointers are used
        self.pointers = packed
        self.sizes = sizes
        self._raw = fn.raw

    def __call__(self, sizes: Sequence[int] | None = None) -> None:
        if sizes is not None:
            if self.sizes is None:
                raise RunError(f"kernel {self.fn.name} has no run-time sizes")
            self.sizes[:] = sizes
        self._raw(self.pointers)


class Library:
    """Object code linked into this process by an MCJIT engine.

    The engine is created for ``mcpu`` (host by default), the object added and finalised;
    :meth:`get` returns the exported functions named in ``names``."""

    def __init__(self, object_code: bytes, names: Sequence[str], mcpu: str | None = None,
                 signatures: dict[str, Signature] | None = None,
                 workspaces: dict[str, int] | None = None,
                 sizes: dict[str, SizeSpec] | None = None) -> None:
        parallel.ensure_runtime()  # kernels link to tessera_parallel_for
        self.object_code = object_code
        self.names = list(names)
        self.signatures = dict(signatures or {})
        self.workspaces = dict(workspaces or {})
        self.sizes = dict(sizes or {})
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
                                self.workspaces.get(name, 0), self.sizes.get(name))
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
                workspaces: dict[str, int] | None = None,
                sizes: dict[str, SizeSpec] | None = None) -> Library:
    """Link ``object_code`` (from :func:`tessera_llvm.build.build_module`) into this process;
    ``names`` are the functions to look up, ``signatures`` optional (dtype, size) per parameter
    for argument checks (size None: a symbolic buffer), ``workspaces`` the workspace bytes of
    the functions that take one, ``sizes`` the :class:`SizeSpec` of those with run-time
    extents (a symbolic kernel without one must be called with ``raw``)."""
    return Library(object_code, names, mcpu, signatures, workspaces, sizes)
