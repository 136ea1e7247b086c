"""A service's view: traces of requests of varying sizes through one compiled model.

A service compiles (or opens) a model once and then answers requests whose sizes vary: text of
every length, batches of every size, images of several sizes. What it sees is each request's
time end to end, a compile on its way included. Per trace, each engine starts from the model
file (Tessera: ``tessera.compile``; onnxruntime: a session), then answers the trace's
requests one after another, each timed; then the same trace again (a second pass shows what
was cached). Printed per trace and engine: the set-up time, the requests' total, p50, p99 and
max per request, the second pass's total and p99, and for Tessera the set-up once more with
the kernel cache its first set-up filled (``cached s``: another process or a restart on the
same machine; every first set-up starts from an empty cache); then Tessera over onnxruntime.

Traces (``--traces``):

- ``text128``: a 4-layer, 512-wide DistilBERT-style encoder (symbolic batch and sequence), 48
  requests of batch 1 with lengths drawn uniformly between 4 and 128 (seed 0: 38 distinct);
- ``text512``: the same encoder, 48 requests with lengths between 16 and 512;
- ``batches``: the same encoder, 48 requests of batch 1, 2, 4 or 8 and lengths 4 to 128;
- ``images``: a small ResNet-style CNN (symbolic batch, height and width), 24 requests of
  batch 1 at sides 96, 128, 160, 192, 224 and 256 px.

Engines (``--engines``): ``ort`` (onnxruntime), ``tessera`` (``tessera.compile`` with its
defaults: one module for every size, compiled once, its kernels reading the sizes at run
time), ``tessera-per-size`` (``shape_mode="specialize"``: a module compiled per size on first
use), ``tessera-bg`` (per size, ``background_compile=True``: new sizes compile in the
background while calls at them are evaluated). Models are exported in a child process (this
one never imports torch). ``--load N`` runs N CPU-bound neighbour processes throughout (a busy
machine).

    python benchmarks/serving.py                                    # every trace
    python benchmarks/serving.py --traces text128 --engines ort,tessera-bg
    python benchmarks/serving.py --traces text128 --requests 12 --load 1
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from _common import cached_export, cpu_name, export_text_model, fresh_kernel_cache, limit_threads

#: The encoder of the text traces (the serving issue's model): DistilBERT's architecture at
#: 4 layers of width 512 (8 heads, feed-forward 2048), BERT's vocabulary.
ENCODER = dict(vocab_size=30522, dim=512, n_layers=4, n_heads=8, hidden_dim=2048,
               max_position_embeddings=512)

CACHE = Path(os.environ.get("TESSERA_BENCH_CACHE", Path.home() / ".cache" / "tessera-bench"))


@dataclass(frozen=True)
class Trace:
    """A named sequence of requests: each a dict of input name -> shape."""

    name: str
    model: str
    requests: list[dict[str, tuple[int, ...]]]


def text_requests(count: int, low: int, high: int, batches: tuple[int, ...] = (1,),
                  seed: int = 0) -> list[dict[str, tuple[int, ...]]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    lengths = rng.integers(low, high + 1, count)
    sizes = rng.choice(batches, count) if len(batches) > 1 else [batches[0]] * count
    return [{"input_ids": (int(b), int(n)), "attention_mask": (int(b), int(n))}
            for b, n in zip(sizes, lengths)]


def image_requests(count: int, sides: tuple[int, ...], seed: int = 0
                   ) -> list[dict[str, tuple[int, ...]]]:
    import numpy as np

    rng = np.random.default_rng(seed)
    return [{"pixel_values": (1, 3, int(s), int(s))} for s in rng.choice(sides, count)]


def traces(count: int) -> dict[str, Trace]:
    return {
        "text128": Trace("text128", "encoder", text_requests(count, 4, 128)),
        "text512": Trace("text512", "encoder", text_requests(count, 16, 512)),
        "batches": Trace("batches", "encoder", text_requests(count, 4, 128, (1, 2, 4, 8))),
        "images": Trace("images", "cnn", image_requests(max(count // 2, 1),
                                                        (96, 128, 160, 192, 224, 256))),
    }


# -- models (exported in a child process) -----------------------------------------------------
def _export_encoder(path: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    model = transformers.DistilBertModel(transformers.DistilBertConfig(**ENCODER)).eval()

    export_text_model(model, ENCODER["vocab_size"], path, "last_hidden_state")


def _export_cnn(path: Path) -> None:
    import torch
    from torch import nn

    torch.manual_seed(0)

    def block(cin: int, cout: int, stride: int) -> nn.Module:
        return nn.Sequential(nn.Conv2d(cin, cout, 3, stride, 1, bias=False),
                             nn.BatchNorm2d(cout), nn.ReLU(),
                             nn.Conv2d(cout, cout, 3, 1, 1, bias=False), nn.BatchNorm2d(cout),
                             nn.ReLU())

    model = nn.Sequential(nn.Conv2d(3, 32, 7, 2, 3), nn.ReLU(), nn.MaxPool2d(3, 2, 1),
                          block(32, 64, 1), block(64, 128, 2), block(128, 256, 2),
                          nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(256, 1000)).eval()
    x = torch.randn(1, 3, 128, 128)
    axes = {"pixel_values": {0: "batch", 2: "height", 3: "width"}, "logits": {0: "batch"}}
    with torch.no_grad():
        torch.onnx.export(model, (x,), str(path), dynamo=False, input_names=["pixel_values"],
                          output_names=["logits"], dynamic_axes=axes, opset_version=17,
                          do_constant_folding=True)


EXPORTS: dict[str, Callable[[Path], None]] = {"encoder": _export_encoder, "cnn": _export_cnn}


def model_path(name: str) -> Path:
    """The model's file, exported by a child process the first time."""
    return cached_export(CACHE / f"serving-{name}.onnx", __file__, name)


