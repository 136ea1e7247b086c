"""Run a whole ``Loop`` in one native call: ``tessera_run_loop(desc)``.

The control-flow backend runs a loop body from Python, a compiled module per iteration (about
2 us of interpreter work each). A loop whose body the llvm backend compiles entirely
(:mod:`.native_loop`) instead runs in this runner, written here in LLVM IR and JIT-compiled once
per process (like :mod:`.sequence`'s). It reads a descriptor, an ``i64`` array of the slots
below (addresses as integers), and does::

    copy(pre)                                  # initial carried values into the body inputs
    limit = trip ? *trip : INT64_MAX;  keep = cond ? *cond != 0 : true
    *cond_in = 1
    for (i = 0; keep && i < limit; i++) {
        if (scan_length >= 0 && i >= scan_length) return i + 1;   # scans would overflow
        *iteration = i
        for (k = 0; k < n; k++) fns[k](args[k]);                   # the body's kernels
        keep = *cond_out != 0
        copy(scan, i)                          # each scan slice to out + i * slice bytes
        copy(carry)                            # carried outputs into the carried inputs
    }
    copy(post)                                 # carried values into the node's outputs
    return i

Each copy list is ``count`` triples ``(dst, src, bytes)`` done in order with ``memcpy``; a scan
list's destination advances by ``i * bytes``. The caller orders the carried copies so that no
copy reads a buffer an earlier one of the same iteration overwrote (through a temporary where
needed, :func:`tessera_llvm.native_loop.carry_copies`). The runner returns the number of
iterations run (one more than ``scan_length`` when the loop would overrun its scan outputs).
"""

from __future__ import annotations

import ctypes

from tessera_llvm import machine

#: Descriptor slots (indices into the ``i64`` array).
N_KERNELS, FNS, ARGS = 0, 1, 2
TRIP, COND = 3, 4            # addresses of the node's M and cond inputs, 0 when absent
ITERATION, COND_IN, COND_OUT = 5, 6, 7
SCAN_LENGTH = 8              # -1 without scan outputs
N_PRE, PRE, N_SCAN, SCAN, N_CARRY, CARRY, N_POST, POST = 9, 10, 11, 12, 13, 14, 15, 16
SLOTS = 17

_RUNNER_TYPE = ctypes.CFUNCTYPE(ctypes.c_int64, ctypes.c_void_p)

