"""``tessera quantize``: float ONNX model + calibration data -> int8 QDQ ONNX model.

The calibration file is an ``.npz`` with one array per model input (samples along axis 0), of the
shape the model declares in its fixed dimensions (other shapes are refused, naming both).
``--scheme vta`` (the default) uses symmetric power-of-two scales (what the ``vta_sim`` backend
runs); the first convolution and the classifier stay in float unless ``--quantize-first`` /
``--quantize-last`` say otherwise. ``--scheme cpu`` quantizes every layer with any scale:
per-channel int8 weights (``--per-tensor`` for one scale per weight), int8 activations
(``--asymmetric``: uint8 with a zero point) over the range ``--method`` gives (``minmax``,
``percentile`` with ``--percentile``, ``entropy``). A summary of the quantized layers and
scales goes to stdout.

    tessera quantize model.onnx --calibration calib.npz -o model_int8.onnx
    tessera quantize model.onnx --calibration calib.npz --scheme cpu --method entropy \
        -o model_int8.onnx
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from tessera.cli.arrays import check_output_file, read_npz
from tessera.cli.compile import progress
from tessera.cli.shapes import ArgumentError, parse_name_list
from tessera.quantization import quantize_model
from tessera.quantization.quantizer import SCHEMES
from tessera.quantization.ranges import METHODS


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "quantize", help="quantize a float ONNX model to int8 (QDQ)",
        description="Quantize a float ONNX model to an int8 QDQ ONNX model, calibrated on "
                    "sample inputs with the reference interpreter: power-of-two scales for VTA "
                    "(--scheme vta), or any scale, per-channel weights and min-max, percentile "
                    "or entropy calibration for CPUs (--scheme cpu).")
    parser.add_argument("model", metavar="MODEL", help="float ONNX model")
    parser.add_argument("--calibration", required=True, metavar="FILE.npz",
                        help="calibration inputs: one array per model input, samples along "
                             "axis 0")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                        help="where to write the quantized model")
    parser.add_argument("--exclude", action="append", default=None, metavar="A,B",
                        help="Conv/Gemm/MatMul node names to keep in float (repeatable)")
    parser.add_argument("--scheme", choices=SCHEMES, default="vta",
                        help="vta: symmetric power-of-two scales, first convolution and "
                             "classifier in float (default); cpu: any scale, every layer")
    parser.add_argument("--method", choices=METHODS, default="minmax",
                        help="cpu scheme: how activation ranges are calibrated (default "
                             "minmax)")
    parser.add_argument("--percentile", type=float, default=99.99, metavar="P",
                        help="cpu scheme, --method percentile: the percentile kept (default "
                             "99.99)")
    parser.add_argument("--asymmetric", action="store_true",
                        help="cpu scheme: uint8 activations with a zero point (default: "
                             "symmetric int8)")
    parser.add_argument("--per-tensor", action="store_true",
                        help="cpu scheme: one scale per weight tensor (default: per output "
                             "channel)")
    parser.add_argument("--quantize-first", action="store_true",
                        help="also quantize the first convolution (vta scheme)")
    parser.add_argument("--quantize-last", action="store_true",
                        help="also quantize the last Gemm/MatMul, the classifier (vta scheme)")
    parser.add_argument("--batch-size", type=int, default=64, metavar="N",
                        help="calibration batch size for models with a symbolic batch "
                             "(default 64)")
    parser.set_defaults(handler=run_quantize)


def read_calibration(path: str, flag: str = "--calibration") -> dict[str, np.ndarray]:
    """Calibration inputs from an ``.npz`` (one array per model input)."""
    return read_npz(path, flag)


def run_quantize(args: argparse.Namespace) -> int:
    import onnx

    if args.batch_size < 1:
        raise ArgumentError(f"--batch-size must be at least 1, got {args.batch_size}")
    cpu_only = [flag for flag, set_ in (("--method", args.method != "minmax"),
                                        ("--percentile", args.percentile != 99.99),
                                        ("--asymmetric", args.asymmetric),
                                        ("--per-tensor", args.per_tensor)) if set_]
    if args.scheme == "vta" and cpu_only:
        raise ArgumentError(f"{', '.join(cpu_only)}: options of --scheme cpu (the vta scheme "
                            f"uses power-of-two scales over each tensor's largest magnitude)")
    if not 0.0 < args.percentile <= 100.0:
        raise ArgumentError(f"--percentile must be in (0, 100], got {args.percentile}")
    out = check_output_file(args.output, "--output", "model_int8.onnx")
    calibration = read_calibration(args.calibration)
    exclude = parse_name_list(args.exclude)
    progress(f"calibrating on {args.calibration}")
    vta = args.scheme == "vta"
    model, report = quantize_model(args.model, calibration, scheme=args.scheme,
                                   skip_first_conv=vta and not args.quantize_first,
                                   skip_last_dense=vta and not args.quantize_last,
                                   exclude=exclude, batch_size=args.batch_size,
                                   method=args.method, percentile=args.percentile,
                                   symmetric=not args.asymmetric,
                                   per_channel=not args.per_tensor)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print(report.summary())
    progress(f"wrote {out}")
    return 0
