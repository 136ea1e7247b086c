"""tessera-llvm: the CPU backend of Tessera.

The code generator turns lowered TIR (``tessera.tir.PrimFunc`` with 1-D buffers) into LLVM IR
with the pure-Python ``llvmlite.ir`` (:mod:`tessera_llvm.codegen`, vector math in
:mod:`tessera_llvm.intrinsics`); :mod:`tessera_llvm.build` optimises it and emits object code
with ``llvmlite.binding`` (the target machine and O3 pipeline are :mod:`tessera_llvm.machine`'s,
under the lock of :mod:`tessera_llvm.lock`); :mod:`tessera_llvm.loader` links object code into
the process and hands out callable kernels; :mod:`tessera_llvm.parallel` is the native thread
pool that parallel loops run on.

The ``tessera.backends`` entry point is :mod:`tessera_llvm.plugin`.
"""

from __future__ import annotations

__version__ = "0.1.0"
