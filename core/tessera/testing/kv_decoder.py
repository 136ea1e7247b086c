"""A Llama-style decoder exported with its key/value cache as inputs and outputs, and greedy
generation with it: what a text generator runs, one step per token, each step a new shape.

The exported step takes ``input_ids: int64[1, seq]``, ``attention_mask: int64[1, total]`` and
``past_<2i>``/``past_<2i+1>: float32[1, kv_heads, past, head_dim]`` (layer ``i``'s keys and
values so far) and returns the last position's ``logits: float32[1, vocab]`` and the
``present_*`` caches (``total = past + seq`` positions). The first step feeds the prompt with
an empty cache (``past = 0``), every later step one token. Random weights from a
``transformers.LlamaConfig`` (no download); the export (TorchScript, opset 17) is cached like
the zoo's (:func:`tessera.testing.hf_zoo.default_cache_dir`).

    python -m tessera.testing.kv_decoder export [small|realistic] [torchscript|dynamo]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import zlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tessera.testing.hf_zoo import _require, _silenced, default_cache_dir

__all__ = ["CONFIG", "CONFIGS", "DECODER_05B", "EXPORTERS", "REALISTIC", "DecoderShape", "export",
           "greedy", "torch_greedy"]

#: The decoder: two layers of width 64, grouped-query attention (4 heads, 2 key/value heads).
CONFIG: dict[str, Any] = {"vocab_size": 256, "hidden_size": 64, "intermediate_size": 128,
                          "num_hidden_layers": 2, "num_attention_heads": 4,
                          "num_key_value_heads": 2, "max_position_embeddings": 256,
                          "tie_word_embeddings": False}
#: A decoder where the work per token is the weights' (about 20 M parameters, 80 MB), not the
#: calls': eight heads of 64, four key/value heads, four layers, a vocabulary of 8192.
REALISTIC: dict[str, Any] = {"vocab_size": 8192, "hidden_size": 512, "intermediate_size": 1408,
                             "num_hidden_layers": 4, "num_attention_heads": 8,
                             "num_key_value_heads": 4, "max_position_embeddings": 1024,
                             "tie_word_embeddings": False}
#: The shape of today's small chat models (Qwen2-0.5B's: 24 layers 896 wide, 14 heads of 64,
#: two key/value heads, a vocabulary of 151936 whose embedding the output layer shares):
#: about 0.5 B parameters, 2 GB in float32, past protobuf's limit with the shared table written
#: twice, so exported with external data (a folder holding ``model.onnx`` and its data file).
DECODER_05B: dict[str, Any] = {"vocab_size": 151936, "hidden_size": 896,
                               "intermediate_size": 4864, "num_hidden_layers": 24,
                               "num_attention_heads": 14, "num_key_value_heads": 2,
                               "max_position_embeddings": 4096, "tie_word_embeddings": True}
CONFIGS: dict[str, dict[str, Any]] = {"small": CONFIG, "realistic": REALISTIC,
                                      "0.5b": DECODER_05B}
WEIGHT_SEED = 0


@dataclass(frozen=True)
class DecoderShape:
    """What a generation loop needs to know of the exported step."""

    layers: int
    kv_heads: int
    head_dim: int

    @staticmethod
    def of(config: Mapping[str, Any] = CONFIG) -> DecoderShape:
        return DecoderShape(int(config["num_hidden_layers"]),
                            int(config["num_key_value_heads"]),
                            int(config["hidden_size"]) // int(config["num_attention_heads"]))


def _model(config: Mapping[str, Any] = CONFIG) -> Any:
    torch, transformers = _require()
    torch.manual_seed(WEIGHT_SEED)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**config)).eval()


#: The exporters :func:`export` takes: TorchScript (opset 17, ``dynamic_axes``) and dynamo
#: (opset 18, named ``torch.export.Dim``\ s ``seq``, ``past`` and ``total``).
EXPORTERS = ("torchscript", "dynamo")


def export(cache_dir: str | os.PathLike[str] | None = None,
           config: Mapping[str, Any] = CONFIG, exporter: str = "torchscript") -> Path:
    """The step's ``.onnx`` file for ``config`` exported by ``exporter`` (from the cache when
    there). A model past protobuf's 2 GB (torch then writes each weight to a file of its own)
    is kept as a folder of the file's name holding ``model.onnx`` and one data file,
    ``model.onnx.data``; the path returned is that ``model.onnx``."""
    if exporter not in EXPORTERS:
        raise ValueError(f"exporter must be one of {', '.join(EXPORTERS)}, not {exporter!r}")
    key = f"{sorted(config.items())}{WEIGHT_SEED}"
    versions = (f"torch{metadata.version('torch')}-tf{metadata.version('transformers')}"
                .replace("+", "_"))
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    kind = "" if exporter == "torchscript" else f"-{exporter}"
    path = folder / f"llama-kv{kind}-{zlib.crc32(key.encode()):08x}-{versions}.onnx"
    folded = path.with_suffix("") / "model.onnx"
    if path.exists():
        return path
    if folded.exists():
        return folded
    torch, transformers = _require()
    shape = DecoderShape.of(config)
    model = _model(config)

    class Step(torch.nn.Module):  # type: ignore[misc,name-defined]
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> tuple[Any, ...]:
            cache = transformers.DynamicCache()
            for i in range(shape.layers):
                cache.update(past[2 * i], past[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask,
                             past_key_values=cache, use_cache=True)
            flat = []
            for layer in out.past_key_values.layers[:shape.layers]:
                flat += [layer.keys, layer.values]
            return (out.logits[:, -1, :], *flat)

    n = 2 * shape.layers
    example = (torch.tensor([[5, 7]]), torch.ones(1, 5, dtype=torch.int64),
               *[torch.zeros(1, shape.kv_heads, 3, shape.head_dim) for _ in range(n)])
    names = ["input_ids", "attention_mask", *[f"past_{i}" for i in range(n)]]
    outputs = ["logits", *[f"present_{i}" for i in range(n)]]
    axes: dict[str, dict[int, str]] = {"input_ids": {1: "seq"}, "attention_mask": {1: "total"}}
    axes.update({f"past_{i}": {2: "past"} for i in range(n)})
    axes.update({f"present_{i}": {2: "total"} for i in range(n)})
    folder.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{path.stem}.", dir=folder))
    tmp = work / "model.onnx"
    try:
        with _silenced(), torch.no_grad():
            if exporter == "dynamo":
                dim = torch.export.Dim
                seq, past, total = dim("seq", max=4096), dim("past", max=4096), \
                    dim("total", max=8192)
                torch.onnx.export(Step().eval(), example, str(tmp), input_names=names,
                                  output_names=outputs, opset_version=18, dynamo=True,
                                  dynamic_shapes=({1: seq}, {1: total},
                                                  tuple({2: past} for _ in range(n))),
                                  external_data=False)
            else:
                torch.onnx.export(Step().eval(), example, str(tmp), input_names=names,
                                  output_names=outputs, opset_version=17, dynamo=False,
                                  dynamic_axes=axes)
        if len(list(work.iterdir())) == 1:
            os.replace(tmp, path)
            return path
        # past 2 GB torch wrote a file per weight: one data file, as models are shipped
        proto = onnx.load(str(tmp))
        packed = work / "packed"
        packed.mkdir()
        onnx.save_model(proto, str(packed / "model.onnx"), save_as_external_data=True,
                        all_tensors_to_one_file=True, location="model.onnx.data")
        del proto
        os.replace(packed, folded.parent)
        return folded
    finally:
        shutil.rmtree(work, ignore_errors=True)


def greedy(run: Callable[[dict[str, np.ndarray]], Sequence[np.ndarray]], prompt: Sequence[int],
           tokens: int, shape: DecoderShape | None = None,
           on_step: Callable[[int, float], None] | None = None) -> list[int]:
    """``tokens`` greedy tokens after ``prompt`` with an exported step: ``run(feeds)`` returns
    its outputs in order (logits, then the caches), as onnxruntime's ``sess.run(None, feeds)``.
    ``on_step(token, seconds)`` is called after every step."""
    import time

    shape = shape or DecoderShape.of()
    past = [np.zeros((1, shape.kv_heads, 0, shape.head_dim), np.float32)
            for _ in range(2 * shape.layers)]
    ids = np.array([list(prompt)], np.int64)
    total = len(prompt)
    out: list[int] = []
    for _ in range(tokens):
        feeds = {"input_ids": ids, "attention_mask": np.ones((1, total), np.int64)}
        feeds.update({f"past_{i}": p for i, p in enumerate(past)})
        start = time.perf_counter()
        logits, *past = run(feeds)
        token = int(np.argmax(logits[0]))
        if on_step is not None:
            on_step(token, time.perf_counter() - start)
        out.append(token)
        ids = np.array([[token]], np.int64)
        total += 1
    return out


def torch_greedy(prompt: Sequence[int], tokens: int,
                 config: Mapping[str, Any] = CONFIG) -> list[int]:
    """PyTorch's own greedy generation (``generate``, no sampling) with the same weights."""
    torch, _ = _require()
    model = _model(config)
    ids = torch.tensor([list(prompt)])
    with torch.no_grad():
        result = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=False,
                                max_new_tokens=tokens, min_new_tokens=tokens, pad_token_id=0)
    return [int(t) for t in result[0, len(prompt):]]


if __name__ == "__main__":
    usage = (f"usage: python -m tessera.testing.kv_decoder export [{'|'.join(CONFIGS)}] "
             f"[{'|'.join(EXPORTERS)}]")
    args = sys.argv[1:]
    if args[:1] != ["export"] or len(args) > 3 or len(args) > 1 and args[1] not in CONFIGS \
            or len(args) > 2 and args[2] not in EXPORTERS:
        sys.exit(usage)
    print(export(config=CONFIGS[args[1] if len(args) > 1 else "small"],
                 exporter=args[2] if len(args) > 2 else "torchscript"))
