"""The "light" model-zoo graphs of the ``onnx`` package, with random weights.

``onnx`` ships nine ImageNet topologies under ``onnx/backend/test/data/light/`` (ResNet-50,
Inception v1/v2, DenseNet-121, ShuffleNet, SqueezeNet, VGG-19, AlexNet, ZFNet-512) whose weights
are ``ConstantOfShape`` nodes filled with 0.02. :func:`load_light_model` replaces every float
weight (those nodes and the few real float initializers) by a random initializer of the same
shape, drawn from a seeded generator and scaled by the weight's role so that activations keep
unit order of magnitude (RMS between about 0.4 and 8) through 50+ layers:

- convolution and fully-connected weights: normal with ``std = sqrt(gain / fan_in)``, gain 2
  after a ReLU (He) and 1 otherwise (LeCun);
- biases, shifts and batch-norm means: normal with std 0.05;
- batch-norm scales and variances, and the extra per-channel scales of DenseNet/Inception v2:
  uniform in [0.8, 1.2];
- a batch-norm ending a branch that is added to an identity shortcut is damped to 0.3, and
  branches summed with each other share the scale, so the residual stream stays O(1);
- the classifier's weights are scaled so the logits have a standard deviation of about 3: the
  softmax is neither flat (every probability near 1/1000) nor one-hot, and the largest
  probabilities are far above an absolute tolerance of 1e-4.

The model's non-weight input gets standard-normal data from the same generator.
"""

from __future__ import annotations

import os
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
from onnx import numpy_helper

#: The nine light models, smallest compile first.
LIGHT_MODELS: tuple[str, ...] = (
    "light_squeezenet",
    "light_bvlc_alexnet",
    "light_zfnet512",
    "light_vgg19",
    "light_inception_v1",
    "light_shufflenet",
    "light_resnet50",
    "light_inception_v2",
    "light_densenet121",
)

#: Standard deviation targeted for the logits of the classifier.
LOGIT_STD = 3.0

#: Extra scale of each model's classifier weights: ``LOGIT_STD`` over the logits' standard
#: deviation measured without it (seed 0; the logits' scale depends on how far the activations'
#: mean drifts from zero, which no per-layer rule predicts).
CLASSIFIER_GAIN: dict[str, float] = {
    "light_squeezenet": 2.6,
    "light_bvlc_alexnet": 0.8,
    "light_zfnet512": 2.15,
    "light_vgg19": 0.9,
    "light_inception_v1": 0.89,
    "light_shufflenet": 0.73,
    "light_resnet50": 0.67,
    "light_inception_v2": 0.58,
    "light_densenet121": 1.25,
}


@dataclass
class LightModel:
    """A light model with random weights, and a random input for it."""

    name: str
    model: onnx.ModelProto
    inputs: dict[str, np.ndarray]

    @property
    def input_shapes(self) -> dict[str, list[int]]:
        return {k: list(v.shape) for k, v in self.inputs.items()}

    @property
    def output_names(self) -> list[str]:
        return [o.name for o in self.model.graph.output]


def light_model_dir() -> Path:
    """The folder of the light models inside the installed ``onnx`` package."""
    return Path(os.path.dirname(onnx.__file__)) / "backend" / "test" / "data" / "light"


def light_model_path(name: str) -> Path:
    """The ``.onnx`` file of a light model (``light_resnet50`` or ``resnet50``)."""
    if not name.startswith("light_"):
        name = "light_" + name
    path = light_model_dir() / f"{name}.onnx"
    if not path.exists():
        raise FileNotFoundError(f"no light model {name!r} in {light_model_dir()}; known: "
                                f"{', '.join(LIGHT_MODELS)}")
    return path


def load_light_model(name: str, seed: int = 0) -> LightModel:
    """Load a light model with deterministic random weights and a standard-normal input."""
    path = light_model_path(name)
    model = onnx.load(str(path))
    rng = np.random.default_rng(seed)
    _replace_weights(model, rng, CLASSIFIER_GAIN.get(path.stem, 1.0))
    graph = model.graph
    initialized = {t.name for t in graph.initializer}
    inputs = {}
    for vi in graph.input:
        if vi.name in initialized:
            continue
        shape = [d.dim_value for d in vi.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type)
        inputs[vi.name] = rng.standard_normal(shape, dtype=np.float32).astype(dtype)
    return LightModel(path.stem, model, inputs)


