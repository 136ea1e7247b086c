"""Direct against Winograd convolution, layer by layer, on this machine (llvm backend).

Each layer is a blocked 3x3 stride-1 convolution with its bias and ReLU fused (ConvNCHWc +
Relu, as the llvm backend compiles ResNet-50's), lowered with the template the knobs name:
``direct``, Winograd F(2x2, 3x3) (``F2``) and F(4x4, 3x3) (``F4``), and ``default`` (what the
conv space picks without tuning records). The kernels of a layer are timed interleaved, round
after round (each round: every kernel run for at least ``--min-ms``), and the table gives the
median and the minimum over the rounds, and each output's largest error against a float64
reference relative to the output's largest magnitude.

    python benchmarks/winograd_layers.py                 # ResNet-50's 3x3 stride-1 layers
    python benchmarks/winograd_layers.py --layers 1x64x56x64,2x128x28x128 --rounds 15
    python benchmarks/winograd_layers.py --mcpu znver3   # AVX2 code (8 lanes, 16 registers)
"""

from __future__ import annotations

import argparse
import json
import time
from typing import Any

import numpy as np

#: ResNet-50's 3x3 stride-1 convolutions (batch x channels x size x out channels), pad 1.
RESNET50 = "1x64x56x64,1x128x28x128,1x256x14x256,1x512x7x512"

VARIANTS: dict[str, dict[str, Any] | None] = {
    "direct": {"template": "direct"},
    "F2": {"template": "winograd", "winograd_tile": 2},
    "F4": {"template": "winograd", "winograd_tile": 4},
    "default": None,
}


def _block(c: int) -> int:
    return next((b for b in (16, 8, 4, 2) if c % b == 0), c)


def layer(n: int, c: int, size: int, o: int, pad: int, seed: int = 0) -> dict[str, Any]:
    """The graph of one layer (blocked input, packed weights), its input and reference."""
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType
    from tessera.ops.layout import pack_conv_weight, pack_nchwc

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, size, size)).astype(np.float32)
    w = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    ib, ob = _block(c), _block(o)
    fn = Function("layer")
    xb = pack_nchwc(x, ib)
    y = fn.op("ConvNCHWc", fn.add_input("x", TensorType.of(xb)),
              fn.constant(pack_conv_weight(w, ib, ob), "w"),
              fn.constant(b.reshape(-1, ob), "b"), pads=[pad] * 4, strides=[1, 1])
    fn.outputs = [fn.op("Relu", y)]
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = size + 2 * pad - 2
    ref = np.zeros((n, o, oh, oh))
    for r in range(3):
        for s in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, r:r + oh, s:s + oh],
                             w[:, :, r, s].astype(np.float64))
    ref = np.maximum(ref + b[None, :, None, None], 0)
    return {"fn": fn, "x": xb, "ref": ref, "flops": 2 * n * o * oh * oh * c * 9}


def build(fn: Any, knobs: dict[str, Any] | None, cpu: Any,
          mcpu: str | None = None) -> tuple[Any, dict[str, Any]]:
    """The layer's kernel lowered with ``knobs`` (None: the defaults), loaded; its config."""
    from tessera.passes.fuse_ops import fuse_ops
    from tessera.topi.from_graph import build_te
    from tessera_llvm.build import build_module
    from tessera_llvm.lowering import choose_conv_tiling, lower_group
    from tessera_llvm.schedules.common import compute_ops
    from tessera_llvm.schedules.conv2d import conv_space, find_conv

    choose_conv_tiling(fn, cpu)
    (group,) = fuse_ops(fn)
    gte = build_te(group.nodes, [v for v in group.inputs if not v.is_constant], group.outputs)
    key = conv_space(find_conv(compute_ops(list(gte.outputs))), cpu).default_config().key()
    kernel, consts = lower_group(group, "layer", cpu, {key: knobs} if knobs else None)
    f = build_module([kernel.func], "layer", mcpu=mcpu).load().get("layer")
    data = {v.name: np.ascontiguousarray(v.data) for v in consts}
    return (f, kernel, data), dict(kernel.config)


