"""Models with symbolic batch and sequence: one compile, any size, against static compiles.

Every model of :mod:`tessera.testing.hf_zoo` (``--models``), exported by TorchScript with
symbolic ``batch`` (every input's axis 0) and ``seq`` (token inputs' axis 1), in a child
process (this one never imports torch). Per model, Tessera compiles it for ``--target``
without ``input_shapes`` (with its defaults: one :class:`~tessera.runtime.module.Module` whose
kernels take the sizes at run time, ``kind`` ``sym``; or, where a backend of the target cannot,
a per-size :class:`~tessera.runtime.dynamic.DynamicModule`, ``kind`` ``per-size``;
``--shape-mode`` chooses), then at each ``--sizes`` (batch x seq) runs it and checks it against
onnxruntime on the same file, and times:

- ``first``: the first call at that size (a per-size module compiles the specialisation);
- ``dyn`` and ``static``: the median latency through the dynamic module and of a module
  compiled statically for that size (``input_shapes``), measured alternately; ``dyn/st``
  their ratio; ``ort`` onnxruntime's median and ``st/ort``;
- ``compile``: the dynamic ``compile()`` call against one static compile (``cmp/st``): the
  first size's (the smallest: little code to generate) and the median over the sizes. Both
  without the kernel cache (a cache filled by an earlier run would make either free), in a
  process that compiled a small model first (the first compile of a process also starts
  LLVM and its worker processes).

    python benchmarks/dynamic_shapes.py
    python benchmarks/dynamic_shapes.py --models bert,vit --sizes 1x7,3x32,8x64 --size small
    python benchmarks/dynamic_shapes.py --shape-mode specialize   # the per-size modules
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import cpu_name, geomean, limit_threads, median_ms, ort_session

#: Seconds to wait after onnxruntime ran before timing Tessera: its intra-op workers keep
#: spinning for a while after each run, and on a 2-core machine they would be timed too.
SETTLE_S = 0.2
#: Seconds each engine is called before its calls are timed: after the settling pause the
#: engine timed first (the symbolic module) otherwise ran its first calls on a core coming
#: back from sleep (bert-small at 1x7: 78 against 43 us; the same engines in the other order
#: 45 against 45 us).
WARM_S = 0.02

DEFAULT_MODELS = ("gpt2,llama,bert,distilbert,t5-encoder,whisper-encoder,vit,swin,convnext,"
                  "resnet,mobilenetv2,efficientnet,segformer,wav2vec2,clip-vision,clip-text")


def export(name: str, size: str) -> Path:
    proc = subprocess.run([sys.executable, "-m", "tessera.testing.hf_zoo", "export", name, size,
                           "torchscript", "--dynamic"], capture_output=True, text=True)
    line = (proc.stdout.strip().splitlines() or ["ERROR: no output"])[-1]
    if proc.returncode != 0 or line.startswith("ERROR"):
        raise RuntimeError(line)
    return Path(line)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=DEFAULT_MODELS)
    ap.add_argument("--size", default="small", choices=("small", "realistic"))
    ap.add_argument("--sizes", default="1x7,3x32,8x64,1x128,1x384",
                    help="batch x seq, comma-separated")
    ap.add_argument("--shape-mode", default="auto", choices=("auto", "symbolic", "specialize"))
    ap.add_argument("--dim-bounds", default="",
                    help="upper bounds of the size variables, e.g. batch=8,seq=512 (default: "
                         "what each model implies, else tessera's default)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--repeat", type=int, default=20)
    args = ap.parse_args()
    limit_threads(args.threads)
    import numpy as np
    import onnx

    import tessera
    from tessera.testing import hf_zoo

    sizes = [tuple(int(n) for n in s.split("x")) for s in args.sizes.split(",")]
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; target {args.target}; "
          f"{args.threads} threads for Tessera and onnxruntime; zoo size {args.size}")
    print(f"{'model':<16} {'kind':>8} {'batch x seq':>11} {'relerr':>8} {'first s':>8} "
          f"{'dyn ms':>8} {'static ms':>9} {'dyn/st':>6} {'ort ms':>8} {'st/ort':>6}")
    # the first compile of a process starts LLVM and the compile workers: not the model's
    tessera.compile(str(Path(__file__).resolve().parents[1] / "examples/digits/digits_cnn.onnx"),
                    args.target, input_shapes={"image": [1, 1, 8, 8]}, kernel_cache=False)
    ratios: list[float] = []
    compile_ratios: list[float] = []
    median_ratios: list[float] = []
    for name in args.models.split(","):
        try:
            path = export(name, args.size)
        except RuntimeError as e:
            print(f"{name:<16} export failed: {e}")
            continue
        model = onnx.load(str(path))
        sess = ort_session(model, args.threads)
        start = time.perf_counter()
        try:
            bounds = {k: (0, int(v)) for k, v in
                      (item.split("=") for item in args.dim_bounds.split(",") if item)}
            dyn = tessera.compile(str(path), args.target, shape_mode=args.shape_mode,
                                  kernel_cache=False,
                                  **({"dim_bounds": bounds} if bounds else {}))
        except Exception as e:  # noqa: BLE001 - one line per model
            print(f"{name:<16} compile failed: {type(e).__name__}: {str(e).splitlines()[0]}")
            continue
        dyn_compile = time.perf_counter() - start
        kind = "per-size" if hasattr(dyn, "cache_info") else "sym"
        static_compiles: list[float] = []
        for batch, seq in sizes:
            feeds = hf_zoo.inputs(name, args.size, batch=batch, seq=seq)
            label = f"{batch} x {seq}"
            try:
                start = time.perf_counter()
                got = dyn.run(feeds)
                first = time.perf_counter() - start
                start = time.perf_counter()
                static = tessera.compile(str(path), args.target, kernel_cache=False,
                                         input_shapes={k: list(v.shape) for k, v in feeds.items()})
                static_compiles.append(time.perf_counter() - start)
            except Exception as e:  # noqa: BLE001
                print(f"{name:<16} {label:>11} failed: {type(e).__name__}: "
                      f"{str(e).splitlines()[0][:120]}")
                continue
            want = sess.run(None, feeds)
            time.sleep(SETTLE_S)  # onnxruntime's workers spin after a run: let them stop
            err = max(float(np.abs(np.asarray(g, np.float64) - w).max() / (np.abs(w).max() or 1))
                      for g, w in zip(got.values(), want))
            dyn_ms, static_ms, ort_ms = [], [], []
            for _ in range(3):  # alternate, so drift hits all three alike
                dyn_ms.append(median_ms(lambda m=dyn, f=feeds: m.run(f), args.repeat,
                                        warm_s=WARM_S))
                static_ms.append(median_ms(lambda m=static, f=feeds: m.run(f), args.repeat,
                                           warm_s=WARM_S))
                ort_ms.append(median_ms(lambda s=sess, f=feeds: s.run(None, f), args.repeat,
                                        warm_s=WARM_S))
                time.sleep(SETTLE_S)
            d, s, o = min(dyn_ms), min(static_ms), min(ort_ms)
            ratios.append(d / s)
            print(f"{name:<16} {kind:>8} {label:>11} {err:8.1e} {first:8.2f} {d:8.3f} {s:9.3f} "
                  f"{d / s:6.2f} {o:8.3f} {s / o:6.2f}", flush=True)
        if static_compiles:
            first, middle = static_compiles[0], statistics.median(static_compiles)
            compile_ratios.append(dyn_compile / first)
            median_ratios.append(dyn_compile / middle)
            cached = f"; {dyn.cache_info()}" if kind == "per-size" else ""
            print(f"{name:<16} compile: {kind} {dyn_compile:.2f} s, one static {first:.2f} s "
                  f"at the first size (cmp/st {dyn_compile / first:.2f}), {middle:.2f} s "
                  f"median over the sizes (cmp/st {dyn_compile / middle:.2f}){cached}")
    if ratios:
        print(f"geomean dyn/static {geomean(ratios):.3f} (max {max(ratios):.3f}); "
              f"compile geomean dyn/static {geomean(compile_ratios):.3f} against the first "
              f"size's static compile, {geomean(median_ratios):.3f} against the median one")
    return 0


if __name__ == "__main__":
    sys.exit(main())