def _replace_weights(model: onnx.ModelProto, rng: np.random.Generator,
                     classifier_gain: float) -> None:
    """Turn weight-making ConstantOfShape nodes and float initializers into random initializers."""
    graph = model.graph
    inits = {t.name: t for t in graph.initializer}
    users: dict[str, list[tuple[onnx.NodeProto, int]]] = defaultdict(list)
    producer: dict[str, onnx.NodeProto] = {}
    for node in graph.node:
        for i, name in enumerate(node.input):
            users[name].append((node, i))
        for name in node.output:
            producer[name] = node

    # every float weight with its shape, in order of first use
    weights: dict[str, tuple[int, ...]] = {}
    made_by_node: set[str] = set()
    for node in graph.node:
        if node.op_type == "ConstantOfShape" and node.input[0] in inits:
            shape = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[0]]))
            weights[node.output[0]] = shape
            made_by_node.add(node.output[0])
        for name in node.input:
            t = inits.get(name)
            if t is not None and t.data_type == onnx.TensorProto.FLOAT and name not in weights:
                weights[name] = tuple(t.dims)

    residual = _residual_branch_ends(graph, producer, users)
    new_arrays = {}
    for name, shape in weights.items():
        new_arrays[name] = _random_weight(name, shape, users, inits, producer, residual,
                                          classifier_gain, rng)

    # drop the ConstantOfShape nodes, and the shape tensors and inputs nothing uses any more
    kept_nodes = [n for n in graph.node
                  if not (n.op_type == "ConstantOfShape" and n.output[0] in made_by_node)]
    used = {name for n in kept_nodes for name in n.input} | {o.name for o in graph.output}
    kept_inits = [t for t in graph.initializer if t.name not in weights and t.name in used]
    del graph.node[:]
    graph.node.extend(kept_nodes)
    del graph.initializer[:]
    graph.initializer.extend(kept_inits)
    graph.initializer.extend(numpy_helper.from_array(a, name) for name, a in new_arrays.items())
    # initializers are constants, not graph inputs (IR version 4 and later allow that)
    initialized = {t.name for t in graph.initializer}
    graph_inputs = [vi for vi in graph.input if vi.name not in initialized and vi.name in used]
    del graph.input[:]
    graph.input.extend(graph_inputs)
    model.ir_version = max(model.ir_version, 4)


def _consumer(name: str, users: dict, inits: dict) -> tuple[str, int, onnx.NodeProto | None,
                                                            tuple[int, ...] | None]:
    """(op type, input index, node, reshaped shape) of a weight's use, looking through Reshape
    and Unsqueeze."""
    reshaped = None
    for _ in range(4):
        uses = users.get(name, [])
        if not uses:
            return "", -1, None, reshaped
        node, index = uses[0]
        if node.op_type == "Reshape" and index == 0:
            if node.input[1] in inits:
                reshaped = tuple(int(d) for d in numpy_helper.to_array(inits[node.input[1]]))
            name = node.output[0]
            continue
        if node.op_type == "Unsqueeze" and index == 0:
            name = node.output[0]
            continue
        return node.op_type, index, node, reshaped
    return "", -1, None, reshaped


def _attr(node: onnx.NodeProto, key: str, default: int) -> int:
    for a in node.attribute:
        if a.name == key:
            return int(onnx.helper.get_attribute_value(a))
    return default


def _residual_branch_ends(graph: onnx.GraphProto, producer: dict,
                          users: dict) -> dict[str, float]:
    """Damping factors for BatchNormalization nodes whose output flows straight into a residual
    ``Sum``/``Add`` joining activation streams: a branch added to an identity shortcut is damped
    to 0.3 so the residual stream grows slowly; branches joined with each other (projection
    shortcuts) share the scale, ``1/sqrt(n)`` each."""
    damping: dict[str, float] = {}
    for node in graph.node:
        if node.op_type not in ("Sum", "Add") or len(node.input) < 2:
            continue
        if not all(name in producer for name in node.input):
            continue  # adds a constant: a bias, not a residual join
        bns = [producer[name] for name in node.input
               if producer[name].op_type == "BatchNormalization"]
        if not bns:
            continue
        factor = 0.3 if len(bns) < len(node.input) else 1.0 / np.sqrt(len(bns))
        for bn in bns:
            damping[bn.name or bn.output[0]] = factor
    return damping


