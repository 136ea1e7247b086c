"""What a backend hands over for a program without Python (``Backend.export_code``).

``tessera export --format c`` (:mod:`tessera.deploy.c_library`) writes the execution plan of
a compiled model as C: one arena, the weights as one blob, and per step a call into the code
of the region it belongs to. Each region's backend gives that code as relocatable objects
with one C function per kernel::

    void symbol(void **args);   /* args: the data pointers of the kernel's inputs, outputs
                                   and workspace (Kernel.workspace_bytes), in that order */

The objects must be position independent (a shared library built from them needs no text
relocations) and may call only the C library, libm and pthreads, and functions they define
themselves. Objects several regions share (a thread pool) carry the same file name and the
same bytes, and are linked once.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class ExportedCode:
    """The code of one compiled region for a C program.

    ``objects``: file name -> relocatable object (ELF, position independent) for
    ``triple``; ``symbols``: kernel name (``Kernel.name``) -> the C function running it;
    ``set_threads``: a ``void f(int)`` the program calls once at start with the number of
    threads its parallel loops may use (None: the code runs in the calling thread);
    ``cpu_features``: the CPU features the code needs (LLVM's names: ``avx2``,
    ``avx512f``), checked when the program creates the model; ``libraries``: what it links
    against besides the C library (``m``, ``pthread``)."""

    objects: dict[str, bytes]
    symbols: dict[str, str]
    triple: str
    set_threads: str | None = None
    cpu_features: list[str] = field(default_factory=list)
    libraries: list[str] = field(default_factory=list)
