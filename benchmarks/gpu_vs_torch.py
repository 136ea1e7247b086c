"""Tessera's cuda backend against PyTorch on the same GPU, with the same weights, in one run.

Models, each at every batch of ``--batches`` (default 1 and 16):

- ResNet-50: the ``onnx`` package's light ResNet-50 with random weights
  (:mod:`tessera.testing.light_models`; its classifier's ``Reshape`` follows the batch);
- a BERT-style encoder, 4 layers x 768, 128 tokens (:mod:`tessera.testing.bert`, with the
  ``LayerNormalization`` op, as ``torch.nn.LayerNorm`` exports at opset 17);
- MobileNet v1 at 224x224, thirteen depthwise-separable blocks (:mod:`tessera.testing.mobilenet`).

PyTorch runs the same ONNX graph op by op with the calls a PyTorch model makes
(``benchmarks/_torch_onnx.py``: ``F.conv2d``, ``F.batch_norm``, ``F.layer_norm``, ``F.gelu``,
``torch.matmul``, ...) in eager mode and through ``torch.compile`` (``--compile-mode``; by
default torch's default mode, as most users call it). Both sides
are timed from host numpy inputs to host numpy outputs (Tessera: ``set_input``, ``run``,
``get_output``; PyTorch: ``from_numpy``, ``.to(device)``, forward, ``.cpu()``), so both pay the
same copies. Per model, the engines' measurements alternate (the order rotates every repeat);
each measurement averages enough runs to last ``--min-ms``. The table prints medians, the ratios
Tessera / PyTorch (below 1: Tessera is faster) and the largest difference from PyTorch eager's
output, then the issue's goal: untuned ``cuda`` at most 3x PyTorch eager on ResNet-50, batch 1.

    python benchmarks/gpu_vs_torch.py                                  # cuda, on a GPU machine
    python benchmarks/gpu_vs_torch.py --models resnet50 --batches 1 --no-compile
    python benchmarks/gpu_vs_torch.py --libs --models resnet50,bert   # cuDNN and cuBLAS
    python benchmarks/gpu_vs_torch.py --target llvm --torch-device cpu --models mobilenet \\
        --batches 1 --no-compile                                       # a smoke run without GPU
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from _common import cpu_name, geomean

#: Benchmark key -> label.
MODELS: dict[str, str] = {
    "resnet50": "ResNet-50",
    "bert": "BERT 4x768 s128",
    "mobilenet": "MobileNet v1",
}

#: The cuDNN/cuBLAS goals (``--libs``): Tessera / PyTorch eager at batch 1 and at batch 16.
LIBS_B1_MAX_RATIO, LIBS_B16_MAX_RATIO = 0.6, 1.0
#: The issue's goal: untuned cuda / PyTorch eager on ResNet-50 at batch 1.
RESNET_B1_MAX_RATIO = 3.0


@dataclass
class Workload:
    key: str
    label: str
    batch: int
    model: Any  # onnx.ModelProto
    inputs: dict[str, Any]


@dataclass
class Result:
    key: str
    label: str
    batch: int
    compile_s: dict[str, float] = field(default_factory=dict)
    ms: dict[str, list[float]] = field(default_factory=dict)
    max_abs_diff: dict[str, float] = field(default_factory=dict)
    runs_per_measurement: int = 0
    error: str | None = None

    def median(self, engine: str) -> float:
        values = sorted(self.ms.get(engine, []))
        if not values:
            return float("nan")
        mid = len(values) // 2
        return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2

    def ratio(self, engine: str) -> float:
        return self.median("tessera") / self.median(engine)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS),
                    help=f"comma-separated, from {', '.join(MODELS)}")
    ap.add_argument("--batches", default="1,16", help="comma-separated batch sizes")
    ap.add_argument("--target", default="cuda", help="Tessera's target (default: cuda)")
    ap.add_argument("--libs", action="store_true",
                    help="Tessera with cuDNN and cuBLAS (target 'cuda -libs=cudnn,cublas'; "
                         "with --tf32, cuDNN may use TF32 as PyTorch's convolutions do by "
                         "default) and the libraries' goals")
    ap.add_argument("--tf32", action="store_true",
                    help="with --libs: 'cudnn -tf32=1, cublas, cuda', PyTorch's defaults "
                         "(TF32 convolutions, float32 matrix products)")
    ap.add_argument("--torch-device", default="cuda", help="PyTorch's device (default: cuda)")
    ap.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    ap.add_argument("--compile-mode", default="default",
                    help="torch.compile mode (default, reduce-overhead, max-autotune)")
    ap.add_argument("--repeat", type=int, default=5, help="measurements per engine (median)")
    ap.add_argument("--min-ms", type=float, default=200.0,
                    help="a measurement lasts at least this long")
    ap.add_argument("--warmup", type=int, default=3, help="untimed runs per engine")
    ap.add_argument("--seed", type=int, default=0)
    return ap.parse_args(argv)


def with_batch(model: Any, batch: int) -> Any:
    """A copy of a batch-1 image model whose input, output and constant ``Reshape`` shapes
    (a leading 1, as the light models' classifier has) have batch ``batch``."""
    import numpy as np
    import onnx
    from onnx import numpy_helper

    out = onnx.ModelProto()
    out.CopyFrom(model)
    g = out.graph
    shapes = {n.input[1] for n in g.node if n.op_type == "Reshape"}
    for i, init in enumerate(g.initializer):
        if init.name in shapes:
            value = numpy_helper.to_array(init).copy()
            if value.ndim == 1 and value.size and value[0] == 1:
                value[0] = batch
                g.initializer[i].CopyFrom(numpy_helper.from_array(value.astype(np.int64),
                                                                  init.name))
    for v in [*g.input, *g.output]:
        dims = v.type.tensor_type.shape.dim
        if dims and dims[0].dim_value == 1:
            dims[0].dim_value = batch
    return out


def load_workload(key: str, batch: int, seed: int) -> Workload:
    import numpy as np

    if key == "bert":
        from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder

        cfg = BertConfig(batch=batch, layer_norm="op")
        return Workload(key, MODELS[key], batch, make_bert_encoder(cfg, seed=seed),
                        bert_inputs(cfg, seed=seed))
    if key == "mobilenet":
        from tessera.testing.mobilenet import make_mobilenet, mobilenet_inputs

        return Workload(key, MODELS[key], batch, make_mobilenet(batch, seed=seed),
                        mobilenet_inputs(batch, seed=seed))
    from tessera.testing.light_models import load_light_model

    light = load_light_model(key, seed=seed)
    rng = np.random.default_rng(seed + 1)
    inputs = {k: rng.standard_normal((batch, *v.shape[1:]), dtype=np.float32)
              for k, v in light.inputs.items()}
    return Workload(key, MODELS[key], batch, with_batch(light.model, batch), inputs)


def _max_diff(got: list[Any], want: list[Any]) -> float:
    import numpy as np

    return max((float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64))))
                for a, b in zip(got, want)), default=0.0)


