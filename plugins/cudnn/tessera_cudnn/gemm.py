"""Matrix products on cuBLASLt: what is claimed, the call plan and the call.

Claimed (float32): ``MatMul`` of 2-D or batched operands (an operand's batch dims equal the
output's or are absent, so one strided batch describes it), ``MatMul(A, Transpose(B))`` where the
transpose swaps the last two axes (attention's ``Q K^T``), ``Gemm`` (alpha, beta, transA,
transB; C absent, a row vector or a full matrix), each optionally followed by the epilogues
cuBLASLt fuses: ``Add`` of a bias row vector, ``Relu``, and ``Gelu`` with
``approximate="tanh"`` (cuBLASLt's GELU is the tanh form; the exact erf form stays on the
generated kernels).

Row-major Tessera tensors are handed to the column-major library as their transposes:
``Y = A B`` is computed as ``Y^T = B^T A^T``, so the bias vector is per row of the library's
result, as its epilogue wants.
"""

from __future__ import annotations

import ctypes
import threading
from dataclasses import dataclass
from math import prod
from typing import Any

from tessera.errors import RunError
from tessera.ir.graph import Node, Value
from tessera.plugin.patterns import Pattern, PatternMatch

from . import cublaslt_api as lt
from .common import Plan, attrs_of, is_f32, pointer, shape


def _batch_ok(operand: tuple[int, ...], out: tuple[int, ...]) -> bool:
    batch = operand[:-2]
    return not batch or all(d == 1 for d in batch) or batch == out[:-2]


def matmul_unsupported(node: Node) -> str | None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    if not is_f32(a, b, y):
        return "cublas runs float32 matrix products only"
    if len(a.type.shape) < 2 or len(b.type.shape) < 2:
        return "a 1-D operand (a matrix-vector product) stays on the generated kernels"
    if not (_batch_ok(shape(a), shape(y)) and _batch_ok(shape(b), shape(y))):
        return f"batch dims {shape(a)[:-2]} x {shape(b)[:-2]} broadcast in a way one strided " \
               f"batch cannot describe"
    if 0 in shape(y) or 0 in shape(a)[-1:]:
        return "empty tensor"
    return None


def transpose_last_two(node: Node) -> bool:
    nd = len(node.inputs[0].type.shape)
    perm = list(attrs_of(node).get("perm") or reversed(range(nd)))
    return nd >= 2 and perm == list(range(nd - 2)) + [nd - 1, nd - 2]


def gemm_unsupported(node: Node) -> str | None:
    a, b, y = node.inputs[0], node.inputs[1], node.outputs[0]
    c = node.inputs[2] if len(node.inputs) > 2 else None
    if not is_f32(a, b, c, y):
        return "cublas runs float32 matrix products only"
    if c is not None and _c_kind(node, c) is None:
        return f"Gemm's C {c.type} is neither a row of {shape(y)[1]} (with beta 1) nor a full " \
               f"{shape(y)} matrix"
    if 0 in shape(y):
        return "empty tensor"
    return None


def _c_kind(node: Node, c: Value) -> str | None:
    beta = float(attrs_of(node).get("beta", 1.0))
    m, n = shape(node.outputs[0])
    if beta == 0.0:
        return "none"
    if shape(c) in ((n,), (1, n)) and beta == 1.0:
        return "bias"
    if shape(c) == (m, n):
        return "matrix"
    return None


def bias_kind(product: Value, other: Value) -> bool:
    n = shape(product)[-1]
    s = shape(other)
    return is_f32(other) and len(s) >= 1 and s[-1] == n and all(d == 1 for d in s[:-1]) \
        and len(s) <= len(shape(product))


def add_unsupported(add: Node, index: int) -> str | None:
    if len(add.inputs) != 2 or any(v is None for v in add.inputs):
        return "Add with an omitted input"
    product, other = add.inputs[index], add.inputs[1 - index]
    if product.producer is None or product.producer.op != "MatMul" or \
            len(product.type.shape) < 2:
        return "not the output of a matrix product"
    if not bias_kind(product, other):
        return f"the Add after the matrix product adds {other.type}, not a bias row of " \
               f"{shape(product)[-1]}"
    return None


def patterns() -> list[Pattern]:
    mm = Pattern("MatMul", check=lambda n: matmul_unsupported(n) is None)
    transposed = Pattern("Transpose", check=transpose_last_two)
    mm_t = Pattern("MatMul", [None, transposed], check=lambda n: matmul_unsupported(n) is None,
                   name="MatMulTransposed")
    gemm = Pattern("Gemm", check=lambda n: gemm_unsupported(n) is None)
    products = [mm_t, mm]
    with_bias = [Pattern("Add", [p, None] if i == 0 else [None, p],
                         check=lambda n, i=i: add_unsupported(n, i) is None,
                         name=f"{p.name}Bias")
                 for p in products for i in (0, 1)]
    out: list[Pattern] = []
    for inner in [*with_bias, mm_t, gemm, mm]:
        out.append(Pattern("Relu", [inner], name=f"{inner.name}Relu"))
        out.append(Pattern("Gelu", [inner], name=f"{inner.name}Gelu",
                           check=lambda n: attrs_of(n).get("approximate") == "tanh"))
    return [*out, *with_bias, mm_t, gemm, mm]


