"""A zoo of today's architectures: Hugging Face ``transformers`` models with random weights,
exported to ONNX by both PyTorch exporters.

Every model is built from its configuration class (``transformers.<Config>(**sizes)``, then
``transformers.<Model>(config)`` with ``torch.manual_seed``): nothing is downloaded. Each comes
in two sizes: ``"small"`` (a few layers of width 32-128, well under 5 ms; for tests) and
``"realistic"`` (the real model's widths and input sizes with fewer layers where the real depth
would take more than about 100 ms on two cores; for benchmarks). :func:`export` writes the
``.onnx`` file with the TorchScript exporter (``torch.onnx.export(..., dynamo=False)``, opset
17) or the dynamo exporter (``dynamo=True``, opset 18, needs ``onnxscript``), once: the file is
cached under ``cache_dir`` by model, size, exporter and the torch and transformers versions.
:func:`inputs` makes random data of the right kinds (token ids in the vocabulary, images and
mel features ~N(0, 1), raw audio).

The weights are transformers' own random initialisation, except where it would leave a model
numerically dead: batch norms get unit scales and running statistics measured on random inputs
(EfficientNet's initial scales ~N(0, 0.02) made its activations denormal), and ConvNeXt's layer
scales start at 1 instead of 1e-6 (its blocks would vanish behind the skip connections). Sizes
use batch 1 except a few small ones with batch 2 (decoders: ids and an all-ones mask; encoders:
a padding mask that differs per row).

    from tessera.testing.hf_zoo import ZOO, export, inputs
    path = export("gpt2", "small", "torchscript")
    feeds = inputs("gpt2", "small", seed=0)

torch and transformers are imported inside the functions that need them; without them, those
functions raise :class:`ZooUnavailable` naming the install command (``pip install -e
'.[zoo]'``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import io
import os
import sys
import tempfile
import warnings
import zlib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

#: Bumped when the wrapper or the weight initialisation changes (the cache file names carry a
#: digest of it with each model's configuration).
ZOO_VERSION = 1
SIZES = ("small", "realistic")
EXPORTERS = ("torchscript", "dynamo")
#: The opset each exporter is asked for.
OPSETS = {"torchscript": 17, "dynamo": 18}
INSTALL = "pip install -e '.[zoo]'"
#: Seed of the random weights (the same for every size and exporter).
WEIGHT_SEED = 0


class ZooUnavailable(ImportError):
    """torch, transformers or onnxscript is missing."""


@dataclass(frozen=True)
class InputSpec:
    """One model input. ``kind``: ``tokens`` (int64 ids in [1, ``high``)), ``mask`` (int64
    padding mask: row ``b`` ends in ``(b + 1) * seq // 8`` zeros), ``ones``, ``zeros`` (int64),
    ``image`` / ``features`` (float32 ~N(0, 1)) or ``audio`` (float32, a noisy mix of tones,
    zero mean and unit variance)."""

    name: str
    shape: tuple[int, ...]
    kind: str
    high: int = 0


@dataclass(frozen=True)
class Size:
    """A size of a zoo model: its configuration's keyword arguments and its inputs."""

    config: Mapping[str, Any]
    inputs: tuple[InputSpec, ...]


@dataclass(frozen=True)
class ZooModel:
    """A zoo architecture: ``transformers.<config_class>(**base, **size.config)`` built as
    ``transformers.<model_class>``, its ``submodule`` exported when given (Whisper's encoder),
    returning ``outputs`` (attributes of the model's output) for the inputs in order."""

    name: str
    family: str
    description: str
    config_class: str
    model_class: str
    sizes: Mapping[str, Size]
    outputs: tuple[str, ...] = ("last_hidden_state",)
    base: Mapping[str, Any] = field(default_factory=dict)
    call: Mapping[str, Any] = field(default_factory=dict)
    submodule: str | None = None

    def size(self, size: str) -> Size:
        if size not in self.sizes:
            raise ValueError(f"unknown size {size!r} of {self.name}; known: {', '.join(SIZES)}")
        return self.sizes[size]

    def input_names(self, size: str) -> list[str]:
        return [s.name for s in self.size(size).inputs]

    def build(self, size: str) -> tuple[Any, dict[str, np.ndarray]]:
        """The torch module to export (random weights, eval mode; its ``forward`` takes the
        inputs positionally and returns a tuple of ``outputs``) and example inputs."""
        torch, transformers = _require()
        config = getattr(transformers, self.config_class)(**{**self.base,
                                                             **self.size(size).config})
        torch.manual_seed(WEIGHT_SEED)
        model = getattr(transformers, self.model_class)(config)
        if self.submodule:
            model = getattr(model, self.submodule)
        _calibrate_batch_norm(torch, model, self, size)
        model.eval()
        wrapper = _wrapper(torch)(model, self.input_names(size), self.outputs, dict(self.call))
        return wrapper.eval(), inputs(self.name, size)


def _tok(name: str, batch: int, seq: int, vocab: int) -> InputSpec:
    return InputSpec(name, (batch, seq), "tokens", vocab)


def _text(batch: int, seq: int, vocab: int, mask: bool = True,
          type_ids: bool = False) -> tuple[InputSpec, ...]:
    specs = [_tok("input_ids", batch, seq, vocab)]
    if mask:
        specs.append(InputSpec("attention_mask", (batch, seq), "mask"))
    if type_ids:
        specs.append(InputSpec("token_type_ids", (batch, seq), "zeros"))
    return tuple(specs)


def _prompt(batch: int, seq: int, vocab: int) -> tuple[InputSpec, ...]:
    """A decoder's prompt: ids and an all-ones mask (without a mask, transformers looks for
    packed sequences with ``torch.diff``, which the TorchScript exporter cannot export)."""
    return (_tok("input_ids", batch, seq, vocab), InputSpec("attention_mask", (batch, seq), "ones"))


def _image(batch: int, side: int, name: str = "pixel_values") -> tuple[InputSpec, ...]:
    return (InputSpec(name, (batch, 3, side, side), "image"),)


_LM = dict(use_cache=False)
_CLASSIFY = ("logits",)

_MODELS = [
    ZooModel(
        "gpt2", "decoder-lm", "GPT-2: learned positions, pre-LayerNorm, GELU(tanh) MLP, logits",
        "GPT2Config", "GPT2LMHeadModel", outputs=("logits",), call=_LM,
        sizes={"small": Size(dict(vocab_size=1000, n_positions=64, n_embd=64, n_layer=2,
                                  n_head=4, bos_token_id=0, eos_token_id=0), _prompt(2, 16, 1000)),
               "realistic": Size(dict(n_embd=768, n_layer=4, n_head=12),
                                 _prompt(1, 64, 50257))}),
    ZooModel(
        "llama", "decoder-lm", "Llama-style: RMSNorm, rotary positions, GQA, SwiGLU, logits",
        "LlamaConfig", "LlamaForCausalLM", outputs=("logits",), call=_LM,
        sizes={"small": Size(dict(vocab_size=1000, hidden_size=64, intermediate_size=172,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  num_key_value_heads=2, max_position_embeddings=64),
                             _prompt(1, 16, 1000)),
               "realistic": Size(dict(vocab_size=32000, hidden_size=768, intermediate_size=2048,
                                      num_hidden_layers=4, num_attention_heads=12,
                                      num_key_value_heads=4, max_position_embeddings=512),
                                 _prompt(1, 64, 32000))}),
    ZooModel(
        "bert", "encoder-lm", "BERT: post-LayerNorm encoder, GELU, padding mask",
        "BertConfig", "BertModel",
        sizes={"small": Size(dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=256,
                                  max_position_embeddings=64), _text(2, 16, 1000, True, True)),
               "realistic": Size(dict(num_hidden_layers=4), _text(1, 128, 30522, True, True))}),
    ZooModel(
        "distilbert", "encoder-lm", "DistilBERT: BERT without token types, 6 layers",
        "DistilBertConfig", "DistilBertModel",
        sizes={"small": Size(dict(vocab_size=1000, dim=64, n_layers=2, n_heads=4, hidden_dim=256,
                                  max_position_embeddings=64), _text(1, 16, 1000)),
               "realistic": Size(dict(), _text(1, 64, 30522))}),
    ZooModel(
        "t5-encoder", "seq2seq-encoder", "T5 (v1.1 / Flan) encoder: RMSNorm, relative position "
        "buckets, gated GELU", "T5Config", "T5EncoderModel", base=dict(
            feed_forward_proj="gated-gelu", is_encoder_decoder=False),
        sizes={"small": Size(dict(vocab_size=1000, d_model=64, d_kv=16, d_ff=128, num_layers=2,
                                  num_heads=4), _text(1, 16, 1000)),
               "realistic": Size(dict(vocab_size=32128, d_model=512, d_kv=64, d_ff=1024,
                                      num_layers=8, num_heads=6), _text(1, 128, 32128))}),
    ZooModel(
        "whisper-encoder", "seq2seq-encoder", "Whisper encoder: 2 conv1d over log-mel frames, "
        "sinusoidal positions, pre-LayerNorm attention", "WhisperConfig", "WhisperModel",
        submodule="encoder", base=dict(num_mel_bins=80, decoder_layers=1),
        sizes={"small": Size(dict(d_model=64, encoder_layers=2, encoder_attention_heads=4,
                                  encoder_ffn_dim=256, max_source_positions=50,
                                  decoder_attention_heads=4, decoder_ffn_dim=64),
                             (InputSpec("input_features", (1, 80, 100), "features"),)),
               "realistic": Size(dict(d_model=384, encoder_layers=4, encoder_attention_heads=6,
                                      encoder_ffn_dim=1536, max_source_positions=500,
                                      decoder_attention_heads=6, decoder_ffn_dim=64),
                                 (InputSpec("input_features", (1, 80, 1000), "features"),))}),
    ZooModel(
        "vit", "vision-transformer", "ViT: 16x16 patches, class token, pre-LayerNorm encoder",
        "ViTConfig", "ViTModel",
        sizes={"small": Size(dict(image_size=32, patch_size=8, hidden_size=64,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256), _image(1, 32)),
               "realistic": Size(dict(image_size=224, patch_size=16, hidden_size=384,
                                      num_hidden_layers=4, num_attention_heads=6,
                                      intermediate_size=1536), _image(1, 224))}),
    ZooModel(
        "swin", "vision-transformer", "Swin: shifted-window attention with relative position "
        "bias, patch merging", "SwinConfig", "SwinModel",
        sizes={"small": Size(dict(image_size=32, patch_size=2, embed_dim=32, depths=[2, 2],
                                  num_heads=[2, 4], window_size=4), _image(1, 32)),
               "realistic": Size(dict(image_size=224, patch_size=4, embed_dim=96,
                                      depths=[2, 2, 2, 2], num_heads=[3, 6, 12, 24],
                                      window_size=7), _image(1, 224))}),
    ZooModel(
        "convnext", "cnn", "ConvNeXt: 7x7 depthwise conv, channels-last LayerNorm, GELU MLP, "
        "layer scale", "ConvNextConfig", "ConvNextForImageClassification", outputs=_CLASSIFY,
        # layer scales of 1 (the initial 1e-6 would hide every block's output behind the skip)
        base=dict(layer_scale_init_value=1.0),
        sizes={"small": Size(dict(image_size=32, num_channels=3, hidden_sizes=[16, 32],
                                  depths=[1, 1], num_stages=2, num_labels=10), _image(1, 32)),
               "realistic": Size(dict(hidden_sizes=[96, 192, 384, 768], depths=[2, 2, 4, 2],
                                      num_labels=1000), _image(1, 224))}),
    ZooModel(
        "resnet", "cnn", "ResNet-50: bottleneck blocks, batch norm, ReLU", "ResNetConfig",
        "ResNetForImageClassification", outputs=_CLASSIFY,
        sizes={"small": Size(dict(embedding_size=16, hidden_sizes=[32, 64], depths=[1, 1],
                                  layer_type="bottleneck", num_labels=10), _image(1, 32)),
               "realistic": Size(dict(embedding_size=64, hidden_sizes=[256, 512, 1024, 2048],
                                      depths=[3, 4, 6, 3], layer_type="bottleneck",
                                      num_labels=1000), _image(1, 224))}),
    ZooModel(
        "mobilenetv2", "mobile-cnn", "MobileNetV2: inverted residuals, depthwise 3x3, ReLU6, "
        "TF padding", "MobileNetV2Config", "MobileNetV2ForImageClassification",
        outputs=_CLASSIFY,
        sizes={"small": Size(dict(image_size=64, depth_multiplier=0.35, num_labels=10),
                             _image(1, 64)),
               "realistic": Size(dict(image_size=224, num_labels=1000), _image(1, 224))}),
    ZooModel(
        "efficientnet", "mobile-cnn", "EfficientNet-B0: MBConv with squeeze-excitation, SiLU",
        "EfficientNetConfig", "EfficientNetForImageClassification", outputs=_CLASSIFY,
        sizes={"small": Size(dict(image_size=64, width_coefficient=0.25, depth_coefficient=0.25,
                                  hidden_dim=320, num_labels=10), _image(1, 64)),
               # B0 (the configuration's defaults are B7's)
               "realistic": Size(dict(image_size=224, width_coefficient=1.0,
                                      depth_coefficient=1.0, hidden_dim=1280, num_labels=1000),
                                 _image(1, 224))}),
    ZooModel(
        "segformer", "segmentation", "SegFormer (MiT-B0): overlapping patch embeddings, "
        "reduced-key attention, Mix-FFN, all-MLP decoder", "SegformerConfig",
        "SegformerForSemanticSegmentation", outputs=_CLASSIFY,
        sizes={"small": Size(dict(hidden_sizes=[16, 32, 64, 128], depths=[1, 1, 1, 1],
                                  num_attention_heads=[1, 2, 4, 8], decoder_hidden_size=64,
                                  num_labels=10), _image(1, 64)),
               "realistic": Size(dict(num_labels=150), _image(1, 256))}),
    ZooModel(
        "wav2vec2", "speech", "wav2vec 2.0: 7 conv1d over raw audio (GroupNorm, GELU), grouped "
        "positional conv, post-LayerNorm encoder", "Wav2Vec2Config", "Wav2Vec2Model",
        base=dict(feat_extract_norm="group", do_stable_layer_norm=False),
        sizes={"small": Size(dict(conv_dim=(32,) * 7, hidden_size=32, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=64,
                                  num_conv_pos_embeddings=16, num_conv_pos_embedding_groups=4),
                             (InputSpec("input_values", (1, 4000), "audio"),)),
               "realistic": Size(dict(num_hidden_layers=4),
                                 (InputSpec("input_values", (1, 16000), "audio"),))}),
    ZooModel(
        "clip-vision", "multimodal", "CLIP ViT-B/32 vision tower: pre-LayerNorm, quick GELU, "
        "pooled class token", "CLIPVisionConfig", "CLIPVisionModel",
        outputs=("last_hidden_state", "pooler_output"),
        sizes={"small": Size(dict(image_size=32, patch_size=8, hidden_size=64,
                                  num_hidden_layers=2, num_attention_heads=4,
                                  intermediate_size=256), _image(1, 32)),
               "realistic": Size(dict(image_size=224, patch_size=32, num_hidden_layers=6),
                                 _image(1, 224))}),
    ZooModel(
        "clip-text", "multimodal", "CLIP text tower: causal mask, quick GELU, pooled at the end "
        "token (argmax)", "CLIPTextConfig", "CLIPTextModel",
        outputs=("last_hidden_state", "pooler_output"),
        sizes={"small": Size(dict(vocab_size=1000, hidden_size=64, num_hidden_layers=2,
                                  num_attention_heads=4, intermediate_size=256,
                                  max_position_embeddings=16, bos_token_id=998,
                                  eos_token_id=999, pad_token_id=1),
                             _text(2, 16, 1000, mask=False)),
               "realistic": Size(dict(num_hidden_layers=6), _text(1, 77, 49408, mask=False))}),
]

