"""``tessera quantize``: float ONNX model + calibration data -> int8 QDQ ONNX model.

The calibration file is an ``.npz`` with one array per model input (samples along axis 0), of the
shape the model declares in its fixed dimensions (other shapes are refused, naming both). The
quantized model uses symmetric power-of-two scales (what the ``vta_sim`` backend runs); the
first convolution and the classifier stay in float unless ``--quantize-first`` /
``--quantize-last`` say otherwise. A summary of the quantized layers and scales goes to stdout.

    tessera quantize model.onnx --calibration calib.npz -o model_int8.onnx
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from tessera.cli.arrays import check_output_file, read_npz
from tessera.cli.compile import progress
from tessera.cli.shapes import ArgumentError, parse_name_list
from tessera.quantization import quantize_model


def add_parser(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "quantize", help="quantize a float ONNX model to int8 (QDQ)",
        description="Quantize a float ONNX model to an int8 QDQ ONNX model with power-of-two "
                    "scales, calibrated on sample inputs with the reference interpreter.")
    parser.add_argument("model", metavar="MODEL", help="float ONNX model")
    parser.add_argument("--calibration", required=True, metavar="FILE.npz",
                        help="calibration inputs: one array per model input, samples along "
                             "axis 0")
    parser.add_argument("-o", "--output", required=True, metavar="OUT.onnx",
                        help="where to write the quantized model")
    parser.add_argument("--exclude", action="append", default=None, metavar="A,B",
                        help="Conv/Gemm/MatMul node names to keep in float (repeatable)")
    parser.add_argument("--quantize-first", action="store_true",
                        help="also quantize the first convolution")
    parser.add_argument("--quantize-last", action="store_true",
                        help="also quantize the last Gemm/MatMul (the classifier)")
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
    out = check_output_file(args.output, "--output", "model_int8.onnx")
    calibration = read_calibration(args.calibration)
    exclude = parse_name_list(args.exclude)
    progress(f"calibrating on {args.calibration}")
    model, report = quantize_model(args.model, calibration,
                                   skip_first_conv=not args.quantize_first,
                                   skip_last_dense=not args.quantize_last, exclude=exclude,
                                   batch_size=args.batch_size)
    out.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, str(out))
    print(report.summary())
    progress(f"wrote {out}")
    return 0
