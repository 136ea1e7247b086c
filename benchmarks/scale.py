"""Full-size models: compile time (cold and from the kernel cache), memory and latency.

The published configurations of models people deploy, with random weights, exported by
TorchScript (opset 17, symbolic batch and sequence) in a child process (this one never
imports torch): ``bert-base`` (BERT-base, 110M parameters) and ``gpt2`` (GPT-2 small, 124M).
Each measurement runs in a fresh child process, so that its peak resident memory is its own:

- ``compile``: ``tessera.compile`` for ``--target`` at ``--size`` (input shapes fixed; or,
  with ``--symbolic``, one module for every size) with an empty kernel cache (``cold``), then
  again in another process with the cache the first one filled (``cached``);
- ``peak MiB``: the process's peak resident memory while compiling (cold), against the
  weights' bytes (``peak/w``); ``steady MiB``: resident memory after the compile and one run
  (``steady/w``); ``base MiB``: the same process before it read the model (the interpreter and
  libraries), so that what the model costs is ``steady - base``;
- onnxruntime's session creation time, peak and steady memory in the same way;
- ``tessera ms`` and ``ort ms``: median latency at ``--size``, measured alternately in one
  process (``ratio``: Tessera over onnxruntime).

    python benchmarks/scale.py                           # bert-base and gpt2 at 1x128
    python benchmarks/scale.py --models bert-base --size 1x384 --symbolic
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
#: Where the exported models are kept (as benchmarks/serving.py keeps its own).
CACHE = Path(os.environ.get("TESSERA_BENCH_CACHE", Path.home() / ".cache" / "tessera-bench"))


def model_path(name: str) -> Path:
    path = CACHE / f"scale-{name}.onnx"
    if not path.exists():
        CACHE.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run([sys.executable, __file__, "--export", name, str(path)],
                              capture_output=True, text=True)
        if proc.returncode != 0 or not path.exists():
            tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
            raise RuntimeError(f"exporting {name} failed: " + " | ".join(tail))
    return path


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
def _rss_mib() -> float:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def _peak_mib() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _feeds(batch: int, seq: int) -> dict[str, Any]:
    import numpy as np

    rng = np.random.default_rng(0)
    return {"input_ids": rng.integers(0, 1000, (batch, seq)).astype(np.int64),
            "attention_mask": np.ones((batch, seq), np.int64)}


def _child(job: dict[str, Any]) -> dict[str, Any]:
    """One measurement (``job["kind"]``), in this process."""
    limit_threads(job["threads"])
    import numpy as np

    batch, seq = job["batch"], job["seq"]
    shapes = {"input_ids": [batch, seq], "attention_mask": [batch, seq]}
    feeds = _feeds(batch, seq)
    import onnxruntime  # noqa: F401 - loaded before the baseline, as tessera's imports are

    import tessera

    base = _rss_mib()
    out: dict[str, Any] = {"base": base}
    if job["kind"] in ("compile", "cached"):
        kwargs: dict[str, Any] = {} if job["symbolic"] else {"input_shapes": shapes}
        start = time.perf_counter()
        mod = tessera.compile(job["path"], job["target"], kernel_cache=job["cache"], **kwargs)
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
        kwargs = {} if job["symbolic"] else {"input_shapes": shapes}
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
    ap.add_argument("--models", default="bert-base,gpt2")
    ap.add_argument("--size", default="1x128", help="batch x seq")
    ap.add_argument("--symbolic", action="store_true",
                    help="compile one module for every size (no input_shapes)")
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=15)
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
        if name not in MODELS:
            raise SystemExit(f"unknown model {name!r}: known {', '.join(MODELS)}")
        path = model_path(name)
        weights = os.path.getsize(path) / 2**20
        job = {"path": str(path), "target": args.target, "threads": args.threads,
               "batch": batch, "seq": seq, "symbolic": args.symbolic, "rounds": args.rounds,
               "cache": fresh_kernel_cache()}
        cold = run_child({**job, "kind": "compile"})
        cached = run_child({**job, "kind": "cached"})
        ort = run_child({**job, "kind": "ort"})
        lat = run_child({**job, "kind": "latency"})
        for engine, r, ms in (("cold", cold, lat["tessera"]), ("cached", cached, None),
                              ("ort", ort, lat["ort"])):
            ratio = f"{lat['tessera'] / lat['ort']:6.2f}" if engine == "cold" else ""
            print(f"{name:<10} {weights:8.0f} {engine:<8} {r['seconds']:7.2f} "
                  f"{r['peak']:9.0f} {r['peak'] / weights:7.2f} {r['steady']:7.0f} "
                  f"{(r['steady'] - r['base']) / weights:8.2f} {r['base']:5.0f} "
                  f"{'' if ms is None else f'{ms:8.2f}':>8} {ratio:>6}", flush=True)
        print(f"  max |tessera - ort| = {lat['max_abs_diff']:.2e}")
    print("peak/w: peak resident memory over the weights' bytes (the ONNX file); steady/w: "
          "what the model adds to the process after one run, over the weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
