"""TIR -> LLVM IR: turns lowered ``tir.PrimFunc`` s into an ``llvmlite.ir.Module``.

Input: PrimFuncs whose buffers are 1-D (one index per load and store; the TIR pass pipeline
flattens them), vectors written as ``Ramp``/``Broadcast``, loops of any kind, ``Allocate``,
``LetStmt``, ``IfThenElse`` and ``Evaluate``. ``ProducerLoad`` and ``Reduce`` must have been
lowered away.

Calling convention. Each PrimFunc ``f`` becomes an exported ``void f(i8** args)``: ``args[i]``
is the data pointer of ``params[i]``. ``f`` loads the pointers and calls the internal
``f_body(ptr noalias ...)``, so LLVM knows that distinct buffers do not overlap. Index
arithmetic is 64-bit.

Types. ``bool`` is ``i1`` in registers and ``i8`` in memory; ``float16`` is ``half``
(conversions to and from integers and float64 go through float32).

Parallel loops. A ``For`` of kind PARALLEL is outlined into an internal function
``void body(i64 begin, i64 end, ptr closure)``: the buffers and variables it uses from the
enclosing code are stored in a closure struct on the caller's stack, and the loop is launched
with ``tessera_parallel_for(body, closure, extent, grain)`` (the native pool of
:mod:`tessera_llvm.parallel`; the grain is the loop's ``parallel_grain`` annotation, default 1).
``body`` unpacks the closure and calls ``body_impl`` whose buffer arguments are ``noalias``.
A parallel loop inside another one runs serially.

Memory. ``Allocate`` of at most :data:`MAX_STACK_BYTES` with a constant size is an ``alloca``
in the entry block of the function it runs in (the outlined function inside a parallel loop, so
every thread has its own); larger or variable-size allocations use ``aligned_alloc``/``free``.

Lifecycle: ``gen = CodeGenerator(name, triple, data_layout)``, ``gen.add_function(f)`` for each
PrimFunc, ``module = gen.finalize()``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from llvmlite import ir

from tessera.errors import CompileError
from tessera.tir import expr as E
from tessera.tir import stmt as S
from tessera.tir.buffer import Buffer
from tessera.tir.functor import post_order_visit
from tessera_llvm.intrinsics import MathEmitter, splat

#: Largest constant-size ``Allocate`` placed on the stack; larger ones use the heap.
MAX_STACK_BYTES = 64 * 1024
#: Alignment of stack and heap allocations, in bytes.
ALLOC_ALIGN = 64
#: Loops of kind UNROLLED with a constant extent up to this are unrolled by the code generator.
MAX_UNROLL = 64
#: The pool entry point that parallel loops call.
PARALLEL_FOR = "tessera_parallel_for"

I1 = ir.IntType(1)
I8 = ir.IntType(8)
I32 = ir.IntType(32)
I64 = ir.IntType(64)
PTR = ir.PointerType()
#: Large scratch buffers outside parallel loops live in static module workspaces (see
#: ``_stmt_Allocate``); False allocates them per call.
STATIC_WORKSPACE = True
VOID = ir.VoidType()

_FLOAT_TYPES: dict[str, ir.Type] = {"float16": ir.HalfType(), "float32": ir.FloatType(),
                                    "float64": ir.DoubleType()}


def scalar_type(dtype: str, memory: bool = False) -> ir.Type:
    """The LLVM type of one ``dtype`` element, in registers or (``memory``) in a buffer."""
    if dtype in _FLOAT_TYPES:
        return _FLOAT_TYPES[dtype]
    if dtype == "bool":
        return I8 if memory else I1
    if dtype.startswith(("int", "uint")):
        return ir.IntType(E.bits(dtype))
    raise TypeError(f"no LLVM type for dtype {dtype!r}")


def value_type(dtype: str, lanes: int = 1) -> ir.Type:
    """The register type of a ``dtype`` value with ``lanes`` lanes."""
    t = scalar_type(dtype)
    return ir.VectorType(t, lanes) if lanes > 1 else t


def element_bytes(dtype: str) -> int:
    """Bytes per element of a ``dtype`` buffer."""
    return 1 if dtype == "bool" else E.bits(dtype) // 8


def _is_signed(dtype: str) -> bool:
    return dtype.startswith("int")


def _const_int(e: E.PrimExpr) -> int | None:
    """The value of an integer constant, looking through Broadcast."""
    while isinstance(e, E.Broadcast):
        e = e.value
    return e.value if isinstance(e, E.IntImm) else None


def _const_float(e: E.PrimExpr) -> float | None:
    while isinstance(e, E.Broadcast):
        e = e.value
    if isinstance(e, E.FloatImm | E.IntImm):
        return float(e.value)
    return None


def _short(node: Any) -> str:
    text = " ".join(repr(node).split())
    return text if len(text) <= 160 else text[:157] + "..."


@dataclass
class _Scope:
    """The LLVM function being filled: its builders and the values visible in it."""

    function: ir.Function
    builder: ir.IRBuilder
    alloca_builder: ir.IRBuilder
    body_block: ir.Block
    vars: dict[E.Var, ir.Value] = field(default_factory=dict)
    buffers: dict[E.Var, ir.Value] = field(default_factory=dict)
    in_parallel: bool = False


class CodeGenerator:
    """Builds one LLVM module from PrimFuncs: create, :meth:`add_function`, :meth:`finalize`."""

    def __init__(self, name: str, triple: str = "", data_layout: str = "",
                 fastmath: tuple[str, ...] = ("contract", "reassoc")) -> None:
        self.module = ir.Module(name=name)
        self.module.triple = triple
        self.module.data_layout = data_layout
        self.math = MathEmitter(self.module)
        #: Fast-math flags put on float arithmetic: ``contract`` lets LLVM form FMAs,
        #: ``reassoc`` lets it vectorize float reductions (sums and means over a row), as
        #: onnxruntime's kernels do; results may differ from a sequential sum in the last bits.
        #: No ``nnan``/``ninf``: NaN and infinity keep their IEEE behaviour.
        self.fastmath = fastmath
        self.function_names: list[str] = []
        self._finalized = False

    def add_function(self, func: S.PrimFunc) -> None:
        """Generate ``func`` (and its outlined parallel bodies) into the module."""
        if self._finalized:
            raise CompileError("CodeGenerator.add_function after finalize")
        if func.name in self.function_names or func.name in self.module.globals:
            raise CompileError(f"llvm codegen: a function named {func.name!r} is already in "
                               f"module {self.module.name!r}")
        _FunctionCodegen(self, func).build()
        self.function_names.append(func.name)

    def finalize(self) -> ir.Module:
        """The finished module (no more functions can be added)."""
        self._finalized = True
        return self.module


def generate_module(funcs: list[S.PrimFunc], name: str, triple: str = "",
                    data_layout: str = "") -> ir.Module:
    """An LLVM module with one exported ``void f(i8**)`` per PrimFunc."""
    gen = CodeGenerator(name, triple, data_layout)
    for f in funcs:
        gen.add_function(f)
    return gen.finalize()


class _FunctionCodegen:
    """Generates one PrimFunc; ``self.scope`` is the LLVM function currently filled."""

    def __init__(self, gen: CodeGenerator, func: S.PrimFunc) -> None:
        self.gen = gen
        self.module = gen.module
        self.func = func
        self.scope: _Scope
        self._outlined = 0

    # -- errors --------------------------------------------------------------------------------
    def error(self, what: str, node: Any = None) -> CompileError:
        where = f"llvm codegen of PrimFunc '{self.func.name}'"
        if node is None:
            return CompileError(f"{where}: {what}")
        return CompileError(f"{where}: {what}: {type(node).__name__} {_short(node)}")

    # -- functions -------------------------------------------------------------------------
    def _new_scope(self, function: ir.Function, in_parallel: bool) -> _Scope:
        entry = function.append_basic_block("entry")
        body = function.append_basic_block("body")
        return _Scope(function, ir.IRBuilder(body), ir.IRBuilder(entry), body,
                      in_parallel=in_parallel)

    @staticmethod
    def _close_scope(scope: _Scope) -> None:
        scope.alloca_builder.branch(scope.body_block)
        if not scope.builder.block.is_terminated:
            scope.builder.ret_void()

    def _internal_function(self, name: str, fnty: ir.FunctionType) -> ir.Function:
        fn = ir.Function(self.module, fnty, name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        return fn

    def build(self) -> None:
        func = self.func
        for p in func.params:
            if not isinstance(p, Buffer):
                raise self.error(f"parameter {p!r} is not a buffer")
        n = len(func.params)
        body_fn = self._internal_function(f"{func.name}_body", ir.FunctionType(VOID, [PTR] * n))
        for arg, p in zip(body_fn.args, func.params):
            arg.name = p.name
            arg.add_attribute("noalias")
        self.scope = self._new_scope(body_fn, in_parallel=False)
        for arg, p in zip(body_fn.args, func.params):
            self.scope.buffers[p.data] = arg
        self.stmt(func.body)
        self._close_scope(self.scope)

        entry = ir.Function(self.module, ir.FunctionType(VOID, [PTR]), name=func.name)
        entry.attributes.add("nounwind")
        entry.args[0].name = "args"
        b = ir.IRBuilder(entry.append_basic_block("entry"))
        ptrs = []
        for i, p in enumerate(func.params):
            slot = b.gep(entry.args[0], [ir.Constant(I64, i)], inbounds=True, source_etype=PTR)
            ptrs.append(b.load(slot, name=p.name, typ=PTR, align=8))
        b.call(body_fn, ptrs)
        b.ret_void()

    # -- statements -----------------------------------------------------------------------------
    def stmt(self, s: S.Stmt | None) -> None:
        if s is None:
            return
        method = getattr(self, "_stmt_" + type(s).__name__, None)
        if method is None:
            raise self.error("unsupported statement", s)
        method(s)

    def _stmt_SeqStmt(self, s: S.SeqStmt) -> None:
        for item in s.seq:
            self.stmt(item)

    def _stmt_Evaluate(self, s: S.Evaluate) -> None:
        if isinstance(s.value, E.IntImm | E.FloatImm):
            return
        self.expr(s.value)

    def _stmt_LetStmt(self, s: S.LetStmt) -> None:
        with self._bind(s.var, self.expr(s.value)):
            self.stmt(s.body)

    def _stmt_IfThenElse(self, s: S.IfThenElse) -> None:
        if s.condition.lanes != 1:
            raise self.error("IfThenElse condition must be a scalar", s.condition)
        cond = self._as_bool(self.expr(s.condition), s.condition)
        b = self.scope.builder
        if s.else_case is None:
            with b.if_then(cond):
                self.stmt(s.then_case)
        else:
            with b.if_else(cond) as (then, otherwise):
                with then:
                    self.stmt(s.then_case)
                with otherwise:
                    self.stmt(s.else_case)

    def _stmt_BufferStore(self, s: S.BufferStore) -> None:
        value = self.expr(s.value)
        index = self._flat_index(s, s.buffer, s.indices)
        lanes = max(index.lanes, s.value.lanes)
        if s.value.lanes != lanes:
            value = self._broadcast(value, lanes)
        self._store(s, s.buffer, index, value, lanes)

    def _stmt_Allocate(self, s: S.Allocate) -> None:
        buf = s.buffer
        mem_ty = scalar_type(buf.dtype, memory=True)
        elem = element_bytes(buf.dtype)
        b = self.scope.builder
        sizes = [_const_int(d) for d in buf.shape]
        if all(v is not None for v in sizes):
            count = math.prod(v for v in sizes if v is not None)
            if count * elem <= MAX_STACK_BYTES:
                arr = self.scope.alloca_builder.alloca(ir.ArrayType(mem_ty, max(count, 1)),
                                                       name=buf.name)
                arr.align = ALLOC_ALIGN
                arr.type = PTR  # opaque, so llvmlite accepts stores of any element type
                with self._bind_buffer(buf, arr):
                    self.stmt(s.body)
                return
            if STATIC_WORKSPACE and not self.scope.in_parallel:
                # A large scratch buffer outside parallel loops (a padded input, a transposed
                # operand) lives in a static workspace of this module: allocating and freeing
                # it per call costs page faults on every call once malloc returns it to the
                # OS. Kernels of one module are not called concurrently.
                arr_ty = ir.ArrayType(mem_ty, count)
                ws = ir.GlobalVariable(self.gen.module, arr_ty,
                                       name=f"tessera.ws.{len(self.gen.module.globals)}")
                ws.linkage = "internal"
                ws.initializer = ir.Constant(arr_ty, None)
                ws.align = ALLOC_ALIGN
                ws.type = PTR  # opaque, as for the allocas above
                with self._bind_buffer(buf, ws):
                    self.stmt(s.body)
                return
            nbytes: ir.Value = ir.Constant(I64, -(-count * elem // ALLOC_ALIGN) * ALLOC_ALIGN)
        else:
            count_v: ir.Value = ir.Constant(I64, 1)
            for d in buf.shape:
                count_v = b.mul(count_v, self._index_value(self.expr(d)))
            nbytes = b.mul(count_v, ir.Constant(I64, elem))
            nbytes = b.and_(b.add(nbytes, ir.Constant(I64, ALLOC_ALIGN - 1)),
                            ir.Constant(I64, -ALLOC_ALIGN))
            nbytes = b.select(b.icmp_signed("==", nbytes, ir.Constant(I64, 0)),
                              ir.Constant(I64, ALLOC_ALIGN), nbytes)
        alloc = self.gen.math.declare("aligned_alloc", PTR, [I64, I64])
        free = self.gen.math.declare("free", VOID, [PTR])
        ptr = b.call(alloc, [ir.Constant(I64, ALLOC_ALIGN), nbytes], name=buf.name)
        with self._bind_buffer(buf, ptr):
            self.stmt(s.body)
        self.scope.builder.call(free, [ptr])

    def _stmt_For(self, s: S.For) -> None:
        kind = s.kind
        if kind == S.ForKind.THREAD_BINDING:
            raise self.error("GPU thread binding is not supported on the CPU", s)
        if kind == S.ForKind.PARALLEL and not self.scope.in_parallel:
            self._parallel_for(s)
            return
        loop_ty = scalar_type(s.loop_var.dtype)
        if not isinstance(loop_ty, ir.IntType) or loop_ty.width == 1:
            raise self.error(f"loop variable of type {s.loop_var.dtype}", s)
        begin = self._cast_int(self.expr(s.min), loop_ty, s.min.dtype)
        extent = _const_int(s.extent)
        if kind == S.ForKind.UNROLLED and extent is not None and extent <= MAX_UNROLL:
            for i in range(extent):
                value = self.scope.builder.add(begin, ir.Constant(loop_ty, i))
                with self._bind(s.loop_var, value):
                    self.stmt(s.body)
            return
        end = self.scope.builder.add(begin, self._cast_int(self.expr(s.extent), loop_ty,
                                                           s.extent.dtype))
        self._serial_loop(s.loop_var, begin, end, lambda: self.stmt(s.body))

    def _serial_loop(self, var: E.Var, begin: ir.Value, end: ir.Value,
                     emit_body: Callable[[], None]) -> None:
        """``for var in [begin, end): emit_body()`` as header / body / latch blocks."""
        b = self.scope.builder
        pre = b.block
        header = b.append_basic_block("for_header")
        body = b.append_basic_block("for_body")
        exit_block = b.append_basic_block("for_end")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(begin.type, name=var.name)
        phi.add_incoming(begin, pre)
        b.cbranch(b.icmp_signed("<", phi, end), body, exit_block)
        b.position_at_end(body)
        with self._bind(var, phi):
            emit_body()
        b = self.scope.builder
        nxt = b.add(phi, ir.Constant(begin.type, 1))
        phi.add_incoming(nxt, b.block)
        b.branch(header)
        b.position_at_end(exit_block)

    # -- parallel loops -------------------------------------------------------------------------
    def _parallel_for(self, s: S.For) -> None:
        outer = self.scope
        b = outer.builder
        begin = self._index_value(self.expr(s.min))
        extent = self._index_value(self.expr(s.extent))
        grain = int(s.annotations.get("parallel_grain", 1) or 1)
        var_caps, buf_caps = self._captures(s.body, outer)

        self._outlined += 1
        base = f"{self.func.name}_parallel{self._outlined}"
        cap_types = [v.type for v in var_caps.values()]
        impl_ty = ir.FunctionType(VOID, [I64, I64, I64] + [PTR] * len(buf_caps) + cap_types)
        impl = self._internal_function(f"{base}_impl", impl_ty)
        for i, arg in enumerate(impl.args[3:3 + len(buf_caps)]):
            arg.add_attribute("noalias")
            arg.name = f"buf{i}"
        outlined = self._internal_function(base, ir.FunctionType(VOID, [I64, I64, PTR]))

        # The caller: pack the closure and launch.
        closure_ty = ir.LiteralStructType([I64] + [PTR] * len(buf_caps) + cap_types)
        closure = outer.alloca_builder.alloca(closure_ty, name="closure")
        closure.type = PTR
        fields = [begin, *buf_caps.values(), *var_caps.values()]
        for i, v in enumerate(fields):
            slot = b.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                         source_etype=closure_ty)
            b.store(v, slot)
        launch = self.gen.math.declare(PARALLEL_FOR, VOID, [PTR, PTR, I64, I64])
        b.call(launch, [outlined, closure, extent, ir.Constant(I64, grain)])

        # The outlined body: unpack the closure, call the implementation.
        ob = ir.IRBuilder(outlined.append_basic_block("entry"))
        lo, hi, cl = outlined.args
        unpacked = []
        for i, ty in enumerate(closure_ty.elements):
            slot = ob.gep(cl, [ir.Constant(I32, 0), ir.Constant(I32, i)], inbounds=True,
                          source_etype=closure_ty)
            unpacked.append(ob.load(slot, typ=ty))
        ob.call(impl, [lo, hi, *unpacked])
        ob.ret_void()

        # The implementation: the loop over [begin + lo, begin + hi).
        self.scope = self._new_scope(impl, in_parallel=True)
        try:
            args = impl.args
            for data, arg in zip(buf_caps, args[3:3 + len(buf_caps)]):
                self.scope.buffers[data] = arg
            for var, arg in zip(var_caps, args[3 + len(buf_caps):]):
                self.scope.vars[var] = arg
            ib = self.scope.builder
            start = ib.add(args[2], args[0])
            stop = ib.add(args[2], args[1])
            loop_ty = scalar_type(s.loop_var.dtype)
            if loop_ty != I64:
                start, stop = ib.trunc(start, loop_ty), ib.trunc(stop, loop_ty)
            self._serial_loop(s.loop_var, start, stop, lambda: self.stmt(s.body))
            self._close_scope(self.scope)
        finally:
            self.scope = outer

    def _captures(self, body: S.Stmt,
                  scope: _Scope) -> tuple[dict[E.Var, ir.Value], dict[E.Var, ir.Value]]:
        """The variables and buffer pointers of ``scope`` that ``body`` uses, in first-use
        order."""
        var_caps: dict[E.Var, ir.Value] = {}
        buf_caps: dict[E.Var, ir.Value] = {}

        def visit(node: Any) -> None:
            if isinstance(node, E.Var):
                if node in scope.vars and node not in var_caps:
                    var_caps[node] = scope.vars[node]
            elif isinstance(node, E.BufferLoad | S.BufferStore | S.Allocate):
                buf = node.buffer
                for e in (*buf.shape, buf.elem_offset):
                    post_order_visit(e, visit)
                data = buf.data
                if data in scope.buffers and data not in buf_caps:
                    buf_caps[data] = scope.buffers[data]

        post_order_visit(body, visit)
        return var_caps, buf_caps

    # -- scoping helpers --------------------------------------------------------------------
    @contextmanager
    def _bind(self, var: E.Var, value: ir.Value) -> Iterator[None]:
        table = self.scope.vars
        old = table.get(var)
        table[var] = value
        try:
            yield
        finally:
            if old is None:
                table.pop(var, None)
            else:
                table[var] = old

    @contextmanager
    def _bind_buffer(self, buf: Buffer, ptr: ir.Value) -> Iterator[None]:
        table = self.scope.buffers
        old = table.get(buf.data)
        table[buf.data] = ptr
        try:
            yield
        finally:
            if old is None:
                table.pop(buf.data, None)
            else:
                table[buf.data] = old

    # -- memory -----------------------------------------------------------------------------
    def _buffer_ptr(self, node: Any, buf: Buffer) -> ir.Value:
        ptr = self.scope.buffers.get(buf.data)
        if ptr is None:
            raise self.error(f"buffer {buf.name!r} is neither a parameter nor allocated here",
                             node)
        return ptr

    def _flat_index(self, node: Any, buf: Buffer, indices: tuple[E.PrimExpr, ...]) -> E.PrimExpr:
        if len(indices) != 1:
            raise self.error(f"buffer {buf.name!r} is accessed with {len(indices)} indices; "
                             "the code generator takes flattened 1-D buffers", node)
        index = indices[0]
        if not (_const_int(buf.elem_offset) == 0):
            offset = buf.elem_offset
            if offset.dtype != index.dtype:
                offset = E.cast(index.dtype, offset)
            index = index + offset
        return index

    @staticmethod
    def _contiguous_base(index: E.PrimExpr) -> E.PrimExpr | None:
        """``b`` when ``index`` is ``[b, b + 1, ...]`` (a unit-stride Ramp, maybe plus a
        Broadcast), else None."""
        if isinstance(index, E.Ramp):
            return index.base if _const_int(index.stride) == 1 else None
        if isinstance(index, E.Add):
            for ramp, other in ((index.a, index.b), (index.b, index.a)):
                if isinstance(ramp, E.Ramp) and isinstance(other, E.Broadcast):
                    if _const_int(ramp.stride) == 1 and ramp.base.dtype == other.value.dtype:
                        return E.Add(ramp.base, other.value)
        return None

    def _address(self, base_ptr: ir.Value, mem_ty: ir.Type, index: ir.Value) -> ir.Value:
        return self.scope.builder.gep(base_ptr, [index], inbounds=True, source_etype=mem_ty)

    def _load(self, node: E.BufferLoad) -> ir.Value:
        buf = node.buffer
        ptr = self._buffer_ptr(node, buf)
        mem_ty = scalar_type(buf.dtype, memory=True)
        align = element_bytes(buf.dtype)
        b = self.scope.builder
        index = self._flat_index(node, buf, node.indices)
        lanes = index.lanes
        if lanes == 1:
            v = b.load(self._address(ptr, mem_ty, self._index_value(self.expr(index))),
                       typ=mem_ty, align=align)
            return self._from_memory(v, buf.dtype)
        base = self._contiguous_base(index)
        if base is not None:
            addr = self._address(ptr, mem_ty, self._index_value(self.expr(base)))
            v = b.load(addr, typ=ir.VectorType(mem_ty, lanes), align=align)
            return self._from_memory(v, buf.dtype)
        if isinstance(index, E.Broadcast):
            scalar = b.load(self._address(ptr, mem_ty, self._index_value(self.expr(index.value))),
                            typ=mem_ty, align=align)
            return self._broadcast(self._from_memory(scalar, buf.dtype), lanes)
        idx = self._index_value(self.expr(index))
        out: ir.Value = ir.Constant(ir.VectorType(mem_ty, lanes), ir.Undefined)
        for lane in range(lanes):
            pos = ir.Constant(I32, lane)
            v = b.load(self._address(ptr, mem_ty, b.extract_element(idx, pos)), typ=mem_ty,
                       align=align)
            out = b.insert_element(out, v, pos)
        return self._from_memory(out, buf.dtype)

    def _store(self, node: S.BufferStore, buf: Buffer, index: E.PrimExpr, value: ir.Value,
               lanes: int) -> None:
        ptr = self._buffer_ptr(node, buf)
        mem_ty = scalar_type(buf.dtype, memory=True)
        align = element_bytes(buf.dtype)
        b = self.scope.builder
        value = self._to_memory(value, buf.dtype)
        if lanes == 1:
            b.store(value, self._address(ptr, mem_ty, self._index_value(self.expr(index))),
                    align=align)
            return
        base = self._contiguous_base(index)
        if base is not None:
            b.store(value, self._address(ptr, mem_ty, self._index_value(self.expr(base))),
                    align=align)
            return
        if index.lanes == 1:
            raise self.error("a vector value stored at a scalar index", node)
        idx = self._index_value(self.expr(index))
        for lane in range(lanes):
            pos = ir.Constant(I32, lane)
            b.store(b.extract_element(value, pos),
                    self._address(ptr, mem_ty, b.extract_element(idx, pos)), align=align)

    def _from_memory(self, v: ir.Value, dtype: str) -> ir.Value:
        if dtype != "bool":
            return v
        return self.scope.builder.icmp_unsigned("!=", v, splat(v.type, 0))

    def _to_memory(self, v: ir.Value, dtype: str) -> ir.Value:
        if dtype != "bool":
            return v
        ty = v.type
        mem = ir.VectorType(I8, ty.count) if isinstance(ty, ir.VectorType) else I8
        return self.scope.builder.zext(v, mem)

    # -- value helpers --------------------------------------------------------------------------
    def _index_value(self, v: ir.Value) -> ir.Value:
        """``v`` (an integer scalar or vector) as 64-bit indices."""
        ty = v.type
        elem = ty.element if isinstance(ty, ir.VectorType) else ty
        if not isinstance(elem, ir.IntType):
            raise self.error(f"index of type {ty} is not an integer")
        if elem.width == 64:
            return v
        target = ir.VectorType(I64, ty.count) if isinstance(ty, ir.VectorType) else I64
        if elem.width == 1:
            return self.scope.builder.zext(v, target)
        return self.scope.builder.sext(v, target)

    def _cast_int(self, v: ir.Value, ty: ir.Type, dtype: str) -> ir.Value:
        """The integer scalar ``v`` (of TIR ``dtype``) converted to the integer type ``ty``."""
        if v.type == ty:
            return v
        if not isinstance(v.type, ir.IntType):
            raise self.error(f"expected an integer, got a {dtype} value")
        b = self.scope.builder
        if v.type.width > ty.width:
            return b.trunc(v, ty)
        return b.sext(v, ty) if _is_signed(dtype) else b.zext(v, ty)

    def _broadcast(self, v: ir.Value, lanes: int) -> ir.Value:
        if isinstance(v.type, ir.VectorType):
            if v.type.count != lanes:
                raise self.error(f"cannot use a {v.type.count}-lane value as {lanes} lanes")
            return v
        if lanes == 1:
            return v
        vty = ir.VectorType(v.type, lanes)
        if isinstance(v, ir.Constant):
            return ir.Constant(vty, [v] * lanes)
        b = self.scope.builder
        one = b.insert_element(ir.Constant(vty, ir.Undefined), v, ir.Constant(I32, 0))
        mask = ir.Constant(ir.VectorType(I32, lanes), [0] * lanes)
        return b.shuffle_vector(one, ir.Constant(vty, ir.Undefined), mask)

    def _as_bool(self, v: ir.Value, node: E.PrimExpr) -> ir.Value:
        if node.dtype == "bool":
            return v
        raise self.error(f"condition has type {node.dtype}, expected bool", node)

    # -- expressions ----------------------------------------------------------------------------
    def expr(self, e: E.PrimExpr) -> ir.Value:
        method = getattr(self, "_expr_" + type(e).__name__, None)
        if method is None:
            if isinstance(e, E.ProducerLoad | E.Reduce):
                raise self.error("not lowered (run the TIR pass pipeline first)", e)
            raise self.error("unsupported expression", e)
        return method(e)

    def _expr_IntImm(self, e: E.IntImm) -> ir.Value:
        ty = scalar_type(e.dtype)
        width = ty.width
        value = e.value & ((1 << width) - 1)
        if value >= 1 << (width - 1) and width > 1:
            value -= 1 << width
        return ir.Constant(ty, value)

    def _expr_FloatImm(self, e: E.FloatImm) -> ir.Value:
        return ir.Constant(scalar_type(e.dtype), e.value)

    def _expr_Var(self, e: E.Var) -> ir.Value:
        v = self.scope.vars.get(e)
        if v is None:
            raise self.error(f"variable {e.name!r} is not bound", e)
        return v

    def _expr_Let(self, e: E.Let) -> ir.Value:
        with self._bind(e.var, self.expr(e.value)):
            return self.expr(e.body)

    def _expr_Broadcast(self, e: E.Broadcast) -> ir.Value:
        return self._broadcast(self.expr(e.value), e.lanes)

    def _expr_Ramp(self, e: E.Ramp) -> ir.Value:
        ty = scalar_type(e.dtype)
        vty = ir.VectorType(ty, e.lanes)
        base, stride = self.expr(e.base), self.expr(e.stride)
        if isinstance(base, ir.Constant) and isinstance(stride, ir.Constant):
            b0, s0 = _const_int(e.base), _const_int(e.stride)
            if b0 is not None and s0 is not None:
                return ir.Constant(vty, [b0 + i * s0 for i in range(e.lanes)])
        steps = ir.Constant(vty, list(range(e.lanes)))
        b = self.scope.builder
        offsets = b.mul(self._broadcast(stride, e.lanes), steps)
        return b.add(self._broadcast(base, e.lanes), offsets)

    def _expr_BufferLoad(self, e: E.BufferLoad) -> ir.Value:
        return self._load(e)

    def _operands(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value]:
        if e.a.dtype != e.b.dtype:
            raise self.error(f"operands have types {e.a.dtype} and {e.b.dtype}", e)
        a, b = self.expr(e.a), self.expr(e.b)
        lanes = max(e.a.lanes, e.b.lanes)
        return self._broadcast(a, lanes), self._broadcast(b, lanes)

    def _expr_Add(self, e: E.Add) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fadd(a, b, flags=self.gen.fastmath)
        return bld.or_(a, b) if e.a.dtype == "bool" else bld.add(a, b)

    def _expr_Sub(self, e: E.Sub) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fsub(a, b, flags=self.gen.fastmath)
        return bld.xor(a, b) if e.a.dtype == "bool" else bld.sub(a, b)

    def _expr_Mul(self, e: E.Mul) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        if E.is_float(e.a.dtype):
            return bld.fmul(a, b, flags=self.gen.fastmath)
        return bld.and_(a, b) if e.a.dtype == "bool" else bld.mul(a, b)

    def _expr_Div(self, e: E.Div) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            return self.scope.builder.fdiv(a, b, flags=self.gen.fastmath)
        # Integer '/' is truncating division (TVM's Div), guarded like FloorDiv.
        return self._int_div(e, a, b, floor=False, mod=False)

    def _expr_FloorDiv(self, e: E.FloorDiv) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            bld = self.scope.builder
            return self.gen.math.llvm(bld, "llvm.floor", bld.fdiv(a, b))
        return self._int_div(e, a, b, floor=True, mod=False)

    def _expr_FloorMod(self, e: E.FloorMod) -> ir.Value:
        a, b = self._operands(e)
        if E.is_float(e.a.dtype):
            bld = self.scope.builder
            q = self.gen.math.llvm(bld, "llvm.floor", bld.fdiv(a, b))
            return bld.fsub(a, bld.fmul(q, b))
        return self._int_div(e, a, b, floor=True, mod=True)

    def _int_div(self, e: E.BinaryOp, a: ir.Value, b: ir.Value, floor: bool,
                 mod: bool) -> ir.Value:
        """Integer division / modulo. Signed floor semantics follow Python; a zero divisor
        gives 0 (as numpy does) instead of trapping."""
        bld = self.scope.builder
        dtype = e.a.dtype
        ty = a.type
        zero = splat(ty, 0)
        divisor = _const_int(e.b)
        if dtype == "bool":
            return bld.and_(a, b) if not mod else zero
        if not _is_signed(dtype):
            if divisor is not None and divisor != 0:
                return bld.urem(a, b) if mod else bld.udiv(a, b)
            safe = bld.select(bld.icmp_unsigned("==", b, zero), splat(ty, 1), b)
            r = bld.urem(a, safe) if mod else bld.udiv(a, safe)
            return bld.select(bld.icmp_unsigned("==", b, zero), zero, r)
        if divisor is not None and divisor > 0:
            if floor and divisor & (divisor - 1) == 0:
                shift = divisor.bit_length() - 1
                if mod:
                    return bld.and_(a, splat(ty, divisor - 1))
                return bld.ashr(a, splat(ty, shift))
            q, r = bld.sdiv(a, b), bld.srem(a, b)
            if not floor:
                return r if mod else q
            negative = bld.icmp_signed("<", r, zero)
            if mod:
                return bld.select(negative, bld.add(r, b), r)
            return bld.sub(q, bld.zext(negative, ty))
        # General divisor: guard 0 and -1 (INT_MIN / -1 traps on x86).
        minus_one = splat(ty, -1)
        is_zero = bld.icmp_signed("==", b, zero)
        is_m1 = bld.icmp_signed("==", b, minus_one)
        safe = bld.select(bld.or_(is_zero, is_m1), splat(ty, 1), b)
        q, r = bld.sdiv(a, safe), bld.srem(a, safe)
        if floor:
            adjust = bld.and_(bld.icmp_signed("!=", r, zero),
                              bld.xor(bld.icmp_signed("<", r, zero),
                                      bld.icmp_signed("<", safe, zero)))
            q = bld.sub(q, bld.zext(adjust, ty))
            r = bld.select(adjust, bld.add(r, safe), r)
        if mod:
            return bld.select(bld.or_(is_zero, is_m1), zero, r)
        q = bld.select(is_m1, bld.sub(zero, a), q)
        return bld.select(is_zero, zero, q)

    def _minmax(self, e: E.BinaryOp, want_max: bool) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        dtype = e.a.dtype
        if E.is_float(dtype):
            m = self.gen.math
            return m.fmax(bld, a, b) if want_max else m.fmin(bld, a, b)
        op = ">" if want_max else "<"
        if _is_signed(dtype):
            cond = bld.icmp_signed(op, a, b)
        else:
            cond = bld.icmp_unsigned(op, a, b)
        return bld.select(cond, a, b)

    def _expr_Min(self, e: E.Min) -> ir.Value:
        return self._minmax(e, want_max=False)

    def _expr_Max(self, e: E.Max) -> ir.Value:
        return self._minmax(e, want_max=True)

    def _compare(self, e: E.CmpOp, op: str) -> ir.Value:
        a, b = self._operands(e)
        bld = self.scope.builder
        dtype = e.a.dtype
        if E.is_float(dtype):
            if op == "!=":
                return bld.fcmp_unordered("!=", a, b)
            return bld.fcmp_ordered(op, a, b)
        if _is_signed(dtype):
            return bld.icmp_signed(op, a, b)
        return bld.icmp_unsigned(op, a, b)

    def _expr_EQ(self, e: E.EQ) -> ir.Value:
        return self._compare(e, "==")

    def _expr_NE(self, e: E.NE) -> ir.Value:
        return self._compare(e, "!=")

    def _expr_LT(self, e: E.LT) -> ir.Value:
        return self._compare(e, "<")

    def _expr_LE(self, e: E.LE) -> ir.Value:
        return self._compare(e, "<=")

    def _expr_GT(self, e: E.GT) -> ir.Value:
        return self._compare(e, ">")

    def _expr_GE(self, e: E.GE) -> ir.Value:
        return self._compare(e, ">=")

    def _logical(self, e: E.BinaryOp) -> tuple[ir.Value, ir.Value]:
        a, b = self._operands(e)
        if e.a.dtype != "bool":
            raise self.error(f"logical operator on {e.a.dtype} operands", e)
        return a, b

    def _expr_And(self, e: E.And) -> ir.Value:
        a, b = self._logical(e)
        return self.scope.builder.and_(a, b)

    def _expr_Or(self, e: E.Or) -> ir.Value:
        a, b = self._logical(e)
        return self.scope.builder.or_(a, b)

    def _expr_Not(self, e: E.Not) -> ir.Value:
        if e.a.dtype != "bool":
            raise self.error(f"logical not of a {e.a.dtype} operand", e)
        return self.scope.builder.not_(self.expr(e.a))

    def _expr_Select(self, e: E.Select) -> ir.Value:
        cond = self._as_bool(self.expr(e.condition), e.condition)
        if e.true_value.dtype != e.false_value.dtype:
            raise self.error("select branches have different types", e)
        lanes = max(e.true_value.lanes, e.false_value.lanes, e.condition.lanes)
        t = self._broadcast(self.expr(e.true_value), lanes)
        f = self._broadcast(self.expr(e.false_value), lanes)
        if e.condition.lanes not in (1, lanes):
            raise self.error("select condition lanes differ from its values", e)
        return self.scope.builder.select(cond, t, f)

    def _expr_Cast(self, e: E.Cast) -> ir.Value:
        return self.cast(self.expr(e.value), e.value.dtype, e.dtype, e.lanes)

    def cast(self, v: ir.Value, src: str, dst: str, lanes: int) -> ir.Value:
        """Convert ``v`` from dtype ``src`` to ``dst`` (numpy ``astype`` for in-range values;
        to bool means ``!= 0``)."""
        if src == dst:
            return v
        b = self.scope.builder
        dst_ty = value_type(dst, lanes)
        if dst == "bool":
            if E.is_float(src):
                return b.fcmp_unordered("!=", v, splat(v.type, 0.0))
            return b.icmp_unsigned("!=", v, splat(v.type, 0))
        f32 = value_type("float32", lanes)
        if src == "float16" and dst != "float32":
            return self.cast(b.fpext(v, f32), "float32", dst, lanes)
        if dst == "float16" and src != "float32":
            return b.fptrunc(self.cast(v, src, "float32", lanes), dst_ty)
        if E.is_float(src) and E.is_float(dst):
            if E.bits(dst) > E.bits(src):
                return b.fpext(v, dst_ty)
            return b.fptrunc(v, dst_ty)
        if E.is_float(src):
            return b.fptosi(v, dst_ty) if _is_signed(dst) else b.fptoui(v, dst_ty)
        signed_src = _is_signed(src)
        if E.is_float(dst):
            return b.sitofp(v, dst_ty) if signed_src else b.uitofp(v, dst_ty)
        src_bits, dst_bits = v.type, dst_ty
        sw = (src_bits.element if isinstance(src_bits, ir.VectorType) else src_bits).width
        dw = (dst_bits.element if isinstance(dst_bits, ir.VectorType) else dst_bits).width
        if sw == dw:
            return v
        if sw > dw:
            return b.trunc(v, dst_ty)
        return b.sext(v, dst_ty) if signed_src else b.zext(v, dst_ty)

    def _prefetch(self, e: E.Call) -> ir.Value:
        """``prefetch(buf[i])``: a read prefetch of the cache line holding ``buf[i]`` (into
        L2 and closer; no effect on results). Returns int32 0."""
        (target,) = e.args
        if not isinstance(target, E.BufferLoad) or target.lanes != 1:
            raise self.error("prefetch takes one scalar buffer element", e)
        buf = target.buffer
        mem_ty = scalar_type(buf.dtype, memory=True)
        index = self._flat_index(target, buf, target.indices)
        addr = self._address(self._buffer_ptr(target, buf), mem_ty,
                             self._index_value(self.expr(index)))
        fn = self.gen.module.globals.get("llvm.prefetch.p0")
        if fn is None:
            fn = ir.Function(self.gen.module, ir.FunctionType(
                ir.VoidType(), [PTR, I32, I32, I32]), name="llvm.prefetch.p0")
        b = self.scope.builder
        b.call(fn, [addr, ir.Constant(I32, 0), ir.Constant(I32, 2), ir.Constant(I32, 1)])
        return ir.Constant(I32, 0)

    def _expr_Call(self, e: E.Call) -> ir.Value:
        if e.name == "prefetch":
            return self._prefetch(e)
        lanes = e.lanes
        args = [self._broadcast(self.expr(a), lanes) for a in e.args]
        for a in e.args:
            if a.dtype != e.dtype:
                raise self.error(f"argument of type {a.dtype} to {e.name} of type {e.dtype}", e)
        exponent = _const_float(e.args[1]) if e.name == "pow" and len(e.args) == 2 else None
        try:
            return self.gen.math.emit(self.scope.builder, e.name, args, e.dtype, exponent)
        except ValueError as exc:
            raise self.error(str(exc), e) from None
