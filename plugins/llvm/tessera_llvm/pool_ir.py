"""The native thread pool as LLVM IR: what :mod:`tessera_llvm.parallel` JIT-compiles.

:class:`PoolIR` builds one module with ``tessera_parallel_for`` (the launch kernels call), the
worker loop, accessors for the pool's settings and counters, and float16 conversions. How the
pool behaves, and why, is described in :mod:`tessera_llvm.parallel`.
"""

from __future__ import annotations

from collections.abc import Callable

from llvmlite import ir

#: Most worker threads the pool starts (the caller is one more thread).
MAX_WORKERS = 255
#: How long a waiting thread spins (``pause``) before it sleeps on a futex, in microseconds:
#: longer than the gap between two kernels of a model, far shorter than a scheduler's time
#: slice, so a spinning thread never holds a core a neighbour needs for long.
DEFAULT_SPIN_US = 100
#: A parallel loop is split into up to this many chunks per thread, claimed one at a time.
DEFAULT_CHUNKS_PER_THREAD = 4
#: A worker that finishes this long (and three of the caller's chunks) after the caller ran
#: out of chunks is a straggler and sits out the next loops for a while (0: never).
DEFAULT_STRAGGLER_US = 200

_SIT_OUT_MIN_NS = 10_000_000  # a straggler's first sit-out
_SIT_OUT_MAX_NS = 320_000_000  # the longest, after repeated straggling
_CLOCK_MONOTONIC = 1
_CLOCK_EVERY = 16  # pauses between two reads of the clock while spinning
_MAX_CHUNKS = 0xFFFF  # most chunks of one parallel loop
#: The fields of a thread's 64-byte slot: its unclaimed chunks [lo, hi) as hi << 32 | lo; the
#: word it waits on for jobs and whether it sleeps there; when it finished its last chunk;
#: until when it sits out and its current back-off (ns); padding.
_SLOT_FIELDS = ("range", "wake", "sleeping", "finished", "sit_out_until", "backoff", "pad0",
                "pad1", "pad2")
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
#: The settable words of the pool (``tessera_pool_set_<name>`` / ``_get_<name>``).
KNOB_TYPES = {"nthreads": I32, "spin_ns": I64, "chunks_per_thread": I32, "straggler_ns": I64,
               "worker_delay_ns": I64, "cap": I32}