#: Every zoo model by name, in a stable order (language models first).
ZOO: dict[str, ZooModel] = {m.name: m for m in _MODELS}


def get(model_name: str) -> ZooModel:
    """The zoo model named ``model_name``."""
    try:
        return ZOO[model_name]
    except KeyError:
        raise ValueError(f"unknown zoo model {model_name!r}; known: {', '.join(ZOO)}") from None


def missing() -> list[str]:
    """The packages the zoo needs that are not installed (empty: everything is there)."""
    return [m for m in ("torch", "transformers", "onnxscript")
            if importlib.util.find_spec(m) is None]


def _require_installed(exporter: str | None = None) -> None:
    """:class:`ZooUnavailable`, with the install command, where torch or transformers (or
    onnxscript, for the dynamo exporter) is not installed."""
    needed = ["torch", "transformers"] + (["onnxscript"] if exporter == "dynamo" else [])
    absent = [m for m in needed if importlib.util.find_spec(m) is None]
    if absent:
        raise ZooUnavailable(f"the Hugging Face model zoo needs {', '.join(absent)}: {INSTALL}")


def _require(exporter: str | None = None) -> tuple[Any, Any]:
    """torch and transformers, imported (and onnxscript checked for the dynamo exporter), or
    :class:`ZooUnavailable` with the install command."""
    _require_installed(exporter)
    import torch
    import transformers

    return torch, transformers


