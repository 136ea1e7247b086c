"""Neural-network computes: convolutions, matrix products, pooling, softmax, normalizations and
their quantized forms (TVM's ``topi.nn``)."""

from tessera.topi.nn.conv2d import bias_add, conv2d_nchw, conv2d_NCHWc, conv_nchw
from tessera.topi.nn.conv_transpose import conv_transpose_nchw
from tessera.topi.nn.dense import batch_matmul, dense, matmul, matmul_general
from tessera.topi.nn.norm import (
    batch_norm,
    group_norm,
    instance_norm,
    layer_norm,
    lp_norm,
    lrn,
    mean_variance_norm,
    rms_norm,
)
from tessera.topi.nn.pooling import global_pool, pool
from tessera.topi.nn.quantized import (
    conv_integer,
    dequantize,
    dynamic_quantize,
    matmul_integer,
    qlinear_conv,
    qlinear_matmul,
    quantize,
    requantize,
)
from tessera.topi.nn.softmax import hardmax, log_softmax, softmax
from tessera.topi.transform import pad

__all__ = [
    "batch_matmul", "batch_norm", "bias_add", "conv2d_NCHWc", "conv2d_nchw", "conv_integer",
    "conv_nchw", "conv_transpose_nchw", "dense", "dequantize", "dynamic_quantize", "global_pool",
    "group_norm", "hardmax", "instance_norm", "layer_norm", "log_softmax", "lp_norm", "lrn",
    "matmul", "matmul_general", "matmul_integer", "mean_variance_norm", "pad", "pool",
    "qlinear_conv", "qlinear_matmul", "quantize", "requantize", "rms_norm", "softmax",
]
