"""The plans of tessera-cudnn executed in numpy, exactly as their descriptors describe the calls
(column-major layouts with leading dimensions and batch strides, pre-padding, bias, residual,
pooling windows, softmax views), so that CI checks the mapping from graph to library call that
the GPU tests then check against the libraries themselves."""

from __future__ import annotations

import numpy as np

from tessera.ops.conv import conv as ref_conv
from tessera.ops.pool import average_pool, max_pool
from tessera_cudnn.conv import ConvPlan
from tessera_cudnn.gemm import GemmPlan, LayoutSpec, layouts
from tessera_cudnn.pool_softmax import PoolPlan, SoftmaxPlan


def _read(buf: np.ndarray, spec: LayoutSpec, b: int) -> np.ndarray:
    flat = buf.reshape(-1)
    idx = b * spec.stride + np.arange(spec.cols)[None, :] * spec.ld + \
        np.arange(spec.rows)[:, None]
    m = flat[idx].astype(np.float64)
    return m.T if spec.transposed else m


def gemm(p: GemmPlan, env: dict[str, np.ndarray]) -> None:
    a_spec, b_spec, d_spec = layouts(p)
    a, b = env[p.inputs[0]], env[p.inputs[1]]
    bias = env[p.inputs[2]].reshape(-1) if p.has_bias else None
    c = env[p.inputs[2 + p.has_bias]] if p.has_c else None
    out = np.zeros(p.batch * p.m * p.n, np.float32)
    for i in range(p.batch):
        # cuBLASLt: D = alpha * op(A') op(B') + beta * C, then the epilogue
        d = p.alpha * (_read(b, a_spec, i) @ _read(a, b_spec, i))
        if c is not None:
            d = d + p.beta * _read(c, d_spec, 0)
        if bias is not None:
            d = d + bias[:, None]
        if "relu" in p.epilogue:
            d = np.maximum(d, 0)
        if "gelu" in p.epilogue:
            d = 0.5 * d * (1 + np.tanh(np.sqrt(2 / np.pi) * (d + 0.044715 * d ** 3)))
        idx = i * d_spec.stride + np.arange(d_spec.cols)[None, :] * d_spec.ld + \
            np.arange(d_spec.rows)[:, None]
        out[idx] = d
    env[p.outputs[0]] = out


def conv(p: ConvPlan, env: dict[str, np.ndarray]) -> None:
    x = env[p.inputs[0]].reshape(p.x_shape)
    if p.prepad:
        t, left, bot, r = p.prepad
        x = np.pad(x, ((0, 0), (0, 0), (t, bot), (left, r)))
    assert list(x.shape) == p.padded_shape
    w, b = env[p.inputs[1]].reshape(p.w_shape), env[p.inputs[2]].reshape(-1)
    y = ref_conv(x, w, b, kernel_shape=p.w_shape[2:], strides=p.strides,
                 pads=[*p.pads, *p.pads], dilations=p.dilations, group=p.groups)
    if p.residual:
        y = y + env[p.inputs[3]].reshape(y.shape)
    if p.activation == "relu":
        y = np.maximum(y, 0)
    assert list(y.shape) == p.y_shape
    env[p.outputs[0]] = y


def pool(p: PoolPlan, env: dict[str, np.ndarray]) -> None:
    x = env[p.inputs[0]].reshape(p.x_shape)
    common = dict(kernel_shape=p.window, strides=p.strides, pads=[*p.pads, *p.pads],
                  dilations=None, ceil_mode=0)
    if p.mode == 0:
        y = max_pool(x, storage_order=0, **common)[0]
    else:
        y = average_pool(x, count_include_pad=int(p.mode == 1), **common)
    env[p.outputs[0]] = y


def softmax(p: SoftmaxPlan, env: dict[str, np.ndarray]) -> None:
    x = env[p.inputs[0]].reshape(p.view).astype(np.float64)
    shifted = x - x.max(axis=1, keepdims=True)
    if p.log:
        y = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    else:
        y = np.exp(shifted) / np.exp(shifted).sum(axis=1, keepdims=True)
    env[p.outputs[0]] = y.astype(np.float32)


RUN = {"gemm": gemm, "conv": conv, "pool": pool, "softmax": softmax}


def run_region(compiled, env: dict[str, np.ndarray]) -> None:  # noqa: ANN001
    """Run a compiled cudnn/cublas region's plans on ``env`` (tensor name -> array)."""
    env.update(compiled.handle["constants"])
    for plan in compiled.handle["plans"]:
        RUN[plan.kind](plan, env)
        for name in plan.outputs:
            env[name] = np.asarray(env[name]).reshape(compiled.tensors[name].shape)


def _lookup(env: dict[str, np.ndarray], name: str) -> np.ndarray:
    return env[name] if name in env else env[name.split("@")[0]]


def run_module(mod, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:  # noqa: ANN001
    """A module compiled for ``cuda -libs=cudnn,cublas`` run without a GPU: the library
    regions by their plans (above), the others node by node with the reference ops."""
    from tessera.ops.registry import get_schema

    env = dict(inputs)
    for info in mod.partition_report().regions:
        compiled = mod.compiled[info.name]
        for v in compiled.region.inputs:
            env.setdefault(v.name, _lookup(env, v.name))
        if info.backend in ("cudnn", "cublas"):
            run_region(compiled, env)
            continue
        for node in compiled.region.nodes:
            args = [None if v is None else (v.data if v.is_constant else _lookup(env, v.name))
                    for v in node.inputs]
            outs = get_schema(node.op).evaluate(args, node.attrs)
            for v, o in zip(node.outputs, outs):
                if v is not None:
                    env[v.name] = o
    return {name: np.asarray(_lookup(env, v.name)).reshape(v.type.shape)
            for name, v in zip(mod.output_names, mod.graph.outputs)}
