"""The native thread pool that parallel loops run on.

Kernels launch a parallel loop with ``tessera_parallel_for(fn, closure, extent, grain)``, where
``fn`` is ``void fn(i64 begin, i64 end, ptr closure)``. The pool splits ``[0, extent)`` into
contiguous chunks of near-equal size, at most one per thread and at least ``grain`` iterations
each; the calling thread runs chunk 0, workers the others, and the call returns when all are
done.

The pool is native code, written here in LLVM IR with ``llvmlite.ir`` and JIT-compiled once per
process; its symbols are registered with ``llvmlite.binding.add_symbol`` so the object code of
kernels links to it. Workers are POSIX threads created on first use. Each has a cache-line slot
holding a job sequence number: the caller publishes the job and bumps the sequence numbers of
the workers it needs; a worker spins on its slot with ``pause`` for a while
(:func:`set_spin_count`) and then sleeps on it with ``futex``; the caller wakes sleeping workers
and waits for a pending counter the same way (spin, then futex). Workers block all signals.

- Nesting and concurrency: a launch while the pool is busy (from inside a worker, or from a
  second Python thread) runs its whole range serially in the calling thread.
- Thread count: ``TESSERA_NUM_THREADS``, else ``os.cpu_count()``; :func:`set_num_threads`.
- Exit: workers are never joined; the process exits with them asleep or spinning, and the JIT
  memory holding the pool is never freed.
- ``fork``: the child resets the pool (its workers did not survive the fork) and starts new ones.

Launch cost of an empty body (:func:`measure_launch_overhead`, 2-core Zen 5 VM): 0.15-0.9 us
with 2 threads and the workers awake; about 50 us when they sleep (futex wake-up in this VM);
16 us with 4 threads on the 2 cores (oversubscribed, spinning threads yield).
"""

from __future__ import annotations

import ctypes
import os
import platform
import threading
import time
from collections.abc import Callable

import llvmlite.binding as llvm
from llvmlite import ir

from tessera_llvm import build

#: Most worker threads the pool starts (the caller is one more thread).
MAX_WORKERS = 255
#: Default spin iterations (each one ``pause``, about 25 ns on Zen 5) before a waiting thread
#: sleeps: about 100 us, longer than the Python overhead between two kernel launches.
DEFAULT_SPIN = 4000
#: A spinning thread calls ``sched_yield`` every this many iterations, so that when there are
#: more threads than free cores a descheduled worker gets the core back quickly.
YIELD_EVERY = 256

_SLOT_WORDS = 16  # 64-byte slots: [0] sequence number, [1] sleeping flag
_FUTEX_WAIT_PRIVATE = 128
_FUTEX_WAKE_PRIVATE = 129
_SYS_FUTEX = {"x86_64": 202, "amd64": 202, "aarch64": 98, "arm64": 98, "ppc64le": 221}

I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
VOID = ir.VoidType()
BODY_TY = ir.FunctionType(VOID, [I64, I64, PTR])
#: A pointer to a loop body. llvmlite needs the typed form to call through it; LLVM reads
#: ``void (i64, i64, ptr)*`` as a plain ``ptr``.
BODY_PTR = BODY_TY.as_pointer()


