"""A ViT-style image encoder as an ONNX model, with seeded random weights.

:func:`make_vit` builds the graph with ``onnx.helper`` (opset 17) in the op patterns a PyTorch
export of Hugging Face's ``ViTModel`` produces:

- patch embedding: ``Conv`` with kernel and stride ``patch``, ``Reshape`` to
  ``[batch, hidden, patches]``, ``Transpose`` to ``[batch, patches, hidden]``; the class token
  (``Expand`` to the batch) is concatenated in front and the position embedding added;
- ``layers`` pre-norm encoder layers: ``x + attention(LayerNorm(x))`` then
  ``x + mlp(LayerNorm(x))``, with the attention and GELU of :mod:`tessera.testing.bert` (no mask);
- a final LayerNorm; the output ``last_hidden_state`` is ``[batch, patches + 1, hidden]``.

The token count (``(image / patch)^2 + 1``, 197 for ViT-Base at 224x224) is deliberately not a
multiple of any register tile, as in the real model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper

from tessera.testing.bert import BertConfig, _attention, _gelu, _GraphBuilder


@dataclass(frozen=True)
class ViTConfig:
    """The shape of a ViT-style encoder (defaults: a small ViT, 4 layers of width 192 on
    64x64 images, 65 tokens)."""

    image: int = 64
    patch: int = 8
    channels: int = 3
    hidden: int = 192
    heads: int = 3
    intermediate: int = 768
    layers: int = 4
    batch: int = 1
    eps: float = 1e-12

    def __post_init__(self) -> None:
        for name in ("image", "patch", "channels", "hidden", "heads", "intermediate", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if self.layers < 0:
            raise ValueError("layers must be non-negative")
        if self.image % self.patch:
            raise ValueError(f"image {self.image} is not a multiple of patch {self.patch}")
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")

    @property
    def tokens(self) -> int:
        """Patches plus the class token."""
        return (self.image // self.patch) ** 2 + 1

    def attention_config(self) -> BertConfig:
        """The attention block's shape, as :mod:`tessera.testing.bert` reads it."""
        return BertConfig(hidden=self.hidden, heads=self.heads, intermediate=self.intermediate,
                          layers=self.layers, seq_len=self.tokens, batch=self.batch,
                          layer_norm="op", max_position=self.tokens, eps=self.eps)


def make_vit(config: ViTConfig | None = None, seed: int = 0) -> onnx.ModelProto:
    """Build a ViT-style encoder (input ``pixel_values``, float32
    ``[batch, channels, image, image]``; output ``last_hidden_state``, float32
    ``[batch, tokens, hidden]``) with weights drawn from a generator seeded with ``seed``."""
    cfg = config or ViTConfig()
    attn_cfg = cfg.attention_config()
    g = _GraphBuilder(np.random.default_rng(seed))
    b, h, p, n = cfg.batch, cfg.hidden, cfg.patch, cfg.tokens

    w = g.normal("embeddings.patch_embeddings.projection.weight", (h, cfg.channels, p, p))
    bias = g.normal("embeddings.patch_embeddings.projection.bias", (h,))
    x = g.node("Conv", ["pixel_values", w, bias], "embeddings.patch_embeddings/Conv",
               kernel_shape=[p, p], strides=[p, p])
    flat = g.const("embeddings.flat_shape", np.array([b, h, n - 1], np.int64))
    x = g.node("Reshape", [x, flat], "embeddings.patch_embeddings/Reshape")
    x = g.node("Transpose", [x], "embeddings.patch_embeddings/Transpose", perm=[0, 2, 1])
    cls = g.normal("embeddings.cls_token", (1, 1, h))
    cls_shape = g.const("embeddings.cls_shape", np.array([b, 1, h], np.int64))
    cls = g.node("Expand", [cls, cls_shape], "embeddings/Expand")
    x = g.node("Concat", [cls, x], "embeddings/Concat", axis=1)
    position = g.normal("embeddings.position_embeddings", (1, n, h))
    x = g.node("Add", [x, position], "embeddings/Add")

    for i in range(cfg.layers):
        name = f"encoder.layer.{i}"
        y = g.layer_norm(x, f"{name}.layernorm_before", h, cfg.eps, "op")
        y = _attention(g, y, None, attn_cfg, f"{name}.attention")
        x = g.node("Add", [y, x], f"{name}/Add_attention")
        y = g.layer_norm(x, f"{name}.layernorm_after", h, cfg.eps, "op")
        y = g.linear(y, f"{name}.intermediate.dense", h, cfg.intermediate)
        y = _gelu(g, y, f"{name}.intermediate.gelu")
        y = g.linear(y, f"{name}.output.dense", cfg.intermediate, h)
        x = g.node("Add", [y, x], f"{name}/Add_mlp")
    x = g.layer_norm(x, "layernorm", h, cfg.eps, "op")
    g.nodes[-1].output[0] = "last_hidden_state"

    return g.model(
        f"vit_{cfg.layers}x{h}_{cfg.image}px",
        [helper.make_tensor_value_info("pixel_values", TensorProto.FLOAT,
                                       [b, cfg.channels, cfg.image, cfg.image])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [b, n, h])],
        "tessera.testing.vit")


def vit_inputs(config: ViTConfig | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for :func:`make_vit`: ``pixel_values`` standard normal (normalised
    images)."""
    cfg = config or ViTConfig()
    rng = np.random.default_rng(seed)
    shape = (cfg.batch, cfg.channels, cfg.image, cfg.image)
    return {"pixel_values": rng.standard_normal(shape, dtype=np.float32)}
