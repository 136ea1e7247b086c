"""int8 on the CPU: float32 and int8 models through Tessera and onnxruntime, on the same files.

Models (random weights with trained-like statistics, batch 1): ResNet-50 (``onnx``'s light
topology, :mod:`tessera.testing.light_models`), a MobileNet-style network
(:mod:`tessera.testing.mobilenet`) and a MiniLM-sized BERT-style encoder (4 layers x 384, 12
heads, 128 tokens, :mod:`tessera.testing.bert`). Each is quantized

- by onnxruntime's quantizer: ``quantize_static`` (QDQ, per-channel int8 weights, uint8
  activations, min-max over the calibration inputs) for the CNNs, ``quantize_dynamic``
  (DynamicQuantizeLinear + MatMulInteger, int8 weights) for the encoder (``ort-q``);
- by ``tessera.quantize(scheme="cpu")`` (QDQ, per-channel int8 weights, int8 activations,
  min-max; ``tess-q``),

and every file runs through both runtimes (``--threads`` threads each, measurements
interleaved). Printed per model and file: each runtime's median latency, the ratios the issue
asks for (Tessera int8 over Tessera float32, Tessera int8 over onnxruntime int8 on the same
file), and the accuracy against the float model's output (largest error over the output's
largest magnitude; for the classifiers whether the top-1 class agrees), with the machine's CPU
and its integer-dot-product features.

    python benchmarks/int8_cpu.py
    python benchmarks/int8_cpu.py --models bert --threads 1
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
from _common import cpu_name, interleaved_medians, limit_threads, ort_session

MODELS = ("resnet50", "mobilenet", "bert")
#: CPU flags (``/proc/cpuinfo``) the integer and bf16 kernels would use.
FLAGS = ("avx2", "avx512f", "avx512_vnni", "avx_vnni", "avx512_bf16", "amx_int8", "amx_bf16",
         "asimddp", "i8mm")


def cpu_flags() -> list[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return []
    line = next((ln for ln in text.splitlines() if ln.startswith(("flags", "Features"))), "")
    have = set(line.split(":", 1)[-1].split())
    return [f for f in FLAGS if f in have]


def float_model(name: str) -> tuple[Any, dict[str, np.ndarray], list[dict[str, np.ndarray]]]:
    """The float model, one input, and calibration batches (8 samples)."""
    if name == "resnet50":
        from tessera.testing.light_models import load_light_model

        lm = load_light_model("resnet50")
        rng = np.random.default_rng(1)
        calib = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in lm.inputs.items()}
                 for _ in range(8)]
        import onnx.version_converter  # opset 9: quantizers write per-channel QDQ of opset 13

        return onnx.version_converter.convert_version(lm.model, 13), lm.inputs, calib
    if name == "mobilenet":
        from tessera.testing.mobilenet import make_mobilenet, mobilenet_inputs

        calib = [mobilenet_inputs(seed=s) for s in range(1, 9)]
        return make_mobilenet(), mobilenet_inputs(seed=0), calib
    from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder

    cfg = BertConfig(hidden=384, heads=12, intermediate=1536, layers=4, seq_len=128)
    calib = [bert_inputs(cfg, seed=s) for s in range(1, 9)]
    return make_bert_encoder(cfg), bert_inputs(cfg, seed=0), calib


def ort_quantized(name: str, model: Any, calib: list[dict[str, np.ndarray]],
                  folder: Path) -> Any:
    import onnx
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    src, out = folder / f"{name}.onnx", folder / f"{name}_ort_int8.onnx"
    onnx.save(model, str(src))
    if name == "bert":
        quantize_dynamic(str(src), str(out), weight_type=QuantType.QInt8)
    else:
        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.items = iter(calib)

            def get_next(self) -> dict[str, np.ndarray] | None:
                return next(self.items, None)

        quantize_static(str(src), str(out), Reader(), quant_format=QuantFormat.QDQ,
                        per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8)
    return onnx.load(str(out))


def accuracy(got: np.ndarray, want: np.ndarray, classifier: bool) -> str:
    err = float(np.max(np.abs(got.astype(np.float64) - want))) / max(float(np.abs(want).max()),
                                                                       1e-30)
    top1 = ""
    if classifier:
        top1 = ", top-1 " + ("same" if int(np.argmax(got)) == int(np.argmax(want)) else "differs")
    return f"err {err:.3f}{top1}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--target", default="llvm")
    args = ap.parse_args()
    limit_threads(args.threads)
    import tessera

    print(f"# {cpu_name()}; flags: {' '.join(cpu_flags()) or 'none of ' + ', '.join(FLAGS)}; "
          f"{args.threads} threads; target {args.target}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, feeds, calib = float_model(name)
            classifier = name != "bert"
            files = {"float32": model,
                     "ort-q": ort_quantized(name, model, calib, Path(tmp)),
                     "tess-q": tessera.quantize(model, calib, scheme="cpu")}
            shapes = {k: list(v.shape) for k, v in feeds.items()}
            ref = ort_session(model, args.threads).run(None, feeds)[0].astype(np.float64)
            print(f"\n## {name}")
            print(f"{'file':<8} {'tessera ms':>10} {'ort ms':>8} {'tess/ort':>8}  accuracy "
                  f"(tessera)")
            times: dict[str, tuple[float, float]] = {}
            for label, proto in files.items():
                mod = tessera.compile(proto, args.target, input_shapes=shapes)
                sess = ort_session(proto, args.threads)
                out = mod.output_names[0]
                t, o = interleaved_medians([lambda m=mod, f=feeds: m.run(f),
                                            lambda s=sess, f=feeds: s.run(None, f)], rounds=5)
                times[label] = (t, o)
                got = np.asarray(mod.run(feeds)[out])
                print(f"{label:<8} {t:10.2f} {o:8.2f} {t / o:8.2f}  "
                      f"{accuracy(got, ref, classifier)}", flush=True)
            ft = times["float32"][0]
            for label in ("ort-q", "tess-q"):
                t, o = times[label]
                print(f"  {label}: Tessera int8 / Tessera float32 {t / ft:.2f}x, "
                      f"Tessera int8 / onnxruntime int8 {t / o:.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
