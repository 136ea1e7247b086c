"""Compiled layers: :class:`Program` (instructions + DRAM image) and the compile entry points."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..asm import disassemble, disassemble_stream
from ..config import DEFAULT_CONFIG, VTAConfig
from ..errors import CompileError, EncodingError
from ..isa import Instruction, encode_insn, encode_stream
from .conv2d import Conv2dLowering, DramBases
from .layers import Conv2dParams
from .packing import ceil_div, pack_activation, pack_bias, pack_weight, unpack_activation
from .stream import DramImage, StreamBuilder
from .tiling import Tiling, choose_tiling


@dataclass
class Program:
    """One compiled layer: its instruction stream and the DRAM image it runs against.

    The image holds the weights, bias and micro-op kernels; the input region is filled by
    :meth:`dram_with_input` and the output region read back by :meth:`read_output`. A dense
    layer is compiled as a 1x1 convolution over a 1 x N "image" (``kind == "dense"``).
    """

    config: VTAConfig
    kind: str
    params: Conv2dParams
    tiling: Tiling
    insns: list[Instruction]
    dram: np.ndarray
    input_offset: int
    input_nbytes: int
    output_offset: int
    output_nbytes: int

    @property
    def input_shape(self) -> tuple[int, ...]:
        if self.kind == "dense":
            return (self.params.width, self.params.in_channels)
        return self.params.input_shape

    @property
    def output_shape(self) -> tuple[int, ...]:
        if self.kind == "dense":
            return (self.params.width, self.params.out_channels)
        return self.params.output_shape

    @property
    def macs(self) -> int:
        """Useful multiply-accumulates of the layer (without channel padding)."""
        return self.params.macs

    def assembly(self, numbered: bool = True) -> str:
        return disassemble_stream(self.insns, numbered=numbered)

    def instruction_bytes(self) -> bytes:
        return encode_stream(self.insns, self.config)

    def dram_with_input(self, x: np.ndarray) -> np.ndarray:
        """A copy of the DRAM image with ``x`` packed into the input region."""
        x = np.asarray(x)
        if x.shape != self.input_shape or x.dtype != np.int8:
            raise CompileError(
                f"{self.kind} input must be int8 of shape {self.input_shape}; "
                f"got {x.dtype} {x.shape}"
            )
        nchw = x.T.reshape(1, x.shape[1], 1, x.shape[0]) if self.kind == "dense" else x
        packed = pack_activation(nchw, self.config.batch, self.config.block).tobytes()
        assert len(packed) == self.input_nbytes
        dram = self.dram.copy()
        dram[self.input_offset : self.input_offset + len(packed)] = np.frombuffer(
            packed, dtype=np.uint8
        )
        return dram

    def read_output(self, dram: np.ndarray) -> np.ndarray:
        """The layer's output (NCHW, or (N, M) for dense) from a final DRAM image."""
        p, cfg = self.params, self.config
        raw = dram[self.output_offset : self.output_offset + self.output_nbytes].view(np.int8)
        packed = raw.reshape(
            ceil_div(p.batch, cfg.batch),
            ceil_div(p.out_channels, cfg.block),
            p.out_height,
            p.out_width,
            cfg.batch,
            cfg.block,
        )
        out = unpack_activation(packed, p.batch, p.out_channels)
        if self.kind == "dense":
            return out[0, :, 0, :].T.copy()
        return out


def _check_int(name: str, array: np.ndarray, dtype: type, shape: tuple[int, ...]) -> np.ndarray:
    array = np.asarray(array)
    if array.dtype != dtype or array.shape != shape:
        raise CompileError(
            f"{name} must be {np.dtype(dtype).name} of shape {shape}; got {array.dtype} "
            f"{array.shape}"
        )
    return array


