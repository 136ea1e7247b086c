"""A BERT-style transformer encoder as an ONNX model, with seeded random weights.

:func:`make_bert_encoder` builds the graph with ``onnx.helper`` (opset 17) in the op patterns a
PyTorch export of a BERT encoder produces, so that Tessera sees what a user's exported model
contains:

- embeddings: ``Gather`` of the word, position and token-type tables (position and token-type ids
  are constant initializers, as the buffers PyTorch registers for them), two ``Add``, LayerNorm;
- the additive attention mask, computed in the graph from the int64 ``attention_mask`` input:
  ``Unsqueeze`` to ``[batch, 1, 1, seq]``, ``Cast`` to float, ``1 - mask``, times ``-10000``;
- ``layers`` encoder layers, each: Q/K/V ``MatMul`` + ``Add``, ``Reshape`` + ``Transpose`` into
  heads (K straight to ``[batch, heads, head_dim, seq]``), ``MatMul`` Q·Kᵀ, ``Div`` by
  ``sqrt(head_dim)``, ``Add`` of the mask, ``Softmax(axis=-1)``, ``MatMul`` with V, ``Transpose``
  + ``Reshape`` back, output ``MatMul`` + ``Add``, residual ``Add``, LayerNorm, then the
  feed-forward block ``MatMul`` + ``Add`` → GELU as ``x * 0.5 * (1 + Erf(x / sqrt(2)))`` →
  ``MatMul`` + ``Add``, residual ``Add``, LayerNorm.

LayerNorm is either decomposed as most exported BERTs have it (``ReduceMean``, ``Sub``, ``Pow``,
``ReduceMean``, ``Add`` eps, ``Sqrt``, ``Div``, ``Mul``, ``Add``) or the single
``LayerNormalization`` op, chosen by :attr:`BertConfig.layer_norm`.

Weights follow BERT's initialization: matrices and embedding tables normal with std 0.02; biases
are small (normal, std 0.02) rather than zero so that they matter numerically; LayerNorm scales
are uniform in [0.9, 1.1] and shifts normal with std 0.02. The output ``last_hidden_state``
(``[batch, seq, hidden]``) comes out of a LayerNorm, so it has unit order of magnitude.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

#: The opset the encoder is written in.
OPSET = 17

#: The additive mask value of padded positions (BERT's classic ``-10000``).
MASK_VALUE = -10000.0


@dataclass(frozen=True)
class BertConfig:
    """The shape of a BERT-style encoder (defaults: BERT-base widths, 4 layers, 128 tokens)."""

    vocab: int = 8192
    hidden: int = 768
    heads: int = 12
    intermediate: int = 3072
    layers: int = 4
    seq_len: int = 128
    batch: int = 1
    #: ``"decomposed"`` (ReduceMean/Sub/Pow/... as exported by PyTorch before opset 17) or
    #: ``"op"`` (the ONNX ``LayerNormalization`` op).
    layer_norm: str = "decomposed"
    max_position: int = 512
    type_vocab: int = 2
    eps: float = 1e-12

    def __post_init__(self) -> None:
        if self.hidden % self.heads:
            raise ValueError(f"hidden {self.hidden} is not a multiple of heads {self.heads}")
        if self.layer_norm not in ("decomposed", "op"):
            raise ValueError(f"layer_norm must be 'decomposed' or 'op', not {self.layer_norm!r}")
        if self.seq_len > self.max_position:
            raise ValueError(f"seq_len {self.seq_len} exceeds max_position {self.max_position}")
        for name in ("vocab", "hidden", "heads", "intermediate", "seq_len", "batch"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be positive")
        if self.layers < 0:
            raise ValueError("layers must be non-negative")

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


class _GraphBuilder:
    """Collects nodes and initializers, naming values uniquely."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[onnx.TensorProto] = []
        self._count = 0

    def model(self, name: str, inputs: list[onnx.ValueInfoProto],
              outputs: list[onnx.ValueInfoProto], producer: str) -> onnx.ModelProto:
        """The nodes and initializers as a checked opset-:data:`OPSET` model."""
        graph = helper.make_graph(self.nodes, name, inputs=inputs, outputs=outputs,
                                  initializer=self.initializers)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)],
                                  producer_name=producer)
        model.ir_version = 8
        onnx.checker.check_model(model)
        return model

    def fresh(self, prefix: str) -> str:
        self._count += 1
        return f"{prefix}_{self._count}"

    def const(self, name: str, array: np.ndarray) -> str:
        self.initializers.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs: list[str], prefix: str, **attrs: object) -> str:
        out = self.fresh(prefix)
        self.nodes.append(helper.make_node(op, inputs, [out], name=out, **attrs))
        return out

    def normal(self, name: str, shape: tuple[int, ...], std: float = 0.02) -> str:
        a = self.rng.standard_normal(shape, dtype=np.float32) * np.float32(std)
        return self.const(name, a.astype(np.float32))

    def linear(self, x: str, name: str, n_in: int, n_out: int) -> str:
        """``MatMul`` by a ``[n_in, n_out]`` weight then ``Add`` of a bias (a ``torch.nn.Linear``
        as exported)."""
        w = self.normal(f"{name}.weight", (n_in, n_out))
        b = self.normal(f"{name}.bias", (n_out,))
        y = self.node("MatMul", [x, w], f"{name}/MatMul")
        return self.node("Add", [y, b], f"{name}/Add")

    def layer_norm(self, x: str, name: str, hidden: int, eps: float, mode: str) -> str:
        gamma = self.const(f"{name}.weight",
                           self.rng.uniform(0.9, 1.1, hidden).astype(np.float32))
        beta = self.normal(f"{name}.bias", (hidden,))
        if mode == "op":
            return self.node("LayerNormalization", [x, gamma, beta], f"{name}/LayerNorm",
                             axis=-1, epsilon=eps)
        mean = self.node("ReduceMean", [x], f"{name}/ReduceMean", axes=[-1], keepdims=1)
        centered = self.node("Sub", [x, mean], f"{name}/Sub")
        two = self.const(f"{name}.two", np.array(2.0, np.float32))
        square = self.node("Pow", [centered, two], f"{name}/Pow")
        var = self.node("ReduceMean", [square], f"{name}/ReduceMean_var", axes=[-1], keepdims=1)
        eps_c = self.const(f"{name}.eps", np.array(eps, np.float32))
        var_eps = self.node("Add", [var, eps_c], f"{name}/Add_eps")
        std = self.node("Sqrt", [var_eps], f"{name}/Sqrt")
        normed = self.node("Div", [centered, std], f"{name}/Div")
        scaled = self.node("Mul", [normed, gamma], f"{name}/Mul")
        return self.node("Add", [scaled, beta], f"{name}/Add")


