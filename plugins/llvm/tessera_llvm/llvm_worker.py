"""A compile worker: a process that optimises LLVM IR for :mod:`tessera_llvm.compile_pool`.

``python -m tessera_llvm.llvm_worker`` reads jobs from its standard input and answers each on
its standard output, until its input ends (its parent exited or closed it). A frame is an
8-byte little-endian length and that many bytes. The worker first writes one frame saying what
it is (:func:`hello`). A job is two frames: a JSON header (the
:class:`~tessera_llvm.pipeline.MachineSpec` as ``machine``, ``speed_level``,
``loop_unrolling``) and the IR text. The answer is two frames: ``b"ok"`` and the optimised
module as LLVM bitcode, or ``b"error"`` and the message.

llvmlite serialises its calls within a process, so the optimisation of a large module can use
more than one core only in more than one process. A worker imports llvmlite and
:mod:`tessera_llvm.pipeline` and nothing of Tessera's, and runs the same pipeline on the same
target machine as the parent would.
"""

from __future__ import annotations

import json
import signal
import struct
import sys
from typing import BinaryIO

import llvmlite
import llvmlite.binding as llvm

from tessera_llvm import pipeline

_LENGTH = struct.Struct("<Q")


def read_frame(stream: BinaryIO) -> bytes | None:
    """The next frame of ``stream``; None at its end (a frame cut short is its end too)."""
    head = stream.read(_LENGTH.size)
    if len(head) < _LENGTH.size:
        return None
    (size,) = _LENGTH.unpack(head)
    data = stream.read(size)
    return data if len(data) == size else None


def write_frame(stream: BinaryIO, data: bytes) -> None:
    stream.write(_LENGTH.pack(len(data)))
    stream.write(data)


def optimize_job(header: dict, text: str) -> bytes:
    """The bitcode of ``text`` optimised as ``header`` says (RuntimeError from LLVM)."""
    spec = pipeline.MachineSpec(**header["machine"])
    pipeline.init_targets(spec.foreign)
    tm = pipeline.create_machine(spec)
    mod = pipeline.parse_for(text, tm)
    pipeline.run_pipeline(mod, tm, int(header["speed_level"]), bool(header["loop_unrolling"]))
    return mod.as_bitcode()


def serve(inp: BinaryIO, out: BinaryIO) -> None:
    """Answer jobs from ``inp`` on ``out`` until ``inp`` ends."""
    while True:
        header = read_frame(inp)
        text = read_frame(inp) if header is not None else None
        if header is None or text is None:
            return
        try:
            answer = [b"ok", optimize_job(json.loads(header), text.decode())]
        except Exception as exc:  # noqa: BLE001 - any failure goes back to the parent
            answer = [b"error", f"{type(exc).__name__}: {exc}".encode()]
        for frame in answer:
            write_frame(out, frame)
        out.flush()


def hello() -> bytes:
    """The first frame a worker writes: what it is, and the llvmlite and LLVM it runs (the
    parent uses a worker only when they are its own: bitcode is read by the same LLVM)."""
    return f"tessera-llvm-worker {llvmlite.__version__} {llvm.llvm_version_info}".encode()


def main() -> None:
    # Ctrl-C in a terminal reaches the whole process group: the parent decides what stops
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    llvm.initialize_native_target()
    write_frame(sys.stdout.buffer, hello())
    sys.stdout.buffer.flush()
    serve(sys.stdin.buffer, sys.stdout.buffer)


if __name__ == "__main__":
    main()
