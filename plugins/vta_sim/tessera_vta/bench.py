"""Benchmark: the convolutions of ResNet-18 (224x224, batch 1) on fsim and tsim.

For each distinct convolution the script compiles an int8 layer with random weights, runs it on
fsim (reporting simulated MACs per second of wall time and the timing model's cycle estimate)
and on tsim (the Verilog core's cycle count from launch to FINISH), checks that both agree with
the numpy reference, and prints the GOPS the cycle counts imply at the configuration's clock.

    python -m tessera_vta.bench [--no-tsim] [--tsim-max-cycles N] [--layers conv1,layer1 ...]
"""

from __future__ import annotations

import argparse
import time
from dataclasses import dataclass

import numpy as np

from .compiler import compile_conv2d, conv2d_reference
from .config import DEFAULT_CONFIG, VTAConfig
from .runner import run
from .tsim import load_model, unavailable_reason


@dataclass(frozen=True)
class ConvLayer:
    """One distinct ResNet-18 convolution and how many times the network uses it."""

    name: str
    in_channels: int
    size: int
    out_channels: int
    kernel: int
    stride: int
    count: int

    @property
    def padding(self) -> int:
        return self.kernel // 2


RESNET18_CONVS = [
    ConvLayer("conv1", 3, 224, 64, 7, 2, 1),
    ConvLayer("layer1", 64, 56, 64, 3, 1, 4),
    ConvLayer("layer2.down", 64, 56, 128, 3, 2, 1),
    ConvLayer("layer2", 128, 28, 128, 3, 1, 3),
    ConvLayer("layer2.proj", 64, 56, 128, 1, 2, 1),
    ConvLayer("layer3.down", 128, 28, 256, 3, 2, 1),
    ConvLayer("layer3", 256, 14, 256, 3, 1, 3),
    ConvLayer("layer3.proj", 128, 28, 256, 1, 2, 1),
    ConvLayer("layer4.down", 256, 14, 512, 3, 2, 1),
    ConvLayer("layer4", 512, 7, 512, 3, 1, 3),
    ConvLayer("layer4.proj", 256, 14, 512, 1, 2, 1),
]


@dataclass
class LayerResult:
    layer: ConvLayer
    macs: int
    fsim_seconds: float
    fsim_macs_per_second: float
    fsim_cycles: int
    tsim_cycles: int | None
    tsim_seconds: float | None


def gops(macs: int, cycles: int, config: VTAConfig) -> float:
    """Giga-operations a second (2 per MAC) at the configuration's clock."""
    return 2 * macs * config.clock_mhz * 1e6 / cycles / 1e9


def bench_layer(
    layer: ConvLayer, config: VTAConfig, use_tsim: bool, tsim_max_cycles: int, seed: int = 0
) -> LayerResult:
    rng = np.random.default_rng(seed)
    c, s = layer.in_channels, layer.size
    x = rng.integers(-128, 128, (1, c, s, s), dtype=np.int8)
    weight = rng.integers(-128, 128, (layer.out_channels, c, layer.kernel, layer.kernel), np.int8)
    bias = rng.integers(-(2**15), 2**15, layer.out_channels, dtype=np.int32)
    program = compile_conv2d(
        x.shape,
        weight,
        bias,
        stride=layer.stride,
        padding=layer.padding,
        shift=12,
        relu=True,
        config=config,
    )
    expected = conv2d_reference(x, weight, bias, program.params)
    start = time.perf_counter()
    fsim = run(program, x, sim="fsim")
    fsim_seconds = time.perf_counter() - start
    if not np.array_equal(fsim.output, expected):
        raise AssertionError(f"{layer.name}: fsim disagrees with the numpy reference")
    assert fsim.counters is not None
    tsim_cycles = tsim_seconds = None
    if use_tsim and fsim.cycles <= tsim_max_cycles:
        start = time.perf_counter()
        tsim = run(program, x, sim="tsim")
        tsim_seconds = time.perf_counter() - start
        if not np.array_equal(tsim.output, expected):
            raise AssertionError(f"{layer.name}: tsim disagrees with the numpy reference")
        tsim_cycles = tsim.cycles
    return LayerResult(
        layer=layer,
        macs=program.macs,
        fsim_seconds=fsim_seconds,
        fsim_macs_per_second=fsim.counters.gemm_macs / fsim_seconds,
        fsim_cycles=fsim.cycles,
        tsim_cycles=tsim_cycles,
        tsim_seconds=tsim_seconds,
    )


