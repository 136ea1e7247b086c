"""Vector math for the code generator: the TIR intrinsics (``Call`` names) as LLVM IR.

``sqrt fabs floor ceil round fma`` map onto LLVM intrinsics, which the backend lowers to single
instructions for scalars and vectors alike. ``exp log tanh erf sigmoid`` on float32 (and on
float16, computed in float32) are emitted inline as polynomial approximations built from plain
arithmetic, so a 16-lane call stays 16-lane code instead of 16 calls into libm, and a scalar call
inside a serial loop can still be vectorized by LLVM:

- ``exp``: Cody-Waite range reduction ``x = n ln2 + r``, a degree-6 polynomial for ``e^r``
  (Cephes' ``expf`` coefficients) and ``2^n`` built from exponent bits in two halves, so
  overflow gives ``inf`` and underflow denormals or 0. About 1 ulp.
- ``log``: ``x = m 2^e`` with ``m`` in ``[sqrt(1/2), sqrt(2))``, a degree-8 polynomial in
  ``m - 1`` (Cephes' ``logf``); denormals are rescaled; 0, negatives, ``inf`` and NaN follow IEEE.
- ``tanh``: the odd/even rational approximation of degree 13/6 used by Eigen, XLA and MLAS on
  ``[-7.905, 7.905]`` (where float32 ``tanh`` reaches +-1). About 3e-7 relative (5 ulp), one
  division and no ``exp``.
- ``sigmoid``: ``1 / (1 + e^{-x})``.
- ``erf``: the odd/even rational approximation on ``[-4, 4]`` used by Eigen and XLA (6.5e-8
  approximation error; about 4e-7 after float32 rounding), saturating to +-1 outside.

float64 transcendental functions call libm lane by lane (exact to libm's accuracy, slower).
``pow`` with a constant exponent of 0, +-0.5, +-1, 2, 3 or 4 becomes multiplications / sqrt;
other exponents call libm's ``powf``/``pow`` lane by lane. ``fmod`` is LLVM's ``frem`` (C
``fmod``). The trigonometric and hyperbolic functions and ``log2 log10 exp2 atan2`` (which
TOPI also emits) call libm lane by lane (float16 through float32).
"""

from __future__ import annotations

from llvmlite import ir

from tessera.tir.dot_product import DOT2_S16, DP4A

#: Functions computed by libm, lane by lane: name -> number of arguments.
LIBM = {"sin": 1, "cos": 1, "tan": 1, "asin": 1, "acos": 1, "atan": 1, "sinh": 1, "cosh": 1,
        "asinh": 1, "acosh": 1, "atanh": 1, "log2": 1, "log10": 1, "exp2": 1, "atan2": 2}

#: Integer dot products inside a word (:mod:`tessera.tir.dot_product`): name -> arguments.
DOT_PRODUCTS = {DOT2_S16: 3, **{name: 3 for name in DP4A}}

#: Intrinsic names the code generator accepts in ``tir.Call``.
SUPPORTED = ("exp", "log", "sqrt", "tanh", "erf", "fabs", "floor", "ceil", "round", "pow", "fma",
             "sigmoid", "fmod", *LIBM, *DOT_PRODUCTS)

F32 = ir.FloatType()
F64 = ir.DoubleType()
F16 = ir.HalfType()
I32 = ir.IntType(32)
I1 = ir.IntType(1)

# Cephes expf: e^r ~ 1 + r + r^2 * P(r) on |r| <= ln2/2.
_EXP_P = (1.9875691500e-4, 1.3981999507e-3, 8.3334519073e-3, 4.1665795894e-2, 1.6666665459e-1,
          5.0000001201e-1)
_LOG2E = 1.44269504088896341
_LN2_HI = 0.693359375
_LN2_LO = -2.12194440e-4
# Cephes logf polynomial for log(1 + x) ~ x - x^2/2 + x^3 P(x) on [sqrt(1/2) - 1, sqrt(2) - 1].
_LOG_P = (7.0376836292e-2, -1.1514610310e-1, 1.1676998740e-1, -1.2420140846e-1,
          1.4249322787e-1, -1.6668057665e-1, 2.0000714765e-1, -2.4999993993e-1,
          3.3333331174e-1)