def _attention(g: _GraphBuilder, x: str, mask: str | None, cfg: BertConfig, name: str) -> str:
    """Multi-head self-attention of ``x``; ``mask`` (an additive mask) is added to the scores
    when given."""
    b, s, h, nh, hd = cfg.batch, cfg.seq_len, cfg.hidden, cfg.heads, cfg.head_dim
    heads_shape = g.const(f"{name}.heads_shape", np.array([b, s, nh, hd], np.int64))
    merged_shape = g.const(f"{name}.merged_shape", np.array([b, s, h], np.int64))

    def split_heads(t: str, perm: list[int], what: str) -> str:
        r = g.node("Reshape", [t, heads_shape], f"{name}/{what}/Reshape")
        return g.node("Transpose", [r], f"{name}/{what}/Transpose", perm=perm)

    q = split_heads(g.linear(x, f"{name}.query", h, h), [0, 2, 1, 3], "query")
    k = split_heads(g.linear(x, f"{name}.key", h, h), [0, 2, 3, 1], "key")
    v = split_heads(g.linear(x, f"{name}.value", h, h), [0, 2, 1, 3], "value")
    scores = g.node("MatMul", [q, k], f"{name}/MatMul_qk")
    scale = g.const(f"{name}.sqrt_head_dim", np.array(math.sqrt(hd), np.float32))
    scores = g.node("Div", [scores, scale], f"{name}/Div")
    if mask is not None:
        scores = g.node("Add", [scores, mask], f"{name}/Add_mask")
    probs = g.node("Softmax", [scores], f"{name}/Softmax", axis=-1)
    context = g.node("MatMul", [probs, v], f"{name}/MatMul_pv")
    context = g.node("Transpose", [context], f"{name}/context/Transpose", perm=[0, 2, 1, 3])
    context = g.node("Reshape", [context, merged_shape], f"{name}/context/Reshape")
    return g.linear(context, f"{name}.output.dense", h, h)