class _PoolIR:
    """Builds the pool module. Every function and global is named ``tessera_*``."""

    def __init__(self, triple: str, data_layout: str, machine: str) -> None:
        self.module = ir.Module(name="tessera_pool")
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.machine = machine
        self._allocas: dict[ir.Function, tuple[ir.IRBuilder, ir.Block]] = {}
        m = self.module
        self.nthreads = self._global("tessera_pool_nthreads", I32, 1)
        self.started = self._global("tessera_pool_started", I32, 0)
        self.busy = self._global("tessera_pool_busy", I32, 0)
        self.spin = self._global("tessera_pool_spin", I32, DEFAULT_SPIN)
        self.pending = self._global("tessera_pool_pending", I32, 0)
        self.caller_sleeping = self._global("tessera_pool_caller_sleeping", I32, 0)
        self.job_fn = self._global("tessera_pool_job_fn", PTR, None)
        self.job_closure = self._global("tessera_pool_job_closure", PTR, None)
        self.job_extent = self._global("tessera_pool_job_extent", I64, 0)
        self.job_chunks = self._global("tessera_pool_job_chunks", I64, 1)
        self.slot_ty = ir.ArrayType(I32, _SLOT_WORDS)
        self.slots_ty = ir.ArrayType(self.slot_ty, MAX_WORKERS)
        self.slots = ir.GlobalVariable(m, self.slots_ty, "tessera_pool_slots")
        self.slots.initializer = ir.Constant(self.slots_ty, None)
        self.slots.align = 64
        self.slots.linkage = "internal"
        opaque(self.slots)
        sys_futex = _SYS_FUTEX.get(machine)
        if sys_futex is None:
            raise RuntimeError(f"tessera-llvm's thread pool does not know the futex system call "
                               f"number on {machine!r}")
        self.sys_futex = sys_futex
        self.syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.pthread_create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]),
                                          "pthread_create")
        self.sched_yield = ir.Function(m, ir.FunctionType(I32, []), "sched_yield")
        self.sigfillset = ir.Function(m, ir.FunctionType(I32, [PTR]), "sigfillset")
        self.pthread_sigmask = ir.Function(m, ir.FunctionType(I32, [I32, PTR, PTR]),
                                           "pthread_sigmask")

    def _global(self, name: str, ty: ir.Type, init: int | None) -> ir.GlobalVariable:
        g = ir.GlobalVariable(self.module, ty, name)
        g.initializer = ir.Constant(ty, init)
        g.linkage = "internal"
        g.align = 64
        return opaque(g)

    def _function(self, name: str, fnty: ir.FunctionType,
                  internal: bool = True) -> tuple[ir.Function, ir.IRBuilder]:
        fn = ir.Function(self.module, fnty, name)
        if internal:
            fn.linkage = "internal"
        fn.attributes.add("nounwind")
        entry = fn.append_basic_block("entry")
        start = fn.append_basic_block("start")
        self._allocas[fn] = (ir.IRBuilder(entry), start)
        return fn, ir.IRBuilder(start)

    def alloca(self, fn: ir.Function, ty: ir.Type) -> ir.Value:
        """A stack slot of ``ty`` in ``fn``'s entry block (so loops do not grow the stack)."""
        return opaque(self._allocas[fn][0].alloca(ty))

    # -- primitives ---------------------------------------------------------------------------
    @staticmethod
    def load(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type, order: str = "seq_cst") -> ir.Value:
        """An atomic load."""
        return b.load_atomic(ptr, order, _size(ty), typ=ty)

    @staticmethod
    def store(b: ir.IRBuilder, value: ir.Value, ptr: ir.Value, order: str = "seq_cst") -> None:
        """An atomic store, written as an exchange (llvmlite's ``store_atomic`` needs typed
        pointers; on x86 a sequentially consistent store is an ``xchg`` anyway)."""
        b.atomic_rmw("xchg", ptr, value, order)

    def pause(self, b: ir.IRBuilder) -> None:
        """A spin-wait hint (``pause`` on x86, ``yield`` on ARM)."""
        if self.machine in ("x86_64", "amd64"):
            fn = self.module.globals.get("llvm.x86.sse2.pause")
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(VOID, []), "llvm.x86.sse2.pause")
            b.call(fn, [])
        elif self.machine in ("aarch64", "arm64"):
            b.asm(ir.FunctionType(VOID, []), "yield", "~{memory}", [], side_effect=True)

    def futex(self, b: ir.IRBuilder, addr: ir.Value, op: int, value: ir.Value) -> None:
        """``syscall(SYS_futex, addr, op, value, NULL)`` (every vararg passed as 64 bits)."""
        b.call(self.syscall, [ir.Constant(I64, self.sys_futex), addr, ir.Constant(I64, op),
                              b.zext(value, I64), ir.Constant(PTR, None)])

    def slot_word(self, b: ir.IRBuilder, index: ir.Value, word: int) -> ir.Value:
        """The address of word ``word`` of worker slot ``index``."""
        return b.gep(self.slots, [ir.Constant(I64, 0), index, ir.Constant(I64, word)],
                     inbounds=True, source_etype=self.slots_ty)

    def spin_then(self, b: ir.IRBuilder, fn: ir.Function,
                  ready: Callable[[ir.IRBuilder], ir.Value],
                  sleep: Callable[[ir.IRBuilder], None]) -> None:
        """Emit: loop { if ready(): break; if spins < limit: pause; else sleep() }; the builder
        ends in the block after the loop."""
        counter = self.alloca(fn, I32)
        b.store(ir.Constant(I32, 0), counter)
        check = fn.append_basic_block("check")
        spin = fn.append_basic_block("spin")
        do_pause = fn.append_basic_block("pause")
        do_sleep = fn.append_basic_block("sleep")
        done = fn.append_basic_block("done")
        b.branch(check)
        b.position_at_end(check)
        b.cbranch(ready(b), done, spin)
        b.position_at_end(spin)
        n = b.load(counter, typ=I32)
        limit = b.load(self.spin, typ=I32)
        b.cbranch(b.icmp_signed("<", n, limit), do_pause, do_sleep)
        b.position_at_end(do_pause)
        self.pause(b)
        every = ir.Constant(I32, YIELD_EVERY - 1)
        with b.if_then(b.icmp_unsigned("==", b.and_(n, every), every)):
            b.call(self.sched_yield, [])
        b.store(b.add(n, ir.Constant(I32, 1)), counter)
        b.branch(check)
        b.position_at_end(do_sleep)
        sleep(b)
        b.branch(check)
        b.position_at_end(done)

    # -- the pool -------------------------------------------------------------------------------
    def build(self) -> ir.Module:
        run_chunk = self._run_chunk()
        worker = self._worker(run_chunk)
        self._parallel_for(run_chunk, worker)
        self._accessors()
        self._half_conversions()
        for builder, start in self._allocas.values():
            builder.branch(start)
        return self.module

    def _run_chunk(self) -> ir.Function:
        """``run_chunk(k)``: run chunk k of the published job."""
        fn, b = self._function("tessera_pool_run_chunk", ir.FunctionType(VOID, [I64]))
        k = fn.args[0]
        body = b.load(self.job_fn, typ=BODY_PTR)
        closure = b.load(self.job_closure, typ=PTR)
        extent = b.load(self.job_extent, typ=I64)
        n = b.load(self.job_chunks, typ=I64)
        base = b.udiv(extent, n)
        rem = b.urem(extent, n)
        lt = b.icmp_unsigned("<", k, rem)
        begin = b.add(b.mul(k, base), b.select(lt, k, rem))
        end = b.add(b.add(begin, base), b.zext(lt, I64))
        b.call(body, [begin, end, closure])
        b.ret_void()
        return fn

    def _worker(self, run_chunk: ir.Function) -> ir.Function:
        """``void *worker(void *id)``: wait for jobs on slot ``id - 1`` forever."""
        fn, b = self._function("tessera_pool_worker", ir.FunctionType(PTR, [PTR]))
        wid = b.ptrtoint(fn.args[0], I64)
        index = b.sub(wid, ir.Constant(I64, 1))
        seq_ptr = self.slot_word(b, index, 0)
        sleep_ptr = self.slot_word(b, index, 1)
        sigset = self.alloca(fn, ir.ArrayType(I8, 128))
        b.call(self.sigfillset, [sigset])
        b.call(self.pthread_sigmask, [ir.Constant(I32, 0), sigset, ir.Constant(PTR, None)])
        seen = self.alloca(fn, I32)
        b.store(ir.Constant(I32, 0), seen)
        loop = fn.append_basic_block("loop")
        b.branch(loop)
        b.position_at_end(loop)

        def ready(bb: ir.IRBuilder) -> ir.Value:
            cur = self.load(bb, seq_ptr, I32, "acquire")
            return bb.icmp_unsigned("!=", cur, bb.load(seen, typ=I32))

        def sleep(bb: ir.IRBuilder) -> None:
            self.store(bb, ir.Constant(I32, 1), sleep_ptr)
            old = bb.load(seen, typ=I32)
            cur = self.load(bb, seq_ptr, I32)
            with bb.if_then(bb.icmp_unsigned("==", cur, old)):
                self.futex(bb, seq_ptr, _FUTEX_WAIT_PRIVATE, old)
            self.store(bb, ir.Constant(I32, 0), sleep_ptr)

        self.spin_then(b, fn, ready, sleep)
        b.store(self.load(b, seq_ptr, I32, "acquire"), seen)
        b.call(run_chunk, [wid])
        old = b.atomic_rmw("sub", self.pending, ir.Constant(I32, 1), "seq_cst")
        with b.if_then(b.icmp_unsigned("==", old, ir.Constant(I32, 1))):
            sleeping = self.load(b, self.caller_sleeping, I32)
            with b.if_then(b.icmp_unsigned("!=", sleeping, ir.Constant(I32, 0))):
                self.futex(b, self.pending, _FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))
        b.branch(loop)
        return fn

    def _parallel_for(self, run_chunk: ir.Function, worker: ir.Function) -> None:
        fn, b = self._function("tessera_parallel_for",
                               ir.FunctionType(VOID, [BODY_PTR, PTR, I64, I64]),
                               internal=False)
        body, closure, extent, grain = fn.args
        serial = fn.append_basic_block("serial")
        ret = fn.append_basic_block("ret")
        tid = self.alloca(fn, I64)
        with b.if_then(b.icmp_signed("<=", extent, ir.Constant(I64, 0))):
            b.ret_void()
        g = b.select(b.icmp_signed("<", grain, ir.Constant(I64, 1)), ir.Constant(I64, 1), grain)
        nthreads = b.zext(self.load(b, self.nthreads, I32, "monotonic"), I64)
        nthreads = b.select(b.icmp_unsigned(">", nthreads, ir.Constant(I64, MAX_WORKERS + 1)),
                            ir.Constant(I64, MAX_WORKERS + 1), nthreads)
        want = b.sdiv(extent, g)
        chunks = b.select(b.icmp_signed("<", want, nthreads), want, nthreads)
        pool = fn.append_basic_block("pool")
        b.cbranch(b.icmp_signed("<=", chunks, ir.Constant(I64, 1)), serial, pool)

        b.position_at_end(pool)
        pair = b.cmpxchg(self.busy, ir.Constant(I32, 0), ir.Constant(I32, 1), "acquire",
                         "monotonic")
        locked = fn.append_basic_block("locked")
        b.cbranch(b.extract_value(pair, 1), locked, serial)

        # Start workers up to nthreads - 1 (stop at the first failure).
        b.position_at_end(locked)
        spawn_check = fn.append_basic_block("spawn_check")
        spawn = fn.append_basic_block("spawn")
        spawned = fn.append_basic_block("spawned")
        b.branch(spawn_check)
        b.position_at_end(spawn_check)
        started = b.zext(b.load(self.started, typ=I32), I64)
        need = b.icmp_signed("<", started, b.sub(nthreads, ir.Constant(I64, 1)))
        b.cbranch(need, spawn, spawned)
        b.position_at_end(spawn)
        wid = b.add(started, ir.Constant(I64, 1))
        rc = b.call(self.pthread_create, [tid, ir.Constant(PTR, None), worker,
                                          b.inttoptr(wid, PTR)])
        ok = fn.append_basic_block("spawn_ok")
        b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, spawned)
        b.position_at_end(ok)
        b.store(b.trunc(wid, I32), self.started)
        b.branch(spawn_check)

        b.position_at_end(spawned)
        started = b.zext(b.load(self.started, typ=I32), I64)
        avail = b.add(started, ir.Constant(I64, 1))
        chunks = b.select(b.icmp_signed("<", avail, chunks), avail, chunks)
        publish = fn.append_basic_block("publish")
        unlock_serial = fn.append_basic_block("unlock_serial")
        b.cbranch(b.icmp_signed("<=", chunks, ir.Constant(I64, 1)), unlock_serial, publish)
        b.position_at_end(unlock_serial)
        self.store(b, ir.Constant(I32, 0), self.busy, "release")
        b.branch(serial)

        b.position_at_end(publish)
        b.store(body, self.job_fn)
        b.store(closure, self.job_closure)
        b.store(extent, self.job_extent)
        b.store(chunks, self.job_chunks)
        nworkers = b.sub(chunks, ir.Constant(I64, 1))
        self.store(b, b.trunc(nworkers, I32), self.pending)
        post_check = fn.append_basic_block("post_check")
        post = fn.append_basic_block("post")
        posted = fn.append_basic_block("posted")
        counter = self.alloca(fn, I64)
        b.store(ir.Constant(I64, 0), counter)
        b.branch(post_check)
        b.position_at_end(post_check)
        w = b.load(counter, typ=I64)
        b.cbranch(b.icmp_signed("<", w, nworkers), post, posted)
        b.position_at_end(post)
        seq_ptr = self.slot_word(b, w, 0)
        b.atomic_rmw("add", seq_ptr, ir.Constant(I32, 1), "seq_cst")
        sleeping = self.load(b, self.slot_word(b, w, 1), I32)
        with b.if_then(b.icmp_unsigned("!=", sleeping, ir.Constant(I32, 0))):
            self.futex(b, seq_ptr, _FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))
        b.store(b.add(w, ir.Constant(I64, 1)), counter)
        b.branch(post_check)

        b.position_at_end(posted)
        b.call(run_chunk, [ir.Constant(I64, 0)])

        def ready(bb: ir.IRBuilder) -> ir.Value:
            left = self.load(bb, self.pending, I32, "acquire")
            return bb.icmp_unsigned("==", left, ir.Constant(I32, 0))

        def sleep(bb: ir.IRBuilder) -> None:
            self.store(bb, ir.Constant(I32, 1), self.caller_sleeping)
            left = self.load(bb, self.pending, I32)
            with bb.if_then(bb.icmp_unsigned("!=", left, ir.Constant(I32, 0))):
                self.futex(bb, self.pending, _FUTEX_WAIT_PRIVATE, left)
            self.store(bb, ir.Constant(I32, 0), self.caller_sleeping)

        self.spin_then(b, fn, ready, sleep)
        self.store(b, ir.Constant(I32, 0), self.busy, "release")
        b.branch(ret)

        b.position_at_end(serial)
        b.call(body, [ir.Constant(I64, 0), extent, closure])
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()

    def _accessors(self) -> None:
        for name, g in (("threads", self.nthreads), ("spin", self.spin)):
            fn, b = self._function(f"tessera_pool_set_{name}", ir.FunctionType(VOID, [I32]),
                                   internal=False)
            self.store(b, fn.args[0], g)
            b.ret_void()
            fn, b = self._function(f"tessera_pool_get_{name}", ir.FunctionType(I32, []),
                                   internal=False)
            b.ret(self.load(b, g, I32))
        fn, b = self._function("tessera_pool_started_workers", ir.FunctionType(I32, []),
                               internal=False)
        b.ret(self.load(b, self.started, I32))

        # After fork: the child has no workers; forget them and every job in flight.
        fn, b = self._function("tessera_pool_after_fork", ir.FunctionType(VOID, []),
                               internal=False)
        for g in (self.started, self.busy, self.pending, self.caller_sleeping):
            b.store(ir.Constant(I32, 0), g)
        b.store(ir.Constant(self.slots_ty, None), self.slots)
        b.ret_void()

        # An empty loop body and a native launch loop, to measure the launch cost.
        noop, b = self._function("tessera_pool_noop", BODY_TY)
        b.ret_void()
        fn, b = self._function("tessera_pool_bench", ir.FunctionType(VOID, [I64, I64]),
                               internal=False)
        launch = self.module.globals["tessera_parallel_for"]
        counter = self.alloca(fn, I64)
        b.store(ir.Constant(I64, 0), counter)
        check = fn.append_basic_block("check")
        loop = fn.append_basic_block("loop")
        done = fn.append_basic_block("done")
        b.branch(check)
        b.position_at_end(check)
        i = b.load(counter, typ=I64)
        b.cbranch(b.icmp_signed("<", i, fn.args[0]), loop, done)
        b.position_at_end(loop)
        b.call(launch, [noop, ir.Constant(PTR, None), fn.args[1], ir.Constant(I64, 1)])
        b.store(b.add(i, ir.Constant(I64, 1)), counter)
        b.branch(check)
        b.position_at_end(done)
        b.ret_void()


    def _half_conversions(self) -> None:
        """``float tessera_extendhfsf2(half)`` and ``half tessera_truncsfhf2(float)``
        (round to nearest even), in integer arithmetic: LLVM calls ``__extendhfsf2`` /
        ``__truncsfhf2`` for float16 on CPUs without F16C, and a Python process may not have
        them (they live in compiler-rt / libgcc)."""
        f32, f16, i16 = ir.FloatType(), ir.HalfType(), ir.IntType(16)

        def c(v: int) -> ir.Constant:
            return ir.Constant(I32, v)

        fn, b = self._function("tessera_extendhfsf2", ir.FunctionType(f32, [f16]),
                               internal=False)
        h = b.zext(b.bitcast(fn.args[0], i16), I32)
        bits = b.shl(b.and_(h, c(0x7FFF)), c(13))
        exp = b.and_(bits, c(0x7C00 << 13))
        bits = b.add(bits, c((127 - 15) << 23))
        special = b.add(bits, c((128 - 16) << 23))  # inf / NaN
        tiny = b.fsub(b.bitcast(b.add(bits, c(1 << 23)), f32),
                      ir.Constant(f32, 2.0 ** -14))  # zero / subnormal
        out = b.select(b.icmp_unsigned("==", exp, c(0x7C00 << 13)), special, bits)
        out = b.select(b.icmp_unsigned("==", exp, c(0)), b.bitcast(tiny, I32), out)
        out = b.or_(out, b.shl(b.and_(h, c(0x8000)), c(16)))
        b.ret(b.bitcast(out, f32))

        fn, b = self._function("tessera_truncsfhf2", ir.FunctionType(f16, [f32]),
                               internal=False)
        bits = b.bitcast(fn.args[0], I32)
        sign = b.and_(bits, c(0x80000000))
        mag = b.xor(bits, sign)
        inf_nan = b.select(b.icmp_unsigned(">", mag, c(255 << 23)), c(0x7E00), c(0x7C00))
        magic = ir.Constant(f32, 0.5)  # ((127 - 15) + (23 - 10) + 1) << 23 as a float
        sub = b.sub(b.bitcast(b.fadd(b.bitcast(mag, f32), magic), I32), c(126 << 23))
        odd = b.and_(b.lshr(mag, c(13)), c(1))
        normal = b.lshr(b.add(b.add(mag, c(((15 - 127) << 23) + 0xFFF)), odd), c(13))
        out = b.select(b.icmp_unsigned("<", mag, c(113 << 23)), sub, normal)
        out = b.select(b.icmp_unsigned(">=", mag, c((127 + 16) << 23)), inf_nan, out)
        out = b.or_(out, b.lshr(sign, c(16)))
        b.ret(b.bitcast(b.trunc(out, i16), f16))