_SQRT_HALF = 0.707106781186547524
_FLT_MIN = 1.17549435e-38
# Eigen/XLA tanh: x * A(x^2) / B(x^2) on [-7.905, 7.905].
_TANH_CLAMP = 7.90531110763549805
_TANH_A = (-2.76076847742355e-16, 2.00018790482477e-13, -8.60467152213735e-11,
           5.12229709037114e-08, 1.48572235717979e-05, 6.37261928875436e-04,
           4.89352455891786e-03)
_TANH_B = (1.19825839466702e-06, 1.18534705686654e-04, 2.26843463243900e-03,
           4.89352518554385e-03)
# Eigen/XLA erf: x * A(x^2) / B(x^2) on [-4, 4].
_ERF_A = (-2.72614225801306e-10, 2.77068142495902e-08, -2.10102402082508e-06,
          -5.69250639462346e-05, -7.34990630326855e-04, -2.95459980854025e-03,
          -1.60960333262415e-02)
_ERF_B = (-1.45660718464996e-05, -2.13374055278905e-04, -1.68282697438203e-03,
          -7.37332916720468e-03, -1.42647390514189e-02)


def _element(ty: ir.Type) -> ir.Type:
    return ty.element if isinstance(ty, ir.VectorType) else ty


def _like(ty: ir.Type, element: ir.Type) -> ir.Type:
    """``element`` with the vector shape of ``ty``."""
    return ir.VectorType(element, ty.count) if isinstance(ty, ir.VectorType) else element


def type_suffix(ty: ir.Type) -> str:
    """LLVM's overload suffix for ``ty``: ``f32``, ``v16f32``, ``i64``, ``v8i1``."""
    if isinstance(ty, ir.VectorType):
        return f"v{ty.count}{type_suffix(ty.element)}"
    if isinstance(ty, ir.HalfType):
        return "f16"
    if isinstance(ty, ir.FloatType):
        return "f32"
    if isinstance(ty, ir.DoubleType):
        return "f64"
    if isinstance(ty, ir.IntType):
        return f"i{ty.width}"
    raise TypeError(f"no intrinsic suffix for {ty}")


def splat(ty: ir.Type, value: float | int) -> ir.Constant:
    """The constant ``value`` of ``ty`` (every lane when ``ty`` is a vector)."""
    if isinstance(ty, ir.VectorType):
        return ir.Constant(ty, [ir.Constant(ty.element, value)] * ty.count)
    return ir.Constant(ty, value)