def _gelu(g: _GraphBuilder, x: str, name: str) -> str:
    """``x * 0.5 * (1 + erf(x / sqrt(2)))`` as ``torch.nn.functional.gelu`` exports at opset 17."""
    sqrt2 = g.const(f"{name}.sqrt2", np.array(math.sqrt(2.0), np.float32))
    one = g.const(f"{name}.one", np.array(1.0, np.float32))
    half = g.const(f"{name}.half", np.array(0.5, np.float32))
    t = g.node("Div", [x, sqrt2], f"{name}/Div")
    t = g.node("Erf", [t], f"{name}/Erf")
    t = g.node("Add", [t, one], f"{name}/Add")
    t = g.node("Mul", [x, t], f"{name}/Mul")
    return g.node("Mul", [t, half], f"{name}/Mul_half")


def _encoder_layer(g: _GraphBuilder, x: str, mask: str, cfg: BertConfig, index: int) -> str:
    name = f"encoder.layer.{index}"
    attn = _attention(g, x, mask, cfg, f"{name}.attention")
    x = g.node("Add", [attn, x], f"{name}.attention/Add_residual")
    x = g.layer_norm(x, f"{name}.attention.output.LayerNorm", cfg.hidden, cfg.eps, cfg.layer_norm)
    inner = g.linear(x, f"{name}.intermediate.dense", cfg.hidden, cfg.intermediate)
    inner = _gelu(g, inner, f"{name}.intermediate.gelu")
    out = g.linear(inner, f"{name}.output.dense", cfg.intermediate, cfg.hidden)
    x = g.node("Add", [out, x], f"{name}.output/Add_residual")
    return g.layer_norm(x, f"{name}.output.LayerNorm", cfg.hidden, cfg.eps, cfg.layer_norm)