def lower_conv2d(
    params: Conv2dParams,
    weight: np.ndarray,
    bias: np.ndarray | None,
    config: VTAConfig,
    kind: str = "conv2d",
    tiling: Tiling | None = None,
) -> Program:
    """Lower a conv2d with the given parameters and constants to a :class:`Program`."""
    weight = _check_int("weight", weight, np.int8, params.weight_shape)
    if bias is None:
        bias = np.zeros(params.out_channels, dtype=np.int32)
    bias = _check_int("bias", bias, np.int32, (params.out_channels,))
    if params.rounds:
        # rounding to nearest: the bias add also adds half of the shift's unit (see conv2d.py)
        rounded = bias.astype(np.int64) + (1 << (params.shift - 1))
        if rounded.max() > np.iinfo(np.int32).max:
            raise CompileError(
                f"bias {int(bias.max())} + 2^{params.shift - 1} (rounding) overflows int32"
            )
        bias = rounded.astype(np.int32)
    tiling = tiling or choose_tiling(params, config)
    if ceil_div(params.in_channels, config.block) * params.kernel_h * params.kernel_w >= 1 << 16:
        raise CompileError("conv2d weight rows exceed the 16-bit x_stride of a LOAD")
    if max(params.width, params.out_width) >= 1 << 16:
        raise CompileError("conv2d image width exceeds the 16-bit x_stride of a LOAD/STORE")

    alignment = max(
        config.inp_elem_bytes, config.wgt_elem_bytes, config.acc_elem_bytes, config.uop_elem_bytes
    )
    image = DramImage(alignment)
    nb = ceil_div(params.batch, config.batch)
    icb, ocb = (
        ceil_div(params.in_channels, config.block),
        ceil_div(params.out_channels, config.block),
    )
    input_nbytes = nb * icb * params.height * params.width * config.inp_elem_bytes
    output_nbytes = nb * ocb * params.out_height * params.out_width * config.out_elem_bytes
    inp = image.allocate("input", input_nbytes)
    wgt_bytes = pack_weight(weight, config.block).tobytes()
    wgt = image.allocate("weight", len(wgt_bytes), wgt_bytes)
    bias_bytes = pack_bias(bias, config.batch, config.block).astype("<i4").tobytes()
    bias_at = image.allocate("bias", len(bias_bytes), bias_bytes)
    out = image.allocate("output", output_nbytes)
    bases = DramBases(
        inp=inp // config.inp_elem_bytes,
        wgt=wgt // config.wgt_elem_bytes,
        bias=bias_at // config.acc_elem_bytes,
        out=out // config.out_elem_bytes,
    )

    builder = StreamBuilder(config)
    Conv2dLowering(params, tiling, config, bases, builder).emit()
    uop_segment = builder.uop_segment()
    builder.relocate_uops(image.allocate("uops", len(uop_segment), uop_segment))
    if image.size >= (1 << 32):
        raise CompileError(f"the DRAM image of {image.size} bytes exceeds 32-bit addresses")
    for index, insn in enumerate(builder.insns):
        try:
            encode_insn(insn, config)  # every field must fit its bits
        except EncodingError as err:
            raise CompileError(
                f"conv2d {params.weight_shape}: instruction #{index} '{disassemble(insn)}': {err}"
            ) from None
    return Program(
        config=config,
        kind=kind,
        params=params,
        tiling=tiling,
        insns=builder.insns,
        dram=image.to_array(),
        input_offset=inp,
        input_nbytes=input_nbytes,
        output_offset=out,
        output_nbytes=output_nbytes,
    )


def compile_conv2d(
    input_shape: tuple[int, int, int, int],
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    stride: int | tuple[int, int] = 1,
    padding: int | tuple[int, int] | tuple[int, int, int, int] = 0,
    shift: int = 0,
    relu: bool = False,
    rounding: str = "floor",
    config: VTAConfig = DEFAULT_CONFIG,
    tiling: Tiling | None = None,
) -> Program:
    """Compile an int8 NCHW conv2d: ``clip((conv(x, weight) + bias) >> shift)`` to int8.

    ``weight`` is int8 OIHW, ``bias`` int32 (O,). ``padding`` is one value, (vertical,
    horizontal) or (top, left, bottom, right). Channel counts need not be multiples of 16.
    ``rounding`` is "floor" (an arithmetic shift) or "half_even" (to nearest, ties to even).
    """
    weight = np.asarray(weight)
    if weight.ndim != 4 or len(input_shape) != 4:
        raise CompileError("conv2d expects an NCHW input shape and an OIHW weight")
    if weight.shape[1] != input_shape[1]:
        raise CompileError(
            f"conv2d weight has {weight.shape[1]} input channels, the input {input_shape[1]}"
        )
    sh, sw = (stride, stride) if isinstance(stride, int) else stride
    if isinstance(padding, int):
        pads = (padding,) * 4
    elif len(padding) == 2:
        pads = (padding[0], padding[1], padding[0], padding[1])
    else:
        pads = tuple(padding)
    params = Conv2dParams(
        batch=input_shape[0],
        in_channels=input_shape[1],
        height=input_shape[2],
        width=input_shape[3],
        out_channels=weight.shape[0],
        kernel_h=weight.shape[2],
        kernel_w=weight.shape[3],
        stride_h=sh,
        stride_w=sw,
        pad_top=pads[0],
        pad_left=pads[1],
        pad_bottom=pads[2],
        pad_right=pads[3],
        shift=shift,
        relu=relu,
        rounding=rounding,
    )
    return lower_conv2d(params, weight, bias, config, tiling=tiling)


def compile_dense(
    input_shape: tuple[int, int],
    weight: np.ndarray,
    bias: np.ndarray | None = None,
    *,
    shift: int = 0,
    relu: bool = False,
    rounding: str = "floor",
    config: VTAConfig = DEFAULT_CONFIG,
) -> Program:
    """Compile ``clip((x @ weight.T + bias) >> shift)`` for int8 x (N, K), weight (M, K);
    ``rounding`` as for :func:`compile_conv2d`."""
    weight = np.asarray(weight)
    if weight.ndim != 2 or len(input_shape) != 2 or weight.shape[1] != input_shape[1]:
        raise CompileError(
            f"dense expects x (N, K) and weight (M, K); got {tuple(input_shape)} and {weight.shape}"
        )
    n, k = input_shape
    m = weight.shape[0]
    params = Conv2dParams(
        batch=1,
        in_channels=k,
        height=1,
        width=n,
        out_channels=m,
        kernel_h=1,
        kernel_w=1,
        shift=shift,
        relu=relu,
        rounding=rounding,
    )
    return lower_conv2d(params, weight.reshape(m, k, 1, 1), bias, config, kind="dense")
