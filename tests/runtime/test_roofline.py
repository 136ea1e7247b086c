"""tessera.runtime.roofline: conv and matmul kernels of a profile against a given peak."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tessera.backends.reference.backend import ReferenceBackend
from tessera.cli.run import roofline_reports
from tessera.plugin.target import TargetKind
from tessera.runtime.profiler import KernelProfile, Profile
from tessera.runtime.roofline import by_kind, compute_op, roofline_rows


def _profile() -> Profile:
    return Profile([
        KernelProfile("k0_conv3", "llvm", "ConvNCHWc+Add+Relu", ms=2.0, flops=100_000_000),
        KernelProfile("k1_conv1", "llvm", "ConvNCHWc", ms=1.0, flops=20_000_000),
        KernelProfile("k2_pool", "llvm", "MaxPool", ms=0.5, flops=1_000_000),
        KernelProfile("k3_dense", "llvm", "Flatten+MatMulPacked+Add", ms=0.25, flops=5_000_000),
        KernelProfile("k4_gemm", "ref", "Gemm", ms=0.25, flops=0),  # work unknown
        KernelProfile("k5_conv3", "llvm", "LayoutTransform+ConvNCHWc", ms=1.0,
                      flops=30_000_000),
    ], total_ms=5.0)


def test_compute_op_finds_the_conv_or_matmul_of_a_fused_group():
    assert compute_op("ConvNCHWc+Add+Relu") == "ConvNCHWc"
    assert compute_op("Reshape+MatMul") == "MatMul"
    assert compute_op("Add+Relu") is None
    assert compute_op("QLinearConv") is None  # integer work is not compared with a float peak


def test_rows_keep_conv_and_matmul_kernels_with_known_work():
    rows = roofline_rows(_profile().kernels)
    assert [r.name for r in rows] == ["k0_conv3", "k1_conv1", "k3_dense", "k5_conv3"]
    assert rows[0].gflops == pytest.approx(50.0)  # 1e8 flops in 2 ms
    assert rows[0].fraction(100.0) == pytest.approx(0.5)
    assert rows[2].kind == "MatMulPacked"


def test_per_kind_fraction_is_time_weighted():
    def kind(k: KernelProfile) -> str | None:
        return "conv 3x3" if k.name.endswith("conv3") else None

    summary = {r.kind: r for r in by_kind(roofline_rows(_profile().kernels, kind))}
    conv3 = summary["conv 3x3"]
    assert (conv3.count, conv3.ms, conv3.flops) == (2, 3.0, 130_000_000)
    # (2 ms at 50% + 1 ms at 30%) / 3 ms = 130 GFLOP / 3 ms at a 100 GFLOP/s peak
    assert conv3.fraction(100.0) == pytest.approx((2 * 0.5 + 1 * 0.3) / 3)
    assert summary["ConvNCHWc"].fraction(100.0) == pytest.approx(0.2)
    assert summary["MatMulPacked"].fraction(100.0) == pytest.approx(0.2)


def test_roofline_table_prints_percentages():
    text = _profile().roofline(100.0, peak_label="2 threads")
    lines = text.splitlines()
    assert lines[0] == "peak 100.0 GFLOP/s (2 threads)"
    row = next(line for line in lines if line.startswith("k0_conv3"))
    assert row.split()[-2:] == ["50.0", "50.0%"]
    total = next(line for line in lines if line.strip().startswith("all"))
    # 4 kernels, 4.25 ms of the profile's 5 ms, 155 MFLOP / 4.25 ms = 36.5 GFLOP/s
    assert total.split() == ["all", "4", "4.250", "85.0%", "36.5", "36.5%"]
    assert "k2_pool" not in text and "k4_gemm" not in text


def test_roofline_top_and_bad_peak():
    text = _profile().roofline(10.0, top=1)
    assert "k0_conv3" in text and "k5_conv3" not in text.split("per kind")[0]
    assert "(3 more)" in text
    with pytest.raises(ValueError):
        _profile().roofline(0.0)


class _Peaked:
    """A backend stand-in that offers a peak rate."""

    def peak_gflops(self, target: TargetKind) -> tuple[float, str] | None:
        return 200.0, f"peak of {target.name} -mcpu={target.get('mcpu')}"


def test_run_profile_reports_backends_that_offer_a_peak():
    module = SimpleNamespace(target="llvm -mcpu=haswell, ref",
                             backends={"llvm": _Peaked(), "ref": ReferenceBackend()})
    reports = roofline_reports(module, _profile())
    assert len(reports) == 1  # ref offers no peak (the Backend default)
    head, peak = reports[0].splitlines()[:2]
    assert head == "peak of llvm -mcpu=haswell" and peak == "peak 200.0 GFLOP/s (llvm)"
    assert "k0_conv3" in reports[0] and "k4_gemm" not in reports[0]
    assert roofline_reports(SimpleNamespace(target="", backends={}), _profile()) == []
