"""One native call for a region's kernels (``tessera_llvm.sequence``): order, checks, and the
runtime using it for llvm regions while profiles still time each kernel."""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases.support import conv_block_model, run_onnxruntime

import tessera
from tessera import tir
from tessera.errors import RunError
from tessera.tir.stmt import ForKind as F
from tessera_llvm.build import build_module
from tessera_llvm.sequence import KernelSequence, make_binder

N = 64


def _library():
    """``scale(A, B)``: B = 3A + 1 and ``square(B, C)``: C = B * B, the second parallel."""
    A, B, C = (tir.Buffer(c, [N], "float32") for c in "ABC")
    i, j = tir.Var("i"), tir.Var("j")
    scale = tir.PrimFunc("scale", [A, B], tir.For(
        i, 0, N, F.SERIAL, tir.BufferStore(B, A[i] * 3.0 + 1.0, [i])))
    square = tir.PrimFunc("square", [B, C], tir.For(
        j, 0, N, F.PARALLEL, tir.BufferStore(C, B[j] * B[j], [j])))
    return build_module([scale, square], "seq").load()


def test_kernels_run_in_order_on_their_bound_buffers(rng):
    lib = _library()
    a = rng.standard_normal(N).astype("float32")
    b, c, d = (np.zeros(N, "float32") for _ in range(3))
    # scale a -> b, square b -> c, then square c -> d: each reads what the previous wrote
    seq = KernelSequence([lib.get("scale"), lib.get("square"), lib.get("square")],
                         [[a, b], [b, c], [c, d]])
    assert len(seq) == 3
    seq()
    np.testing.assert_allclose(d, (a * 3 + 1) ** 4, rtol=1e-5)
    a[:] = rng.standard_normal(N)  # the same buffers, new data: bound once, run again
    seq()
    np.testing.assert_allclose(d, (a * 3 + 1) ** 4, rtol=1e-5)


def test_binder_takes_inputs_and_outputs_per_kernel(rng):
    lib = _library()
    a = rng.standard_normal(N).astype("float32")
    b, c = np.zeros(N, "float32"), np.zeros(N, "float32")
    run = make_binder([lib.get("scale"), lib.get("square")])([([a], [b]), ([b], [c])])
    run()
    np.testing.assert_allclose(c, (a * 3 + 1) ** 2, rtol=1e-6)


def test_bad_buffers_are_refused_when_binding():
    lib = _library()
    good = np.zeros(N, "float32")
    with pytest.raises(RunError, match="dtype"):
        KernelSequence([lib.get("scale")], [[good, np.zeros(N, "float64")]])
    with pytest.raises(RunError, match="elements"):
        KernelSequence([lib.get("scale")], [[good, np.zeros(N - 1, "float32")]])
    with pytest.raises(RunError, match="2 kernels got 1 buffer lists"):
        KernelSequence([lib.get("scale"), lib.get("square")], [[good, good]])


def test_llvm_regions_run_as_one_call_and_profile_per_kernel():
    model, inputs = conv_block_model(seed=3, channels=5, out_channels=12, size=9)
    module = tessera.compile(model, target="llvm", opt_level=0)  # no fusion: several kernels
    (cr,) = module.compiled.values()
    assert cr.bind_sequence is not None and len(cr.kernels) > 1
    assert len(module.executor.runs) == 1
    want = run_onnxruntime(model, inputs)["y"]
    np.testing.assert_allclose(module.run(**inputs)["y"], want, rtol=1e-4, atol=1e-5)
    prof = module.profile(runs=2, **inputs)
    assert len(prof.kernels) == len(cr.kernels)
    np.testing.assert_allclose(module.get_output(0), want, rtol=1e-4, atol=1e-5)