class PoolIR:
    """Builds the pool module. Every function and global is named ``tessera_*``."""

    def __init__(self, triple: str, data_layout: str, machine: str) -> None:
        self.module = ir.Module(name="tessera_pool")
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.machine = machine
        self._allocas: dict[ir.Function, tuple[ir.IRBuilder, ir.Block]] = {}
        m = self.module
        # Settings (written from Python).
        self.nthreads = self._global("tessera_pool_nthreads", I32, 1)
        self.spin_ns = self._global("tessera_pool_spin_ns", I64, DEFAULT_SPIN_US * 1000)
        self.chunks_per_thread = self._global("tessera_pool_chunks_per_thread", I32,
                                              DEFAULT_CHUNKS_PER_THREAD)
        self.straggler_ns = self._global("tessera_pool_straggler_ns", I64,
                                         DEFAULT_STRAGGLER_US * 1000)
        self.worker_delay_ns = self._global("tessera_pool_worker_delay_ns", I64, 0)
        self.cap = self._global("tessera_pool_cap", I32, 0)
        # State.
        self.started = self._global("tessera_pool_started", I32, 0)
        self.busy = self._global("tessera_pool_busy", I32, 0)
        self.sit_outs = self._global("tessera_pool_sit_outs", I64, 0)
        self.job_fn = self._global("tessera_pool_job_fn", PTR, None)
        self.job_closure = self._global("tessera_pool_job_closure", PTR, None)
        self.job_extent = self._global("tessera_pool_job_extent", I64, 0)
        self.job_chunks = self._global("tessera_pool_job_chunks", I64, 1)
        self.job_slots = self._global("tessera_pool_job_slots", I64, 1)
        self.done = self._global("tessera_pool_done", I32, 0)
        self.caller_sleeping = self._global("tessera_pool_caller_sleeping", I32, 0)
        # One 64-byte slot per thread (0: the caller, w: worker w): see _SLOT_FIELDS.
        self.slot_ty = ir.LiteralStructType([I64, I32, I32, I64, I64, I64, I64, I64, I64])
        self.slots_ty = ir.ArrayType(self.slot_ty, MAX_WORKERS + 1)
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
        self.timespec = ir.LiteralStructType([I64, I64])
        self.syscall = ir.Function(m, ir.FunctionType(I64, [I64], var_arg=True), "syscall")
        self.clock_gettime = ir.Function(m, ir.FunctionType(I32, [I32, PTR]), "clock_gettime")
        self.nanosleep = ir.Function(m, ir.FunctionType(I32, [PTR, PTR]), "nanosleep")
        self.pthread_create = ir.Function(m, ir.FunctionType(I32, [PTR, PTR, PTR, PTR]),
                                          "pthread_create")
        self.sigfillset = ir.Function(m, ir.FunctionType(I32, [PTR]), "sigfillset")
        self.pthread_sigmask = ir.Function(m, ir.FunctionType(I32, [I32, PTR, PTR]),
                                           "pthread_sigmask")

    def _global(self, name: str, ty: ir.Type, init: int | None) -> ir.GlobalVariable:
        g = ir.GlobalVariable(self.module, ty, name)
        g.initializer = ir.Constant(ty, init)
        g.linkage = "internal"
        g.align = 64  # one cache line each: the words threads write do not share lines
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
            # ``hint #1`` is ``yield``; the intrinsic, not inline assembly, so that the pool
            # can be emitted for AArch64 from another architecture (export), where LLVM has
            # no AArch64 assembly parser registered
            fn = self.module.globals.get("llvm.aarch64.hint")
            if fn is None:
                fn = ir.Function(self.module, ir.FunctionType(VOID, [I32]), "llvm.aarch64.hint")
            b.call(fn, [ir.Constant(I32, 1)])

    def futex(self, b: ir.IRBuilder, addr: ir.Value, op: int, value: ir.Value) -> None:
        """``syscall(SYS_futex, addr, op, value, NULL)`` (every vararg passed as 64 bits)."""
        b.call(self.syscall, [ir.Constant(I64, self.sys_futex), addr, ir.Constant(I64, op),
                              b.zext(value, I64), ir.Constant(PTR, None)])

    def now_ns(self, b: ir.IRBuilder, fn: ir.Function) -> ir.Value:
        """``CLOCK_MONOTONIC`` in nanoseconds (``clock_gettime``: the vDSO, no system call)."""
        ts = self.alloca(fn, self.timespec)
        b.call(self.clock_gettime, [ir.Constant(I32, _CLOCK_MONOTONIC), ts])
        sec = b.load(self.field(b, ts, self.timespec, 0), typ=I64)
        nsec = b.load(self.field(b, ts, self.timespec, 1), typ=I64)
        return b.add(b.mul(sec, ir.Constant(I64, 1_000_000_000)), nsec)

    @staticmethod
    def field(b: ir.IRBuilder, ptr: ir.Value, ty: ir.Type, index: int) -> ir.Value:
        """The address of field ``index`` of the struct of type ``ty`` at ``ptr``."""
        return b.gep(ptr, [ir.Constant(I32, 0), ir.Constant(I32, index)], inbounds=True,
                     source_etype=ty)

    def slot(self, b: ir.IRBuilder, index: ir.Value, name: str) -> ir.Value:
        """The address of field ``name`` of slot ``index``."""
        return b.gep(self.slots, [ir.Constant(I64, 0), index,
                                  ir.Constant(I32, _SLOT_FIELDS.index(name))],
                     inbounds=True, source_etype=self.slots_ty)

    def loop(self, fn: ir.Function, b: ir.IRBuilder, lo: ir.Value, hi: ir.Value,
             body: Callable[[ir.IRBuilder, ir.Value], None]) -> None:
        """Emit ``for (i = lo; i < hi; i++) body(i)`` (i64); the builder ends after it."""
        counter = self.alloca(fn, I64)
        b.store(lo, counter)
        check = fn.append_basic_block("for_check")
        step = fn.append_basic_block("for_body")
        after = fn.append_basic_block("for_end")
        b.branch(check)
        b.position_at_end(check)
        i = b.load(counter, typ=I64)
        b.cbranch(b.icmp_signed("<", i, hi), step, after)
        b.position_at_end(step)
        body(b, i)
        b.store(b.add(i, ir.Constant(I64, 1)), counter)
        b.branch(check)
        b.position_at_end(after)

    def spin_then(self, b: ir.IRBuilder, fn: ir.Function,
                  ready: Callable[[ir.IRBuilder], ir.Value],
                  sleep: Callable[[ir.IRBuilder], None], start: ir.Value | None = None) -> None:
        """Emit: loop { if ready(): break; pause; once the spin budget (``tessera_pool_spin_ns``
        since ``start``, default now; the clock is read every few pauses) is spent: sleep() };
        the builder ends in the block after the loop. ``sleep`` returns when woken (or at once
        when ``ready`` may have changed); after a first sleep the loop sleeps again at once."""
        counter = self.alloca(fn, I32)
        began = self.alloca(fn, I64)
        b.store(ir.Constant(I32, 0), counter)
        b.store(start if start is not None else self.now_ns(b, fn), began)
        check = fn.append_basic_block("check")
        spin = fn.append_basic_block("spin")
        do_pause = fn.append_basic_block("pause")
        clock = fn.append_basic_block("clock")
        do_sleep = fn.append_basic_block("sleep")
        done = fn.append_basic_block("done")
        b.branch(check)
        b.position_at_end(check)
        b.cbranch(ready(b), done, spin)
        b.position_at_end(spin)
        n = b.load(counter, typ=I32)
        b.store(b.add(n, ir.Constant(I32, 1)), counter)
        every = ir.Constant(I32, _CLOCK_EVERY - 1)
        b.cbranch(b.icmp_unsigned("==", b.and_(n, every), ir.Constant(I32, 0)), clock, do_pause)
        b.position_at_end(clock)
        elapsed = b.sub(self.now_ns(b, fn), b.load(began, typ=I64))
        budget = self.load(b, self.spin_ns, I64, "monotonic")
        b.cbranch(b.icmp_signed(">=", elapsed, budget), do_sleep, do_pause)
        b.position_at_end(do_pause)
        self.pause(b)
        b.branch(check)
        b.position_at_end(do_sleep)
        sleep(b)
        b.branch(check)
        b.position_at_end(done)

    # -- the pool -------------------------------------------------------------------------------
    def build(self) -> ir.Module:
        work = self._work(self._run_chunk())
        worker = self._worker(work)
        self._parallel_for(work, worker)
        self._accessors()
        self._half_conversions()
        for builder, start in self._allocas.values():
            builder.branch(start)
        return self.module

    def _run_chunk(self) -> ir.Function:
        """``run_chunk(k)``: run chunk k of the published job. Called only after chunk k was
        claimed: the job cannot end before its claimed chunks do, so the job's words still
        hold its values."""
        fn, b = self._function("tessera_pool_run_chunk", ir.FunctionType(VOID, [I64]))
        k = fn.args[0]
        body = self.load(b, self.job_fn, BODY_PTR, "monotonic")
        closure = self.load(b, self.job_closure, PTR, "monotonic")
        extent = self.load(b, self.job_extent, I64, "monotonic")
        n = self.load(b, self.job_chunks, I64, "monotonic")
        base = b.udiv(extent, n)
        rem = b.urem(extent, n)
        lt = b.icmp_unsigned("<", k, rem)
        begin = b.add(b.mul(k, base), b.select(lt, k, rem))
        end = b.add(b.add(begin, base), b.zext(lt, I64))
        b.call(body, [begin, end, closure])
        b.ret_void()
        return fn

    def _take(self, fn: ir.Function, b: ir.IRBuilder, index: ir.Value, front: bool,
              got: ir.Block, chunk: ir.Value) -> None:
        """Emit: take the first (``front``) or last unclaimed chunk of slot ``index`` into the
        stack slot ``chunk`` and branch to ``got``; fall through (the builder ends in a new
        block) when the slot has none left. A claim is one compare-and-swap of the slot's
        range word, so every chunk is taken exactly once."""
        loop = fn.append_basic_block("take")
        attempt = fn.append_basic_block("take_attempt")
        empty = fn.append_basic_block("take_empty")
        b.branch(loop)
        b.position_at_end(loop)
        ptr = self.slot(b, index, "range")
        w = self.load(b, ptr, I64, "acquire")
        lo = b.and_(w, ir.Constant(I64, 0xFFFFFFFF))
        hi = b.lshr(w, ir.Constant(I64, 32))
        b.cbranch(b.icmp_unsigned("<", lo, hi), attempt, empty)
        b.position_at_end(attempt)
        if front:
            k, new = lo, b.add(w, ir.Constant(I64, 1))
        else:
            k = b.sub(hi, ir.Constant(I64, 1))
            new = b.or_(b.shl(k, ir.Constant(I64, 32)), lo)
        pair = b.cmpxchg(ptr, w, new, "acq_rel", "acquire")
        b.store(k, chunk)
        b.cbranch(b.extract_value(pair, 1), got, loop)
        b.position_at_end(empty)

    def _work(self, run_chunk: ir.Function) -> ir.Function:
        """``i32 work(own)``: run the chunks of slot ``own`` front to back, then steal the
        other slots' chunks from their backs, until no chunk is left; then count them done
        (the thread that completes the job wakes the caller if it sleeps). Returns the chunks
        run. Slot ``t``'s chunks are a contiguous range, so without stealing every thread
        works where it worked in the previous loop (its caches hold that data); a thread the
        OS has not run yet loses its chunks to the others instead of holding up the loop.
        A worker that ran chunks writes the time it finished into its slot (the caller reads
        it to find stragglers)."""
        fn, b = self._function("tessera_pool_work", ir.FunctionType(I32, [I64]))
        own = fn.args[0]
        chunk = self.alloca(fn, I64)
        count = self.alloca(fn, I32)
        b.store(ir.Constant(I32, 0), count)
        run = fn.append_basic_block("run")
        own_loop = fn.append_basic_block("own")
        b.branch(own_loop)
        b.position_at_end(own_loop)
        self._take(fn, b, own, True, run, chunk)

        # Steal: slots own+1, own+2, ... (mod slots), each from its back.
        nslots = self.load(b, self.job_slots, I64, "monotonic")
        finish = fn.append_basic_block("finish")

        def steal(bb: ir.IRBuilder, i: ir.Value) -> None:
            self._take(fn, bb, bb.urem(bb.add(own, i), nslots), False, run, chunk)

        self.loop(fn, b, ir.Constant(I64, 1), nslots, steal)
        b.branch(finish)

        b.position_at_end(run)
        b.call(run_chunk, [b.load(chunk, typ=I64)])
        b.store(b.add(b.load(count, typ=I32), ir.Constant(I32, 1)), count)
        b.branch(own_loop)

        b.position_at_end(finish)
        mine = b.load(count, typ=I32)
        with b.if_then(b.icmp_unsigned("!=", mine, ir.Constant(I32, 0))):
            # Only while the caller sleeps (it waited past its spin budget) may this worker be
            # a straggler, and only then is the clock read.
            waited = self.load(b, self.caller_sleeping, I32, "monotonic")
            late = b.and_(b.icmp_unsigned("!=", own, ir.Constant(I64, 0)),
                          b.icmp_unsigned("!=", waited, ir.Constant(I32, 0)))
            with b.if_then(late):
                self.store(b, self.now_ns(b, fn), self.slot(b, own, "finished"), "monotonic")
            old = b.atomic_rmw("add", self.done, mine, "acq_rel")
            n = b.trunc(self.load(b, self.job_chunks, I64, "monotonic"), I32)
            with b.if_then(b.icmp_unsigned("==", b.add(old, mine), n)):
                sleeping = self.load(b, self.caller_sleeping, I32)
                with b.if_then(b.icmp_unsigned("!=", sleeping, ir.Constant(I32, 0))):
                    self.futex(b, self.done, _FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))
        b.ret(mine)
        return fn

    def _worker(self, work: ir.Function) -> ir.Function:
        """``void *worker(void *id)``: wait on slot ``id``'s wake word and help with each job
        the caller wakes it for, forever."""
        fn, b = self._function("tessera_pool_worker", ir.FunctionType(PTR, [PTR]))
        wid = b.ptrtoint(fn.args[0], I64)
        wake = self.slot(b, wid, "wake")
        sleeping = self.slot(b, wid, "sleeping")
        sigset = self.alloca(fn, ir.ArrayType(I8, 128))
        b.call(self.sigfillset, [sigset])
        b.call(self.pthread_sigmask, [ir.Constant(I32, 0), sigset, ir.Constant(PTR, None)])
        seen = self.alloca(fn, I32)
        b.store(self.load(b, wake, I32, "acquire"), seen)
        delay_ts = self.alloca(fn, self.timespec)
        loop = fn.append_basic_block("loop")
        b.branch(loop)
        b.position_at_end(loop)

        def ready(bb: ir.IRBuilder) -> ir.Value:
            cur = self.load(bb, wake, I32, "acquire")
            return bb.icmp_unsigned("!=", cur, bb.load(seen, typ=I32))

        def sleep(bb: ir.IRBuilder) -> None:
            self.store(bb, ir.Constant(I32, 1), sleeping)
            old = bb.load(seen, typ=I32)
            with bb.if_then(bb.icmp_unsigned("==", self.load(bb, wake, I32), old)):
                self.futex(bb, wake, _FUTEX_WAIT_PRIVATE, old)
            self.store(bb, ir.Constant(I32, 0), sleeping)

        self.spin_then(b, fn, ready, sleep)
        b.store(self.load(b, wake, I32, "acquire"), seen)
        delay = self.load(b, self.worker_delay_ns, I64, "monotonic")
        with b.if_then(b.icmp_signed(">", delay, ir.Constant(I64, 0))):  # tests only
            billion = ir.Constant(I64, 1_000_000_000)
            b.store(b.sdiv(delay, billion), self.field(b, delay_ts, self.timespec, 0))
            b.store(b.srem(delay, billion), self.field(b, delay_ts, self.timespec, 1))
            b.call(self.nanosleep, [delay_ts, ir.Constant(PTR, None)])
        b.call(work, [wid])
        b.branch(loop)
        return fn

    def _parallel_for(self, work: ir.Function, worker: ir.Function) -> None:
        fn, b = self._function("tessera_parallel_for",
                               ir.FunctionType(VOID, [BODY_PTR, PTR, I64, I64]),
                               internal=False)
        body, closure, extent, grain = fn.args
        zero, one = ir.Constant(I64, 0), ir.Constant(I64, 1)

        def smin(x: ir.Value, y: ir.Value) -> ir.Value:
            return b.select(b.icmp_signed("<", x, y), x, y)

        def smax(x: ir.Value, y: ir.Value) -> ir.Value:
            return b.select(b.icmp_signed(">", x, y), x, y)

        serial = fn.append_basic_block("serial")
        ret = fn.append_basic_block("ret")
        tid = self.alloca(fn, I64)
        with b.if_then(b.icmp_signed("<=", extent, zero)):
            b.ret_void()
        g = smax(grain, one)
        nthreads = b.zext(self.load(b, self.nthreads, I32, "monotonic"), I64)
        nthreads = smin(nthreads, ir.Constant(I64, MAX_WORKERS + 1))
        want = b.sdiv(extent, g)
        pool = fn.append_basic_block("pool")
        single = b.or_(b.icmp_signed("<=", want, one), b.icmp_signed("<=", nthreads, one))
        b.cbranch(single, serial, pool)

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
        need = b.icmp_signed("<", started, b.sub(nthreads, one))
        b.cbranch(need, spawn, spawned)
        b.position_at_end(spawn)
        wid = b.add(started, one)
        rc = b.call(self.pthread_create, [tid, ir.Constant(PTR, None), worker,
                                          b.inttoptr(wid, PTR)])
        ok = fn.append_basic_block("spawn_ok")
        b.cbranch(b.icmp_signed("==", rc, ir.Constant(I32, 0)), ok, spawned)
        b.position_at_end(ok)
        b.store(b.trunc(wid, I32), self.started)
        b.branch(spawn_check)

        # Who takes part: the caller and every worker below the thread count and the cap (the
        # threads to use while other tasks keep cores busy, set by adapt_to_load) that is not
        # sitting out (see below).
        b.position_at_end(spawned)
        t_publish = self.now_ns(b, fn)
        last = smin(b.zext(b.load(self.started, typ=I32), I64), b.sub(nthreads, one))
        nslots = b.add(last, one)
        helping = self.alloca(fn, I64)
        b.store(one, helping)

        cap = b.zext(self.load(b, self.cap, I32, "monotonic"), I64)

        def takes_part(bb: ir.IRBuilder, t: ir.Value) -> ir.Value:
            until = self.load(bb, self.slot(bb, t, "sit_out_until"), I64, "monotonic")
            below_cap = bb.or_(bb.icmp_signed("==", cap, zero), bb.icmp_signed("<", t, cap))
            return bb.and_(bb.icmp_signed("<=", until, t_publish), below_cap)

        def count(bb: ir.IRBuilder, t: ir.Value) -> None:
            with bb.if_then(takes_part(bb, t)):
                bb.store(bb.add(bb.load(helping, typ=I64), one), helping)

        self.loop(fn, b, one, nslots, count)
        parts = b.load(helping, typ=I64)
        per = b.zext(self.load(b, self.chunks_per_thread, I32, "monotonic"), I64)
        chunks = smin(smin(want, b.mul(parts, smax(per, one))), ir.Constant(I64, _MAX_CHUNKS))
        publish = fn.append_basic_block("publish")
        unlock_serial = fn.append_basic_block("unlock_serial")
        b.cbranch(b.icmp_signed("<=", parts, one), unlock_serial, publish)
        b.position_at_end(unlock_serial)
        self.store(b, ir.Constant(I32, 0), self.busy, "release")
        b.branch(serial)

        # Publish the job: its words, then each slot's range of chunks (a worker's successful
        # claim on a slot word sees the words written before it; slots of threads sitting out
        # get none), then wake the workers taking part, each on its own word.
        b.position_at_end(publish)
        self.store(b, body, self.job_fn, "monotonic")
        self.store(b, closure, self.job_closure, "monotonic")
        self.store(b, extent, self.job_extent, "monotonic")
        self.store(b, chunks, self.job_chunks, "monotonic")
        self.store(b, nslots, self.job_slots, "monotonic")
        self.store(b, ir.Constant(I32, 0), self.done, "monotonic")
        # Participant p (the caller is 0) of the first min(parts, chunks) gets chunks
        # [p * chunks / used, (p + 1) * chunks / used); the others get none and are not woken.
        used = smin(parts, chunks)
        nth = self.alloca(fn, I64)

        def ranked(bb: ir.IRBuilder, t: ir.Value) -> ir.Value:
            """Whether slot t gets chunks (counting participants in ``nth``)."""
            p = bb.load(nth, typ=I64)
            part = bb.or_(bb.icmp_signed("==", t, zero), takes_part(bb, t))
            gets = bb.and_(part, bb.icmp_signed("<", p, used))
            bb.store(bb.add(p, bb.zext(gets, I64)), nth)
            return gets

        def fill(bb: ir.IRBuilder, t: ir.Value) -> None:
            p = bb.load(nth, typ=I64)
            gets = ranked(bb, t)
            lo = bb.udiv(bb.mul(p, chunks), used)
            hi = bb.select(gets, bb.udiv(bb.mul(bb.add(p, one), chunks), used), lo)
            self.store(bb, bb.or_(bb.shl(hi, ir.Constant(I64, 32)), lo),
                       self.slot(bb, t, "range"))

        b.store(zero, nth)
        self.loop(fn, b, zero, nslots, fill)

        def wake(bb: ir.IRBuilder, t: ir.Value) -> None:
            gets = ranked(bb, t)
            with bb.if_then(bb.and_(gets, bb.icmp_signed(">", t, zero))):
                word = self.slot(bb, t, "wake")
                bb.atomic_rmw("add", word, ir.Constant(I32, 1), "seq_cst")
                asleep = self.load(bb, self.slot(bb, t, "sleeping"), I32)
                with bb.if_then(bb.icmp_unsigned("!=", asleep, ir.Constant(I32, 0))):
                    self.futex(bb, word, _FUTEX_WAKE_PRIVATE, ir.Constant(I32, 1))

        b.store(zero, nth)
        self.loop(fn, b, zero, nslots, wake)

        # The caller works too, then waits for the chunks other threads still run.
        own = b.zext(b.call(work, [zero]), I64)
        t_own = self.now_ns(b, fn)
        n32 = b.trunc(chunks, I32)

        def ready(bb: ir.IRBuilder) -> ir.Value:
            return bb.icmp_unsigned("==", self.load(bb, self.done, I32, "acquire"), n32)

        slept = self.alloca(fn, I32)
        b.store(ir.Constant(I32, 0), slept)

        def sleep(bb: ir.IRBuilder) -> None:
            bb.store(ir.Constant(I32, 1), slept)
            self.store(bb, ir.Constant(I32, 1), self.caller_sleeping)
            left = self.load(bb, self.done, I32)
            with bb.if_then(bb.icmp_unsigned("!=", left, n32)):
                self.futex(bb, self.done, _FUTEX_WAIT_PRIVATE, left)
            self.store(bb, ir.Constant(I32, 0), self.caller_sleeping)

        self.spin_then(b, fn, ready, sleep, start=t_own)

        # Stragglers: a worker that finished its last chunk long after the caller ran out of
        # chunks (more than the straggler time and 3 of the caller's chunks) was most likely
        # descheduled in the middle of one, and the loop waited for it. It sits out the next
        # loops for a while, doubling while it keeps straggling (a busy neighbour keeps
        # taking its core), so the others stop waiting for it; it comes back when that time
        # is over.
        # (A straggler wait is longer than the spin budget: only a caller that slept checks.)
        floor = self.load(b, self.straggler_ns, I64, "monotonic")
        check = b.and_(b.icmp_signed(">", floor, zero),
                       b.icmp_unsigned("!=", b.load(slept, typ=I32), ir.Constant(I32, 0)))
        with b.if_then(check):
            per_chunk = b.sdiv(b.sub(t_own, t_publish), smax(own, one))
            limit = smax(floor, b.mul(per_chunk, ir.Constant(I64, 3)))
            t_done = self.now_ns(b, fn)

            def judge(bb: ir.IRBuilder, t: ir.Value) -> None:
                finished = self.load(bb, self.slot(bb, t, "finished"), I64, "monotonic")
                late = bb.icmp_signed(">", bb.sub(finished, t_own), limit)
                with bb.if_then(bb.and_(takes_part(bb, t), late)):
                    self._sit_out(bb, t, t_done)

            with b.if_then(b.icmp_signed(">", b.sub(t_done, t_own), limit)):
                self.loop(fn, b, one, nslots, judge)
        self.store(b, ir.Constant(I32, 0), self.busy, "release")
        b.branch(ret)

        b.position_at_end(serial)
        b.call(body, [zero, extent, closure])
        b.branch(ret)
        b.position_at_end(ret)
        b.ret_void()

    def _sit_out(self, b: ir.IRBuilder, t: ir.Value, now: ir.Value) -> None:
        """Emit: worker ``t`` sits out until ``now`` plus its back-off, which doubles (up to
        the maximum) when its last sit-out ended less than one back-off ago and starts over
        at the minimum otherwise."""
        until_ptr = self.slot(b, t, "sit_out_until")
        backoff_ptr = self.slot(b, t, "backoff")
        until = self.load(b, until_ptr, I64, "monotonic")
        backoff = self.load(b, backoff_ptr, I64, "monotonic")
        recent = b.icmp_signed("<", b.sub(now, until), backoff)
        doubled = b.mul(backoff, ir.Constant(I64, 2))
        top = ir.Constant(I64, _SIT_OUT_MAX_NS)
        doubled = b.select(b.icmp_signed(">", doubled, top), top, doubled)
        new = b.select(recent, doubled, ir.Constant(I64, _SIT_OUT_MIN_NS))
        self.store(b, new, backoff_ptr, "monotonic")
        self.store(b, b.add(now, new), until_ptr, "monotonic")
        b.atomic_rmw("add", self.sit_outs, ir.Constant(I64, 1), "monotonic")

    def _accessors(self) -> None:
        for name, ty in KNOB_TYPES.items():
            g = getattr(self, name)
            fn, b = self._function(f"tessera_pool_set_{name}", ir.FunctionType(VOID, [ty]),
                                   internal=False)
            self.store(b, fn.args[0], g)
            b.ret_void()
            fn, b = self._function(f"tessera_pool_get_{name}", ir.FunctionType(ty, []),
                                   internal=False)
            b.ret(self.load(b, g, ty))
        fn, b = self._function("tessera_pool_started_workers", ir.FunctionType(I32, []),
                               internal=False)
        b.ret(self.load(b, self.started, I32))
        fn, b = self._function("tessera_pool_get_sit_outs", ir.FunctionType(I64, []),
                               internal=False)
        b.ret(self.load(b, self.sit_outs, I64))
        fn, b = self._function("tessera_pool_awake_workers", ir.FunctionType(I32, []),
                               internal=False)
        awake = self.alloca(fn, I32)
        b.store(ir.Constant(I32, 0), awake)

        def count(bb: ir.IRBuilder, t: ir.Value) -> None:
            asleep = self.load(bb, self.slot(bb, t, "sleeping"), I32, "monotonic")
            bb.store(bb.add(bb.load(awake, typ=I32), bb.zext(
                bb.icmp_unsigned("==", asleep, ir.Constant(I32, 0)), I32)), awake)

        last = b.zext(self.load(b, self.started, I32, "monotonic"), I64)
        self.loop(fn, b, ir.Constant(I64, 1), b.add(last, ir.Constant(I64, 1)), count)
        b.ret(b.load(awake, typ=I32))

        # After fork: the child has no workers; forget them and every job in flight.
        fn, b = self._function("tessera_pool_after_fork", ir.FunctionType(VOID, []),
                               internal=False)
        for g in (self.started, self.busy, self.done, self.caller_sleeping):
            b.store(ir.Constant(I32, 0), g)
        b.store(ir.Constant(self.slots_ty, None), self.slots)
        b.ret_void()

        # An empty loop body and a native launch loop, to measure the launch cost.
        noop, b = self._function("tessera_pool_noop", BODY_TY)
        b.ret_void()
        fn, b = self._function("tessera_pool_bench", ir.FunctionType(VOID, [I64, I64]),
                               internal=False)
        launch = self.module.globals["tessera_parallel_for"]

        def call(bb: ir.IRBuilder, i: ir.Value) -> None:
            bb.call(launch, [noop, ir.Constant(PTR, None), fn.args[1], ir.Constant(I64, 1)])

        self.loop(fn, b, ir.Constant(I64, 0), fn.args[0], call)
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


