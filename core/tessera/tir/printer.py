"""A readable text form of TIR expressions, statements and functions (Python-like)."""

from __future__ import annotations

from typing import Any

from tessera.tir import expr as E
from tessera.tir import stmt as S


def expr_to_str(e: Any) -> str:
    if isinstance(e, E.IntImm):
        return str(e.value) if e.dtype in ("int64", "int32") else f"{e.dtype}({e.value})"
    if isinstance(e, E.FloatImm):
        return f"{e.value!r}f" if e.dtype == "float32" else f"{e.dtype}({e.value!r})"
    if isinstance(e, E.Var):
        return e.name
    if isinstance(e, E.Min | E.Max):
        return f"{e.symbol}({expr_to_str(e.a)}, {expr_to_str(e.b)})"
    if isinstance(e, E.BinaryOp):
        return f"({expr_to_str(e.a)} {e.symbol} {expr_to_str(e.b)})"
    if isinstance(e, E.Not):
        return f"!{expr_to_str(e.a)}"
    if isinstance(e, E.Select):
        return (f"select({expr_to_str(e.condition)}, {expr_to_str(e.true_value)}, "
                f"{expr_to_str(e.false_value)})")
    if isinstance(e, E.Cast):
        suffix = f"x{e.lanes}" if e.lanes > 1 else ""
        return f"{e.dtype}{suffix}({expr_to_str(e.value)})"
    if isinstance(e, E.Call):
        return f"{e.name}({', '.join(expr_to_str(a) for a in e.args)})"
    if isinstance(e, E.BufferLoad):
        return f"{e.buffer.name}[{', '.join(expr_to_str(i) for i in e.indices)}]"
    if isinstance(e, E.ProducerLoad):
        name = getattr(e.producer, "name", "tensor")
        return f"{name}[{', '.join(expr_to_str(i) for i in e.indices)}]"
    if isinstance(e, E.Ramp):
        return f"ramp({expr_to_str(e.base)}, {expr_to_str(e.stride)}, {e.lanes})"
    if isinstance(e, E.Broadcast):
        return f"x{e.lanes}({expr_to_str(e.value)})"
    if isinstance(e, E.Let):
        return f"(let {e.var.name} = {expr_to_str(e.value)} in {expr_to_str(e.body)})"
    if isinstance(e, E.Reduce):
        axes = ", ".join(getattr(a, "var", a).name for a in e.axis)
        cond = f", where={expr_to_str(e.condition)}" if e.condition is not None else ""
        return f"{e.combiner}({expr_to_str(e.source)}, axis=[{axes}]{cond})"
    return f"<{type(e).__name__}>"


def _lines(s: Any, indent: int, out: list[str]) -> None:
    pad = "  " * indent
    if s is None:
        return
    if isinstance(s, S.SeqStmt):
        for x in s.seq:
            _lines(x, indent, out)
    elif isinstance(s, S.For):
        kind = "" if s.kind == S.ForKind.SERIAL else f"  # {s.kind}"
        if s.thread_tag:
            kind += f" {s.thread_tag}"
        if s.annotations:
            kind += f" {s.annotations}"
        lo = expr_to_str(s.min)
        ext = expr_to_str(s.extent)
        rng = ext if lo == "0" else f"{lo}, {lo} + {ext}"
        out.append(f"{pad}for {s.loop_var.name} in range({rng}):{kind}")
        _lines(s.body, indent + 1, out)
    elif isinstance(s, S.BufferStore):
        idx = ", ".join(expr_to_str(i) for i in s.indices)
        out.append(f"{pad}{s.buffer.name}[{idx}] = {expr_to_str(s.value)}")
    elif isinstance(s, S.IfThenElse):
        out.append(f"{pad}if {expr_to_str(s.condition)}:")
        _lines(s.then_case, indent + 1, out)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _lines(s.else_case, indent + 1, out)
    elif isinstance(s, S.LetStmt):
        out.append(f"{pad}{s.var.name} = {expr_to_str(s.value)}")
        _lines(s.body, indent, out)
    elif isinstance(s, S.Allocate):
        b = s.buffer
        dims = ", ".join(expr_to_str(d) for d in b.shape)
        out.append(f"{pad}{b.name} = allocate({b.dtype}[{dims}], {b.scope!r})")
        _lines(s.body, indent, out)
    elif isinstance(s, S.Evaluate):
        out.append(f"{pad}{expr_to_str(s.value)}")
    elif isinstance(s, S.Barrier):
        out.append(f"{pad}barrier({s.scope!r})")
    else:
        out.append(f"{pad}<{type(s).__name__}>")


def stmt_to_str(s: Any, indent: int = 0) -> str:
    out: list[str] = []
    _lines(s, indent, out)
    return "\n".join(out)


def func_to_str(f: S.PrimFunc) -> str:
    params = ", ".join(
        f"{b.name}: {b.dtype}[{', '.join(expr_to_str(d) for d in b.shape)}]" for b in f.params)
    if f.size_vars:
        def var(v: E.Var) -> str:
            lo, hi = f.var_bounds()[v]
            return v.name if hi is None and lo == 0 else f"{v.name} in [{lo}, {hi}]"
        params += "; sizes: " + ", ".join(var(v) for v in f.size_vars)
    head = f"def {f.name}({params}):"
    attrs = f"  # attrs: {f.attrs}" if f.attrs else ""
    body = stmt_to_str(f.body, 1)
    return "\n".join(x for x in (head + attrs, body) if x)
