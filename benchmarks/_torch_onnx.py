"""An ONNX graph run by PyTorch, op by op: the PyTorch side of ``gpu_vs_torch.py``.

:class:`TorchGraph` holds the model's weights as torch tensors on a device and runs each node
with the ``torch`` / ``torch.nn.functional`` call a PyTorch model would make for it (``Conv`` is
``F.conv2d``, ``BatchNormalization`` is ``F.batch_norm`` in inference mode,
``LayerNormalization`` is ``F.layer_norm``, ...), so that PyTorch eager runs exactly the
network Tessera compiles, with the same weights. The erf form of GELU that exporters write as
five nodes (``Div`` by sqrt 2, ``Erf``, ``Add`` 1, ``Mul`` by x, ``Mul`` by 0.5) is run as one
``F.gelu``, as the PyTorch module it was exported from does. ``torch.compile`` traces
:meth:`TorchGraph.forward` like any module's forward.

Only the ops of the benchmark's models are implemented; any other raises ``NotImplementedError``
naming it. The module imports torch lazily, so the benchmark can say that torch is missing.
"""

from __future__ import annotations

import math
from functools import reduce
from typing import Any

import numpy as np
import onnx
from onnx import helper, numpy_helper


def _attrs(node: onnx.NodeProto) -> dict[str, Any]:
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _pads(pads: list[int], dims: int) -> tuple[list[int], bool]:
    """ONNX ``[x1_begin, x2_begin, ..., x1_end, x2_end]`` as symmetric padding per spatial
    dimension, and whether it is symmetric."""
    if not pads:
        return [0] * dims, True
    begin, end = list(pads[:dims]), list(pads[dims:])
    return begin, begin == end


