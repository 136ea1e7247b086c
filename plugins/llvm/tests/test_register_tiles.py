"""The register tiles of the conv and matrix-product micro-kernels fit the register file: the
innermost loop holding the FMAs moves no vector register to or from the stack, on AVX2
(znver3: 16 registers), AVX-512 (skylake-avx512, znver5: 32) and AArch64 NEON (neoverse-n1,
generic: 32), the latter cross-compiled with ``-mtriple``.

Each region is lowered by the backend's own lowering (NCHWc layout, FuseOps, default schedules
for the CPU model of the target) and compiled for the target; the assembly is read with
:mod:`plugins.llvm.tests.asm_scan` (see there how loops, FMAs and spills are recognised)."""

from __future__ import annotations

from dataclasses import replace

import llvmlite.binding as llvm
import numpy as np
import pytest
from backend_cases.support import Case, build_function
from tiers import SLOW

from plugins.llvm.tests.asm_scan import functions, innermost_fma_loops, is_fma, vector_spills
from tessera_llvm.build import LLVM_LOCK, BuiltModule, build_module, target_machine
from tessera_llvm.cpu import cpu_info
from tessera_llvm.lowering import LoweredKernel, lower_region
from tessera_llvm.schedules.common import CPUInfo

RNG = np.random.default_rng(12)

#: (id, -mcpu, -mtriple)
TARGETS = [
    ("znver3", "znver3", "x86_64-linux-gnu"),
    ("skylake-avx512", "skylake-avx512", "x86_64-linux-gnu"),
    ("znver5", "znver5", "x86_64-linux-gnu"),
    ("neoverse-n1", "neoverse-n1", "aarch64-linux-gnu"),
    ("aarch64-generic", None, "aarch64-linux-gnu"),
]
#: The anchor templates of the micro-kernels.
MICRO_KERNELS = ("conv2d_NCHWc", "dense")


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


REGIONS = {
    # a ResNet-style 3x3 convolution (NCHW in the graph; the lowering blocks it to NCHWc)
    "conv": Case("Conv", [rand(1, 64, 28, 28), rand(64, 64, 3, 3), rand(64)],
                 {"pads": [1, 1, 1, 1]}, consts=[1, 2]),
    # SqueezeNet's 13 columns, which no row tile divides on any of the targets, get flat
    # tiles (pixels across rows; they hold one address register more per pixel)
    "conv_flat": Case("Conv", [rand(1, 64, 13, 13), rand(64, 64, 3, 3), rand(64)],
                      {"pads": [1, 1, 1, 1]}, consts=[1, 2]),
    # the same convolution computed by Winograd F(2x2, 3x3): its batched product's register
    # tile (the transforms of F(2x2) only add and subtract, so the product's loop is the only
    # one with FMAs)
    "conv_winograd": Case("Conv", [rand(1, 64, 28, 28), rand(64, 64, 3, 3), rand(64)],
                          {"pads": [1, 1, 1, 1]}, consts=[1, 2]),
    # a dense layer: activations times constant (prepacked) weights
    "matmul": Case("MatMul", [rand(64, 256), rand(256, 256)], consts=[1]),
    # a batch-1 fully-connected layer: one row, several column vectors per tile
    "gemv": Case("MatMul", [rand(1, 512), rand(512, 1000)], consts=[1]),
    # attention-style batch matmul of two activations
    "batch_matmul": Case("MatMul", [rand(4, 64, 128), rand(4, 128, 64)]),
}


def verbose_asm(built: BuiltModule, mcpu: str | None, triple: str) -> str:
    """The module's assembly with LLVM's comments, which mark its spill code."""
    tm = target_machine(mcpu, None, triple)
    with LLVM_LOCK:
        tm.set_asm_verbosity(True)
        return tm.emit_assembly(llvm.parse_assembly(built.llvm_ir))