class MathEmitter:
    """Emits intrinsic calls into ``module``; declarations are created once per module."""

    def __init__(self, module: ir.Module, features: frozenset[str] = frozenset()) -> None:
        self.module = module
        #: The target's CPU features (LLVM names), for the instructions only some CPUs have.
        self.features = features

    # -- declarations ---------------------------------------------------------------------
    def declare(self, name: str, ret: ir.Type, args: list[ir.Type]) -> ir.Function:
        """The function ``name`` of the module, declared on first use."""
        existing = self.module.globals.get(name)
        if existing is not None:
            return existing
        return ir.Function(self.module, ir.FunctionType(ret, args), name=name)

    def llvm(self, b: ir.IRBuilder, base: str, *args: ir.Value) -> ir.Value:
        """Call the overloaded LLVM intrinsic ``base`` (``"llvm.floor"``) on ``args``, whose
        first argument's type is the overload type and the result type."""
        ty = args[0].type
        fn = self.declare(f"{base}.{type_suffix(ty)}", ty, [a.type for a in args])
        return b.call(fn, list(args))

    # -- small helpers ----------------------------------------------------------------------
    def fmuladd(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, z: ir.Value) -> ir.Value:
        """``x * y + z``, fused where the target has FMA (``llvm.fmuladd``)."""
        return self.llvm(b, "llvm.fmuladd", x, y, z)

    def horner(self, b: ir.IRBuilder, x: ir.Value, coeffs: tuple[float, ...]) -> ir.Value:
        """``coeffs[0] x^(n-1) + ... + coeffs[-1]`` by Horner's rule."""
        acc: ir.Value = splat(x.type, coeffs[0])
        for c in coeffs[1:]:
            acc = self.fmuladd(b, acc, x, splat(x.type, c))
        return acc

    @staticmethod
    def fmin(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """``min(x, y)``; a NaN in ``x`` propagates (one ``minps`` on x86)."""
        return b.select(b.fcmp_ordered("<", y, x), y, x)

    @staticmethod
    def fmax(b: ir.IRBuilder, x: ir.Value, y: ir.Value) -> ir.Value:
        """``max(x, y)``; a NaN in ``x`` propagates (one ``maxps`` on x86)."""
        return b.select(b.fcmp_ordered(">", y, x), y, x)

    def lanewise(self, b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
        """Call the scalar libm function ``name`` on each lane of ``args``."""
        ty = args[0].type
        elem = _element(ty)
        fn = self.declare(name, elem, [elem] * len(args))
        if not isinstance(ty, ir.VectorType):
            return b.call(fn, args)
        out: ir.Value = ir.Constant(ty, ir.Undefined)
        for lane in range(ty.count):
            idx = ir.Constant(I32, lane)
            r = b.call(fn, [b.extract_element(a, idx) for a in args])
            out = b.insert_element(out, r, idx)
        return out

    # -- float32 kernels --------------------------------------------------------------------
    def exp_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``e^x`` for float32 scalars or vectors (see the module docstring)."""
        ty = x.type
        ity = _like(ty, I32)
        xc = self.fmax(b, self.fmin(b, x, splat(ty, 88.8)), splat(ty, -104.0))
        m = self.llvm(b, "llvm.floor", self.fmuladd(b, xc, splat(ty, _LOG2E), splat(ty, 0.5)))
        r = self.fmuladd(b, m, splat(ty, -_LN2_HI), xc)
        r = self.fmuladd(b, m, splat(ty, -_LN2_LO), r)
        z = b.fmul(r, r)
        y = self.fmuladd(b, self.horner(b, r, _EXP_P), z, b.fadd(r, splat(ty, 1.0)))
        n = b.fptosi(m, ity)
        n1 = b.ashr(n, splat(ity, 1))
        n2 = b.sub(n, n1)
        s1 = b.bitcast(b.shl(b.add(n1, splat(ity, 127)), splat(ity, 23)), ty)
        s2 = b.bitcast(b.shl(b.add(n2, splat(ity, 127)), splat(ity, 23)), ty)
        result = b.fmul(b.fmul(y, s1), s2)
        return b.select(b.fcmp_unordered("uno", x, x), x, result)

    def log_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``ln x`` for float32 scalars or vectors (see the module docstring)."""
        ty = x.type
        ity = _like(ty, I32)
        denormal = b.fcmp_ordered("<", x, splat(ty, _FLT_MIN))
        xs = b.select(denormal, b.fmul(x, splat(ty, 8388608.0)), x)  # * 2^23
        bits = b.bitcast(xs, ity)
        e = b.sub(b.lshr(bits, splat(ity, 23)), splat(ity, 126))
        e = b.sub(e, b.select(denormal, splat(ity, 23), splat(ity, 0)))
        mant = b.bitcast(b.or_(b.and_(bits, splat(ity, 0x007FFFFF)), splat(ity, 0x3F000000)), ty)
        small = b.fcmp_ordered("<", mant, splat(ty, _SQRT_HALF))
        e = b.sub(e, b.zext(small, ity))
        mant = b.fsub(b.select(small, b.fadd(mant, mant), mant), splat(ty, 1.0))
        z = b.fmul(mant, mant)
        y = b.fmul(b.fmul(self.horner(b, mant, _LOG_P), mant), z)
        fe = b.sitofp(e, ty)
        y = self.fmuladd(b, fe, splat(ty, _LN2_LO), y)
        y = self.fmuladd(b, z, splat(ty, -0.5), y)
        result = self.fmuladd(b, fe, splat(ty, _LN2_HI), b.fadd(mant, y))
        # IEEE special cases: log(0) = -inf, log(x < 0) = NaN, log(inf) = inf, log(NaN) = NaN.
        result = b.select(b.fcmp_ordered("==", x, splat(ty, float("inf"))), x, result)
        result = b.select(b.fcmp_ordered("==", x, splat(ty, 0.0)),
                          splat(ty, float("-inf")), result)
        return b.select(b.fcmp_unordered("<", x, splat(ty, 0.0)), splat(ty, float("nan")),
                        result)

    def tanh_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``tanh x`` for float32 scalars or vectors (see the module docstring)."""
        ty = x.type
        xc = self.fmax(b, self.fmin(b, x, splat(ty, _TANH_CLAMP)), splat(ty, -_TANH_CLAMP))
        x2 = b.fmul(xc, xc)
        p = b.fmul(xc, self.horner(b, x2, _TANH_A))
        return b.fdiv(p, self.horner(b, x2, _TANH_B))

    def sigmoid_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``1 / (1 + e^-x)`` for float32 scalars or vectors."""
        ty = x.type
        e = self.exp_f32(b, b.fneg(x))
        return b.fdiv(splat(ty, 1.0), b.fadd(splat(ty, 1.0), e))

    def erf_f32(self, b: ir.IRBuilder, x: ir.Value) -> ir.Value:
        """``erf x`` for float32 scalars or vectors (see the module docstring)."""
        ty = x.type
        xc = self.fmax(b, self.fmin(b, x, splat(ty, 4.0)), splat(ty, -4.0))
        x2 = b.fmul(xc, xc)
        p = b.fmul(xc, self.horner(b, x2, _ERF_A))
        q = self.horner(b, x2, _ERF_B)
        return b.fdiv(p, q)

    # -- the entry point ----------------------------------------------------------------------
    def emit(self, b: ir.IRBuilder, name: str, args: list[ir.Value], dtype: str,
             exponent: float | None = None) -> ir.Value:
        """The intrinsic ``name`` applied to ``args`` (values of the TIR ``dtype``).

        ``exponent`` is the constant second argument of ``pow`` when it has one. Raises
        ``ValueError`` for an unknown name or a name that does not apply to ``dtype``."""
        if name not in SUPPORTED:
            raise ValueError(f"unknown intrinsic {name!r}; supported: {', '.join(SUPPORTED)}")
        expected = (3 if name == "fma" else 2 if name in ("pow", "fmod")
                    else DOT_PRODUCTS.get(name) or LIBM.get(name, 1))
        if len(args) != expected:
            raise ValueError(f"{name} takes {expected} argument(s), got {len(args)}")
        if name in DOT_PRODUCTS:
            if dtype != "int32":
                raise ValueError(f"{name} computes int32 words, got {dtype}")
            return self._dot_product(b, name, args)
        if dtype.startswith(("int", "uint")) or dtype == "bool":
            return self._emit_int(b, name, args, dtype)
        x = args[0]
        if name == "sqrt":
            return self.llvm(b, "llvm.sqrt", x)
        if name == "fabs":
            return self.llvm(b, "llvm.fabs", x)
        if name == "floor":
            return self.llvm(b, "llvm.floor", x)
        if name == "ceil":
            return self.llvm(b, "llvm.ceil", x)
        if name == "round":
            return self.llvm(b, "llvm.roundeven", x)
        if name == "fma":
            return self.llvm(b, "llvm.fma", *args)
        if name == "pow":
            return self._pow(b, args[0], args[1], dtype, exponent)
        if name == "fmod":
            if dtype == "float16":
                wide = _like(x.type, F32)
                return b.fptrunc(b.frem(b.fpext(x, wide), b.fpext(args[1], wide)), x.type)
            return b.frem(x, args[1])
        if name in LIBM:
            return self._libm(b, name, args, dtype)
        return self._transcendental(b, name, x, dtype)

    def _libm(self, b: ir.IRBuilder, name: str, args: list[ir.Value], dtype: str) -> ir.Value:
        if dtype == "float64":
            return self.lanewise(b, name, args)
        if dtype == "float16":
            wide = _like(args[0].type, F32)
            r = self.lanewise(b, name + "f", [b.fpext(a, wide) for a in args])
            return b.fptrunc(r, args[0].type)
        return self.lanewise(b, name + "f", args)

    def _transcendental(self, b: ir.IRBuilder, name: str, x: ir.Value, dtype: str) -> ir.Value:
        if dtype == "float64":
            if name == "sigmoid":
                e = self.lanewise(b, "exp", [b.fneg(x)])
                return b.fdiv(splat(x.type, 1.0), b.fadd(splat(x.type, 1.0), e))
            return self.lanewise(b, name, [x])
        kernel = {"exp": self.exp_f32, "log": self.log_f32, "tanh": self.tanh_f32,
                  "sigmoid": self.sigmoid_f32, "erf": self.erf_f32}[name]
        if dtype == "float16":
            wide = b.fpext(x, _like(x.type, F32))
            return b.fptrunc(kernel(b, wide), x.type)
        return kernel(b, x)

    def _pow(self, b: ir.IRBuilder, x: ir.Value, y: ir.Value, dtype: str,
             exponent: float | None) -> ir.Value:
        ty = x.type
        if exponent == 0.0:
            return splat(ty, 1.0)
        if exponent == 1.0:
            return x
        if exponent == 2.0:
            return b.fmul(x, x)
        if exponent == 3.0:
            return b.fmul(b.fmul(x, x), x)
        if exponent == 4.0:
            sq = b.fmul(x, x)
            return b.fmul(sq, sq)
        if exponent == 0.5:
            return self.llvm(b, "llvm.sqrt", x)
        if exponent == -0.5:
            return b.fdiv(splat(ty, 1.0), self.llvm(b, "llvm.sqrt", x))
        if exponent == -1.0:
            return b.fdiv(splat(ty, 1.0), x)
        if dtype == "float64":
            return self.lanewise(b, "pow", [x, y])
        if dtype == "float16":
            wide_ty = _like(ty, F32)
            r = self.lanewise(b, "powf", [b.fpext(x, wide_ty), b.fpext(y, wide_ty)])
            return b.fptrunc(r, ty)
        return self.lanewise(b, "powf", [x, y])

    # -- integer dot products (tessera.tir.dot_product) ------------------------------------
    def _dot_product(self, b: ir.IRBuilder, name: str, args: list[ir.Value]) -> ir.Value:
        """``c + a . b`` over the parts of int32 words: one x86 ``pmaddwd`` per vector of
        pairs (AVX2: 8 lanes, AVX-512BW: 16; LLVM fuses it with the add into ``vpdpwssd``
        where VNNI is present), ``vpdpbusd`` for unsigned x signed bytes with AVX-512 VNNI or
        AVX-VNNI, else the parts widened to int32 and multiplied (exact, any target)."""
        a, w, c = args
        lanes = a.type.count if isinstance(a.type, ir.VectorType) else 1
        feats = self.features
        if name == DOT2_S16:
            pmadd = {8: ("llvm.x86.avx2.pmadd.wd", "avx2"),
                     16: ("llvm.x86.avx512.pmaddw.d.512", "avx512bw")}.get(lanes)
            if pmadd is not None and pmadd[1] in feats:
                halves = ir.VectorType(ir.IntType(16), 2 * lanes)
                fn = self.declare(pmadd[0], a.type, [halves, halves])
                return b.add(b.call(fn, [b.bitcast(a, halves), b.bitcast(w, halves)]), c)
            return self._dot_parts(b, a, w, c, 16, True, True)
        if name == "dp4a_su":  # the unsigned operand first
            a, w, name = w, a, "dp4a_us"
        vnni = (lanes == 16 and "avx512vnni" in feats) or (lanes == 8 and (
            "avxvnni" in feats or {"avx512vnni", "avx512vl"} <= feats))
        if name == "dp4a_us" and vnni:
            fn = self.declare(f"llvm.x86.avx512.vpdpbusd.{32 * lanes}", a.type, [a.type] * 3)
            return b.call(fn, [c, a, w])
        return self._dot_parts(b, a, w, c, 8, name[5] == "s", name[6] == "s")

    @staticmethod
    def _dot_parts(b: ir.IRBuilder, a: ir.Value, w: ir.Value, c: ir.Value, bits: int,
                   a_signed: bool, w_signed: bool) -> ir.Value:
        """``c + sum of a_j * w_j`` over the ``bits``-wide parts of int32 words, each part
        shifted to the top and back (arithmetic shift for signed parts): exact."""
        acc = c
        for j in range(32 // bits):
            parts = []
            for x, signed in ((a, a_signed), (w, w_signed)):
                top = b.shl(x, splat(x.type, 32 - bits * (j + 1))) if j < 32 // bits - 1 else x
                shift = splat(x.type, 32 - bits)
                parts.append(b.ashr(top, shift) if signed else b.lshr(top, shift))
            acc = b.add(acc, b.mul(parts[0], parts[1]))
        return acc

    def _emit_int(self, b: ir.IRBuilder, name: str, args: list[ir.Value],
                  dtype: str) -> ir.Value:
        x = args[0]
        if name in ("floor", "ceil", "round"):
            return x
        if name == "fabs":
            if dtype.startswith("uint") or dtype == "bool":
                return x
            return b.select(b.icmp_signed("<", x, splat(x.type, 0)), b.neg(x), x)
        if name == "fma":
            return b.add(b.mul(args[0], args[1]), args[2])
        raise ValueError(f"intrinsic {name} needs a float argument, got {dtype}")
