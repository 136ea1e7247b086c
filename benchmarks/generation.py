"""Greedy generation with a key/value-cache decoder: Tessera against onnxruntime, per token.

The Llama-style decoders of :mod:`tessera.testing.kv_decoder` (``small``: two layers of width
64, where a token costs calls rather than arithmetic; ``realistic``: four layers of width 512
and a vocabulary of 8192, 20 M parameters), exported by TorchScript and by dynamo in a child
process (this one never imports torch). Tessera compiles each file once without input
shapes (``--modes``: ``one``, its default: one module whose kernels take the cache length at
run time; ``split``: ``symbolic_dims=["past", "total"]``, split execution with a plan per
length pattern), and generates ``--tokens`` greedy tokens after a four-token prompt;
onnxruntime runs the same file. Printed per model, exporter and mode:

- ``compile s``: the ``compile()`` call; ``plans s``: the first two steps (the prompt, then
  a one-token step: where the split mode makes its two plans);
- ``token ms``: the median time of a one-token step, Tessera and onnxruntime, measured in
  alternating rounds (the best round's median each); their ratio;
- whether the two runtimes chose the same tokens.

    python benchmarks/generation.py
    python benchmarks/generation.py --sizes realistic --tokens 64 --target llvm
    python benchmarks/generation.py --sizes realistic --exporters torchscript --modes one
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

from _common import child_export, cpu_name, limit_threads, ort_session

PROMPT = [5, 7, 9, 11]


def export(size: str, exporter: str) -> Path:
    return child_export(["-m", "tessera.testing.kv_decoder", "export", size, exporter],
                        f"the {size} decoder ({exporter})")


def measure(size: str, exporter: str, mode: str, args: argparse.Namespace) -> None:
    """One decoder's row: compile, the plans, per-token medians in alternating rounds."""
    import onnx

    import tessera
    from tessera.testing import kv_decoder

    shape = kv_decoder.DecoderShape.of(kv_decoder.CONFIGS[size])
    path = export(size, exporter)
    sess = ort_session(onnx.load(str(path)), args.threads)
    start = time.perf_counter()
    if mode == "split":
        mod = tessera.compile(str(path), args.target, symbolic_dims=["past", "total"])
    elif mode == "one":
        mod = tessera.compile(str(path), args.target)
    else:
        raise SystemExit(f"unknown mode {mode!r}: expected one or split")
    compiled = time.perf_counter() - start

    def generate(run, times: list[float]) -> list[int]:
        return kv_decoder.greedy(run, PROMPT, args.tokens, shape,
                                 on_step=lambda _t, s: times.append(s))

    def ours(f):
        return list(mod.run(f).values())

    def theirs(f):
        return sess.run(None, f)

    first: list[float] = []
    our_tokens = generate(ours, first)
    plans = first[0] + first[1]  # the prompt's plan, then the one-token steps' plan
    tessera_ms, ort_ms = [], []
    their_tokens: list[int] = []
    for _ in range(args.rounds):  # alternate, so drift hits both alike
        times: list[float] = []
        generate(ours, times)
        tessera_ms.append(statistics.median(times[1:]) * 1e3)
        times = []
        their_tokens = generate(theirs, times)
        ort_ms.append(statistics.median(times[1:]) * 1e3)
    t, o = min(tessera_ms), min(ort_ms)
    kind = type(mod).__name__
    print(f"{size:<10} {exporter:<11} {mode:<5} {compiled:9.2f} {plans:8.2f} {t:10.3f} "
          f"{o:8.3f} {t / o:6.2f}  {'same' if our_tokens == their_tokens else 'DIFFERENT'} "
          f"({kind})", flush=True)
    for sizes, plan in (mod.split_plans() if hasattr(mod, "split_plans") else []):
        print(f"{'':<28} plan for {sizes}: {plan.describe()}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="small,realistic")
    ap.add_argument("--exporters", default="torchscript,dynamo")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--modes", default="one,split")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    limit_threads(args.threads)
    print(f"machine: {cpu_name()}, {os.cpu_count()} CPUs; target {args.target}; "
          f"{args.threads} threads for Tessera and onnxruntime; {args.tokens} tokens after a "
          f"{len(PROMPT)}-token prompt")
    print(f"{'decoder':<10} {'exporter':<11} {'mode':<5} {'compile s':>9} {'plans s':>8} "
          f"{'tessera ms':>10} {'ort ms':>8} {'ratio':>6}  tokens")
    for size in args.sizes.split(","):
        for exporter in args.exporters.split(","):
            for mode in args.modes.split(","):
                measure(size, exporter, mode, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
