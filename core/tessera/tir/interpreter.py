"""A reference interpreter for TIR: runs a :class:`~tessera.tir.stmt.PrimFunc` on numpy arrays.

It exists for tests: every lowering pass is checked by running the function before and after
the pass on the same random data. Speed is irrelevant; clarity and exact semantics matter:

* buffers are addressed through their flat memory (``elem_offset + sum(index * stride)``,
  row-major strides unless the buffer declares its own), so multi-dimensional and flattened
  (1-D) buffers over the same array both work;
* vector expressions (:class:`Ramp`, :class:`Broadcast` and everything built on them) are numpy
  vectors of ``lanes`` elements;
* integer ``//`` and ``%`` are floor division and modulo, casts use ``numpy.astype``;
* every loop kind (serial, parallel, vectorized, unrolled, thread-bound) runs serially;
* :class:`Allocate` gives memory filled with NaN (floats) or a sentinel value (integers), so
  reading it before writing shows in the result;
* loads and stores outside a buffer raise :class:`IndexError` naming the buffer.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tessera.ir.cast import saturating_astype
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.dot_product import DOT2_S16, DP4A, dot2_s16, dp4a
from tessera.tir.functor import method_for

__all__ = ["run", "bind_sizes", "eval_expr"]



def _np_dtype(dtype: str) -> np.dtype:
    return np.dtype(bool) if dtype == "bool" else np.dtype(dtype)


def _as(value: Any, dtype: str) -> np.ndarray:
    """``value`` as a numpy array (0-d or 1-d) of ``dtype``."""
    arr = np.asarray(value)
    want = _np_dtype(dtype)
    if arr.dtype != want:
        arr = arr.astype(want)
    return arr


def _erf(x: np.ndarray) -> np.ndarray:
    return np.vectorize(math.erf, otypes=[np.float64])(x)


_UNARY_CALLS: dict[str, Any] = {
    "exp": np.exp, "exp2": np.exp2, "log": np.log, "log2": np.log2, "log10": np.log10,
    "log1p": np.log1p, "expm1": np.expm1,
    "sqrt": np.sqrt, "tanh": np.tanh, "sin": np.sin, "cos": np.cos, "tan": np.tan,
    "erf": _erf, "fabs": np.abs, "abs": np.abs, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "trunc": np.trunc, "sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "rsqrt": lambda x: 1.0 / np.sqrt(x), "isnan": np.isnan, "isinf": np.isinf,
    "isfinite": np.isfinite, "sign": np.sign,
}
_BINARY_CALLS: dict[str, Any] = {
    "pow": np.power, "atan2": np.arctan2, "fmod": np.fmod, "fmax": np.fmax, "fmin": np.fmin,
    "copysign": np.copysign,
}

_BIN_OPS: dict[type, Any] = {
    E.Add: np.add, E.Sub: np.subtract, E.Mul: np.multiply, E.Div: np.true_divide,
    E.FloorDiv: np.floor_divide, E.FloorMod: np.mod, E.Min: np.minimum, E.Max: np.maximum,
    E.EQ: np.equal, E.NE: np.not_equal, E.LT: np.less, E.LE: np.less_equal,
    E.GT: np.greater, E.GE: np.greater_equal, E.And: np.logical_and, E.Or: np.logical_or,
}


class _Memory:
    """A buffer's storage: a flat numpy array plus the buffer's addressing."""

    def __init__(self, buffer: Buffer, flat: np.ndarray, shape: list[int], strides: list[int],
                 offset: int):
        self.buffer = buffer
        self.shape = shape
        self.flat = flat
        self.strides = strides
        self.offset = offset

    def address(self, indices: list[np.ndarray]) -> np.ndarray:
        buf = self.buffer
        if len(indices) != len(self.strides):
            raise IndexError(f"buffer {buf.name} has {len(self.strides)} dimension(s) but is "
                             f"indexed with {len(indices)} index(es)")
        addr: Any = np.int64(self.offset)
        for dim, (idx, stride, extent) in enumerate(zip(indices, self.strides, self.shape)):
            idx = np.asarray(idx).astype(np.int64)
            if idx.size and (idx.min() < 0 or idx.max() >= extent):
                raise IndexError(f"index {idx.tolist()} of dimension {dim} of buffer {buf.name} "
                                 f"is outside [0, {extent})")
            addr = addr + idx * np.int64(stride)
        addr = np.asarray(addr, dtype=np.int64)
        if addr.size and (addr.min() < 0 or addr.max() >= self.flat.size):
            shown = [np.asarray(i).tolist() for i in indices]
            raise IndexError(f"access to buffer {buf.name} at {shown} is outside its "
                             f"{self.flat.size} element(s)")
        return addr


class _Interpreter:
    def __init__(self) -> None:
        self.env: dict[E.Var, np.ndarray] = {}
        self.mem: dict[int, _Memory] = {}
        self.by_name: dict[str, list[_Memory]] = {}

    # -- memory ---------------------------------------------------------------------------
    def bind(self, buffer: Buffer, flat: np.ndarray) -> None:
        shape = [self.scalar_int(s) for s in buffer.shape]
        if buffer.strides is not None:
            strides = [self.scalar_int(s) for s in buffer.strides]
        else:
            strides = []
            acc = 1
            for s in reversed(shape):
                strides.append(acc)
                acc *= s
            strides.reverse()
        m = _Memory(buffer, flat, shape, strides, self.scalar_int(buffer.elem_offset))
        self.mem[id(buffer)] = m
        self.by_name.setdefault(buffer.name, []).append(m)

    def unbind(self, buffer: Buffer) -> None:
        m = self.mem.pop(id(buffer))
        self.by_name[buffer.name].remove(m)

    def memory(self, buffer: Buffer) -> _Memory:
        m = self.mem.get(id(buffer))
        if m is not None:
            return m
        # A pass may have rebuilt an equivalent Buffer object: fall back to the name.
        ms = self.by_name.get(buffer.name)
        if ms:
            return ms[-1]
        raise KeyError(f"buffer {buffer.name} is neither a parameter nor allocated")

    def scalar_int(self, e: Any) -> int:
        v = self.eval(E.convert(e))
        if np.ndim(v) != 0:
            raise ValueError(f"expected a scalar, got a vector from {e}")
        return int(v)

    # -- expressions ----------------------------------------------------------------------
    def eval(self, e: E.PrimExpr) -> np.ndarray:
        method = method_for(self, "e_", e)
        if method is None:
            if isinstance(e, E.BinaryOp):
                return self.e_BinaryOp(e)
            raise NotImplementedError(f"the TIR interpreter cannot evaluate "
                                      f"{type(e).__name__}: {e}")
        return method(e)

    def e_IntImm(self, e: E.IntImm) -> np.ndarray:
        return _as(e.value, e.dtype)

    def e_FloatImm(self, e: E.FloatImm) -> np.ndarray:
        return _as(e.value, e.dtype)

    def e_Var(self, e: E.Var) -> np.ndarray:
        if e not in self.env:
            raise NameError(f"variable {e.name} is used outside its scope")
        return self.env[e]

    def e_BinaryOp(self, e: E.BinaryOp) -> np.ndarray:
        a, b = self.eval(e.a), self.eval(e.b)
        op = _BIN_OPS[type(e)]
        if isinstance(e, E.FloorDiv | E.FloorMod) and E.is_int(e.a.dtype):
            # Python semantics; a zero divisor has no meaning: yield 0 rather than crash.
            b = np.where(b == 0, np.ones_like(b), b) if np.any(b == 0) else b
        return _as(op(a, b), e.dtype)

    def e_Not(self, e: E.Not) -> np.ndarray:
        return _as(np.logical_not(self.eval(e.a)), "bool")

    def e_Select(self, e: E.Select) -> np.ndarray:
        c = self.eval(e.condition)
        t, f = self.eval(e.true_value), self.eval(e.false_value)
        return _as(np.where(c, t, f), e.dtype)

    def e_Cast(self, e: E.Cast) -> np.ndarray:
        # float -> int saturates (tessera.ir.cast), like the llvm backend's fptosi.sat
        return saturating_astype(self.eval(e.value), _np_dtype(e.dtype))

    def e_Call(self, e: E.Call) -> np.ndarray:
        if e.name == E.MASKED_LOAD:
            return self.masked_load(e)
        args = [self.eval(a) for a in e.args]
        if e.name in _UNARY_CALLS and len(args) == 1:
            x = args[0]
            if e.name in ("fabs", "abs", "sign", "isnan", "isinf", "isfinite") or E.is_float(
                    str(x.dtype)):
                return _as(_UNARY_CALLS[e.name](x), e.dtype)
            return _as(_UNARY_CALLS[e.name](x.astype(np.float64)), e.dtype)
        if e.name in _BINARY_CALLS and len(args) == 2:
            return _as(_BINARY_CALLS[e.name](args[0], args[1]), e.dtype)
        if e.name == "fma" and len(args) == 3:
            return _as(args[0] * args[1] + args[2], e.dtype)
        if e.name in DP4A and len(args) == 3:
            return _as(dp4a(e.name, *args), e.dtype)
        if e.name == DOT2_S16 and len(args) == 3:
            return _as(dot2_s16(*args), e.dtype)
        if e.name in ("max", "min") and len(args) == 2:
            op = np.maximum if e.name == "max" else np.minimum
            return _as(op(args[0], args[1]), e.dtype)
        raise NotImplementedError(f"the TIR interpreter has no intrinsic {e.name!r} "
                                  f"with {len(args)} argument(s)")

    def masked_load(self, e: E.Call) -> np.ndarray:
        """``masked_load(B[index], mask)``: the lanes inside ``mask`` read, the others 0 (their
        addresses are not checked: they may lie outside the buffer)."""
        load, mask = e.args
        if not isinstance(load, E.BufferLoad):
            raise ValueError(f"{E.MASKED_LOAD} of something other than a load: {e}")
        inside = np.broadcast_to(self.eval(mask), (e.lanes,))
        m = self.memory(load.buffer)
        out = np.zeros(e.lanes, dtype=_np_dtype(e.dtype))
        if inside.any():
            indices = [np.broadcast_to(self.eval(i), (e.lanes,))[inside] for i in load.indices]
            out[inside] = m.flat[m.address(indices)]
        return out

    def e_BufferLoad(self, e: E.BufferLoad) -> np.ndarray:
        m = self.memory(e.buffer)
        addr = m.address([self.eval(i) for i in e.indices])
        return _as(m.flat[addr], e.dtype)

    def e_Ramp(self, e: E.Ramp) -> np.ndarray:
        base, stride = self.eval(e.base), self.eval(e.stride)
        if np.ndim(base) or np.ndim(stride):
            raise ValueError(f"ramp with a vector base or stride: {e}")
        lanes = np.arange(e.lanes, dtype=_np_dtype(e.dtype))
        return _as(base + stride * lanes, e.dtype)

    def e_Broadcast(self, e: E.Broadcast) -> np.ndarray:
        v = self.eval(e.value)
        if np.ndim(v) == 0:
            return _as(np.full(e.lanes, v), e.dtype)
        # A broadcast of a vector repeats it (TVM semantics for lanes multiples).
        return _as(np.tile(v, e.lanes // max(v.size, 1)), e.dtype)

    def e_Let(self, e: E.Let) -> np.ndarray:
        value = self.eval(e.value)
        with _Binding(self.env, e.var, value):
            return self.eval(e.body)

    def e_ProducerLoad(self, e: E.ProducerLoad) -> np.ndarray:
        raise NotImplementedError(f"ProducerLoad {e} survives in lowered TIR; lower TE first")

    def e_Reduce(self, e: E.Reduce) -> np.ndarray:
        raise NotImplementedError(f"Reduce {e} survives in lowered TIR; lower TE first")

    # -- statements -----------------------------------------------------------------------
    def exec(self, s: S.Stmt | None) -> None:
        if s is None:
            return
        method = getattr(self, "s_" + type(s).__name__, None)
        if method is None:
            raise NotImplementedError(f"the TIR interpreter cannot run {type(s).__name__}")
        method(s)

    def s_SeqStmt(self, s: S.SeqStmt) -> None:
        for x in s.seq:
            self.exec(x)

    def s_For(self, s: S.For) -> None:
        lo = self.scalar_int(s.min)
        extent = self.scalar_int(s.extent)
        dtype = _np_dtype(s.loop_var.dtype)
        saved = self.env.get(s.loop_var, _MISSING)
        try:
            for i in range(lo, lo + extent):
                self.env[s.loop_var] = np.asarray(i, dtype=dtype)
                self.exec(s.body)
        finally:
            _restore(self.env, s.loop_var, saved)

    def s_BufferStore(self, s: S.BufferStore) -> None:
        m = self.memory(s.buffer)
        if isinstance(s.value, E.Call) and s.value.name == E.MASKED_STORE:
            # only the lanes inside the mask are written (the others' addresses may lie
            # outside the buffer)
            value, mask = s.value.args
            lanes = s.value.lanes
            inside = np.broadcast_to(self.eval(mask), (lanes,))
            if inside.any():
                vals = np.broadcast_to(self.eval(value), (lanes,))[inside]
                indices = [np.broadcast_to(self.eval(i), (lanes,))[inside] for i in s.indices]
                m.flat[m.address(indices)] = _as(vals, s.buffer.dtype)
            return
        value = self.eval(s.value)
        addr = m.address([self.eval(i) for i in s.indices])
        if np.ndim(value) and np.ndim(addr) and value.size != addr.size:
            raise ValueError(f"store to {s.buffer.name}: {value.size} value lane(s) for "
                             f"{addr.size} address(es)")
        m.flat[addr] = _as(value, s.buffer.dtype)

    def s_IfThenElse(self, s: S.IfThenElse) -> None:
        c = self.eval(s.condition)
        if np.ndim(c):
            raise ValueError(f"if-condition is a vector: {s.condition}")
        if bool(c):
            self.exec(s.then_case)
        else:
            self.exec(s.else_case)

    def s_LetStmt(self, s: S.LetStmt) -> None:
        value = self.eval(s.value)
        with _Binding(self.env, s.var, value):
            self.exec(s.body)

    def s_Allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        shape = [self.scalar_int(d) for d in buf.shape]
        size = math.prod(shape)
        if buf.strides is not None:
            strides = [self.scalar_int(d) for d in buf.strides]
            size = max(size, 1 + sum((d - 1) * st for d, st in zip(shape, strides)))
        size += self.scalar_int(buf.elem_offset)
        flat = np.empty(size, dtype=_np_dtype(buf.dtype))
        if E.is_float(buf.dtype):
            flat.fill(np.nan)
        elif buf.dtype == "bool":
            flat.fill(True)
        else:
            flat.fill(np.iinfo(flat.dtype).max - 7)  # a recognisable garbage value
        self.bind(buf, flat)
        try:
            self.exec(s.body)
        finally:
            self.unbind(buf)

    def s_Evaluate(self, s: S.Evaluate) -> None:
        self.eval(s.value)

    def s_Barrier(self, s: S.Barrier) -> None:
        raise NotImplementedError(
            "the TIR interpreter runs GPU threads one after another, so it cannot honour a "
            "barrier; run the generated CUDA C with its host harness instead")


_MISSING = object()


def _restore(env: dict, var: E.Var, saved: Any) -> None:
    if saved is _MISSING:
        env.pop(var, None)
    else:
        env[var] = saved


class _Binding:
    """Binds a variable for the duration of a ``with`` block (restoring shadowed values)."""

    def __init__(self, env: dict, var: E.Var, value: Any) -> None:
        self.env, self.var, self.value = env, var, value

    def __enter__(self) -> None:
        self.saved = self.env.get(self.var, _MISSING)
        self.env[self.var] = self.value

    def __exit__(self, *exc: Any) -> None:
        _restore(self.env, self.var, self.saved)


def _flat_view(buffer: Buffer, arr: np.ndarray) -> tuple[np.ndarray, bool]:
    """A flat view of ``arr`` (or a flat copy and True when no view is possible)."""
    flat = arr.reshape(-1)
    if flat.size and not np.shares_memory(flat, arr):
        return flat.copy(), True
    return flat, False


def run(func: S.PrimFunc, args: Sequence[np.ndarray] | dict[str, np.ndarray],
        sizes: Mapping[str | E.Var, int] | None = None) -> None:
    """Execute ``func`` on numpy arrays, writing its outputs in place.

    ``args`` gives one array per parameter buffer, in order, or a dict keyed by buffer name.
    An array may have the buffer's shape or any shape with the same number of elements (a
    flattened buffer accepts the original multi-dimensional array); its dtype must match.

    A symbolic function's size variables (``func.size_vars``) take their values from ``sizes``
    (keyed by variable or by name) where given, else from the arrays: a buffer dimension that
    is exactly a size variable takes the array's extent there (arrays with the buffer's number
    of dimensions only; two arrays that disagree are an error). A size variable left unbound,
    or bound outside its range (:meth:`PrimFunc.var_bounds`), is a :class:`ValueError`."""
    if isinstance(args, dict):
        missing = [b.name for b in func.params if b.name not in args]
        if missing:
            raise ValueError(f"{func.name}: no array for parameter(s) {missing}")
        arrays = [args[b.name] for b in func.params]
    else:
        arrays = list(args)
        if len(arrays) != len(func.params):
            raise ValueError(f"{func.name} takes {len(func.params)} buffer(s), got "
                             f"{len(arrays)}")
    interp = _Interpreter()
    for var, value in bind_sizes(func, arrays, sizes).items():
        interp.env[var] = np.asarray(value, dtype=_np_dtype(var.dtype))
    write_back: list[tuple[np.ndarray, np.ndarray]] = []
    for buf, arr in zip(func.params, arrays):
        if not isinstance(arr, np.ndarray):
            raise TypeError(f"{func.name}: parameter {buf.name} needs a numpy array, got "
                            f"{type(arr).__name__}")
        if arr.dtype != _np_dtype(buf.dtype):
            raise TypeError(f"{func.name}: parameter {buf.name} is {buf.dtype}, the array is "
                            f"{arr.dtype}")
        flat, copied = _flat_view(buf, arr)
        shape = [interp.scalar_int(d) for d in buf.shape]
        if buf.strides is None and math.prod(shape) + interp.scalar_int(
                buf.elem_offset) > flat.size:
            raise ValueError(f"{func.name}: parameter {buf.name} needs "
                             f"{math.prod(shape)} element(s), the array has {flat.size}")
        interp.bind(buf, flat)
        if copied:
            write_back.append((arr, flat))
    with np.errstate(all="ignore"):
        interp.exec(func.body)
    for arr, flat in write_back:
        arr[...] = flat.reshape(arr.shape)


def bind_sizes(func: S.PrimFunc, arrays: Sequence[Any],
               sizes: Mapping[str | E.Var, int] | None = None) -> dict[E.Var, int]:
    """The value of every size variable of ``func`` (and of every other variable that is a
    dimension of a parameter) for a call on ``arrays`` with ``sizes`` (see :func:`run`)."""
    out: dict[E.Var, int] = {}
    by_name = {v.name: v for v in func.size_vars}
    for key, value in (sizes or {}).items():
        var = key if isinstance(key, E.Var) else by_name.get(key)
        if var is None or not any(var is v for v in func.size_vars):
            name = key.name if isinstance(key, E.Var) else key
            raise ValueError(f"{func.name}: {name!r} is not a size variable of the function "
                             f"(its size variables: {[v.name for v in func.size_vars]})")
        if isinstance(value, bool) or not isinstance(value, int | np.integer):
            raise TypeError(f"{func.name}: size {var.name} must be an integer, got "
                            f"{value!r}")
        out[var] = int(value)
    given = set(out)
    inferred_from: dict[E.Var, str] = {}
    for buf, arr in zip(func.params, arrays):
        if len(buf.shape) != np.ndim(arr):
            continue
        for dim, extent in zip(buf.shape, np.shape(arr)):
            if not isinstance(dim, E.Var) or dim in given:
                continue
            if dim in out and out[dim] != extent:
                raise ValueError(f"{func.name}: size {dim.name} is {out[dim]} from the array "
                                 f"of {inferred_from[dim]} but {extent} from the array of "
                                 f"{buf.name}")
            out[dim] = int(extent)
            inferred_from.setdefault(dim, buf.name)
    bounds = func.var_bounds()
    for var in func.size_vars:
        if var not in out:
            raise ValueError(f"{func.name}: size variable {var.name} is not bound: no "
                             f"parameter dimension is exactly {var.name}; pass it in "
                             f"sizes={{{var.name!r}: ...}}")
        lo, hi = bounds[var]
        value = out[var]
        if (lo is not None and value < lo) or (hi is not None and value > hi):
            shown = f"[{lo}, {hi if hi is not None else 'inf'}]"
            raise ValueError(f"{func.name}: size {var.name} = {value} is outside its range "
                             f"{shown}")
    return out


def eval_expr(expr: E.PrimExpr, env: dict[E.Var, Any] | None = None) -> Any:
    """Evaluate a buffer-free expression with variables bound by ``env``; returns a numpy
    scalar or a numpy vector (for lanes > 1)."""
    interp = _Interpreter()
    for var, value in (env or {}).items():
        interp.env[var] = _as(value, var.dtype)
    with np.errstate(all="ignore"):
        out = interp.eval(expr)
    return out[()] if np.ndim(out) == 0 else out
