"""Checks a GPU kernel's loop nest against the device's limits before code is generated.

A GPU schedule binds loops to thread axes (``blockIdx.x``, ``threadIdx.y``, ...), keeps
stages in ``shared`` (per block) or ``local`` (per thread, registers) memory and separates
phases with barriers. What the GPU would reject at launch, or silently get wrong, is caught
here instead, with a :class:`~tessera.errors.CompileError` that says which limit:

* thread axes: known tags, constant extents starting at 0, one extent per tag in a kernel,
  no tag nested inside itself; the block's thread count and each grid and block dimension
  within the device's limits (:class:`GPULimits`);
* memory: ``shared`` allocations of constant size that fit the block's shared memory,
  ``local`` ones that fit the per-thread register budget (a register tile that does not fit
  spills to slow local memory), no ``global`` allocation inside a kernel (kernels ask the
  runtime for workspace instead);
* barriers: inside the thread-bound loops, and never under a condition or a loop bound that
  depends on a thread index (threads that skip a barrier others wait at deadlock the block);
* a kernel with no thread-bound loop at all (it would run on one thread).

:func:`verify_gpu` returns the kernel's :class:`LaunchConfig` (grid, block, shared bytes), which
the code generator and the runtime's launch use.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.errors import CompileError
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.arith import uses_var
from tessera.tir.buffer import Buffer

BLOCK_TAGS = ("blockIdx.x", "blockIdx.y", "blockIdx.z")
THREAD_TAGS = ("threadIdx.x", "threadIdx.y", "threadIdx.z")


@dataclass(frozen=True)
class GPULimits:
    """What one device allows a kernel (CUDA's limits for compute capability 7.0 to 9.0 by
    default). ``max_shared_bytes`` is the static ``__shared__`` limit of every CUDA device
    (48 KiB; more needs dynamic shared memory and an opt-in); ``max_local_bytes`` is the
    register tile a thread may hold (half of its 255 32-bit registers by default, leaving the
    rest for addresses, operands and the compiler)."""

    max_threads_per_block: int = 1024
    max_block: tuple[int, int, int] = (1024, 1024, 64)
    max_grid: tuple[int, int, int] = (2**31 - 1, 65535, 65535)
    max_shared_bytes: int = 48 * 1024
    max_local_bytes: int = 128 * 4
    warp_size: int = 32


@dataclass(frozen=True)
class LaunchConfig:
    """How a kernel is launched: grid and block dimensions (x, y, z) and its static shared
    memory and per-thread local bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int
    local_bytes: int

    @property
    def threads_per_block(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


def _const(e: E.PrimExpr) -> int | None:
    return e.value if isinstance(e, E.IntImm) else None


def _bytes(buffer: Buffer) -> int | None:
    size = 1
    for d in buffer.shape:
        c = _const(d)
        if c is None:
            return None
        size *= c
    return size * (1 if buffer.dtype == "bool" else np.dtype(buffer.dtype).itemsize)


class _GPUVerifier:
    def __init__(self, func: S.PrimFunc, limits: GPULimits) -> None:
        self.func = func
        self.limits = limits
        self.extents: dict[str, int] = {}
        self.bound: list[str] = []              # thread tags enclosing the current statement
        self.thread_vars: set[E.Var] = set()    # loop variables bound to threadIdx.*
        self.divergent: list[str] = []          # why the current statement may be divergent
        self.shared = 0
        self.local = 0

    def fail(self, message: str) -> None:
        raise CompileError(f"GPU kernel {self.func.name}: {message}")

    def depends_on_thread(self, e: E.PrimExpr | None) -> bool:
        return e is not None and any(uses_var(e, v) for v in self.thread_vars)

    def stmt(self, s: S.Stmt | None) -> None:
        if s is None:
            return
        if isinstance(s, S.SeqStmt):
            for x in s.seq:
                self.stmt(x)
        elif isinstance(s, S.For):
            self.loop(s)
        elif isinstance(s, S.IfThenElse):
            divergent = self.depends_on_thread(s.condition)
            if divergent:
                self.divergent.append(f"the condition {s.condition}")
            self.stmt(s.then_case)
            self.stmt(s.else_case)
            if divergent:
                self.divergent.pop()
        elif isinstance(s, S.LetStmt):
            if self.depends_on_thread(s.value):
                self.thread_vars.add(s.var)
            self.stmt(s.body)
        elif isinstance(s, S.Allocate):
            self.allocate(s)
        elif isinstance(s, S.Barrier):
            if not any(t in THREAD_TAGS for t in self.bound):
                self.fail("a barrier outside the threadIdx-bound loops synchronizes nothing")
            if self.divergent:
                self.fail(f"a barrier under {self.divergent[-1]}, which depends on the thread "
                          f"index: threads that skip it deadlock the block")

    def loop(self, s: S.For) -> None:
        if s.kind != S.ForKind.THREAD_BINDING:
            divergent = self.depends_on_thread(s.min) or self.depends_on_thread(s.extent)
            if divergent:
                self.divergent.append(f"the bounds of loop {s.loop_var.name}")
            self.stmt(s.body)
            if divergent:
                self.divergent.pop()
            return
        tag = s.thread_tag
        if tag not in BLOCK_TAGS + THREAD_TAGS:
            self.fail(f"loop {s.loop_var.name} is bound to {tag!r}; expected one of "
                      f"{', '.join(BLOCK_TAGS + THREAD_TAGS)}")
        if tag in self.bound:
            self.fail(f"loop {s.loop_var.name} is bound to {tag} inside a loop already bound "
                      f"to it")
        extent, start = _const(s.extent), _const(s.min)
        if extent is None or start != 0:
            self.fail(f"loop {s.loop_var.name} bound to {tag} must run from 0 over a constant "
                      f"extent, not range({s.min}, {s.min} + {s.extent})")
        assert extent is not None
        known = self.extents.setdefault(tag, extent)
        if known != extent:
            self.fail(f"{tag} has extent {extent} at loop {s.loop_var.name} but {known} "
                      f"elsewhere; a kernel has one launch shape")
        self.bound.append(tag)
        if tag in THREAD_TAGS:
            self.thread_vars.add(s.loop_var)
        try:
            self.stmt(s.body)
        finally:
            self.bound.pop()

    def allocate(self, s: S.Allocate) -> None:
        b = s.buffer
        nbytes = _bytes(b)
        if b.scope in ("shared", "local") and nbytes is None:
            self.fail(f"{b.scope} buffer {b.name} has no constant size ({list(b.shape)})")
        if b.scope == "shared":
            self.shared += nbytes or 0
            if self.shared > self.limits.max_shared_bytes:
                self.fail(f"shared memory {self.shared} bytes (with {b.name}) exceeds the "
                          f"block's {self.limits.max_shared_bytes}")
        elif b.scope == "local":
            self.local += nbytes or 0
            if self.local > self.limits.max_local_bytes:
                self.fail(f"local (register) buffers {self.local} bytes per thread (with "
                          f"{b.name}) exceed the register budget of "
                          f"{self.limits.max_local_bytes}; use a smaller register tile")
        else:
            self.fail(f"buffer {b.name} is allocated in {b.scope!r} memory inside a kernel; "
                      f"a kernel's scratch in global memory is workspace from the runtime")
        self.stmt(s.body)

    def launch(self) -> LaunchConfig:
        if not self.extents:
            self.fail("no loop is bound to a GPU thread axis; it would run on one thread")
        grid = tuple(self.extents.get(t, 1) for t in BLOCK_TAGS)
        block = tuple(self.extents.get(t, 1) for t in THREAD_TAGS)
        lim = self.limits
        for tag, n, top in zip(THREAD_TAGS, block, lim.max_block):
            if n > top:
                self.fail(f"{tag} extent {n} exceeds the device's {top}")
        for tag, n, top in zip(BLOCK_TAGS, grid, lim.max_grid):
            if n > top:
                self.fail(f"{tag} extent {n} exceeds the device's {top}")
        threads = block[0] * block[1] * block[2]
        if threads > lim.max_threads_per_block:
            self.fail(f"{threads} threads per block ({' x '.join(map(str, block))}) exceed "
                      f"the device's {lim.max_threads_per_block}")
        return LaunchConfig(grid, block, self.shared, self.local)  # type: ignore[arg-type]


def verify_gpu(func: S.PrimFunc, limits: GPULimits | None = None) -> LaunchConfig:
    """Check ``func`` as one GPU kernel (see the module docstring); its launch shape."""
    v = _GPUVerifier(func, limits or GPULimits())
    v.stmt(func.body)
    return v.launch()


def verify_gpu_pass(limits: GPULimits | None = None) -> Callable[[S.PrimFunc], S.PrimFunc]:
    """A pipeline pass running :func:`verify_gpu`; it records the launch shape in the
    function's ``attrs["launch"]``."""

    def run(func: S.PrimFunc) -> S.PrimFunc:
        out = func.with_body(func.body)
        out.attrs["launch"] = verify_gpu(func, limits)
        return out

    return run
