"""Inference simplification: training-only ops out, BatchNormalization folded away.

* ``BatchNormalization`` (inference form, constant parameters) whose input comes from a ``Conv``,
  ``Gemm`` or ``MatMul`` (optionally followed by a bias ``Add``) with constant weights, and whose
  input nobody else reads, is folded into those weights and bias::

      s = scale / sqrt(var + epsilon)
      W' = W * s (along the output channels),  b' = (b - mean) * s + B

* any other such ``BatchNormalization`` becomes ``Mul`` and ``Add`` by constants of shape
  ``[C, 1, ..., 1]`` (broadcast over the channel axis 1);
* ``Mul`` and ``Add`` by per-channel constants (as Caffe2 models put after their batch norms, or
  a bias ``Add`` after a bias-less Conv) are affine maps too: chains of them compose into one
  Mul and one Add, and fold into a preceding Conv / Gemm / MatMul the same way;
* ``Identity`` disappears, and so does a ``Dropout`` that passes its input through (the IR's
  Dropout is the training-mode op, since the importer already removes inference-mode Dropout:
  only ``ratio <= 0`` makes it an identity); their readers read the input, and a used Dropout
  ``mask`` becomes a constant of ones.

Function outputs are positional, so an output may end up being a graph input or a constant.
"""

from __future__ import annotations

import numpy as np

from tessera.ir.graph import Function, Node, Value
from tessera.passes.base import Pass, Rewriter, take_name

Affine = tuple[Value, np.ndarray, np.ndarray]


def _data(v: Value | None) -> np.ndarray | None:
    return v.data if v is not None else None


def _scalar(v: Value | None) -> float | None:
    """The value of a constant scalar operand; None when absent or not constant."""
    if v is None or v.data is None or v.data.size == 0:
        return None
    return float(np.asarray(v.data).reshape(-1)[0])


def _is_channel_operand(x: Value) -> bool:
    return x.type.dtype.is_float and x.type.ndim >= 2


def _per_channel(c: np.ndarray, shape: tuple[int, ...]) -> np.ndarray | None:
    """The values of constant ``c`` per channel (axis 1) of a tensor of ``shape``, as float64
    of shape ``[C]``, when ``c`` broadcast to ``shape`` varies along axis 1 at most."""
    if c.ndim > len(shape) or not isinstance(shape[1], int):
        return None
    padded = (1,) * (len(shape) - c.ndim) + tuple(c.shape)
    if any(d != 1 for i, d in enumerate(padded) if i != 1) or padded[1] not in (1, shape[1]):
        return None
    return np.array(np.broadcast_to(c.astype(np.float64).reshape(-1), (shape[1],)))


def _compute_dtype(dtype: np.dtype) -> np.dtype:
    """float32 arithmetic for float16/float32 weights (fast), float64 for float64."""
    return np.promote_types(dtype, np.float32)