def _normal(rng: np.random.Generator, shape: tuple[int, ...], std: float) -> np.ndarray:
    a = rng.standard_normal(shape, dtype=np.float32)
    a *= np.float32(std)
    return a


def _nonnegative(name: str, producer: dict, depth: int = 0) -> bool:
    """Whether a value is a ReLU output, possibly through pools, concats and shape ops."""
    node = producer.get(name)
    if node is None or depth > 20:
        return False
    if node.op_type == "Relu":
        return True
    if node.op_type in ("MaxPool", "AveragePool", "GlobalAveragePool", "Reshape", "Flatten",
                        "Transpose", "Dropout", "Identity", "LRN"):
        return _nonnegative(node.input[0], producer, depth + 1)
    if node.op_type == "Concat":
        return all(_nonnegative(i, producer, depth + 1) for i in node.input)
    return False


def _random_weight(name: str, shape: tuple[int, ...], users: dict, inits: dict,
                   producer: dict, residual: dict[str, float], classifier_gain: float,
                   rng: np.random.Generator) -> np.ndarray:
    op, index, node, reshaped = _consumer(name, users, inits)
    eff = reshaped or shape
    if op in ("Conv", "ConvTranspose") and index == 1 or op == "Gemm" and index == 1:
        if op == "Gemm" and not _attr(node, "transB", 0):
            fan_in = eff[0]
        else:
            fan_in = int(np.prod(eff[1:])) if len(eff) > 1 else 1
        # He gain 2 restores the energy a ReLU removed; after no ReLU the gain is 1 (LeCun)
        gain = 2.0 if _nonnegative(node.input[0], producer) else 1.0
        std = np.sqrt(gain / max(fan_in, 1))
        if _is_classifier(node, users):
            std *= classifier_gain
        return _normal(rng, shape, std)
    if op in ("Conv", "ConvTranspose", "Gemm") and index == 2:
        return _normal(rng, shape, 0.05)
    if op == "BatchNormalization":
        if index == 1:  # scale
            damp = residual.get(node.name or node.output[0], 1.0)
            return (rng.uniform(0.8, 1.2, shape) * damp).astype(np.float32)
        if index == 4:  # variance
            return rng.uniform(0.8, 1.2, shape).astype(np.float32)
        return _normal(rng, shape, 0.05)  # bias, mean
    if op == "Mul":
        return rng.uniform(0.8, 1.2, shape).astype(np.float32)
    return _normal(rng, shape, 0.05)  # Add/Sum shifts, others


def _is_classifier(node: onnx.NodeProto | None, users: dict) -> bool:
    """Whether a Conv/Gemm produces the logits: only shape ops, pools and a Softmax follow."""
    if node is None:
        return False
    name = node.output[0]
    passthrough = {"Reshape", "Flatten", "Relu", "GlobalAveragePool", "AveragePool", "Dropout",
                   "Identity", "Squeeze"}
    for _ in range(8):
        uses = users.get(name, [])
        if not uses:
            return True  # a graph output
        nxt, _ = uses[0]
        if nxt.op_type == "Softmax":
            return True
        if nxt.op_type not in passthrough or len(uses) > 1:
            return False
        name = nxt.output[0]
    return False


def main(argv: list[str] | None = None) -> int:
    """``python -m tessera.testing.light_models resnet50 -o resnet50.onnx [--input x.npz]``:
    write a light model with its random weights (and optionally its random input)."""
    import argparse

    ap = argparse.ArgumentParser(description=main.__doc__)
    ap.add_argument("model", help=f"one of {', '.join(m[6:] for m in LIGHT_MODELS)}")
    ap.add_argument("-o", "--output", required=True, help="where to write the .onnx file")
    ap.add_argument("--input", default=None, help="also write the random input as .npz")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    light = load_light_model(args.model, seed=args.seed)
    onnx.save(light.model, args.output)
    print(f"wrote {args.output} ({light.name}, inputs "
          f"{', '.join(f'{k}{list(v.shape)}' for k, v in light.inputs.items())})")
    if args.input:
        np.savez(args.input, **light.inputs)
        print(f"wrote {args.input}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