def format_table(results: list[LayerResult], config: VTAConfig) -> str:
    header = (
        f"{'layer':<12} {'shape':<22} {'n':>2} {'MMACs':>7} {'fsim s':>7} {'fsim MMAC/s':>11} "
        f"{'fsim cycles':>12} {'tsim cycles':>12} {'tsim s':>7} {'GOPS':>6} {'src':>4}"
    )
    lines = [header, "-" * len(header)]
    total_macs = total_cycles = 0
    all_tsim = True
    for r in results:
        layer = r.layer
        shape = (
            f"{layer.in_channels}x{layer.size}^2 k{layer.kernel}s{layer.stride}->"
            f"{layer.out_channels}"
        )
        cycles = r.tsim_cycles if r.tsim_cycles is not None else r.fsim_cycles
        all_tsim &= r.tsim_cycles is not None
        total_macs += r.macs * layer.count
        total_cycles += cycles * layer.count
        lines.append(
            f"{layer.name:<12} {shape:<22} {layer.count:>2} {r.macs / 1e6:>7.1f} "
            f"{r.fsim_seconds:>7.2f} {r.fsim_macs_per_second / 1e6:>11.1f} {r.fsim_cycles:>12} "
            f"{r.tsim_cycles if r.tsim_cycles is not None else '-':>12} "
            f"{r.tsim_seconds if r.tsim_seconds is not None else float('nan'):>7.2f} "
            f"{gops(r.macs, cycles, config):>6.1f} "
            f"{'tsim' if r.tsim_cycles is not None else 'fsim':>4}"
        )
    lines.append("-" * len(header))
    source = "tsim cycles" if all_tsim else "tsim cycles where run, else fsim's estimate"
    lines.append(
        f"ResNet-18 convolutions: {total_macs / 1e9:.2f} GMACs in {total_cycles} cycles "
        f"({source}) = {total_cycles / config.clock_mhz / 1e3:.1f} ms at {config.clock_mhz:g} MHz, "
        f"{gops(total_macs, total_cycles, config):.1f} GOPS (peak {config.peak_gops:.1f})"
    )
    lines.append(
        "GOPS count 2 ops per useful MAC (channels not padded); 'src' says whose cycles they use."
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-tsim", action="store_true", help="run fsim only")
    parser.add_argument(
        "--tsim-max-cycles",
        type=int,
        default=50_000_000,
        help="skip tsim for layers fsim estimates above this many cycles",
    )
    parser.add_argument("--layers", default="", help="comma-separated layer names (default all)")
    parser.add_argument("--config", default=None, help="a VTA configuration JSON file")
    args = parser.parse_args(argv)
    config = VTAConfig.load(args.config) if args.config else DEFAULT_CONFIG
    wanted = {name for name in args.layers.split(",") if name}
    layers = [layer for layer in RESNET18_CONVS if not wanted or layer.name in wanted]
    use_tsim = not args.no_tsim
    if use_tsim:
        reason = unavailable_reason()
        if reason:
            print(f"tsim skipped: {reason}")
            use_tsim = False
        else:
            start = time.perf_counter()
            load_model(config)
            print(f"tsim core built/loaded in {time.perf_counter() - start:.1f} s")
    results = []
    for layer in layers:
        results.append(bench_layer(layer, config, use_tsim, args.tsim_max_cycles))
        print(f"  done {layer.name}", flush=True)
    print(format_table(results, config))


if __name__ == "__main__":
    main()