def _calibrate_batch_norm(torch: Any, model: Any, zoo_model: ZooModel, size: str) -> None:
    """Batch norms as in a trained network: transformers initialises some scales like linear
    weights (EfficientNet: ~N(0, 0.02), so activations vanish to denormals within a few
    blocks) and every running mean 0 and variance 1. Scales become 1 and shifts 0, and the
    running statistics the mean and variance of the activations over two random batches
    (cumulative averages, in training mode), so every batch norm's output has unit scale."""
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    if not norms:
        return
    for bn in norms:
        bn.reset_parameters()
        bn.momentum = None
    model.train()
    with torch.no_grad():
        for seed in (101, 102):
            feeds = inputs(zoo_model.name, size, seed)
            model(**{n: torch.from_numpy(feeds[n]) for n in zoo_model.input_names(size)})
    model.eval()


@contextlib.contextmanager
def _silenced() -> Iterator[io.StringIO]:
    """Python's and C++'s output to stdout and stderr (the exporters print progress lines and,
    on some failures, a whole TorchScript graph) and warnings go into the yielded buffer."""
    sink = io.StringIO()
    with tempfile.TemporaryFile(mode="w+b") as tmp, warnings.catch_warnings(), \
            contextlib.redirect_stdout(sink), contextlib.redirect_stderr(sink):
        warnings.simplefilter("ignore")
        for stream in (sys.__stdout__, sys.__stderr__):
            if stream is not None:
                stream.flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(tmp.fileno(), 1)
        os.dup2(tmp.fileno(), 2)
        try:
            yield sink
        finally:
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            tmp.seek(0)
            sink.write(tmp.read().decode(errors="replace"))