def interleaved(calls: dict[str, Any], rounds: int, min_ms: float) -> dict[str, list[float]]:
    """Seconds per call of each of ``calls``, one value per round, the calls interleaved."""
    counts = {}
    for name, call in calls.items():
        call()
        start = time.perf_counter()
        call()
        once = max(time.perf_counter() - start, 1e-7)
        counts[name] = max(1, int(min_ms / 1e3 / once))
    times: dict[str, list[float]] = {k: [] for k in calls}
    for _ in range(rounds):
        for name, call in calls.items():
            start = time.perf_counter()
            for _ in range(counts[name]):
                call()
            times[name].append((time.perf_counter() - start) / counts[name])
    return times


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", default=RESNET50,
                    help="comma-separated NxCxSIZExO (pad 1; a 5th field sets the pad); "
                         "default: ResNet-50's 3x3 stride-1 layers")
    ap.add_argument("--rounds", type=int, default=11, help="interleaved rounds (default 11)")
    ap.add_argument("--min-ms", type=float, default=50.0,
                    help="least duration of each kernel's measurement per round")
    ap.add_argument("--threads", type=int, default=0, help="threads (default: all cores)")
    ap.add_argument("--json", metavar="PATH", help="also save the results as JSON")
    ap.add_argument("--mcpu", help="compile for this CPU (llvm's -mcpu, e.g. znver3 for AVX2 "
                                   "code on an AVX-512 host); default: the host")
    args = ap.parse_args()

    from tessera_llvm.cpu import cpu_info
    from tessera_llvm.parallel import set_num_threads

    if args.threads:
        set_num_threads(args.threads)
    cpu = cpu_info(args.mcpu, num_threads=args.threads or None)
    print(f"llvm on {cpu.name}, {cpu.num_threads} thread(s); median / min of {args.rounds} "
          f"interleaved rounds; err = max |y - y64| / max |y64|")
    print(f"{'layer':<18} {'variant':<8} {'ms median':>9} {'ms min':>8} {'GFLOP/s':>8} "
          f"{'vs direct':>9} {'err':>8}  config")
    results = []
    for spec in args.layers.split(","):
        dims = [int(v) for v in spec.split("x")]
        n, c, size, o = dims[:4]
        pad = dims[4] if len(dims) > 4 else 1
        lay = layer(n, c, size, o, pad)
        calls, configs, errors = {}, {}, {}
        for name, knobs in VARIANTS.items():
            (f, kernel, data), configs[name] = build(lay["fn"], knobs, cpu, args.mcpu)
            out = np.empty(tuple(lay["fn"].outputs[0].type.shape), np.float32)
            # the workspace (padded input, transformed tiles) allocated once, as the runtime
            # does per execution state
            scratch = [np.empty(f.workspace_bytes, np.uint8)] if f.workspace_bytes else []
            args_ = [data[v] if v in data else lay["x"] for v in kernel.inputs] + [out, *scratch]
            calls[name] = (lambda f=f, a=args_: f(a))
            calls[name]()
            nn, cc, hh, ww, bb = out.shape
            got = out.transpose(0, 1, 4, 2, 3).reshape(nn, cc * bb, hh, ww)
            errors[name] = float(np.abs(got - lay["ref"]).max() / np.abs(lay["ref"]).max())
        times = interleaved(calls, args.rounds, args.min_ms)
        base = float(np.median(times["direct"]))
        for name, ts in times.items():
            med, low = float(np.median(ts)), float(np.min(ts))
            cfg = configs[name]
            desc = cfg.get("template", "direct")
            if desc == "winograd":
                desc += f" m={cfg['winograd_tile']} oc_tile={cfg['winograd_oc_tile']} " \
                        f"reg_n={cfg['winograd_reg_n']}"
            print(f"{spec + 'p' + str(pad):<18} {name:<8} {med * 1e3:>9.3f} {low * 1e3:>8.3f} "
                  f"{lay['flops'] / med / 1e9:>8.1f} {base / med:>8.2f}x {errors[name]:>8.1e}"
                  f"  {desc}", flush=True)
            results.append({"layer": spec, "pad": pad, "variant": name, "ms_median": med * 1e3,
                            "ms_min": low * 1e3, "ms_all": [t * 1e3 for t in ts],
                            "speedup": base / med, "error": errors[name], "config": cfg})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump({"cpu": cpu.name, "mcpu": args.mcpu, "threads": cpu.num_threads,
                       "rounds": args.rounds, "results": results}, fh, indent=1, default=str)


if __name__ == "__main__":
    main()
