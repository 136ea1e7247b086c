"""Full-size models: compile time (cold and from the kernel cache), memory and latency.

The published configurations of models people deploy, with random weights, exported by
TorchScript (opset 17, symbolic batch and sequence) in a child process (this one never
imports torch): ``bert-base`` (BERT-base, 110M parameters) and ``gpt2`` (GPT-2 small, 124M);
and ``decoder-0.5b``, a Llama-style decoder of 0.5 B parameters in the shape of today's small
chat models (24 layers 896 wide, grouped-query attention: 14 heads, 2 key/value heads; a
vocabulary of 151936 shared with the output layer: :data:`tessera.testing.kv_decoder.DECODER_05B`)
with its key/value cache as inputs and outputs, 2.5 GB in float32 and so exported with
external data (a folder with ``model.onnx`` and ``model.onnx.data``); it always compiles as one
module for every size. Each measurement runs in a fresh child process, so that its peak
resident memory is its own:

- ``compile``: ``tessera.compile`` for ``--target`` at ``--size`` (input shapes fixed; or,
  with ``--symbolic``, one module for every size) with an empty kernel cache (``cold``), then
  again in another process with the cache the first one filled (``cached``), which exports
  the module; ``load``: ``tessera.load`` of that artifact in a third process (its arrays are
  mapped from the ``.tar``); each after ``import tessera`` and the backends' plugins are
  loaded (once per process, as onnxruntime's import is not timed either; that time is
  printed beside);
- ``peak MiB``: the process's peak resident memory while compiling (cold), against the
  weights' bytes (``peak/w``); ``steady MiB``: resident memory after the compile and one run
  (``steady/w``); ``base MiB``: the same process before it read the model (the interpreter and
  libraries), so that what the model costs is ``steady - base``;
- onnxruntime's session creation time, peak and steady memory in the same way;
- ``tessera ms`` and ``ort ms``: median latency at ``--size``, measured alternately in one
  process (``ratio``: Tessera over onnxruntime); for the decoder, the prompt of ``--size``
  (an empty cache), and then ``token ms``: the median one-token step of greedy generation
  after that prompt (``--tokens`` tokens, the cache growing), each engine's best of
  ``--gen-rounds`` runs, and whether both chose the same tokens.

    python benchmarks/scale.py                           # bert-base, gpt2 and decoder-0.5b
    python benchmarks/scale.py --models bert-base --size 1x384 --symbolic
    python benchmarks/scale.py --models decoder-0.5b --tokens 32
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from _common import (
    cached_export,
    child_export,
    cpu_name,
    export_text_model,
    fresh_kernel_cache,
    limit_threads,
    ort_session,
)

#: The models: a transformers config class and its arguments (the published sizes).
MODELS: dict[str, tuple[str, dict[str, Any]]] = {
    "bert-base": ("BertConfig", {"vocab_size": 30522, "hidden_size": 768,
                                 "num_hidden_layers": 12, "num_attention_heads": 12,
                                 "intermediate_size": 3072}),
    "gpt2": ("GPT2Config", {"vocab_size": 50257, "n_embd": 768, "n_layer": 12,
                            "n_head": 12, "n_positions": 1024}),
}
#: The decoders: a :data:`tessera.testing.kv_decoder.CONFIGS` name.
DECODERS: dict[str, str] = {"decoder-0.5b": "0.5b"}
#: Where the exported models are kept (as benchmarks/serving.py keeps its own).
CACHE = Path(os.environ.get("TESSERA_BENCH_CACHE", Path.home() / ".cache" / "tessera-bench"))


def model_path(name: str) -> Path:
    if name in DECODERS:  # kept where the generation benchmark keeps its decoders
        return child_export(["-m", "tessera.testing.kv_decoder", "export", DECODERS[name]],
                            name)
    return cached_export(CACHE / f"scale-{name}.onnx", __file__, name)


def _export(name: str, path: Path) -> None:
    import torch
    import transformers

    torch.manual_seed(0)
    cls, kwargs = MODELS[name]
    config = getattr(transformers, cls)(**kwargs)
    model = (transformers.GPT2Model(config) if name == "gpt2"
             else transformers.BertModel(config)).eval()

    export_text_model(model, kwargs["vocab_size"], path, "hidden")


# -- one measurement per child process ------------------------------------------------------
def _status_mib(field: str) -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _rss_mib() -> float:
    return _status_mib("VmRSS")


def _peak_mib() -> float:
    # this process's own high-water mark (ru_maxrss would include the parent's resident
    # memory at the spawn: Linux keeps it across exec)
    return _status_mib("VmHWM")


def weight_bytes(path: Path) -> int:
    """The model's bytes: the ``.onnx`` file and the external data files it names."""
    from tessera.frontend.onnx.external_data import external_tensors
    from tessera.frontend.onnx.importer import load_model

    proto = load_model(path)  # the graph only: the weights stay in their files
    files = {path.parent / e.value for t in external_tensors(proto) for e in t.external_data
             if e.key == "location"}
    return sum(os.path.getsize(f) for f in {path, *files})