_WRAPPER: Any = None


def _wrapper(torch: Any) -> Any:
    """The module class that takes a model's inputs positionally and returns its outputs as a
    tuple (what both exporters want), defined once torch is imported."""
    global _WRAPPER
    if _WRAPPER is None:
        class ZooWrapper(torch.nn.Module):
            def __init__(self, model: Any, names: list[str], outputs: tuple[str, ...],
                         call: dict[str, Any]) -> None:
                super().__init__()
                self.model, self.names, self.outputs, self.call = model, names, outputs, call

            def forward(self, *args: Any) -> tuple[Any, ...]:
                out = self.model(**dict(zip(self.names, args)), **self.call, return_dict=True)
                return tuple(getattr(out, n) for n in self.outputs)

        _WRAPPER = ZooWrapper
    return _WRAPPER


#: Input kinds whose axis 1 is the sequence (a dynamic export names it ``seq``).
SEQUENCE_KINDS = ("tokens", "mask", "ones", "zeros")


def dynamic_axes(model_name: str, size: str = "small") -> dict[str, dict[int, str]]:
    """The axes a dynamic export leaves open: every input's axis 0 (``batch``) and the
    sequence axis of token-like inputs (``seq``)."""
    return {spec.name: {0: "batch", **({1: "seq"} if spec.kind in SEQUENCE_KINDS else {})}
            for spec in get(model_name).size(size).inputs}