@dataclass
class GemmPlan(Plan):
    """``Y[b] = act(alpha * op(A[b]) op(B[b]) + beta * C + bias)`` in row-major terms; strides
    in elements (0: the operand is shared by every batch). ``inputs`` are A, B, then the bias
    and C when present."""

    kind = "gemm"
    m: int = 0
    n: int = 0
    k: int = 0
    batch: int = 1
    stride_a: int = 0
    stride_b: int = 0
    trans_a: bool = False
    trans_b: bool = False
    alpha: float = 1.0
    beta: float = 0.0
    has_bias: bool = False
    has_c: bool = False
    epilogue: str = "none"
    compute: int = lt.COMPUTE_32F
    algo: str | None = None
    algo_source: str = "not chosen"


def plan_gemm(match: PatternMatch, compute: int, workspace: int) -> GemmPlan:
    nodes = {n.op: n for n in match.nodes}
    product = nodes.get("MatMul") or nodes["Gemm"]
    y = match.root.outputs[0]
    a, b = product.inputs[0], product.inputs[1]
    trans_a = trans_b = False
    alpha, beta = 1.0, 0.0
    bias = c = None
    if "Transpose" in nodes:
        b, trans_b = nodes["Transpose"].inputs[0], True
    if product.op == "Gemm":
        at = attrs_of(product)
        trans_a, trans_b = bool(at.get("transA", 0)), bool(at.get("transB", 0))
        alpha = float(at.get("alpha", 1.0))
        cv = product.inputs[2] if len(product.inputs) > 2 else None
        kind = _c_kind(product, cv) if cv is not None else "none"
        if kind == "bias":
            bias = cv
        elif kind == "matrix":
            c, beta = cv, float(at.get("beta", 1.0))
    if "Add" in nodes:
        add = nodes["Add"]
        out = product.outputs[0]
        bias = add.inputs[1] if add.inputs[0] is out else add.inputs[0]
    ys = shape(y)
    m, n = ys[-2], ys[-1]
    sa, sb = shape(a), shape(b)
    k = sa[-2] if trans_a else sa[-1]
    batch = prod(ys[:-2])
    stride_a = m * k if batch > 1 and prod(sa[:-2]) > 1 else 0
    stride_b = k * n if batch > 1 and prod(sb[:-2]) > 1 else 0
    act = {"Relu": "relu", "Gelu": "gelu"}.get(match.root.op, "")
    epilogue = "_".join(p for p in (act, "bias" if bias is not None else "") if p) or "none"
    inputs = [a.name, b.name] + ([bias.name] if bias is not None else []) \
        + ([c.name] if c is not None else [])
    return GemmPlan(name=match.root.name, op=match.pattern, inputs=inputs, outputs=[y.name],
                    flops=2 * batch * m * n * k, workspace=workspace, m=m, n=n, k=k, batch=batch,
                    stride_a=stride_a, stride_b=stride_b, trans_a=trans_a, trans_b=trans_b,
                    alpha=alpha, beta=beta, has_bias=bias is not None, has_c=c is not None,
                    epilogue=epilogue, compute=compute)


@dataclass(frozen=True)
class LayoutSpec:
    """One operand as cuBLASLt sees it: column-major ``rows x cols``, leading dimension ``ld``,
    ``batch`` matrices ``stride`` elements apart, and whether the product transposes it."""

    rows: int
    cols: int
    ld: int
    batch: int
    stride: int
    transposed: bool = False


def layouts(p: GemmPlan) -> tuple[LayoutSpec, LayoutSpec, LayoutSpec]:
    """(A', B', D) of ``Y^T = B^T A^T``: the row-major B read as column-major is B^T (n x k,
    or k x n transposed back when B is stored transposed), likewise A; D = Y^T is n x m."""
    a = LayoutSpec(p.k, p.n, p.k, p.batch, p.stride_b, True) if p.trans_b else \
        LayoutSpec(p.n, p.k, p.n, p.batch, p.stride_b)
    b = LayoutSpec(p.m, p.k, p.m, p.batch, p.stride_a, True) if p.trans_a else \
        LayoutSpec(p.k, p.m, p.k, p.batch, p.stride_a)
    return a, b, LayoutSpec(p.n, p.m, p.n, p.batch, p.m * p.n)


