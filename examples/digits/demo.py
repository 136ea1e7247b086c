"""Tessera demo: classify handwritten digits with a small CNN compiled for this machine's CPU.

Compiles ``digits_cnn.onnx`` (trained by ``train.py``) with ``tessera.compile`` for the best
installed CPU backend (target "auto") at batch size 1, then classifies the whole test split one
image at a time -- as a service would -- and prints the accuracy, the batch-1 latency
(``Module.benchmark`` median), the target used and how the model was partitioned. Where
onnxruntime is installed, its predictions are compared too.

    python examples/digits/demo.py [--target "llvm"] [--repeat 20]
    python examples/digits/demo.py --int8 [--target "vta_sim, ref"]

With ``--int8`` the model is first quantized with ``tessera.quantize`` (power-of-two int8, the
first 60 test images as calibration data) and compiled for the VTA accelerator simulator with the
rest on the CPU; float and int8 accuracy are compared on the remaining images.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

import tessera

HERE = Path(__file__).resolve().parent
MODEL = HERE / "digits_cnn.onnx"
TEST_DATA = HERE / "digits_test.npz"


def load_test_split() -> tuple[np.ndarray, np.ndarray]:
    """The held-out images (float32 [N,1,8,8], pixels 0..1) and labels (int64 [N])."""
    with np.load(TEST_DATA, allow_pickle=False) as data:
        return data["images"], data["labels"]


#: Test images used as calibration data by --int8 (the rest measure accuracy).
CALIBRATION_IMAGES = 60


def compile_model(target: str = "auto", batch: int = 1, model: object = None) -> tessera.Module:
    """The digits CNN (or ``model``) compiled for ``target`` with a static batch size."""
    return tessera.compile(model if model is not None else str(MODEL), target=target,
                           input_shapes={"image": [batch, 1, 8, 8]})


def predict_one_by_one(module: tessera.Module, images: np.ndarray) -> np.ndarray:
    """Predicted classes, running a batch-1 module once per image."""
    return np.array([int(module.run(image=img[None])["logits"].argmax()) for img in images])


def onnxruntime_predictions(images: np.ndarray) -> np.ndarray | None:
    """onnxruntime's predicted classes for comparison, or None when it is not installed."""
    try:
        import onnxruntime as ort
    except ImportError:
        return None
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"image": images})[0].argmax(axis=1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="auto",
                        help="target string (default: auto, the best installed CPU backend)")
    parser.add_argument("--repeat", type=int, default=20, help="benchmark repeats")
    parser.add_argument("--number", type=int, default=20, help="runs per benchmark repeat")
    parser.add_argument("--int8", action="store_true",
                        help="quantize to int8 and run the convolutions and dense layers on the "
                             "VTA simulator (target default: \"vta_sim, auto\")")
    args = parser.parse_args(argv)
    if args.int8:
        return int8_demo(args)

    images, labels = load_test_split()
    start = time.perf_counter()
    module = compile_model(args.target)
    compile_s = time.perf_counter() - start
    print(f"compiled {MODEL.name} for target {module.target!r} in {compile_s:.2f} s")

    start = time.perf_counter()
    predicted = predict_one_by_one(module, images)
    run_s = time.perf_counter() - start
    accuracy = float((predicted == labels).mean())
    print(f"accuracy: {accuracy:.4f} ({int((predicted == labels).sum())}/{len(labels)} test "
          f"images, batch 1, {run_s:.2f} s in all)")

    reference = onnxruntime_predictions(images)
    if reference is not None:
        agree = int((reference == predicted).sum())
        print(f"onnxruntime: accuracy {float((reference == labels).mean()):.4f}, same prediction "
              f"on {agree}/{len(labels)} images")

    module.set_input("image", images[:1])
    result = module.benchmark(repeat=args.repeat, number=args.number)
    print(f"latency (batch 1, median of {args.repeat}x{args.number} runs): "
          f"{result.median:.3f} ms on target {module.target!r}")
    print()
    print(module.partition_report())
    return 0


def int8_demo(args: argparse.Namespace) -> int:
    """Quantize, compile for the accelerator (+ CPU), compare accuracy with float."""
    images, labels = load_test_split()
    calibration, images, labels = (images[:CALIBRATION_IMAGES], images[CALIBRATION_IMAGES:],
                                   labels[CALIBRATION_IMAGES:])
    target = args.target if args.target != "auto" else "vta_sim, auto"
    if target.endswith("auto"):
        from tessera.plugin.manager import default_cpu_target

        target = target[: -len("auto")] + default_cpu_target()
    int8_model = tessera.quantize(str(MODEL), {"image": calibration})
    float_module = compile_model("auto")
    module = compile_model(target, model=int8_model)
    print(f"quantized {MODEL.name} to int8 (calibrated on {len(calibration)} images) and "
          f"compiled it for {module.target!r}")
    float_acc = float((predict_one_by_one(float_module, images) == labels).mean())
    predicted = predict_one_by_one(module, images)
    int8_acc = float((predicted == labels).mean())
    print(f"accuracy on {len(labels)} images: float {float_acc:.4f}, int8 {int8_acc:.4f}")
    module.set_input("image", images[:1])
    profile = module.profile()
    for backend, counters in profile.counters.items():
        print(f"{backend} counters for one image: " + ", ".join(
            f"{k} {v:,.0f}" for k, v in counters.items() if k in ("cycles", "gemm_macs",
                                                                   "bytes_loaded_wgt")))
    print()
    print(module.partition_report())
    return 0


if __name__ == "__main__":
    sys.exit(main())