def measure(work: Workload, args: argparse.Namespace) -> Result:
    import numpy as np
    from _torch_onnx import TorchGraph

    import tessera

    result = Result(work.key, work.label, work.batch)
    runners: dict[str, Any] = {}
    try:
        start = time.perf_counter()
        mod = tessera.compile(work.model, target=args.target,
                              input_shapes={k: list(v.shape) for k, v in work.inputs.items()})
        result.compile_s["tessera"] = time.perf_counter() - start
    except Exception as e:  # noqa: BLE001 - report the model's failure and go on
        result.error = f"tessera: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return result
    outs = [np.empty(0)] * len(mod.output_names)

    def run_tessera() -> list[Any]:
        for name, value in work.inputs.items():
            mod.set_input(name, value)
        mod.run()
        for i in range(len(outs)):
            outs[i] = mod.get_output(i)
        return outs

    runners["tessera"] = run_tessera
    graph = TorchGraph(work.model, args.torch_device)
    runners["eager"] = lambda: graph.run_numpy(work.inputs)
    want = runners["eager"]()
    if not args.no_compile:
        import torch

        compiled_forward = torch.compile(graph.forward, mode=None if args.compile_mode ==
                                         "default" else args.compile_mode)
        start = time.perf_counter()
        try:
            runners["compiled"] = lambda: graph.run_numpy(work.inputs, compiled_forward)
            runners["compiled"]()
            result.compile_s["compiled"] = time.perf_counter() - start
        except Exception as e:  # noqa: BLE001 - torch.compile failing is a figure too
            print(f"  torch.compile failed on {work.label}: {type(e).__name__}: {e}",
                  file=sys.stderr)
            runners.pop("compiled")
    for engine, fn in runners.items():
        got = fn()
        result.max_abs_diff[engine] = _max_diff([np.array(g) for g in got], want)
        for _ in range(max(args.warmup, 0)):
            fn()

    def once(fn: Any) -> float:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1000.0

    slowest = max(min(once(fn) for _ in range(3)) for fn in runners.values())
    number = max(1, math.ceil(args.min_ms / max(slowest, 1e-3)))
    result.runs_per_measurement = number
    order = list(runners)
    for r in range(max(args.repeat, 1)):
        rotated = order[r % len(order):] + order[:r % len(order)]
        for engine in rotated:
            fn = runners[engine]
            start = time.perf_counter()
            for _ in range(number):
                fn()
            result.ms.setdefault(engine, []).append(
                (time.perf_counter() - start) * 1000.0 / number)
    return result


