"""Reading the array files the command line takes (``--inputs``, ``--calibration``, ``--quantize``:
``.npz``; ``--freeze-input``: ``.npy``) and checking the files it writes, with one-line errors
that name the flag, the user's path and what was expected instead of numpy's messages."""

from __future__ import annotations

import os
import zipfile
from pathlib import Path

import numpy as np

from tessera.cli.shapes import ArgumentError
from tessera.frontend.onnx.importer import tar_kind

_NPY_MAGIC = b"\x93NUMPY"
_ZIP_MAGIC = (b"PK\x03\x04", b"PK\x05\x06")  # a .npz is a zip file (an empty one too)


def read_npz(text: str, flag: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file ``text`` by name (``flag`` names the option in errors)."""
    path = _existing(text, flag)
    if not _head(path).startswith(_ZIP_MAGIC):
        raise ArgumentError(f"{flag}: {text!r} is {_what(path)}not a .npz file; expected "
                            f"arrays saved by name, e.g. numpy.savez('inputs.npz', x=x)")
    try:
        with np.load(path, allow_pickle=False) as data:
            return {name: data[name] for name in data.files}
    except (ValueError, OSError, zipfile.BadZipFile) as e:
        raise ArgumentError(f"{flag}: cannot read {text!r} as a .npz file: {_first_line(e)}"
                            ) from None


def read_npy(text: str, flag: str) -> np.ndarray:
    """The array of the ``.npy`` file ``text`` (``flag`` names the option in errors)."""
    path = _existing(text, flag)
    if not _head(path).startswith(_NPY_MAGIC):
        raise ArgumentError(f"{flag}: {text!r} is {_what(path)}not a .npy file; expected one "
                            f"array saved with numpy.save('x.npy', x)")
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError) as e:
        raise ArgumentError(f"{flag}: cannot read {text!r} as a .npy file: {_first_line(e)}"
                            ) from None


def check_output_file(text: str, flag: str, example: str) -> Path:
    """The path of a file a command will write, checked before the work: not a folder (then
    ``example``, a file name, is suggested), and the nearest existing folder above it (missing
    folders are created when the file is written) is a folder this process may write in."""
    path = Path(text)
    if text.endswith(("/", os.sep)) or path.is_dir():
        raise ArgumentError(f"{flag} {text!r} is a folder; expected a file name, e.g. "
                            f"{str(path / example)!r}")
    folder = path.parent
    while not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if folder.exists() and not folder.is_dir():
        raise ArgumentError(f"{flag} {text!r}: {str(folder)!r} is a file, not a folder")
    if not os.access(folder, os.W_OK | os.X_OK):
        raise ArgumentError(f"{flag} {text!r}: folder {str(folder)!r} is not writable")
    return path


def _existing(text: str, flag: str) -> Path:
    path = Path(text)
    if not path.is_file():
        raise ArgumentError(f"{flag}: file {text!r} does not exist")
    return path


def _what(path: Path) -> str:
    """What a file that is not the expected array file seems to be (``"an ONNX model, "``),
    for messages; "" when it is nothing known."""
    head = _head(path)
    if head.startswith(_NPY_MAGIC):
        return "a .npy file (one unnamed array), "
    if head.startswith(_ZIP_MAGIC):
        return "a .npz file (arrays by name), "
    if (kind := tar_kind(path)) is not None:
        return f"{kind}, "
    if path.suffix.lower() == ".onnx":
        return "an ONNX model, "
    return ""


def _head(path: Path) -> bytes:
    with open(path, "rb") as f:
        return f.read(8)


def _first_line(e: Exception) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else type(e).__name__
