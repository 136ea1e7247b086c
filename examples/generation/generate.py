"""Greedy text generation with a key/value-cache decoder: one compiled module, every step a
new shape.

A Llama-style decoder (random weights from a ``transformers`` config, no download) is exported
with its cache as inputs and outputs (:mod:`tessera.testing.kv_decoder`): the prompt step has
an empty cache, each later step one token and a cache one position longer. Tessera compiles the
file once, without input shapes (a ``DynamicModule``), and runs every step; the tokens are
checked against PyTorch's own ``generate`` and onnxruntime's run of the same file, and the time
per token is printed for both runtimes.

    python examples/generation/generate.py                  # 32 tokens on llvm
    python examples/generation/generate.py --target ref --per-size

The module is compiled with ``symbolic_dims=["past", "total"]``: the cache length is not
specialised on. The parts of the step whose shapes do not depend on it (embeddings,
projections, MLPs, the head) compile once per prompt length and once for one-token steps; the
rest (the attention over the cache, its mask and the shape arithmetic around them) is
evaluated at each step's length (``mod.split_plans()`` shows the parts). ``--per-size``
compiles a module per cache length instead (every step compiles). ``--background`` does not
wait for the plans: the first steps run on the evaluator (the step in numpy) while the plans
compile in a background thread.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import onnxruntime as ort

import tessera
from tessera.testing import kv_decoder


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--per-size", action="store_true",
                    help="compile a module per cache length (no symbolic_dims)")
    ap.add_argument("--background", action="store_true",
                    help="compile in the background: the first steps run on the evaluator "
                         "(numpy) instead of waiting for their plans")
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--prompt", default="5,7,9,11", help="token ids, comma-separated")
    args = ap.parse_args()
    prompt = [int(t) for t in args.prompt.split(",")]
    path = kv_decoder.export()
    print(f"decoder step: {path}")
    want = kv_decoder.torch_greedy(prompt, args.tokens)

    sess = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ort_times: list[float] = []
    ort_tokens = kv_decoder.greedy(lambda f: sess.run(None, f), prompt, args.tokens,
                                   on_step=lambda _t, s: ort_times.append(s))
    mod = tessera.compile(str(path), args.target,
                          symbolic_dims=None if args.per_size else ["past", "total"],
                          background_compile=args.background)
    print(mod)
    times: list[float] = []
    tokens = kv_decoder.greedy(lambda f: list(mod.run(f).values()), prompt, args.tokens,
                               on_step=lambda _t, s: times.append(s))
    print(f"PyTorch:     {want}")
    print(f"Tessera:     {tokens}  {'same' if tokens == want else 'DIFFERENT'}")
    print(f"onnxruntime: {ort_tokens}  {'same' if ort_tokens == want else 'DIFFERENT'}")
    print(f"first token: Tessera {times[0] * 1e3:.1f} ms, onnxruntime "
          f"{ort_times[0] * 1e3:.1f} ms")
    print(f"per token (median): Tessera {statistics.median(times) * 1e3:.2f} ms, "
          f"onnxruntime {statistics.median(ort_times) * 1e3:.3f} ms")
    print(mod.cache_info())
    for sizes, plan in mod.split_plans():
        print(f"  plan for {sizes}: {plan.describe()}")
    return 0 if tokens == want else 1


if __name__ == "__main__":
    sys.exit(main())