def _fmt(v: float, spec: str = "9.3f") -> str:
    return format(v, spec) if math.isfinite(v) else f"{'-':>{spec.split('.')[0]}}"


def print_table(results: list[Result]) -> None:
    print(f"{'model':<18} {'batch':>5} {'tessera ms':>10} {'eager ms':>9} {'compiled ms':>11} "
          f"{'/eager':>7} {'/compiled':>9} {'max diff':>9}")
    for r in results:
        if r.error:
            print(f"{r.label:<18} {r.batch:>5}  FAILED {r.error}")
            continue
        print(f"{r.label:<18} {r.batch:>5} {_fmt(r.median('tessera'), '10.3f')} "
              f"{_fmt(r.median('eager'))} {_fmt(r.median('compiled'), '11.3f')} "
              f"{_fmt(r.ratio('eager'), '7.2f')} {_fmt(r.ratio('compiled'), '9.2f')} "
              f"{r.max_abs_diff.get('tessera', float('nan')):9.1e}")
    ok = [r for r in results if not r.error]
    print(f"{'geomean':<18} {'':>5} {'':>10} {'':>9} {'':>11} "
          f"{_fmt(geomean(r.ratio('eager') for r in ok), '7.2f')} "
          f"{_fmt(geomean(r.ratio('compiled') for r in ok), '9.2f')}")


def device_name(args: argparse.Namespace) -> str:
    import torch

    if args.torch_device.startswith("cuda") and torch.cuda.is_available():
        return torch.cuda.get_device_name(torch.device(args.torch_device))
    return cpu_name()


def print_library_goals(results: list[Result]) -> None:
    """The cuDNN/cuBLAS issue's goals: at most LIBS_B16_MAX_RATIO x PyTorch eager at batch 16
    and LIBS_B1_MAX_RATIO x at batch 1, on ResNet-50 and the BERT-style encoder."""
    for r in results:
        if r.error or r.key not in ("resnet50", "bert") or r.batch not in (1, 16):
            continue
        limit = LIBS_B1_MAX_RATIO if r.batch == 1 else LIBS_B16_MAX_RATIO
        ratio = r.ratio("eager")
        print(f"goal: {r.label} batch {r.batch} at most {limit:g}x PyTorch eager: {ratio:.2f}x, "
              f"{'met' if ratio <= limit else 'NOT met'}")


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.libs:
        args.target = "cudnn -tf32=1, cublas, cuda" if args.tf32 else "cuda -libs=cudnn,cublas"
    keys = [k.strip() for k in args.models.split(",") if k.strip()]
    unknown = [k for k in keys if k not in MODELS]
    if unknown:
        raise SystemExit(f"unknown model(s) {', '.join(unknown)}; known: {', '.join(MODELS)}")
    batches = [int(b) for b in args.batches.split(",") if b.strip()]
    try:
        import torch
    except ImportError:
        raise SystemExit("gpu_vs_torch.py needs PyTorch (pip install torch)") from None
    print(f"Tessera --target {args.target!r} against PyTorch {torch.__version__} on "
          f"{args.torch_device} ({device_name(args)}); host CPU: {cpu_name()}")
    print(f"host inputs to host outputs for both; median of {args.repeat}, each measurement "
          f">= {args.min_ms:g} ms; torch.compile mode: "
          f"{'off' if args.no_compile else args.compile_mode}")
    results = []
    for key in keys:
        for batch in batches:
            work = load_workload(key, batch, args.seed)
            r = measure(work, args)
            results.append(r)
            comp = ", ".join(f"{k} {v:.1f} s" for k, v in r.compile_s.items())
            print(f"  {r.label} batch {batch}: compile {comp or '-'}; "
                  f"{r.runs_per_measurement} runs per measurement", file=sys.stderr)
    print_table(results)
    if args.libs:
        print_library_goals(results)
    goal = next((r for r in results if r.key == "resnet50" and r.batch == 1 and not r.error),
                None)
    if goal is not None and not args.libs:
        ratio = goal.ratio("eager")
        verdict = "met" if ratio <= RESNET_B1_MAX_RATIO else "NOT met"
        print(f"goal: ResNet-50 batch 1 at most {RESNET_B1_MAX_RATIO:g}x PyTorch eager: "
              f"{ratio:.2f}x, {verdict}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    raise SystemExit(main())