_IR = """
declare void @llvm.memcpy.p0.p0.i64(ptr, ptr, i64, i1)

define internal void @copies(i64 %n, i64 %list_addr, i64 %i) nounwind {
entry:
  %list = inttoptr i64 %list_addr to ptr
  %any = icmp sgt i64 %n, 0
  br i1 %any, label %loop, label %done
loop:
  %j = phi i64 [ 0, %entry ], [ %j1, %loop ]
  %at = mul i64 %j, 3
  %pd = getelementptr i64, ptr %list, i64 %at
  %dst0 = load i64, ptr %pd
  %ps = getelementptr i64, ptr %pd, i64 1
  %src = load i64, ptr %ps
  %pb = getelementptr i64, ptr %pd, i64 2
  %bytes = load i64, ptr %pb
  %step = mul i64 %i, %bytes
  %dst = add i64 %dst0, %step
  %dp = inttoptr i64 %dst to ptr
  %sp = inttoptr i64 %src to ptr
  call void @llvm.memcpy.p0.p0.i64(ptr %dp, ptr %sp, i64 %bytes, i1 false)
  %j1 = add i64 %j, 1
  %more = icmp slt i64 %j1, %n
  br i1 %more, label %loop, label %done
done:
  ret void
}

define internal i64 @slot(ptr %d, i64 %k) alwaysinline nounwind {
  %p = getelementptr i64, ptr %d, i64 %k
  %v = load i64, ptr %p
  ret i64 %v
}

define i64 @tessera_run_loop(ptr %d) nounwind {
entry:
  %nk = call i64 @slot(ptr %d, i64 0)
  %fns_a = call i64 @slot(ptr %d, i64 1)
  %args_a = call i64 @slot(ptr %d, i64 2)
  %trip_a = call i64 @slot(ptr %d, i64 3)
  %cond_a = call i64 @slot(ptr %d, i64 4)
  %it_a = call i64 @slot(ptr %d, i64 5)
  %cin_a = call i64 @slot(ptr %d, i64 6)
  %cout_a = call i64 @slot(ptr %d, i64 7)
  %scan_len = call i64 @slot(ptr %d, i64 8)
  %n_pre = call i64 @slot(ptr %d, i64 9)
  %pre = call i64 @slot(ptr %d, i64 10)
  %n_scan = call i64 @slot(ptr %d, i64 11)
  %scan = call i64 @slot(ptr %d, i64 12)
  %n_carry = call i64 @slot(ptr %d, i64 13)
  %carry = call i64 @slot(ptr %d, i64 14)
  %n_post = call i64 @slot(ptr %d, i64 15)
  %post = call i64 @slot(ptr %d, i64 16)
  %fns = inttoptr i64 %fns_a to ptr
  %args = inttoptr i64 %args_a to ptr
  %it = inttoptr i64 %it_a to ptr
  %cin = inttoptr i64 %cin_a to ptr
  %cout = inttoptr i64 %cout_a to ptr
  call void @copies(i64 %n_pre, i64 %pre, i64 0)
  %has_trip = icmp ne i64 %trip_a, 0
  br i1 %has_trip, label %read_trip, label %after_trip
read_trip:
  %trip_p = inttoptr i64 %trip_a to ptr
  %trip_v = load i64, ptr %trip_p
  br label %after_trip
after_trip:
  %limit = phi i64 [ %trip_v, %read_trip ], [ 9223372036854775807, %entry ]
  %has_cond = icmp ne i64 %cond_a, 0
  br i1 %has_cond, label %read_cond, label %start
read_cond:
  %cond_p = inttoptr i64 %cond_a to ptr
  %cond_b = load i8, ptr %cond_p
  %cond_v = icmp ne i8 %cond_b, 0
  br label %start
start:
  %keep0 = phi i1 [ %cond_v, %read_cond ], [ true, %after_trip ]
  store i8 1, ptr %cin
  br label %check
check:
  %i = phi i64 [ 0, %start ], [ %i1, %next ]
  %keep = phi i1 [ %keep0, %start ], [ %keep1, %next ]
  %below = icmp slt i64 %i, %limit
  %go = and i1 %keep, %below
  br i1 %go, label %guard, label %finish
guard:
  %scans = icmp sge i64 %scan_len, 0
  %full = icmp sge i64 %i, %scan_len
  %over = and i1 %scans, %full
  br i1 %over, label %overrun, label %body
overrun:
  %past = add i64 %i, 1
  ret i64 %past
body:
  store i64 %i, ptr %it
  %any_k = icmp sgt i64 %nk, 0
  br i1 %any_k, label %kernel, label %after_body
kernel:
  %k = phi i64 [ 0, %body ], [ %k1, %kernel ]
  %fp = getelementptr ptr, ptr %fns, i64 %k
  %fn = load ptr, ptr %fp
  %ap = getelementptr ptr, ptr %args, i64 %k
  %arg = load ptr, ptr %ap
  call void %fn(ptr %arg)
  %k1 = add i64 %k, 1
  %more_k = icmp slt i64 %k1, %nk
  br i1 %more_k, label %kernel, label %after_body
after_body:
  %c = load i8, ptr %cout
  %keep1 = icmp ne i8 %c, 0
  call void @copies(i64 %n_scan, i64 %scan, i64 %i)
  call void @copies(i64 %n_carry, i64 %carry, i64 0)
  br label %next
next:
  %i1 = add i64 %i, 1
  br label %check
finish:
  call void @copies(i64 %n_post, i64 %post, i64 0)
  ret i64 %i
}
"""

#: The ctypes function ``tessera_run_loop`` (compiled on first use, never freed).
runner = machine.jit_runner(lambda tm: _IR, "tessera_run_loop", _RUNNER_TYPE)


def copy_list(copies: list[tuple[int, int, int]]) -> ctypes.Array:
    """The ``i64`` triples ``(dst, src, bytes)`` of a copy list (at least one slot, so that
    its address is valid when it is empty)."""
    flat = [x for triple in copies for x in triple]
    return (ctypes.c_int64 * max(len(flat), 1))(*flat)