def inputs(model_name: str, size: str = "small", seed: int = 0, batch: int | None = None,
           seq: int | None = None) -> dict[str, np.ndarray]:
    """Random inputs of ``model_name`` at ``size`` (no torch needed): token ids uniform in the
    vocabulary (never 0, often a padding id), images and features ~N(0, 1), raw audio a
    normalised mix of tones and noise. ``batch`` and ``seq`` replace the size's batch and
    (for token-like inputs) sequence length, as a dynamic export accepts."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for spec in get(model_name).size(size).inputs:
        shape = list(spec.shape)
        if batch is not None:
            shape[0] = batch
        if seq is not None and spec.kind in SEQUENCE_KINDS:
            shape[1] = seq
        spec = dataclasses.replace(spec, shape=tuple(shape))
        if spec.kind == "tokens":
            out[spec.name] = rng.integers(1, spec.high, size=spec.shape, dtype=np.int64)
        elif spec.kind == "mask":
            mask = np.ones(spec.shape, np.int64)
            seq = spec.shape[-1]
            for b in range(spec.shape[0]):
                mask[b, seq - min((b + 1) * (seq // 8), seq - 1):] = 0
            out[spec.name] = mask
        elif spec.kind == "ones":
            out[spec.name] = np.ones(spec.shape, np.int64)
        elif spec.kind == "zeros":
            out[spec.name] = np.zeros(spec.shape, np.int64)
        elif spec.kind in ("image", "features"):
            out[spec.name] = rng.standard_normal(spec.shape).astype(np.float32)
        elif spec.kind == "audio":
            t = np.arange(spec.shape[-1]) / 16000.0
            tones = sum(np.sin(2 * np.pi * f * t + rng.uniform(0, 6.3))
                        for f in rng.uniform(100, 3000, size=4))
            wave = tones + 0.3 * rng.standard_normal(spec.shape)
            out[spec.name] = ((wave - wave.mean()) / wave.std()).astype(np.float32)
        else:
            raise ValueError(f"unknown input kind {spec.kind!r}")
    return out


def default_cache_dir() -> Path:
    """``$TESSERA_ZOO_CACHE``, else ``~/.cache/tessera/hf_zoo``."""
    env = os.environ.get("TESSERA_ZOO_CACHE")
    return Path(env) if env else Path.home() / ".cache" / "tessera" / "hf_zoo"


def cache_name(model_name: str, size: str, exporter: str, dynamic: bool = False) -> str:
    """The cache file name of an export: the model, size and exporter, a digest of what
    defines the model (its configuration, inputs and outputs, :data:`ZOO_VERSION`) and the
    installed torch and transformers versions (read from their metadata, not imported)."""
    _require_installed()
    m = get(model_name)
    key = repr((ZOO_VERSION, m.config_class, m.model_class, m.submodule, m.outputs,
                dict(m.base), dict(m.call), m.size(size), OPSETS[exporter]))
    versions = (f"torch{metadata.version('torch')}-tf{metadata.version('transformers')}"
                .replace("+", "_"))
    kind = f"{exporter}-dyn" if dynamic else exporter
    return f"{model_name}-{size}-{kind}-{zlib.crc32(key.encode()):08x}-{versions}.onnx"


def export(model_name: str, size: str = "small", exporter: str = "torchscript",
           cache_dir: str | os.PathLike[str] | None = None, quiet: bool = True,
           dynamic: bool = False) -> Path:
    """The ``.onnx`` file of a zoo model exported by ``exporter`` (``"torchscript"``: opset
    17; ``"dynamo"``: opset 18), from the cache when it is there; else built, exported into
    a temporary file and renamed in (parallel callers may export the same model). ``quiet``
    silences the exporters' progress lines and warnings. ``dynamic`` (TorchScript only)
    exports with :func:`dynamic_axes`: symbolic ``batch`` and ``seq``."""
    model = get(model_name)
    model.size(size)
    if exporter not in EXPORTERS:
        raise ValueError(f"unknown exporter {exporter!r}; known: {', '.join(EXPORTERS)}")
    _require_installed(exporter)
    folder = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    if dynamic and exporter != "torchscript":
        raise ValueError("dynamic exports are made with the TorchScript exporter")
    path = folder / cache_name(model_name, size, exporter, dynamic)
    if path.exists():  # without importing torch (seconds)
        return path
    torch, _ = _require(exporter)
    folder.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.stem}.{os.getpid()}.tmp.onnx")
    module, feeds = model.build(size)
    args = tuple(torch.from_numpy(feeds[n]) for n in model.input_names(size))
    names, outputs = model.input_names(size), list(model.outputs)
    sink = None
    try:
        with contextlib.ExitStack() as stack:
            if quiet:
                sink = stack.enter_context(_silenced())
            stack.enter_context(torch.no_grad())
            if exporter == "torchscript":
                torch.onnx.export(module, args, str(tmp), input_names=names,
                                  output_names=outputs, opset_version=OPSETS[exporter],
                                  dynamo=False, do_constant_folding=True,
                                  dynamic_axes=dynamic_axes(model_name, size) if dynamic
                                  else None)
            else:
                program = torch.onnx.export(module, args, input_names=names,
                                            output_names=outputs, opset_version=OPSETS[exporter],
                                            dynamo=True, external_data=False, verbose=False)
                program.save(str(tmp), external_data=False)
    except BaseException as e:
        tmp.unlink(missing_ok=True)
        said = sink.getvalue().strip().splitlines() if sink is not None else []
        if said:
            e.add_note("the exporter's last output lines:\n" + "\n".join(said[-20:]))
        raise
    os.replace(tmp, path)
    return path


def reference_outputs(model_name: str, size: str = "small",
                      feeds: Mapping[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The PyTorch model's own outputs (by output name) on ``feeds`` (default: the seed-0
    inputs), to check an export against."""
    torch, _ = _require()
    model = get(model_name)
    module, example = model.build(size)
    feeds = example if feeds is None else feeds
    with torch.no_grad():
        out = module(*(torch.from_numpy(np.asarray(feeds[n])) for n in model.input_names(size)))
    return {n: o.numpy() for n, o in zip(model.outputs, out)}