#: The conv template each conv region is compiled with (whatever the default for the CPU).
TEMPLATES = {"conv": {"template": "direct"}, "conv_flat": {"template": "direct"},
             "conv_winograd": {"template": "winograd", "winograd_tile": 2}}


def compile_region(name: str, cpu: CPUInfo, mcpu: str | None,
                   triple: str) -> tuple[list[LoweredKernel], str]:
    fn, *_ = build_function([REGIONS[name]])
    lowered = lower_region(fn, cpu, 3, prefix=f"{name}_")
    if name in TEMPLATES:
        keys = [k.configs[0].key() for k in lowered.kernels if k.template == "conv2d_NCHWc"]
        lowered = lower_region(fn, cpu, 3, {key: TEMPLATES[name] for key in keys},
                               prefix=f"{name}_")
    built = build_module([k.func for k in lowered.kernels], name, mcpu=mcpu, triple=triple)
    return lowered.kernels, verbose_asm(built, mcpu, triple)


def scan(kernels: list[LoweredKernel], asm: str) -> tuple[dict[str, object], int, list[str]]:
    """The micro-kernel's schedule config, the FMAs in its innermost FMA loops and the vector
    spills there (the kernel's functions include its outlined parallel bodies)."""
    micro = [k for k in kernels if k.template in MICRO_KERNELS]
    assert len(micro) == 1, [(k.name, k.template) for k in kernels]
    kernel = micro[0]
    fmas, spills = 0, []
    for fname, lines in functions(asm).items():
        if fname != kernel.name and not fname.startswith(kernel.name + "_"):
            continue
        for span in innermost_fma_loops(lines):
            fmas += sum(map(is_fma, lines[span[0]:span[1] + 1]))
            spills += vector_spills(lines, span)
    return kernel.config, fmas, spills


#: The convolutions take 0.3 to 2 s per target; the fast tier checks three of them (the others,
#: and every other target's, are slow), and every matrix product on every target.
FAST_CONVS = {("neoverse-n1", "conv"), ("neoverse-n1", "conv_flat"),
              ("aarch64-generic", "conv_winograd")}


@pytest.mark.parametrize("target, region", [
    pytest.param(t, r, id=f"{t[0]}-{r}",
                 marks=SLOW if r.startswith("conv") and (t[0], r) not in FAST_CONVS else ())
    for r in sorted(REGIONS) for t in TARGETS])
def test_micro_kernel_inner_loop_does_not_spill(target: tuple[str, str | None, str],
                                                region: str) -> None:
    _, mcpu, triple = target
    cpu = cpu_info(mcpu, 2, triple)
    config, fmas, spills = scan(*compile_region(region, cpu, mcpu, triple))
    what = (f"{region} for {triple} -mcpu={mcpu} ({cpu.vector_lanes} lanes, "
            f"{cpu.vector_registers} registers), schedule {config}")
    if region == "conv_flat":
        assert config.get("flat_tiles"), what
    if region in TEMPLATES:
        assert config["template"] == TEMPLATES[region]["template"], what
    if region in ("conv", "conv_flat") and cpu.vector_registers == 16:
        # AVX2: 4 output blocks x 3 pixels (12 accumulators, 3 broadcasts, 1 weight vector)
        assert (config["oc_tile"], config["reg_n"], config["flat_tiles"]) == (4, 3, True), what
    assert fmas > 0, f"{what}: no loop with FMAs found in the micro-kernel"
    assert not spills, f"{what}: {len(spills)} vector spills in the FMA loop:\n" + \
        "\n".join(spills[:20])


def test_the_scan_sees_spills_of_a_tile_too_large_for_the_registers() -> None:
    """A control: schedule for 32 registers, compile for AVX2's 16; the tile spills."""
    cpu = replace(cpu_info("znver3", 2), vector_registers=32)
    config, fmas, spills = scan(*compile_region("matmul", cpu, "znver3", "x86_64-linux-gnu"))
    assert fmas > 0
    assert spills, f"expected spills with schedule {config}"
