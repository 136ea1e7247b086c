"""The layers the compiler lowers, as plain shape parameters."""

from __future__ import annotations

from dataclasses import dataclass

from ..errors import CompileError

#: Widest padding an input LOAD can add on one side (a 4-bit field).
MAX_PAD = 15

#: How the requantizing shift rounds: "floor" (an arithmetic shift, as TVM's VTA flow with
#: rounding off) or "half_even" (round to nearest, ties to even, as ONNX QuantizeLinear does).
ROUNDING_MODES = ("floor", "half_even")


@dataclass(frozen=True)
class Conv2dParams:
    """An int8 NCHW convolution with int32 bias, requantization and optional ReLU:

    ``out = clip((conv(x, w) + bias) >> shift, 0 if relu else -128, 127)`` as int8.
    Padding is (top, left, bottom, right) zeros. With ``rounding="half_even"`` the shift rounds
    to nearest with ties to even instead of down (see :mod:`.conv2d` for the ALU sequence).
    """

    batch: int
    in_channels: int
    height: int
    width: int
    out_channels: int
    kernel_h: int
    kernel_w: int
    stride_h: int = 1
    stride_w: int = 1
    pad_top: int = 0
    pad_left: int = 0
    pad_bottom: int = 0
    pad_right: int = 0
    shift: int = 0
    relu: bool = False
    rounding: str = "floor"

    def __post_init__(self) -> None:
        for name in (
            "batch",
            "in_channels",
            "height",
            "width",
            "out_channels",
            "kernel_h",
            "kernel_w",
            "stride_h",
            "stride_w",
        ):
            if getattr(self, name) < 1:
                raise CompileError(f"conv2d {name} = {getattr(self, name)}: expected >= 1")
        for name, kernel in (
            ("pad_top", self.kernel_h),
            ("pad_bottom", self.kernel_h),
            ("pad_left", self.kernel_w),
            ("pad_right", self.kernel_w),
        ):
            pad = getattr(self, name)
            if not 0 <= pad < kernel or pad > MAX_PAD:
                raise CompileError(
                    f"conv2d {name} = {pad}: VTA input loads pad 0..{min(kernel - 1, MAX_PAD)} "
                    f"here (less than the kernel size {kernel}, at most {MAX_PAD})"
                )
        if not 0 <= self.shift <= 31:
            raise CompileError(f"conv2d shift = {self.shift}: expected 0..31")
        if self.rounding not in ROUNDING_MODES:
            raise CompileError(
                f"conv2d rounding = {self.rounding!r}: expected one of {', '.join(ROUNDING_MODES)}"
            )
        if self.out_height < 1 or self.out_width < 1:
            raise CompileError(
                f"conv2d output would be {self.out_height}x{self.out_width}: the kernel "
                f"{self.kernel_h}x{self.kernel_w} is larger than the padded input"
            )

    @property
    def rounds(self) -> bool:
        """Whether the epilogue rounds to nearest (and so needs scratch accumulator rows)."""
        return self.rounding == "half_even" and self.shift > 0

    @property
    def out_height(self) -> int:
        return (self.height + self.pad_top + self.pad_bottom - self.kernel_h) // self.stride_h + 1

    @property
    def out_width(self) -> int:
        return (self.width + self.pad_left + self.pad_right - self.kernel_w) // self.stride_w + 1

    @property
    def input_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.in_channels, self.height, self.width)

    @property
    def weight_shape(self) -> tuple[int, int, int, int]:
        return (self.out_channels, self.in_channels, self.kernel_h, self.kernel_w)

    @property
    def output_shape(self) -> tuple[int, int, int, int]:
        return (self.batch, self.out_channels, self.out_height, self.out_width)

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the layer as written (channels not padded)."""
        return (
            self.batch
            * self.out_channels
            * self.out_height
            * self.out_width
            * self.in_channels
            * self.kernel_h
            * self.kernel_w
        )