class GemmDescriptors:
    """The cuBLASLt descriptors of a plan, in the library's column-major terms (created on
    any machine)."""

    def __init__(self, p: GemmPlan) -> None:
        a, b, d = layouts(p)
        self.desc = lt.MatmulDesc(p.compute, lt.OP_T if a.transposed else lt.OP_N,
                                  lt.OP_T if b.transposed else lt.OP_N, p.epilogue)
        self.a, self.b, self.d = (lt.Layout(x.rows, x.cols, x.ld, x.batch, x.stride)
                                  for x in (a, b, d))
        self.pref = lt.Preference(p.workspace)


class GemmCall:
    """The kernel function of a bound plan: ``(ins, outs)`` with ins = [A, B, (bias), (C)] and
    outs = [Y, (workspace)]."""

    def __init__(self, plan: GemmPlan, d: GemmDescriptors, device: Any) -> None:
        if plan.algo is None:
            raise RunError(f"cublas: {plan.name} has no algorithm chosen")
        self.plan, self.d, self.device = plan, d, device
        self.algo = lt.Algo.from_hex(plan.algo)
        self.handle = lt.Handle.of(device)
        self.alpha = ctypes.c_float(plan.alpha)
        self.beta = ctypes.c_float(plan.beta)
        self.lock = threading.Lock()  # the bias pointer lives in the shared descriptor

    def launch(self, a: int, b: int, bias: int | None, c: int | None, y: int, ws: int,
               algo: lt.Algo | None = None) -> None:
        p, d = self.plan, self.d
        with self.lock:
            if bias is not None:
                d.desc.set_bias(bias)
            lt.call("cublasLtMatmul", self.handle.ptr, d.desc.ptr, ctypes.byref(self.alpha),
                    lt.VP(b), d.a.ptr, lt.VP(a), d.b.ptr, ctypes.byref(self.beta),
                    lt.VP(c if c is not None else y), d.d.ptr, lt.VP(y), d.d.ptr,
                    ctypes.byref(algo or self.algo), lt.VP(ws or None),
                    p.workspace if ws else 0, lt.VP(int(self.device.stream)),
                    what=f"matrix product {p.name}")

    def __call__(self, ins: list[Any], outs: list[Any]) -> None:
        p = self.plan
        self.device.context()
        bias = pointer(ins[2]) if p.has_bias else None
        c = pointer(ins[2 + p.has_bias]) if p.has_c else None
        ws = pointer(outs[1]) if len(outs) > 1 else 0
        self.launch(pointer(ins[0]), pointer(ins[1]), bias, c, pointer(outs[0]), ws)


def choose_algorithm(plan: GemmPlan, d: GemmDescriptors, device: Any) -> None:
    """Ask cuBLASLt's heuristics for up to 8 algorithms within the workspace, time each on
    ``device`` and keep the fastest."""
    handle = lt.Handle.of(device)
    results = (lt.HeuristicResult * 8)()
    count = ctypes.c_int(0)
    lt.call("cublasLtMatmulAlgoGetHeuristic", handle.ptr, d.desc.ptr, d.a.ptr, d.b.ptr,
            d.d.ptr, d.d.ptr, d.pref.ptr, len(results), results, ctypes.byref(count),
            what=f"algorithm heuristics for {plan.name}")
    usable = [r for r in results[:count.value] if r.state == 0
              and r.workspaceSize <= plan.workspace]
    if not usable:
        raise RunError(f"cublas: no cuBLASLt algorithm for {plan.name} (m={plan.m} n={plan.n} "
                       f"k={plan.k}, epilogue {plan.epilogue}) within {plan.workspace} bytes")
    p = plan
    sizes = [p.batch * p.m * p.k if p.stride_a else p.m * p.k,
             p.batch * p.k * p.n if p.stride_b else p.k * p.n, p.n, p.m * p.n,
             p.batch * p.m * p.n, max(p.workspace, 1) // 4]
    arenas = [device.allocate(s * 4) for s in sizes]
    try:
        a, b, bias, c, y, ws = (x.ptr for x in arenas)
        plan.algo = usable[0].algo.to_hex()
        call = GemmCall(plan, d, device)
        best: tuple[float, int] | None = None
        for i, r in enumerate(usable):
            times = []
            for _ in range(3):
                start = device.record_event()
                call.launch(a, b, bias if p.has_bias else None, c if p.has_c else None, y,
                            ws, r.algo)
                times.append(device.elapsed_ms(start, device.record_event()))
            if best is None or min(times) < best[0]:
                best = (min(times), i)
        assert best is not None
        plan.algo = usable[best[1]].algo.to_hex()
        plan.algo_source = f"measured {best[0]:.3f} ms on {device.key} " \
                           f"({len(usable)} heuristic candidates)"
    finally:
        for arena in arenas:
            device.free(arena)