def _feeds(job: dict[str, Any]) -> dict[str, Any]:
    import numpy as np

    batch, seq = job["batch"], job["seq"]
    rng = np.random.default_rng(0)
    feeds = {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
             "attention_mask": np.ones((batch, seq), np.int64)}
    if job["decoder"]:  # the prompt, with an empty cache
        from tessera.testing import kv_decoder

        shape = kv_decoder.DecoderShape.of(kv_decoder.CONFIGS[job["decoder"]])
        feeds.update({f"past_{i}": np.zeros((batch, shape.kv_heads, 0, shape.head_dim),
                                            np.float32) for i in range(2 * shape.layers)})
    return feeds


def _generation(job: dict[str, Any], runners: dict[str, Any]) -> dict[str, Any]:
    """Per engine, the median one-token step of greedy generation after the prompt (best of
    ``gen_rounds``), and the tokens each chose."""
    import numpy as np

    from tessera.testing import kv_decoder

    shape = kv_decoder.DecoderShape.of(kv_decoder.CONFIGS[job["decoder"]])
    prompt = [int(t) for t in _feeds(job)["input_ids"][0]]
    best: dict[str, float] = {}
    tokens: dict[str, list[int]] = {}
    for _ in range(job["gen_rounds"]):
        for name, run in runners.items():
            steps: list[float] = []
            tokens[name] = kv_decoder.greedy(run, prompt, job["tokens"] + 1, shape,
                                             on_step=lambda _t, s, to=steps: to.append(s))
            median = float(np.median(steps[1:])) * 1e3  # the first step is the prompt
            best[name] = min(best.get(name, median), median)
            time.sleep(0.2)
    return {"token_ms": best, "same_tokens": tokens["tessera"] == tokens["ort"]}


def _child(job: dict[str, Any]) -> dict[str, Any]:
    """One measurement (``job["kind"]``), in this process."""
    limit_threads(job["threads"])
    import numpy as np

    batch, seq = job["batch"], job["seq"]
    # a decoder (its cache inputs symbolic too) compiles as one module for every size
    fixed = not job["symbolic"] and not job["decoder"]
    shapes = {"input_ids": [batch, seq], "attention_mask": [batch, seq]}
    feeds = _feeds(job)
    import onnxruntime  # noqa: F401 - loaded before the baseline, as tessera's imports are

    import tessera
    from tessera.plugin import get_backends

    # the backends' plugins are imported once per process, on first use: before the clock
    # starts, as onnxruntime's import is (their time is reported beside, ``plugins s``)
    start = time.perf_counter()
    get_backends()
    plugins_s = time.perf_counter() - start
    base = _rss_mib()
    out: dict[str, Any] = {"base": base, "plugins_s": plugins_s}
    if job["kind"] in ("compile", "cached"):
        kwargs: dict[str, Any] = {"input_shapes": shapes} if fixed else {}
        start = time.perf_counter()
        mod = tessera.compile(job["path"], job["target"], kernel_cache=job["cache"], **kwargs)
        out["seconds"] = time.perf_counter() - start
        out["peak"] = _peak_mib()
        mod.run(**feeds)
        out["steady"] = _rss_mib()
        if job["kind"] == "cached":  # the artifact the "load" step opens
            mod.export(job["artifact"])
    elif job["kind"] == "load":
        start = time.perf_counter()
        mod = tessera.load(job["artifact"])
        out["seconds"] = time.perf_counter() - start
        out["peak"] = _peak_mib()
        mod.run(**feeds)
        out["steady"] = _rss_mib()
    elif job["kind"] == "ort":
        start = time.perf_counter()
        sess = ort_session(job["path"], job["threads"])
        out["seconds"] = time.perf_counter() - start
        out["peak"] = _peak_mib()
        sess.run(None, feeds)
        out["steady"] = _rss_mib()
    else:  # latency, both engines alternately
        kwargs = {"input_shapes": shapes} if fixed else {}
        mod = tessera.compile(job["path"], job["target"], kernel_cache=job["cache"], **kwargs)
        sess = ort_session(job["path"], job["threads"])
        want = sess.run(None, feeds)[0]
        got = mod.run(**feeds)[mod.output_names[0]]
        out["max_abs_diff"] = float(np.max(np.abs(got - want)))
        times: dict[str, list[float]] = {"tessera": [], "ort": []}
        for _ in range(job["rounds"]):
            for name, fn in (("tessera", lambda: mod.run(**feeds)),
                             ("ort", lambda: sess.run(None, feeds))):
                fn()
                time.sleep(0.05 if name == "tessera" else 0.2)  # ort's workers spin after a run
                t0 = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - t0) * 1e3)
        out.update({k: float(np.median(v)) for k, v in times.items()})
        if job["decoder"]:
            out.update(_generation(job, {
                "tessera": lambda f: [r for r in mod.run(**f).values()],
                "ort": lambda f: sess.run(None, f)}))
    return out


