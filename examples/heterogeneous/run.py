"""One model across three devices: int8 convolutions on VTA, float convolutions and softmax on
cuDNN, matrix products on cuBLAS, the rest on generated CUDA kernels, anything left on llvm.

    python examples/heterogeneous/run.py                  # on a GPU machine: compile, run, check
    python examples/heterogeneous/run.py --html part.html # also draw the partition
    python examples/heterogeneous/run.py --export m.tar   # keep the compiled module

Without a GPU it compiles for ``-arch=sm_90`` (the libraries' algorithms are then measured when
the artifact is loaded on the GPU), prints the partition and stops before running. With one, it
runs the model, compares the logits with the reference backend on the same quantized model and
prints the latency and the time per backend.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

import model as hetero  # noqa: E402

import tessera  # noqa: E402

TARGET = "vta_sim, cuda -libs=cudnn,cublas, llvm"


def gpu_missing() -> str | None:
    from tessera.plugin import get_registry

    return get_registry().get("cuda").available()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default=TARGET)
    parser.add_argument("--html", metavar="FILE", help="write the partition picture here")
    parser.add_argument("--export", metavar="FILE", help="export the compiled module")
    args = parser.parse_args(argv)
    target = args.target
    missing = gpu_missing()
    if missing and "-arch" not in target:
        target = target.replace("cuda ", "cuda -arch=sm_90 ", 1)
        print(f"no GPU here ({missing.split(';')[0]}): compiling for sm_90 only")
    model = hetero.quantized_model()
    mod = tessera.compile(model, target=target)
    print(mod.partition_report().table())
    if args.html:
        from tessera.drawing.html import to_html

        page = to_html(mod.graph, title="heterogeneous example", report=mod.partition_report())
        Path(args.html).write_text(page)
        print(f"partition picture written to {args.html}")
    if args.export:
        mod.export(args.export)
        print(f"module exported to {args.export}")
    if mod.missing_devices:
        print(f"not run: {mod.missing_devices}")
        return 0
    x = hetero.inputs()
    got = mod.run(**x)["logits"]
    want = tessera.compile(model, target="ref").run(**x)["logits"]
    err = float(np.max(np.abs(got - want)))
    print(f"logits: max |tessera - reference| = {err:.2e}")
    bench = mod.benchmark(repeat=10, number=10)
    print(f"latency: median {bench.median:.3f} ms")
    print(mod.profile(runs=5, **x).table())
    return 0 if err < 1e-2 * max(1.0, float(np.max(np.abs(want)))) else 1


if __name__ == "__main__":
    raise SystemExit(main())