def main(argv: list[str] | None = None) -> int:
    """``python -m tessera.testing.hf_zoo [export NAME SIZE EXPORTER] [--cache-dir DIR]
    [--dynamic]``:
    list the zoo, or export one model and print the file's path (on failure: ``ERROR: `` and
    the error's first line, exit status 1), so that a benchmark can export without importing
    torch itself."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m tessera.testing.hf_zoo",
                                 description="the Hugging Face model zoo: list or export")
    ap.add_argument("command", nargs="?", default="list", choices=("list", "export"))
    ap.add_argument("name", nargs="?")
    ap.add_argument("size", nargs="?", default="small", choices=SIZES)
    ap.add_argument("exporter", nargs="?", default="torchscript", choices=EXPORTERS)
    ap.add_argument("--cache-dir", default=None)
    ap.add_argument("--dynamic", action="store_true",
                    help="export with symbolic batch and sequence axes (TorchScript)")
    args = ap.parse_args(argv)
    if args.command == "list":
        for m in ZOO.values():
            print(f"{m.name:<16} {m.family:<19} {m.description}")
        return 0
    if not args.name:
        ap.error("export needs a model name")
    try:
        print(export(args.name, args.size, args.exporter, args.cache_dir,
                     dynamic=args.dynamic))
    except Exception as e:  # noqa: BLE001 - one line for the caller
        first = str(e).strip().splitlines()[0] if str(e).strip() else ""
        print(f"ERROR: {type(e).__name__}: {first}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