def run_child(job: dict[str, Any]) -> dict[str, Any]:
    proc = subprocess.run([sys.executable, __file__, "--child", json.dumps(job)],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-6:]
        raise RuntimeError(f"{job['kind']} of {job['path']} failed: " + " | ".join(tail))
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="bert-base,gpt2,decoder-0.5b")
    ap.add_argument("--size", default="1x128", help="batch x seq")
    ap.add_argument("--symbolic", action="store_true",
                    help="compile one module for every size (no input_shapes)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15,
                    help="latency rounds (the decoder's prompt: at most 3)")
    ap.add_argument("--tokens", type=int, default=16, help="tokens the decoder generates")
    ap.add_argument("--gen-rounds", type=int, default=2)
    ap.add_argument("--export", nargs=2, metavar=("MODEL", "PATH"), help=argparse.SUPPRESS)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.export:
        _export(args.export[0], Path(args.export[1]))
        return 0
    if args.child:
        print(json.dumps(_child(json.loads(args.child))))
        return 0
    batch, seq = (int(x) for x in args.size.lower().split("x"))
    print(f"# {cpu_name()}; {args.threads} threads; target {args.target}; size {batch}x{seq}"
          f"{'; one symbolic module' if args.symbolic else ''}")
    print(f"{'model':<10} {'weights':>8} {'engine':<8} {'time s':>7} {'peak MiB':>9} "
          f"{'peak/w':>7} {'steady':>7} {'steady/w':>8} {'base':>5} {'ms':>8} {'ratio':>6}")
    for name in [m for m in args.models.split(",") if m]:
        if name not in MODELS and name not in DECODERS:
            raise SystemExit(f"unknown model {name!r}: known "
                             f"{', '.join([*MODELS, *DECODERS])}")
        path = model_path(name)
        weights = weight_bytes(path) / 2**20
        decoder = DECODERS.get(name)
        job = {"path": str(path), "target": args.target, "threads": args.threads,
               "batch": batch, "seq": seq, "symbolic": args.symbolic,
               "rounds": min(args.rounds, 3) if decoder else args.rounds,
               "cache": fresh_kernel_cache(), "decoder": decoder, "tokens": args.tokens,
               "gen_rounds": args.gen_rounds}
        cold = run_child({**job, "kind": "compile"})
        artifact = Path(job["cache"]) / "model.tar"
        job["artifact"] = str(artifact)
        cached = run_child({**job, "kind": "cached"})
        loaded = run_child({**job, "kind": "load"})
        artifact.unlink()
        ort = run_child({**job, "kind": "ort"})
        lat = run_child({**job, "kind": "latency"})
        for engine, r, ms in (("cold", cold, lat["tessera"]), ("cached", cached, None),
                              ("load", loaded, None),
                              ("ort", ort, lat["ort"])):
            ratio = f"{lat['tessera'] / lat['ort']:6.2f}" if engine == "cold" else ""
            print(f"{name:<10} {weights:8.0f} {engine:<8} {r['seconds']:7.2f} "
                  f"{r['peak']:9.0f} {r['peak'] / weights:7.2f} {r['steady']:7.0f} "
                  f"{(r['steady'] - r['base']) / weights:8.2f} {r['base']:5.0f} "
                  f"{'' if ms is None else f'{ms:8.2f}':>8} {ratio:>6}", flush=True)
        print(f"  max |tessera - ort| = {lat['max_abs_diff']:.2e}; the backends' import before "
              f"the clock started: {cold['plugins_s']:.2f} s (once per process)")
        if decoder:
            tms = lat["token_ms"]
            print(f"  token ms ({args.tokens} tokens after the prompt): tessera "
                  f"{tms['tessera']:.2f}, ort {tms['ort']:.2f}, ratio "
                  f"{tms['tessera'] / tms['ort']:.2f}; same tokens: {lat['same_tokens']}")
    print("peak/w: peak resident memory over the weights' bytes (the ONNX files); steady/w: "
          "what the model adds to the process after one run, over the weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