def _size(ty: ir.Type) -> int:
    if isinstance(ty, ir.IntType):
        return ty.width // 8
    return 8


def opaque(value: ir.Value) -> ir.Value:
    """``value`` (an alloca or global) typed as an opaque ``ptr``: llvmlite types them as
    typed pointers, which makes its builder reject stores through GEPs of another type."""
    value.type = PTR
    return value


class _Runtime:
    """The compiled pool of this process: the JIT engine (never freed) and entry points."""

    def __init__(self) -> None:
        tm = build.target_machine()
        pool = _PoolIR(tm.triple, str(tm.target_data), platform.machine().lower()).build()
        with build.LLVM_LOCK:
            mod = build.compile_ir(pool, tm, speed_level=2)
            engine = llvm.create_mcjit_compiler(mod, tm)
            engine.finalize_object()
            addr = {name: engine.get_function_address(name) for name in (
                "tessera_parallel_for", "tessera_pool_set_threads", "tessera_pool_get_threads",
                "tessera_pool_set_spin", "tessera_pool_get_spin", "tessera_pool_started_workers",
                "tessera_pool_after_fork", "tessera_pool_bench", "tessera_extendhfsf2",
                "tessera_truncsfhf2")}
            # Kernels and workers run this code until the process ends: never free it.
            engine.detach()
            mod.detach()
            llvm.add_symbol("tessera_parallel_for", addr["tessera_parallel_for"])
            process = ctypes.CDLL(None)
            for libcall, ours in (("__extendhfsf2", "tessera_extendhfsf2"),
                                  ("__truncsfhf2", "tessera_truncsfhf2")):
                if not hasattr(process, libcall):
                    llvm.add_symbol(libcall, addr[ours])
        self.addresses = addr
        self.parallel_for = addr["tessera_parallel_for"]
        self._set_threads = ctypes.CFUNCTYPE(None, ctypes.c_int32)(
            addr["tessera_pool_set_threads"])
        self._get_threads = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["tessera_pool_get_threads"])
        self._set_spin = ctypes.CFUNCTYPE(None, ctypes.c_int32)(addr["tessera_pool_set_spin"])
        self._get_spin = ctypes.CFUNCTYPE(ctypes.c_int32)(addr["tessera_pool_get_spin"])
        self.started_workers = ctypes.CFUNCTYPE(ctypes.c_int32)(
            addr["tessera_pool_started_workers"])
        self.after_fork = ctypes.CFUNCTYPE(None)(addr["tessera_pool_after_fork"])
        self.bench = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(
            addr["tessera_pool_bench"])
        self._set_threads(_default_threads())
        spin = os.environ.get("TESSERA_SPIN_COUNT")
        if spin:
            self._set_spin(max(0, int(spin)))


