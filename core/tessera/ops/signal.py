"""Ops: signal processing: ``DFT``, ``STFT`` and the window / mel-matrix generators
(``HannWindow``, ``HammingWindow``, ``BlackmanWindow``, ``MelWeightMatrix``), which take their
sizes as attributes (static shapes) and therefore have no inputs.

Complex values are real tensors with a trailing axis of 2 (real, imaginary), as in ONNX. The
numerics follow the ONNX specification and its reference implementation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tessera.errors import OpError
from tessera.ir.types import DType, TensorType
from tessera.ops.registry import Attr, normalize_axis, register_op


def _to_complex(x: np.ndarray) -> np.ndarray:
    """A (..., 1) real or (..., 2) real/imaginary tensor as a complex array (...): complex64
    for float16/float32 (the precision ONNX's reference computes in), complex128 for float64."""
    ctype = np.complex128 if x.dtype == np.float64 else np.complex64
    if x.shape[-1] == 1:
        return x[..., 0].astype(ctype)
    c = np.empty(x.shape[:-1], ctype)
    c.real = x[..., 0]
    c.imag = x[..., 1]
    return c


def _from_complex(c: np.ndarray, dtype: np.dtype) -> np.ndarray:
    return np.stack([c.real, c.imag], axis=-1).astype(dtype)


def _dft_infer(x: TensorType, *, axis: int, inverse: int, onesided: int,
               dft_length: int | None) -> TensorType:
    if x.ndim < 2 or x.shape[-1] not in (1, 2):
        raise OpError(f"DFT: input must end in a dimension of 1 (real) or 2 (complex), got {x}")
    ax = normalize_axis(axis, x.ndim, "DFT")
    if ax == x.ndim - 1:
        raise OpError("DFT: axis cannot be the last (real/imaginary) dimension")
    if onesided and not inverse and x.shape[-1] == 2:
        raise OpError("DFT: a one-sided forward transform needs a real input (last dimension 1)")
    n = x.shape[ax]
    if dft_length is None:
        dft_length = 2 * (n - 1) if inverse and onesided else n
    if dft_length < 1:
        raise OpError(f"DFT: dft_length must be positive, got {dft_length}")
    shape = list(x.shape)
    if inverse and onesided:
        shape[ax], shape[-1] = dft_length, 1
    else:
        shape[ax] = dft_length // 2 + 1 if onesided else dft_length
        shape[-1] = 2
    return TensorType(tuple(shape), x.dtype)


@register_op("DFT", attrs={"axis": Attr.int(), "inverse": Attr.int(0), "onesided": Attr.int(0),
                           "dft_length": Attr.int(None)}, inputs=1, infer=_dft_infer)
def dft(x: np.ndarray, *, axis: int, inverse: int, onesided: int,
        dft_length: int | None) -> np.ndarray:
    """Discrete Fourier transform along ``axis`` of a real (..., 1) or complex (..., 2) signal,
    padded or cut to ``dft_length``. ``onesided`` keeps the first n/2+1 frequencies of a
    forward transform; an inverse ``onesided`` transform is an inverse real FFT (output (..., 1)).
    """
    ax = normalize_axis(axis, x.ndim)
    if dft_length is None:
        dft_length = 2 * (x.shape[ax] - 1) if inverse and onesided else x.shape[ax]
    c = _to_complex(x)
    if inverse and onesided:
        return np.fft.irfft(c, n=dft_length, axis=ax)[..., None].astype(x.dtype)
    if inverse:
        return _from_complex(np.fft.ifft(c, n=dft_length, axis=ax), x.dtype)
    out = np.fft.fft(c, n=dft_length, axis=ax)
    if onesided:
        out = np.take(out, np.arange(dft_length // 2 + 1), axis=ax)
    return _from_complex(out, x.dtype)


def _stft_frame_length(signal: tuple[int, ...], window: tuple[int, ...] | None,
                       frame_length: int | None) -> int:
    if frame_length is not None:
        return frame_length
    return window[0] if window is not None else signal[-2]


def _stft_infer(signal: TensorType, window: TensorType | None = None, *, frame_step: int,
                frame_length: int | None, onesided: int) -> TensorType:
    if signal.ndim != 3 or signal.shape[-1] not in (1, 2):
        raise OpError(f"STFT: signal must be (batch, length, 1|2), got {signal}")
    if window is not None and window.ndim != 1:
        raise OpError(f"STFT: window must be rank 1, got {window}")
    n = _stft_frame_length(signal.shape, window.shape if window is not None else None,
                           frame_length)
    if frame_step < 1 or n < 1 or n > signal.shape[1]:
        raise OpError(f"STFT: frame_step {frame_step} and frame_length {n} must be positive and "
                      f"the frame no longer than the signal ({signal.shape[1]})")
    if window is not None and window.shape[0] != n:
        raise OpError(f"STFT: window length {window.shape[0]} != frame_length {n}")
    if onesided and signal.shape[-1] == 2:
        raise OpError("STFT: onesided output needs a real signal")
    frames = 1 + (signal.shape[1] - n) // frame_step
    bins = n // 2 + 1 if onesided else n
    return TensorType((signal.shape[0], frames, bins, 2), signal.dtype)


@register_op("STFT", attrs={"frame_step": Attr.int(), "frame_length": Attr.int(None),
                            "onesided": Attr.int(1)}, inputs=(1, 2), infer=_stft_infer)
def stft(signal: np.ndarray, window: np.ndarray | None = None, *, frame_step: int,
         frame_length: int | None, onesided: int) -> np.ndarray:
    """Short-time Fourier transform: windowed frames of ``frame_length`` every ``frame_step``
    samples; output (batch, frames, bins, 2)."""
    n = _stft_frame_length(signal.shape, window.shape if window is not None else None,
                           frame_length)
    frames = 1 + (signal.shape[1] - n) // frame_step
    c = _to_complex(signal)  # (batch, length)
    idx = np.arange(frames)[:, None] * frame_step + np.arange(n)[None, :]
    framed = c[:, idx]  # (batch, frames, n)
    if window is not None:
        framed = framed * window.astype(framed.real.dtype)
    out = np.fft.fft(framed, n=n, axis=-1)
    if onesided:
        out = out[..., :n // 2 + 1]
    return _from_complex(out, signal.dtype)


def _window_infer(*, size: int, output_datatype: DType, periodic: int) -> TensorType:
    if size < 0:
        raise OpError(f"window size must be non-negative, got {size}")
    return TensorType((size,), output_datatype)


def _window_positions(size: int, periodic: int) -> tuple[np.ndarray, int]:
    return np.arange(size, dtype=np.float64), size if periodic else size - 1


_WINDOW_ATTRS = {"size": Attr.int(), "output_datatype": Attr.dtype(DType.float32),
                 "periodic": Attr.int(1)}


@register_op("HannWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def hann_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``sin(pi n / N)^2`` (N = size if periodic else size - 1)."""
    n, big_n = _window_positions(size, periodic)
    return (np.sin(n * np.pi / big_n) ** 2).astype(output_datatype.numpy)


@register_op("HammingWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def hamming_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``25/46 - 21/46 cos(2 pi n / N)``."""
    n, big_n = _window_positions(size, periodic)
    alpha = 25.0 / 46.0
    return (alpha - (1 - alpha) * np.cos(2 * np.pi * n / big_n)).astype(output_datatype.numpy)


@register_op("BlackmanWindow", attrs=dict(_WINDOW_ATTRS), inputs=0, infer=_window_infer)
def blackman_window(*, size: int, output_datatype: DType, periodic: int) -> np.ndarray:
    """``0.42 - 0.5 cos(2 pi n / N) + 0.08 cos(4 pi n / N)``."""
    n, big_n = _window_positions(size, periodic)
    w = 0.42 - 0.5 * np.cos(2 * np.pi * n / big_n) + 0.08 * np.cos(4 * np.pi * n / big_n)
    return w.astype(output_datatype.numpy)


def _mel_infer(*, num_mel_bins: int, dft_length: int, output_datatype: DType,
               **attrs: Any) -> TensorType:
    if num_mel_bins < 1 or dft_length < 1:
        raise OpError(f"MelWeightMatrix: num_mel_bins ({num_mel_bins}) and dft_length "
                      f"({dft_length}) must be positive")
    return TensorType((dft_length // 2 + 1, num_mel_bins), output_datatype)


@register_op("MelWeightMatrix", attrs={"num_mel_bins": Attr.int(), "dft_length": Attr.int(),
                                       "sample_rate": Attr.int(), "lower_edge_hertz": Attr.float(),
                                       "upper_edge_hertz": Attr.float(),
                                       "output_datatype": Attr.dtype(DType.float32)},
             inputs=0, infer=_mel_infer)
def mel_weight_matrix(*, num_mel_bins: int, dft_length: int, sample_rate: int,
                      lower_edge_hertz: float, upper_edge_hertz: float,
                      output_datatype: DType) -> np.ndarray:
    """Triangular mel filter bank mapping ``dft_length // 2 + 1`` linear frequency bins to
    ``num_mel_bins`` mel bins (the ONNX construction, with its integer bin edges)."""
    def to_mel(hz: float) -> float:
        return 2595.0 * np.log10(1.0 + hz / 700.0)

    low, high = to_mel(lower_edge_hertz), to_mel(upper_edge_hertz)
    points = np.arange(num_mel_bins + 2)
    mels = points * ((high - low) / (num_mel_bins + 2)) + low
    hz = 700.0 * (10.0 ** (mels / 2595.0) - 1.0)
    edges = (((dft_length + 1) * hz) // sample_rate).astype(np.int64)
    out = np.zeros((dft_length // 2 + 1, num_mel_bins))
    for m in range(num_mel_bins):
        left, center, right = (int(e) for e in edges[m:m + 3])
        if center == left:
            out[center, m] = 1.0
        else:
            j = np.arange(left, center + 1)
            out[j, m] = (j - left) / (center - left)
        if right > center:
            j = np.arange(center, right)
            out[j, m] = (right - j) / (right - center)
    return out.astype(output_datatype.numpy)