class SimplifyInference(Pass):
    """Fold BatchNormalization (and per-channel Mul/Add chains) into the preceding layer or into
    one Mul and one Add; drop Identity and pass-through Dropout."""

    name = "SimplifyInference"
    opt_level = 2

    def run(self, fn: Function) -> Function:
        rw = Rewriter(fn)
        for node in list(fn.nodes):
            if rw.is_removed(node):
                continue
            if node.op == "Identity":
                self._bypass(rw, node)
            elif node.op == "Dropout":
                self._dropout(rw, node)
            elif node.op in ("BatchNormalization", "Mul", "Add"):
                self._affine_chain(rw, node)
        return rw.finish()

    # -- Identity and Dropout ------------------------------------------------------------------
    @staticmethod
    def _bypass(rw: Rewriter, node: Node) -> None:
        x = node.inputs[0] if node.inputs else None
        if x is None:
            return
        rw.replace(node.outputs[0], x)
        rw.remove(node)

    def _dropout(self, rw: Rewriter, node: Node) -> None:
        """Remove a Dropout that passes its input through unchanged.

        ONNX inference-mode Dropout is already an identity the importer removes; an IR Dropout
        drops at random (training mode), which only ``ratio <= 0`` (or an explicit false
        ``training_mode``, should a converter keep that flag) turns into an identity.
        """
        training = node.attrs.get("training_mode")
        if training is None and len(node.inputs) > 2 and node.inputs[2] is not None:
            flag = _scalar(node.inputs[2])
            training = None if flag is None else bool(flag)
        ratio = node.attrs.get("ratio")
        if len(node.inputs) > 1 and node.inputs[1] is not None:
            ratio = _scalar(node.inputs[1])
        if not (training is False or training == 0 or (ratio is not None and ratio <= 0)):
            return
        if len(node.outputs) > 1:
            mask = node.outputs[1]
            if not mask.type.is_static:  # symbolic shape: no constant stands for the mask
                if rw.count(mask):
                    return
            else:
                ones = rw.fn.constant(np.ones(mask.type.shape, mask.type.dtype.numpy),
                                      mask.name)
                rw.replace(mask, ones)
        self._bypass(rw, node)

    # -- BatchNormalization and per-channel affine chains ----------------------------------------
    @staticmethod
    def _affine(rw: Rewriter, node: Node) -> Affine | None:
        """``(x, scale, shift)`` when ``node`` computes ``x * scale + shift`` with constant
        per-channel (axis 1) ``scale`` and ``shift`` of shape ``[C]`` (float64): an inference
        BatchNormalization with constant parameters, or a Mul / Add by such a constant."""
        if node.op == "BatchNormalization":
            if node.attrs.get("training_mode") or any(rw.count(o) for o in node.outputs[1:]):
                return None  # training mode: batch statistics
            x = node.inputs[0]
            params = [_data(v) for v in node.inputs[1:5]]
            if x is None or not _is_channel_operand(x) or len(params) != 4:
                return None
            if any(p is None or p.size != x.type.shape[1] for p in params):
                return None
            gamma, beta, mean, var = (np.asarray(p, np.float64).reshape(-1) for p in params)
            scale = gamma / np.sqrt(var + float(node.attrs.get("epsilon", 1e-5)))
            return x, scale, beta - mean * scale
        if node.op not in ("Mul", "Add") or len(node.inputs) != 2 or len(node.outputs) != 1:
            return None
        a, b = node.inputs
        for x, c in ((a, b), (b, a)):
            if (x is None or c is None or x.is_constant or c.data is None
                    or not _is_channel_operand(x) or node.outputs[0].type != x.type):
                continue
            per_channel = _per_channel(c.data, x.type.shape)
            if per_channel is None:
                return None
            if node.op == "Mul":
                return x, per_channel, np.zeros_like(per_channel)
            return x, np.ones_like(per_channel), per_channel
        return None

    def _affine_chain(self, rw: Rewriter, node: Node) -> None:
        """Simplify ``node`` when it is an affine map (see :meth:`_affine`).

        Single-use affine producers are composed into it; the composite folds into the Conv /
        Gemm / MatMul that computes its input when that layer allows, else it is rewritten as
        one Mul and one Add. A lone Mul or Add, or a Mul followed by an Add, that folds nowhere
        stays as it is; a BatchNormalization is always rewritten.
        """
        found = self._affine(rw, node)
        if found is None:
            return
        x, scale, shift = found
        chain = [node]
        while x.producer is not None and rw.count(x) == 1:
            previous = self._affine(rw, x.producer)
            if previous is None:
                break
            chain.append(x.producer)
            x, s0, t0 = previous
            scale, shift = scale * s0, scale * t0 + shift  # s * (s0 * x + t0) + t
        y = node.outputs[0]

        result = self._fold_into_producer(rw, x, scale, shift)
        if result is None:
            already_minimal = len(chain) == 1 or (
                len(chain) == 2 and chain[0].op == "Add" and chain[1].op == "Mul")
            if node.op != "BatchNormalization" and already_minimal:
                return
            result = self._emit_affine(rw, node.name, x, scale, shift)
        rw.replace(y, result)
        take_name(rw.fn, result, y)
        for n in chain:  # each link was read only by the next: all of them are unread now
            rw.remove(n)

    @staticmethod
    def _emit_affine(rw: Rewriter, hint: str, x: Value, scale: np.ndarray,
                     shift: np.ndarray) -> Value:
        """``x * scale + shift`` as Mul and Add nodes (each left out when it does nothing)."""
        dt = x.type.dtype.numpy

        def operand(v: np.ndarray, what: str) -> Value:
            if np.all(v == v[0]):  # the same for every channel: a scalar
                return rw.fn.constant(np.asarray(v[0], dt), f"{hint}_{what}")
            shape = (v.shape[0],) + (1,) * (x.type.ndim - 2)
            return rw.fn.constant(v.reshape(shape).astype(dt), f"{hint}_{what}")

        out = x
        if np.any(scale != 1):
            out = rw.add("Mul", [out, operand(scale, "scale")], name=f"{hint}_mul").output
        if np.any(shift != 0):
            out = rw.add("Add", [out, operand(shift, "shift")], name=f"{hint}_add").output
        return out

    # -- folding into the producing layer ------------------------------------------------------
    def _fold_into_producer(self, rw: Rewriter, x: Value, scale: np.ndarray,
                            shift: np.ndarray) -> Value | None:
        """Fold ``x * scale + shift`` into the layer producing ``x``; the value now standing for
        the result, or None when the layer does not allow it."""
        producer = x.producer
        if producer is None or rw.count(x) != 1 or producer.body is not None:
            return None
        if producer.op == "Conv":
            return self._fold_conv(rw, producer, scale, shift)
        if producer.op == "Gemm":
            return self._fold_gemm(rw, producer, scale, shift)
        if producer.op == "MatMul":
            return self._fold_matmul(rw, producer, None, scale, shift)
        if producer.op == "Add":  # MatMul + a bias that is not per channel
            for i in (0, 1):
                mm, bias = producer.inputs[i], producer.inputs[1 - i]
                if (mm is not None and bias is not None and bias.is_constant
                        and mm.producer is not None and mm.producer.op == "MatMul"
                        and rw.count(mm) == 1 and mm.type == x.type):
                    return self._fold_matmul(rw, mm.producer, producer, scale, shift)
        return None

    @staticmethod
    def _fold_conv(rw: Rewriter, conv: Node, scale: np.ndarray,
                   shift: np.ndarray) -> Value | None:
        w_value = conv.inputs[1] if len(conv.inputs) > 1 else None
        b_value = conv.inputs[2] if len(conv.inputs) > 2 else None
        w = _data(w_value)
        if w is None or w_value is None or (b_value is not None and not b_value.is_constant):
            return None
        if w.shape[0] != scale.shape[0] or np.dtype(w.dtype).kind != "f":
            return None
        ct = _compute_dtype(w.dtype)
        new_w = w.astype(ct, copy=False) * scale.astype(ct).reshape((-1,) + (1,) * (w.ndim - 1))
        bias = np.zeros(w.shape[0]) if b_value is None else np.asarray(b_value.data, np.float64)
        new_b = bias.reshape(-1) * scale + shift
        fn = rw.fn
        b_name = b_value.name if b_value is not None else f"{conv.name}_bias"
        conv.inputs = [conv.inputs[0], fn.constant(new_w.astype(w.dtype, copy=False), w_value.name),
                       fn.constant(new_b.astype(w.dtype), b_name)]
        return conv.outputs[0]

    @staticmethod
    def _fold_gemm(rw: Rewriter, gemm: Node, scale: np.ndarray,
                   shift: np.ndarray) -> Value | None:
        b_value = gemm.inputs[1]
        c_value = gemm.inputs[2] if len(gemm.inputs) > 2 else None
        b = _data(b_value)
        if b is None or b_value is None or b.ndim != 2 or np.dtype(b.dtype).kind != "f":
            return None
        if c_value is not None and not c_value.is_constant:
            return None
        trans_b = bool(gemm.attrs.get("transB", 0))
        n = b.shape[0] if trans_b else b.shape[1]
        if n != scale.shape[0] or gemm.outputs[0].type.shape[-1] != n:
            return None
        ct = _compute_dtype(b.dtype)
        s = scale.astype(ct)
        new_b = b.astype(ct, copy=False) * (s[:, None] if trans_b else s[None, :])
        beta = float(gemm.attrs.get("beta", 1.0))
        c = np.zeros(n) if c_value is None else np.asarray(c_value.data, np.float64) * beta
        new_c = c * scale + shift
        fn = rw.fn
        dt = gemm.outputs[0].type.dtype.numpy
        c_name = c_value.name if c_value is not None else f"{gemm.name}_bias"
        gemm.inputs = [gemm.inputs[0], fn.constant(new_b.astype(b.dtype), b_value.name),
                       fn.constant(new_c.astype(dt), c_name)]
        if "beta" in gemm.attrs:
            gemm.attrs["beta"] = 1.0
        return gemm.outputs[0]

    @staticmethod
    def _fold_matmul(rw: Rewriter, mm: Node, add: Node | None, scale: np.ndarray,
                     shift: np.ndarray) -> Value | None:
        w_value = mm.inputs[1]
        w = _data(w_value)
        if w is None or w_value is None or w.ndim != 2 or mm.outputs[0].type.ndim != 2:
            return None
        if w.shape[1] != scale.shape[0] or np.dtype(w.dtype).kind != "f":
            return None
        fn = rw.fn
        ct = _compute_dtype(w.dtype)
        new_w = w.astype(ct, copy=False) * scale.astype(ct)[None, :]
        mm.inputs = [mm.inputs[0], fn.constant(new_w.astype(w.dtype, copy=False), w_value.name)]
        dt = mm.outputs[0].type.dtype.numpy
        if add is None:
            bias = fn.constant(shift.astype(dt), f"{mm.name}_bias")
            return rw.add("Add", [mm.outputs[0], bias], name=f"{mm.name}_add").output
        i = 0 if add.inputs[0] is mm.outputs[0] else 1
        b_value = add.inputs[1 - i]
        assert b_value is not None and b_value.data is not None
        new_bias = np.asarray(b_value.data, np.float64) * scale + shift
        inputs = list(add.inputs)
        inputs[1 - i] = fn.constant(new_bias.astype(b_value.data.dtype), b_value.name)
        add.inputs = inputs
        return add.outputs[0]