def _default_threads() -> int:
    env = os.environ.get("TESSERA_NUM_THREADS", "").strip()
    if env:
        try:
            n = int(env)
        except ValueError:
            n = 0
        if n >= 1:
            return min(n, MAX_WORKERS + 1)
    return max(1, min(os.cpu_count() or 1, MAX_WORKERS + 1))


_runtime: _Runtime | None = None
_runtime_lock = threading.Lock()


def runtime() -> _Runtime:
    """The process's pool, compiled and registered on first use."""
    global _runtime
    if _runtime is None:
        with _runtime_lock:
            if _runtime is None:
                _runtime = _Runtime()
                if hasattr(os, "register_at_fork"):
                    os.register_at_fork(after_in_child=_after_fork_in_child)
    return _runtime


def _after_fork_in_child() -> None:
    if _runtime is not None:
        _runtime.after_fork()


def ensure_runtime() -> None:
    """Compile the pool and register ``tessera_parallel_for`` (before linking kernels)."""
    runtime()


def set_num_threads(n: int) -> None:
    """Use ``n`` threads (the caller included) for later parallel loops."""
    if n < 1:
        raise ValueError(f"number of threads must be at least 1, got {n}")
    runtime()._set_threads(min(int(n), MAX_WORKERS + 1))


def get_num_threads() -> int:
    """The number of threads parallel loops use (the caller included)."""
    return int(runtime()._get_threads())


def set_spin_count(n: int) -> None:
    """Spin ``n`` ``pause`` iterations before a waiting thread sleeps (0: sleep at once)."""
    runtime()._set_spin(max(0, int(n)))


def get_spin_count() -> int:
    """The spin iterations before a waiting thread sleeps."""
    return int(runtime()._get_spin())


def measure_launch_overhead(launches: int = 10000, extent: int | None = None) -> float:
    """Microseconds per ``tessera_parallel_for`` launch of an empty body, measured in a native
    loop (no Python in between); ``extent`` defaults to the thread count (one chunk per
    thread)."""
    rt = runtime()
    ext = extent if extent is not None else get_num_threads()
    rt.bench(100, ext)  # start the workers, warm up
    t0 = time.perf_counter()
    rt.bench(launches, ext)
    return (time.perf_counter() - t0) / launches * 1e6
