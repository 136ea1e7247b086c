"""The examples that end ``tessera --help`` and each subcommand's ``--help``.

They are run by ``tests/cli/test_examples.py`` (against a small model named ``model.onnx`` and
the demo model under ``examples/digits``, from the repository root), so every line must be a
command that works: keep them in an order where a file one example uses was written by an
earlier one (``model.tar``, ``digits.tar``, ``tuning.jsonl``).
"""

from __future__ import annotations

import argparse

#: Example command lines per subcommand ("" is ``tessera`` itself), each with a comment ("": none)
#: printed above it.
EXAMPLES: dict[str, list[tuple[str, str]]] = {
    "": [
        ('tessera compile examples/digits/digits_cnn.onnx --input-shapes "image:[1,1,8,8]" '
         '-o digits.tar', "the demo model, from the repository root"),
        ("tessera run digits.tar --fill-mode random --print-top 3", ""),
        ("tessera inspect digits.tar", "regions, backends, memory plan"),
        ("tessera plugins", "installed backends"),
    ],
    "compile": [
        ('tessera compile examples/digits/digits_cnn.onnx --input-shapes "image:[1,1,8,8]" '
         '-o digits.tar', ""),
        ('tessera compile model.onnx --target "llvm" --input-shapes "data:[1,3,224,224]" '
         '-o model.tar', ""),
        ("tessera compile model.onnx -O 2 --pass-config FoldConstants=off "
         "--disabled-pass Canonicalize -o model.tar", "switch passes"),
        ("tessera compile model.onnx --freeze-input mask=mask.npy --dump-code ll,asm "
         "-o out/model.tar", "out/<region>.ll, .s"),
        ('tessera compile model.onnx --target "cuda -arch=sm_90, llvm" -o gpu.tar',
         "no GPU needed"),
    ],
    "run": [
        ("tessera run digits.tar --fill-mode random --print-top 3", ""),
        ("tessera run model.tar --inputs x.npz --outputs y.npz", "arrays by input name"),
        ("tessera run model.tar --print-time --repeat 10 --number 10 --profile", ""),
        ('tessera run model.onnx --input-shapes "data:[1,3,224,224]" --target ref',
         "compiled first"),
    ],
    "inspect": [
        ('tessera inspect model.onnx --target "vta_sim, llvm"', "partition only, no code"),
        ("tessera inspect model.tar --dot partition.dot", ""),
        ("tessera inspect model.onnx --compile --html partition.html", "open in a browser"),
        ("tessera inspect model.onnx --svg partition.svg", "the picture as an SVG file"),
    ],
    "tune": [
        ("tessera tune model.onnx --target llvm --tasks list", ""),
        ("tessera tune model.onnx --target llvm -o tuning.jsonl --trials 4 --tasks 0",
         "then the whole-model check"),
        ("tessera compile model.onnx --target llvm --tuning-records tuning.jsonl "
         "-o model.tar", "use them"),
    ],
    "plugins": [
        ("tessera plugins", ""),
        ("tessera plugins -v", "+ devices, options, claimed ops"),
    ],
    "quantize": [
        ("tessera quantize model.onnx --calibration calib.npz -o model_int8.onnx", ""),
        ('tessera compile model_int8.onnx --target "vta_sim, llvm" -o model_int8.tar',
         "int8 layers on VTA"),
    ],
    "export": [
        ('tessera export examples/digits/digits_cnn.onnx --input-shapes "image:[1,1,8,8]" '
         '-o digits_c --prefix digits --shared digits_c/libdigits.so',
         "digits_c/digits.h, libdigits.so: see examples/deploy_c"),
    ],
    "new-plugin": [
        ("tessera new-plugin mynpu", "writes tessera-mynpu/"),
        ("tessera new-plugin mynpu --dir plugins-dev/tessera-mynpu", ""),
        ("tessera new-plugin mynpu --own-device --dir tessera-mynpu-device",
         "+ a device of its own, packed weights"),
    ],
}


def epilog(command: str) -> str:
    """The ``examples:`` block that ends ``command``'s help ("" for ``tessera`` itself)."""
    rows = []
    for line, note in EXAMPLES.get(command, []):
        rows += [f"  # {note}"] if note else []
        rows.append(f"  {line}")
    return "examples:\n" + "\n".join(rows) if rows else ""


class HelpFormatter(argparse.HelpFormatter):
    """argparse's formatter, but an ``examples:`` block keeps one command per line."""

    def _fill_text(self, text: str, width: int, indent: str) -> str:
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)
