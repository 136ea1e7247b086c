"""A tuned model is not slower than an untuned one: issue 46's MPNet-style encoder, tuned
as a user would, then timed untuned, with every record (what compiling with the records did
before the whole-model check) and with the records the check kept, against onnxruntime.

The encoder is Hugging Face's ``MPNetModel`` (hidden 128, 2 layers, 4 heads, intermediate
512, random weights), exported by TorchScript with symbolic batch and sequence (needs the
``zoo`` extra: torch, transformers), tuned at ``--shape`` for ``--budget`` seconds with
``tessera.autotune.tune`` (the check runs after it), then the three modules and an
onnxruntime session are built once and timed in interleaved rounds (``_common``'s method).

    python benchmarks/tuning_check.py --budget 60 --out /tmp/tuning-check
"""

from __future__ import annotations

import argparse
import functools
import sys
import warnings
from pathlib import Path

from _common import cpu_name, interleaved_medians, limit_threads, ort_session


def export_encoder(path: Path) -> None:
    """The MPNet-style encoder as ONNX (symbolic batch and sequence)."""
    import torch
    import transformers

    torch.manual_seed(0)
    config = transformers.MPNetConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, intermediate_size=512,
                                      max_position_embeddings=256)
    model = transformers.MPNetModel(config).eval()

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, ids: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
            return self.model(input_ids=ids, attention_mask=mask).last_hidden_state

    ids = torch.randint(0, 1000, (1, 16))
    axes = {0: "batch", 1: "seq"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(Encoder(), (ids, torch.ones_like(ids)), str(path),
                          input_names=["input_ids", "attention_mask"],
                          output_names=["last_hidden_state"], opset_version=17, dynamo=False,
                          dynamic_axes={"input_ids": axes, "attention_mask": axes,
                                        "last_hidden_state": axes})


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="tuning-check", help="folder for the model and records")
    ap.add_argument("--budget", type=float, default=60.0, help="tuning seconds")
    ap.add_argument("--shape", default="1x32", help="batch x sequence to tune and time at")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--min-ms", type=float, default=40.0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--retune", action="store_true",
                    help="start a new records file (default: resume the one in --out)")
    args = ap.parse_args(argv)
    limit_threads(args.threads)
    import numpy as np
    import onnx

    import tessera
    from tessera.autotune import tune
    from tessera.plugin.records import TuningHistory

    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    model_path, records = out / "mpnet.onnx", out / "mpnet.jsonl"
    if not model_path.is_file():
        export_encoder(model_path)
    if args.retune:
        records.unlink(missing_ok=True)
    batch, seq = (int(n) for n in args.shape.split("x"))
    shapes = {"input_ids": [batch, seq], "attention_mask": [batch, seq]}
    summary = tune(str(model_path), "llvm", records, time_budget=args.budget,
                   input_shapes=shapes, progress=sys.stderr)
    check = summary.check
    print(f"Tessera {tessera.__version__} 'llvm', {args.threads} thread(s); {cpu_name()}")
    print(f"tuned {summary.trials} trial(s) in {args.budget:.0f} s; model check: "
          f"{check.summary() if check is not None else 'no record changes a schedule'}")
    feeds = {"input_ids": np.random.default_rng(0).integers(0, 1000, (batch, seq)),
             "attention_mask": np.ones((batch, seq), np.int64)}
    everything = TuningHistory.load(records)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mods = [tessera.compile(str(model_path), "llvm", input_shapes=shapes,
                                tuning_records=history)
                for history in (None, TuningHistory(everything.records), str(records))]
    calls = []
    for m in mods:
        for name, value in feeds.items():
            m.set_input(name, value)
        calls.append(m.run)
    calls.append(functools.partial(ort_session(onnx.load(str(model_path)), args.threads).run,
                                   None, feeds))
    untuned, every, checked, ort = interleaved_medians(calls, args.rounds, args.min_ms)
    print(f"median of {args.rounds} interleaved rounds at {args.shape}, ms:")
    print(f"{'untuned':>9} {'every rec':>10} {'checked':>9} {'ort':>8} {'every/untuned':>14} "
          f"{'checked/untuned':>16} {'checked/ort':>12}")
    print(f"{untuned:>9.4f} {every:>10.4f} {checked:>9.4f} {ort:>8.4f} {every / untuned:>14.3f} "
          f"{checked / untuned:>16.3f} {checked / ort:>12.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
