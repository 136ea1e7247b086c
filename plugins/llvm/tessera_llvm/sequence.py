"""Run a whole compiled region's kernels in one native call.

The runtime calls kernels one by one from Python; each call costs a few microseconds of
interpreter and ctypes work, which adds up for models with many small kernels (about 4 us per
kernel on the 2-core Zen 5 test machine: 0.3 ms of ShuffleNet's 4.6 ms). A
:class:`KernelSequence` binds every kernel's buffers once and runs them all with a single ctypes
call into ``tessera_run_sequence``::

    void tessera_run_sequence(i64 n, void (**fns)(void **), void ***args)
    {  for (i64 i = 0; i < n; i++) fns[i](args[i]);  }

which is written here in LLVM IR and JIT-compiled once per process. The backend hands the runtime
:func:`bind_sequence` through ``CompiledRegion.bind_sequence``; profiles still call the kernels
one at a time.

A kernel with run-time extents (:attr:`KernelFunction.size_spec`) is bound with its sizes, given
per kernel or derived from its arrays' shapes; its packed arguments point to an ``int64`` sizes
array (:attr:`KernelSequence.size_arrays`) that can be rewritten in place between runs.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from llvmlite import ir

from tessera.errors import RunError
from tessera_llvm import machine
from tessera_llvm.loader import KernelFunction, Sizes, pack_pointers
from tessera_llvm.parallel import adapt_to_load

_I64 = ir.IntType(64)
_PTR = ir.PointerType()
_KERNEL_TY = ir.FunctionType(ir.VoidType(), [_PTR])
_RUNNER_TYPE = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p)


def _runner_ir(triple: str, data_layout: str) -> ir.Module:
    module = ir.Module(name="tessera_sequence")
    module.triple = triple
    module.data_layout = data_layout
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [_I64, _PTR, _PTR]),
                     "tessera_run_sequence")
    fn.attributes.add("nounwind")
    n, fns, args = fn.args
    entry, loop, done = (fn.append_basic_block(s) for s in ("entry", "loop", "done"))
    b = ir.IRBuilder(entry)
    b.cbranch(b.icmp_signed(">", n, ir.Constant(_I64, 0)), loop, done)
    b.position_at_end(loop)
    i = b.phi(_I64)
    i.add_incoming(ir.Constant(_I64, 0), entry)
    kernel = b.load(b.gep(fns, [i], source_etype=_PTR), typ=_KERNEL_TY.as_pointer())
    b.call(kernel, [b.load(b.gep(args, [i], source_etype=_PTR), typ=_PTR)])
    nxt = b.add(i, ir.Constant(_I64, 1))
    i.add_incoming(nxt, loop)
    b.cbranch(b.icmp_signed("<", nxt, n), loop, done)
    b.position_at_end(done)
    b.ret_void()
    return module


#: The ctypes function ``tessera_run_sequence`` (compiled on first use, never freed).
runner = machine.jit_runner(lambda tm: _runner_ir(tm.triple, str(tm.target_data)),
                            "tessera_run_sequence", _RUNNER_TYPE)


class KernelSequence:
    """Kernels bound to their buffers, run in order by one native call.

    The buffers (numpy arrays or addresses) are checked against each kernel's parameters and
    their pointers packed once; the arrays stay referenced so their memory outlives the
    sequence. ``sizes`` gives each symbolic kernel's sizes (None, or None for a kernel:
    derived from its arrays); or ``shared_sizes``, one caller-owned ``int64`` array every
    symbolic kernel reads its sizes from (they must take the same size variables in the same
    order; see :meth:`KernelFunction.pack_shared`). :attr:`size_arrays` holds, per kernel, the
    writable ``int64`` array its sizes are read from (None for a static kernel)."""

    def __init__(self, kernels: Sequence[KernelFunction],
                 buffers: Sequence[Sequence[Any]],
                 sizes: Sequence[Sizes | None] | None = None,
                 shared_sizes: np.ndarray | None = None) -> None:
        if len(kernels) != len(buffers):
            raise RunError(f"a kernel sequence of {len(kernels)} kernels got "
                           f"{len(buffers)} buffer lists")
        if sizes is not None and len(sizes) != len(kernels):
            raise RunError(f"a kernel sequence of {len(kernels)} kernels got {len(sizes)} "
                           f"size lists")
        packed = []
        bound_calls = []  # they keep what bind allocated (a workspace) alive
        self.size_arrays: list[Any] = []
        for k, (fn, args) in enumerate(zip(kernels, buffers)):
            args = list(args)
            given = sizes[k] if sizes is not None else None
            if fn.is_symbolic and shared_sizes is not None and given is None:
                packed.append(fn.pack_shared(args, shared_sizes))
                self.size_arrays.append(shared_sizes)
                continue
            if fn.is_symbolic:
                bound = fn.bind(args, given)
                bound_calls.append(bound)
                packed.append(bound.pointers)
                self.size_arrays.append(bound.sizes)
                continue
            if given:
                raise RunError(f"kernel {fn.name} has no run-time sizes, got {given!r}")
            if fn.signature is not None:
                fn.check(args)
            packed.append(pack_pointers(args))
            self.size_arrays.append(None)
        self.kernels = list(kernels)
        self._keep = [list(a) for a in buffers], packed, bound_calls
        n = len(packed)
        self._n = n
        self._fns = (ctypes.c_void_p * max(n, 1))(*[k.address for k in kernels])
        self._args = (ctypes.c_void_p * max(n, 1))(*[ctypes.addressof(p) for p in packed])
        self._run = runner()

    def __len__(self) -> int:
        return self._n

    def __call__(self) -> None:
        adapt_to_load()
        self._run(self._n, self._fns, self._args)


def make_binder(kernels: Sequence[KernelFunction]
                ) -> Callable[[list[tuple[list[Any], list[Any]]]], Callable[[], None]]:
    """The ``CompiledRegion.bind_sequence`` of a region whose kernels are ``kernels``: given
    each kernel's (inputs, outputs), in order, a call that runs them all (skipping the kernels
    given None: their work is done by the runtime). A region with run-time sizes is bound
    with its sizes array too, which every kernel reads (``CompiledRegion.size_names``)."""
    kernels = list(kernels)

    def bind(calls: list[tuple[list[Any], list[Any]] | None],
             sizes: np.ndarray | None = None) -> Callable[[], None]:
        if len(calls) != len(kernels):
            raise RunError(f"a region of {len(kernels)} kernels got {len(calls)} buffer lists")
        kept = [(k, list(c[0]) + list(c[1])) for k, c in zip(kernels, calls) if c is not None]
        return KernelSequence([k for k, _ in kept], [b for _, b in kept], shared_sizes=sizes)

    return bind