class TorchGraph:
    """An ONNX model's graph with its weights on ``device`` (``"cuda"`` or ``"cpu"``)."""

    def __init__(self, model: onnx.ModelProto, device: str) -> None:
        import torch

        self.torch = torch
        self.device = torch.device(device)
        graph = model.graph
        self.host: dict[str, np.ndarray] = {i.name: numpy_helper.to_array(i)
                                            for i in graph.initializer}
        nodes = []
        for node in graph.node:
            if node.op_type == "Constant":
                self.host[node.output[0]] = numpy_helper.to_array(_attrs(node)["value"])
            else:
                nodes.append(node)
        self.weights = {k: torch.from_numpy(np.ascontiguousarray(v)).to(self.device)
                        for k, v in self.host.items()}
        self.inputs = [v.name for v in graph.input if v.name not in self.host]
        self.outputs = [v.name for v in graph.output]
        self.steps = self._plan(nodes)

    # -- planning ---------------------------------------------------------------------------
    def _scalar(self, name: str) -> float | None:
        value = self.host.get(name)
        return float(value) if value is not None and value.size == 1 else None

    def _plan(self, nodes: list[onnx.NodeProto]) -> list[tuple[str, list[str], list[str],
                                                               dict[str, Any]]]:
        """The nodes as (op, inputs, outputs, attributes), erf-GELU chains as one ``Gelu``."""
        readers: dict[str, int] = {}
        for n in nodes:
            for i in n.input:
                readers[i] = readers.get(i, 0) + 1
        producer = {o: n for n in nodes for o in n.output}
        fused: set[int] = set()
        steps = []
        for n in nodes:
            if id(n) in fused:
                continue
            gelu = self._match_gelu(n, nodes, producer, readers)
            if gelu is not None:
                x, chain = gelu
                fused.update(id(m) for m in chain)
                steps.append(("Gelu", [x], [chain[-1].output[0]], {}))
                continue
            steps.append((n.op_type, list(n.input), list(n.output),
                          self._static(n.op_type, list(n.input), _attrs(n))))
        return steps

    def _static(self, op: str, ins: list[str], attrs: dict[str, Any]) -> dict[str, Any]:
        """Constant inputs that decide shapes or values read as Python numbers once, so that
        ``forward`` never touches numpy (and ``torch.compile`` sees constants)."""
        def given(i: int) -> bool:
            return len(ins) > i and bool(ins[i])

        if op == "Reshape":
            attrs["shape"] = self._ints(ins[1])
        elif op in ("Unsqueeze", "ReduceMean") and "axes" not in attrs and given(1):
            attrs["axes"] = self._ints(ins[1])
        elif op == "Clip":
            attrs["min"] = self._scalar(ins[1]) if given(1) else None
            attrs["max"] = self._scalar(ins[2]) if given(2) else None
        elif op == "Pow":
            attrs["exponent"] = self._scalar(ins[1])
        return attrs

    def _match_gelu(self, div: onnx.NodeProto, nodes: list[onnx.NodeProto],
                    producer: dict[str, onnx.NodeProto], readers: dict[str, int]
                    ) -> tuple[str, list[onnx.NodeProto]] | None:
        if div.op_type != "Div" or not math.isclose(self._scalar(div.input[1]) or 0.0,
                                                    math.sqrt(2.0), rel_tol=1e-5):
            return None
        x = div.input[0]
        after = {i: n for n in nodes for i in n.input}

        def next_of(node: onnx.NodeProto, op: str) -> onnx.NodeProto | None:
            out = node.output[0]
            nxt = after.get(out)
            return nxt if nxt is not None and nxt.op_type == op and readers.get(out) == 1 \
                else None

        erf = next_of(div, "Erf")
        add = erf and next_of(erf, "Add")
        mul = add and next_of(add, "Mul")
        half = mul and next_of(mul, "Mul")
        if not (erf and add and mul and half):
            return None
        if self._scalar(add.input[1]) != 1.0 or x not in mul.input or \
                self._scalar(half.input[1]) != 0.5:
            return None
        return x, [div, erf, add, mul, half]

    # -- running ----------------------------------------------------------------------------
    def forward(self, *inputs: Any) -> list[Any]:
        env: dict[str, Any] = dict(self.weights)
        env.update(zip(self.inputs, inputs))
        for op, ins, outs, attrs in self.steps:
            fn = getattr(self, f"_op_{op}", None)
            if fn is None:
                raise NotImplementedError(f"ONNX op {op} is not implemented by the torch runner")
            result = fn([env[i] if i else None for i in ins], attrs, ins)
            if not isinstance(result, tuple):
                result = (result,)
            env.update(zip(outs, result))
        return [env[o] for o in self.outputs]

    __call__ = forward

    def run_numpy(self, inputs: dict[str, np.ndarray],
                  forward: Any = None) -> list[np.ndarray]:
        """Host arrays in, host arrays out (what the benchmark times for both runtimes),
        through :meth:`forward` or ``forward`` (its ``torch.compile`` form)."""
        t = self.torch
        with t.inference_mode():
            args = [t.from_numpy(np.ascontiguousarray(inputs[n])).to(self.device)
                    for n in self.inputs]
            return [o.cpu().numpy() for o in (forward or self.forward)(*args)]

    def _ints(self, name: str) -> list[int]:
        return [int(v) for v in np.asarray(self.host[name]).reshape(-1)]

    # every op: (input tensors, attributes, input names) -> output(s)
    def _op_Conv(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        F = self.torch.nn.functional
        dims = x[0].dim() - 2
        pads, symmetric = _pads(list(a.get("pads", [])), dims)
        inp = x[0]
        if not symmetric:
            flat = []
            for d in reversed(range(dims)):
                flat += [a["pads"][d], a["pads"][d + dims]]
            inp, pads = F.pad(inp, flat), [0] * dims
        conv = F.conv2d if dims == 2 else F.conv1d
        return conv(inp, x[1], x[2] if len(x) > 2 else None, stride=a.get("strides", 1),
                    padding=pads, dilation=a.get("dilations", 1), groups=a.get("group", 1))

    def _op_BatchNormalization(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.nn.functional.batch_norm(x[0], x[3], x[4], x[1], x[2], False,
                                                   0.0, a.get("epsilon", 1e-5))

    def _op_LayerNormalization(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        axis = a.get("axis", -1) % x[0].dim()
        shape = tuple(x[0].shape[axis:])
        return self.torch.nn.functional.layer_norm(x[0], shape, x[1],
                                                   x[2] if len(x) > 2 else None,
                                                   a.get("epsilon", 1e-5))

    def _op_Relu(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.relu(x[0])

    def _op_Gelu(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.nn.functional.gelu(x[0])

    def _op_Clip(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        lo, hi = a["min"], a["max"]
        if lo == 0.0 and hi == 6.0:
            return self.torch.nn.functional.relu6(x[0])
        return self.torch.clamp(x[0], lo, hi)

    def _op_Erf(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.erf(x[0])

    def _op_Sqrt(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.sqrt(x[0])

    def _op_Add(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return x[0] + x[1]

    def _op_Sub(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return x[0] - x[1]

    def _op_Mul(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return x[0] * x[1]

    def _op_Div(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return x[0] / x[1]

    def _op_Pow(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        if a["exponent"] == 2.0:
            return x[0] * x[0]
        return self.torch.pow(x[0], x[1])

    def _op_Sum(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return reduce(lambda p, q: p + q, x)

    def _op_MaxPool(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        pads, symmetric = _pads(list(a.get("pads", [])), 2)
        if not symmetric:
            raise NotImplementedError("MaxPool with asymmetric pads")
        return self.torch.nn.functional.max_pool2d(
            x[0], a["kernel_shape"], a.get("strides", 1), pads,
            ceil_mode=bool(a.get("ceil_mode", 0)))

    def _op_AveragePool(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        pads, symmetric = _pads(list(a.get("pads", [])), 2)
        if not symmetric:
            raise NotImplementedError("AveragePool with asymmetric pads")
        return self.torch.nn.functional.avg_pool2d(
            x[0], a["kernel_shape"], a.get("strides", 1), pads,
            ceil_mode=bool(a.get("ceil_mode", 0)),
            count_include_pad=bool(a.get("count_include_pad", 0)))

    def _op_GlobalAveragePool(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return x[0].mean(dim=tuple(range(2, x[0].dim())), keepdim=True)

    def _op_Flatten(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        axis = a.get("axis", 1) % max(x[0].dim(), 1)
        return x[0].reshape(math.prod(x[0].shape[:axis]), -1)

    def _op_Reshape(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        shape = [x[0].shape[i] if s == 0 else s for i, s in enumerate(a["shape"])]
        return x[0].reshape(shape)

    def _op_Transpose(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        perm = a.get("perm") or list(reversed(range(x[0].dim())))
        return x[0].permute(*perm)

    def _op_Unsqueeze(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        axes = a["axes"]
        out = x[0]
        rank = out.dim() + len(axes)
        for ax in sorted(ax % rank for ax in axes):
            out = out.unsqueeze(ax)
        return out

    def _op_Cast(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        np_type = helper.tensor_dtype_to_np_dtype(a["to"])
        return x[0].to(getattr(self.torch, np.dtype(np_type).name))

    def _op_Gather(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        data, idx = x
        axis = a.get("axis", 0) % data.dim()
        flat = data.index_select(axis, idx.reshape(-1).long())
        return flat.reshape(*data.shape[:axis], *idx.shape, *data.shape[axis + 1:])

    def _op_MatMul(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.matmul(x[0], x[1])

    def _op_Gemm(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        A = x[0].t() if a.get("transA", 0) else x[0]
        alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
        c = x[2] if len(x) > 2 else None
        if a.get("transB", 0) and alpha == 1.0 and beta == 1.0:
            return self.torch.nn.functional.linear(A, x[1], c)  # weight as nn.Linear keeps it
        B = x[1].t() if a.get("transB", 0) else x[1]
        out = self.torch.matmul(A, B) * alpha
        return out if c is None else out + beta * c

    def _op_Softmax(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.softmax(x[0], dim=a.get("axis", -1))

    def _op_ReduceMean(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        axes = a.get("axes")
        dims = tuple(axes) if axes else tuple(range(x[0].dim()))
        return x[0].mean(dim=dims, keepdim=bool(a.get("keepdims", 1)))

    def _op_Concat(self, x: list[Any], a: dict[str, Any], _n: list[str]) -> Any:
        return self.torch.cat(x, dim=a["axis"])