def make_bert_encoder(config: BertConfig | None = None, seed: int = 0) -> onnx.ModelProto:
    """Build a BERT-style encoder (inputs ``input_ids`` and ``attention_mask``, int64
    ``[batch, seq_len]``; output ``last_hidden_state``, float32 ``[batch, seq_len, hidden]``)
    with weights drawn from a generator seeded with ``seed``."""
    cfg = config or BertConfig()
    g = _GraphBuilder(np.random.default_rng(seed))
    b, s, h = cfg.batch, cfg.seq_len, cfg.hidden

    # embeddings
    word = g.normal("embeddings.word_embeddings.weight", (cfg.vocab, h))
    position = g.normal("embeddings.position_embeddings.weight", (cfg.max_position, h))
    token_type = g.normal("embeddings.token_type_embeddings.weight", (cfg.type_vocab, h))
    position_ids = g.const("embeddings.position_ids", np.arange(s, dtype=np.int64)[None, :])
    token_type_ids = g.const("embeddings.token_type_ids", np.zeros((1, s), np.int64))
    x = g.node("Gather", [word, "input_ids"], "embeddings.word_embeddings/Gather", axis=0)
    t = g.node("Gather", [token_type, token_type_ids], "embeddings.token_type_embeddings/Gather",
               axis=0)
    x = g.node("Add", [x, t], "embeddings/Add")
    p = g.node("Gather", [position, position_ids], "embeddings.position_embeddings/Gather", axis=0)
    x = g.node("Add", [x, p], "embeddings/Add_position")
    x = g.layer_norm(x, "embeddings.LayerNorm", h, cfg.eps, cfg.layer_norm)

    # additive attention mask: (1 - mask[:, None, None, :]) * -10000
    axis1 = g.const("mask.axis1", np.array([1], np.int64))
    axis2 = g.const("mask.axis2", np.array([2], np.int64))
    m = g.node("Unsqueeze", ["attention_mask", axis1], "mask/Unsqueeze")
    m = g.node("Unsqueeze", [m, axis2], "mask/Unsqueeze_2")
    m = g.node("Cast", [m], "mask/Cast", to=TensorProto.FLOAT)
    one = g.const("mask.one", np.array(1.0, np.float32))
    m = g.node("Sub", [one, m], "mask/Sub")
    neg = g.const("mask.value", np.array(MASK_VALUE, np.float32))
    mask = g.node("Mul", [m, neg], "mask/Mul")

    for i in range(cfg.layers):
        x = _encoder_layer(g, x, mask, cfg, i)
    last = g.nodes[-1]  # the final LayerNorm's last node names the graph output
    assert last.output[0] == x
    last.output[0] = "last_hidden_state"

    return g.model(
        f"bert_encoder_{cfg.layers}x{h}",
        [helper.make_tensor_value_info("input_ids", TensorProto.INT64, [b, s]),
         helper.make_tensor_value_info("attention_mask", TensorProto.INT64, [b, s])],
        [helper.make_tensor_value_info("last_hidden_state", TensorProto.FLOAT, [b, s, h])],
        "tessera.testing.bert")


def bert_inputs(config: BertConfig | None = None, seed: int = 0) -> dict[str, np.ndarray]:
    """Random inputs for :func:`make_bert_encoder`: ``input_ids`` uniform in ``[0, vocab)`` and an
    ``attention_mask`` of ones whose last eighth of positions (at least one when ``seq_len > 1``)
    is zero, as for a padded sentence."""
    cfg = config or BertConfig()
    rng = np.random.default_rng(seed)
    shape = (cfg.batch, cfg.seq_len)
    input_ids = rng.integers(0, cfg.vocab, shape, dtype=np.int64)
    attention_mask = np.ones(shape, np.int64)
    padded = max(cfg.seq_len // 8, 1) if cfg.seq_len > 1 else 0
    if padded:
        attention_mask[:, cfg.seq_len - padded:] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def main(argv: list[str] | None = None) -> int:
    """``python -m tessera.testing.bert -o bert.onnx [--input x.npz] [--layers 4 ...]``: write
    a BERT-style encoder with random weights (and optionally its random inputs)."""
    import argparse

    default = BertConfig()
    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("-o", "--output", required=True, help="where to write the .onnx file")
    ap.add_argument("--input", default=None, help="also write random inputs as .npz")
    ap.add_argument("--seed", type=int, default=0)
    for field in ("vocab", "hidden", "heads", "intermediate", "layers", "seq_len", "batch"):
        ap.add_argument(f"--{field.replace('_', '-')}", type=int, default=getattr(default, field))
    ap.add_argument("--layer-norm", choices=("decomposed", "op"), default=default.layer_norm)
    args = ap.parse_args(argv)
    cfg = BertConfig(vocab=args.vocab, hidden=args.hidden, heads=args.heads,
                     intermediate=args.intermediate, layers=args.layers, seq_len=args.seq_len,
                     batch=args.batch, layer_norm=args.layer_norm)
    model = make_bert_encoder(cfg, seed=args.seed)
    onnx.save(model, args.output)
    inputs = bert_inputs(cfg, seed=args.seed)
    print(f"wrote {args.output} (BERT encoder {cfg.layers} layers x {cfg.hidden}, inputs "
          f"{', '.join(f'{k}{list(v.shape)}' for k, v in inputs.items())})")
    if args.input:
        np.savez(args.input, **inputs)
        print(f"wrote {args.input}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