# -- engines ----------------------------------------------------------------------------------
def feeds_for(request: dict[str, tuple[int, ...]], seed: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(seed)
    out: dict[str, Any] = {}
    for name, shape in request.items():
        if name == "input_ids":
            out[name] = rng.integers(0, ENCODER["vocab_size"], shape).astype(np.int64)
        elif name == "attention_mask":
            mask = np.ones(shape, np.int64)
            if shape[1] > 2:  # padding at the end of some rows, as a batcher makes
                for row in range(shape[0]):
                    mask[row, shape[1] - int(rng.integers(0, shape[1] // 3 + 1)):] = 0
                    mask[row, 0] = 1
            out[name] = mask
        else:
            out[name] = rng.standard_normal(shape).astype(np.float32)
    return out


def open_engine(engine: str, path: Path, threads: int, target: str,
                kernel_cache: str | None = None) -> Callable[[Any], Any]:
    """``engine``'s runner of the model (what the set-up time measures); Tessera's with the
    kernel cache in folder ``kernel_cache``."""
    import onnx

    if engine == "ort":
        from _common import ort_session

        sess = ort_session(onnx.load(str(path)), threads)
        return lambda feeds: sess.run(None, feeds)[0]
    import tessera

    kwargs: dict[str, Any] = {"kernel_cache": kernel_cache}
    if engine == "tessera-bg":
        kwargs["background_compile"] = True
    elif engine == "tessera-per-size":
        kwargs["shape_mode"] = "specialize"
    elif engine != "tessera":
        raise SystemExit(f"unknown engine {engine!r}: expected ort, tessera, "
                         f"tessera-per-size, tessera-bg")
    mod = tessera.compile(str(path), target, **kwargs)

    def run(feeds: Any) -> Any:
        return mod.run(**feeds)[mod.output_names[0]]

    # the background compiles still queued when the trace ends (they write the kernel cache)
    run.wait = getattr(mod, "wait_compiles", lambda: True)  # type: ignore[attr-defined]
    return run


@dataclass
class Row:
    setup_s: float
    times_ms: list[float]
    again_ms: list[float]
    #: The set-up again with the kernel cache the first one filled (None: onnxruntime).
    cached_setup_s: float | None = None

    @staticmethod
    def pct(values: list[float], q: float) -> float:
        import numpy as np

        return float(np.percentile(np.asarray(values), q))


def run_trace(trace: Trace, engine: str, args: argparse.Namespace,
              check: dict[int, Any]) -> Row:
    """The trace through one engine: set-up, then every request timed end to end, twice.
    ``check`` holds the first engine's outputs (request index -> array) to compare with."""
    import numpy as np

    path = model_path(trace.model)
    # Tessera's compiles are cold: a kernel cache of this engine's own, empty at first
    cache = None if engine == "ort" else fresh_kernel_cache()
    start = time.perf_counter()
    run = open_engine(engine, path, args.threads, args.target, cache)
    setup = time.perf_counter() - start
    passes: list[list[float]] = []
    for _ in range(2):
        times = []
        for i, request in enumerate(trace.requests):
            feeds = feeds_for(request, i)
            time.sleep(args.gap)
            t0 = time.perf_counter()
            out = np.asarray(run(feeds))
            times.append((time.perf_counter() - t0) * 1e3)
            if i in check:
                err = float(np.max(np.abs(out - check[i]))) if out.size else 0.0
                if not err <= args.tolerance:
                    raise SystemExit(f"{trace.name}, {engine}, request {i} {request}: "
                                     f"differs from {args.engines.split(',')[0]} by {err:.3g}")
            elif len(passes) == 0:
                check[i] = out
        passes.append(times)
    wait = getattr(run, "wait", None)
    if wait is not None:  # not timed: the compiles a service would leave running
        wait()
    cached = None
    if cache is not None:  # a second process, or a restart, on the same machine
        start = time.perf_counter()
        open_engine(engine, path, args.threads, args.target, cache)
        cached = time.perf_counter() - start
    return Row(setup, passes[0], passes[1], cached)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--traces", default="text128,text512,batches,images")
    ap.add_argument("--engines", default="ort,tessera,tessera-bg")
    ap.add_argument("--requests", type=int, default=48, help="requests per text trace")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--gap", type=float, default=0.01,
                    help="seconds between requests (a service's requests come with gaps)")
    ap.add_argument("--load", type=int, default=0, help="CPU-bound neighbour processes")
    ap.add_argument("--tolerance", type=float, default=2e-3)
    ap.add_argument("--export", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.export:
        EXPORTS[args.export[0]](Path(args.export[1]))
        return 0
    limit_threads(args.threads)
    all_traces = traces(args.requests)
    names = [t for t in args.traces.split(",") if t]
    unknown = [t for t in names if t not in all_traces]
    if unknown:
        raise SystemExit(f"unknown traces {unknown}: known {', '.join(all_traces)}")
    engines = [e for e in args.engines.split(",") if e]
    neighbours = [subprocess.Popen([sys.executable, "-c", "while True: pass"])
                  for _ in range(args.load)]
    print(f"# {cpu_name()}; {args.threads} threads; target {args.target}; "
          f"{args.load} CPU-bound neighbours")
    try:
        for name in names:
            trace = all_traces[name]
            distinct = len({tuple(sorted(r.items())) for r in trace.requests})
            print(f"\n## {name}: {len(trace.requests)} requests, {distinct} distinct sizes "
                  f"({trace.model})")
            print(f"{'engine':<12} {'set-up s':>9} {'total s':>9} {'p50 ms':>9} {'p99 ms':>9} "
                  f"{'max ms':>9} {'again s':>9} {'again p99':>10} {'cached s':>9}")
            rows: dict[str, Row] = {}
            check: dict[int, Any] = {}
            for engine in engines:
                row = run_trace(trace, engine, args, check)
                rows[engine] = row
                print(f"{engine:<12} {row.setup_s:9.2f} {sum(row.times_ms) / 1e3:9.2f} "
                      f"{row.pct(row.times_ms, 50):9.1f} {row.pct(row.times_ms, 99):9.1f} "
                      f"{max(row.times_ms):9.1f} {sum(row.again_ms) / 1e3:9.2f} "
                      f"{row.pct(row.again_ms, 99):10.1f} "
                      f"{'' if row.cached_setup_s is None else f'{row.cached_setup_s:.2f}':>9}",
                      flush=True)
            peer = rows.get("ort")
            if peer is not None:
                for engine, row in rows.items():
                    if engine == "ort":
                        continue
                    print(f"  {engine} / ort: total {sum(row.times_ms) / sum(peer.times_ms):.2f}x"
                          f", p99 {row.pct(row.times_ms, 99) / row.pct(peer.times_ms, 99):.2f}x"
                          f", again {sum(row.again_ms) / sum(peer.again_ms):.2f}x")
    finally:
        for p in neighbours:
            p.kill()
            p.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
