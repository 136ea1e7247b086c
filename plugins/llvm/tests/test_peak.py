"""tessera_llvm.peak: the FMA peak kernel's code, and a measurement (never its speed)."""

from __future__ import annotations

import platform
import re

import numpy as np
import pytest

from plugins.llvm.tests.asm_scan import Line, fma_loop_body, is_fma
from tessera_llvm.build import build_module
from tessera_llvm.cpu import cpu_info
from tessera_llvm.peak import (
    PeakResult,
    accumulators_for,
    build_peak_kernels,
    fma_kernel,
    measure_fma_peak,
)

X86 = platform.machine().lower() in ("x86_64", "amd64")
#: Memory operands in x86 (AT&T: ``(%reg)``) or AArch64 (``[x0]``) assembly.
_MEMORY = re.compile(r"\(%|\[")


def test_accumulators_fit_the_register_file():
    assert accumulators_for(16) == 12  # AVX2: 12 accumulators + 2 operands
    assert accumulators_for(32) == 24
    assert accumulators_for(4) == 1


@pytest.mark.parametrize("function", ["fma_peak_1", "fma_peak_n_parallel1"])
def test_inner_loop_is_fmas_without_memory_traffic(function):
    built, lanes, k = build_peak_kernels(2)
    assert k == accumulators_for(cpu_info().vector_registers)
    loop = fma_loop_body(built.asm, function)
    fmas = [i for i in loop if is_fma(Line(i, ""))]
    assert len(fmas) >= k, "\n".join(loop)  # the loop may be unrolled
    assert not [i for i in loop if _MEMORY.search(i)], "spills or loads:\n" + "\n".join(loop)
    if X86 and lanes == 8:
        assert all("%ymm" in i for i in fmas)


@pytest.mark.skipif(not X86, reason="x86 -mcpu names")
@pytest.mark.parametrize("mcpu, register", [("haswell", "%ymm"), ("x86-64-v3", "%ymm")])
def test_kernel_for_a_named_cpu(mcpu, register):
    built, lanes, _ = build_peak_kernels(1, mcpu)
    assert lanes == 8
    loop = fma_loop_body(built.asm, "fma_peak_1")
    assert any(is_fma(Line(i, "")) and register in i for i in loop), "\n".join(loop)


def test_kernel_computes_the_recurrence():
    lanes, k, n = 4, 3, 5
    lib = build_module([fma_kernel("fma_check", lanes, k, 2)], "fma_check").load()
    x = np.concatenate([np.full(lanes, 0.5, np.float32), np.full(lanes, 1.0, np.float32)])
    out = np.zeros(2 * lanes, np.float32)
    lib.get("fma_check")([x, np.array([n], np.int64), out])
    want = 0.0
    for start in range(1, k + 1):
        acc = float(start)
        for _ in range(n):
            acc = acc * 0.5 + 1.0
        want += acc
    np.testing.assert_allclose(out, want, rtol=1e-6)


def test_is_fma():
    assert is_fma(Line("\tvfmadd231ps\t%ymm1, %ymm2, %ymm3", ""))
    assert is_fma(Line("\tfmla\tv0.4s, v1.4s, v2.4s", ""))
    assert not is_fma(Line("\tvmulps\t%ymm1, %ymm2, %ymm3", ""))
    assert not is_fma(Line("", ""))


def test_measurement_is_positive_and_cached():
    result = measure_fma_peak(1)
    assert result.gflops > 0 and result.per_thread_gflops > 0
    assert result.threads == 1 and result.lanes == cpu_info().vector_lanes
    assert result.flops_per_cycle == cpu_info().peak_flops_per_cycle
    assert measure_fma_peak(1) is result
    assert "GFLOP/s" in result.describe()


def test_code_for_a_wider_cpu_is_refused():
    wider = "znver4" if X86 else "a64fx"
    if cpu_info().vector_lanes >= cpu_info(wider).vector_lanes:
        pytest.skip("the host runs code for the widest CPU named here")
    with pytest.raises(ValueError, match="cannot measure"):
        measure_fma_peak(1, wider)


def test_describe_notes_threads_that_did_not_scale():
    ok = PeakResult(gflops=78.0, per_thread_gflops=40.0, threads=2, lanes=8, accumulators=12,
                    cpu="znver1", flops_per_cycle=16)
    assert ok.scaling == pytest.approx(0.975) and ok.implied_ghz == pytest.approx(2.5)
    assert "note" not in ok.describe()
    busy = PeakResult(gflops=40.0, per_thread_gflops=40.0, threads=2, lanes=8, accumulators=12,
                      cpu="znver1", flops_per_cycle=16)
    assert "2 threads reached 50%" in busy.describe()


def test_the_llvm_backend_offers_its_measured_peak_to_the_roofline():
    from tessera.plugin.target import TargetKind
    from tessera_llvm.backend import LLVMBackend

    peak = LLVMBackend().peak_gflops(TargetKind("llvm", {"num-threads": "1"}))
    assert peak is not None and peak[0] > 0 and "GFLOP/s" in peak[1]
    foreign = TargetKind("llvm", {"mtriple": "aarch64-linux-gnu" if platform.machine() in
                                  ("x86_64", "AMD64") else "x86_64-linux-gnu"})
    assert LLVMBackend().peak_gflops(foreign) is None
