"""Train a small CNN on scikit-learn's handwritten digits and save it as ONNX.

The network is trained in plain numpy (convolutions through im2col, gradients written out by
hand, Adam), then written as an ONNX graph (opset 17) with ``onnx.helper``:

    image [N,1,8,8] -> Conv(1->16, 3x3, pad 1) -> Relu -> Conv(16->32, 3x3, pad 1) -> Relu
      -> MaxPool 2x2 -> Flatten -> Gemm(512->64) -> Relu -> Gemm(64->10) -> logits [N,10]

Pixels are scaled from 0..16 to 0..1 before they reach the model (the saved test split is already
scaled). Everything is seeded, so a run reproduces the committed files.

    python examples/digits/train.py            # writes digits_cnn.onnx and digits_test.npz here

Needs scikit-learn (``pip install -e ".[demo]"``); onnxruntime, when installed, checks the export.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
SEED = 0


# ---------------------------------------------------------------------------------------------
# Layers (forward returns a cache for the backward pass)
# ---------------------------------------------------------------------------------------------

def im2col_3x3(x: np.ndarray) -> np.ndarray:
    """Columns of 3x3 patches of ``x`` [B,C,H,W] (padding 1): [B*H*W, C*9]."""
    b, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    patches = np.lib.stride_tricks.sliding_window_view(xp, (3, 3), axis=(2, 3))  # B,C,H,W,3,3
    return patches.transpose(0, 2, 3, 1, 4, 5).reshape(b * h * w, c * 9)


def conv_forward(x: np.ndarray, w: np.ndarray, bias: np.ndarray):
    b, _, h, wd = x.shape
    cols = im2col_3x3(x)
    out = cols @ w.reshape(w.shape[0], -1).T + bias
    return out.reshape(b, h, wd, -1).transpose(0, 3, 1, 2), (x.shape, cols)


def conv_backward(dout: np.ndarray, w: np.ndarray, cache):
    (b, c, h, wd), cols = cache
    o = w.shape[0]
    d2 = dout.transpose(0, 2, 3, 1).reshape(-1, o)
    dw = (d2.T @ cols).reshape(w.shape)
    db = d2.sum(axis=0)
    dcols = (d2 @ w.reshape(o, -1)).reshape(b, h, wd, c, 3, 3)
    dxp = np.zeros((b, c, h + 2, wd + 2), dtype=dout.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i:i + h, j:j + wd] += dcols[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1], dw, db


def maxpool_forward(x: np.ndarray):
    b, c, h, w = x.shape
    win = x.reshape(b, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    win = win.reshape(b, c, h // 2, w // 2, 4)
    idx = win.argmax(axis=-1)
    return np.take_along_axis(win, idx[..., None], axis=-1)[..., 0], (x.shape, idx)


def maxpool_backward(dout: np.ndarray, cache):
    (b, c, h, w), idx = cache
    dwin = np.zeros((b, c, h // 2, w // 2, 4), dtype=dout.dtype)
    np.put_along_axis(dwin, idx[..., None], dout[..., None], axis=-1)
    dwin = dwin.reshape(b, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return dwin.reshape(b, c, h, w)


# ---------------------------------------------------------------------------------------------
# The model
# ---------------------------------------------------------------------------------------------

def init_params(rng: np.random.Generator) -> dict[str, np.ndarray]:
    """He-initialized weights; Gemm weights are stored [out, in] as ONNX Gemm(transB=1) wants."""
    def he(shape: tuple[int, ...], fan_in: int) -> np.ndarray:
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(np.float32)

    return {
        "conv1.weight": he((16, 1, 3, 3), 9), "conv1.bias": np.zeros(16, np.float32),
        "conv2.weight": he((32, 16, 3, 3), 144), "conv2.bias": np.zeros(32, np.float32),
        "fc1.weight": he((64, 512), 512), "fc1.bias": np.zeros(64, np.float32),
        "fc2.weight": he((10, 64), 64), "fc2.bias": np.zeros(10, np.float32),
    }


def forward(p: dict[str, np.ndarray], x: np.ndarray, keep: bool = False):
    """Logits for images ``x`` [B,1,8,8]; with ``keep`` also the caches for ``backward``."""
    c1, k1 = conv_forward(x, p["conv1.weight"], p["conv1.bias"])
    r1 = np.maximum(c1, 0)
    c2, k2 = conv_forward(r1, p["conv2.weight"], p["conv2.bias"])
    r2 = np.maximum(c2, 0)
    pooled, kp = maxpool_forward(r2)
    flat = pooled.reshape(len(x), -1)
    h = flat @ p["fc1.weight"].T + p["fc1.bias"]
    rh = np.maximum(h, 0)
    logits = rh @ p["fc2.weight"].T + p["fc2.bias"]
    if not keep:
        return logits
    return logits, (k1, c1, k2, c2, kp, pooled.shape, flat, h, rh)


def backward(p: dict[str, np.ndarray], dlogits: np.ndarray, cache) -> dict[str, np.ndarray]:
    k1, c1, k2, c2, kp, pooled_shape, flat, h, rh = cache
    g: dict[str, np.ndarray] = {}
    g["fc2.weight"] = dlogits.T @ rh
    g["fc2.bias"] = dlogits.sum(axis=0)
    dh = (dlogits @ p["fc2.weight"]) * (h > 0)
    g["fc1.weight"] = dh.T @ flat
    g["fc1.bias"] = dh.sum(axis=0)
    dpooled = (dh @ p["fc1.weight"]).reshape(pooled_shape)
    dc2 = maxpool_backward(dpooled, kp) * (c2 > 0)
    dr1, g["conv2.weight"], g["conv2.bias"] = conv_backward(dc2, p["conv2.weight"], k2)
    dc1 = dr1 * (c1 > 0)
    _, g["conv1.weight"], g["conv1.bias"] = conv_backward(dc1, p["conv1.weight"], k1)
    return g


def softmax_cross_entropy(logits: np.ndarray, labels: np.ndarray) -> tuple[float, np.ndarray]:
    """Mean loss and its gradient with respect to the logits."""
    z = logits - logits.max(axis=1, keepdims=True)
    prob = np.exp(z)
    prob /= prob.sum(axis=1, keepdims=True)
    n = len(labels)
    loss = float(-np.log(prob[np.arange(n), labels] + 1e-12).mean())
    grad = prob
    grad[np.arange(n), labels] -= 1
    return loss, (grad / n).astype(np.float32)


def train(x: np.ndarray, y: np.ndarray, epochs: int, batch: int, lr: float,
          rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Adam on mini-batches; returns the trained parameters."""
    params = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in params.items()}
    v = {k: np.zeros_like(v) for k, v in params.items()}
    beta1, beta2, eps, step = 0.9, 0.999, 1e-8, 0
    for epoch in range(epochs):
        order = rng.permutation(len(x))
        total = 0.0
        for start in range(0, len(x), batch):
            sel = order[start:start + batch]
            logits, cache = forward(params, x[sel], keep=True)
            loss, dlogits = softmax_cross_entropy(logits, y[sel])
            total += loss * len(sel)
            grads = backward(params, dlogits, cache)
            step += 1
            for k in params:
                m[k] = beta1 * m[k] + (1 - beta1) * grads[k]
                v[k] = beta2 * v[k] + (1 - beta2) * grads[k] ** 2
                m_hat = m[k] / (1 - beta1 ** step)
                v_hat = v[k] / (1 - beta2 ** step)
                params[k] = (params[k] - lr * m_hat / (np.sqrt(v_hat) + eps)).astype(np.float32)
        acc = float((forward(params, x).argmax(axis=1) == y).mean())
        print(f"epoch {epoch + 1:2d}: loss {total / len(x):.4f}  train accuracy {acc:.4f}")
    return params


# ---------------------------------------------------------------------------------------------
# ONNX export
# ---------------------------------------------------------------------------------------------

def to_onnx(params: dict[str, np.ndarray]) -> onnx.ModelProto:
    """The trained network as an ONNX graph (opset 17) with a symbolic batch dimension ``N``."""
    nodes = [
        helper.make_node("Conv", ["image", "conv1.weight", "conv1.bias"], ["conv1"],
                         name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("Conv", ["relu1", "conv2.weight", "conv2.bias"], ["conv2"],
                         name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool"], name="pool",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1.weight", "fc1.bias"], ["fc1"], name="fc1",
                         transB=1),
        helper.make_node("Relu", ["fc1"], ["relu3"], name="relu3"),
        helper.make_node("Gemm", ["relu3", "fc2.weight", "fc2.bias"], ["logits"], name="fc2",
                         transB=1),
    ]
    graph = helper.make_graph(
        nodes, "digits_cnn",
        [helper.make_tensor_value_info("image", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=[numpy_helper.from_array(v, k) for k, v in params.items()],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                              producer_name="tessera-examples-digits")
    model.ir_version = 8  # the IR version that goes with opset 17; readable by older runtimes
    model.doc_string = ("CNN for sklearn's 8x8 handwritten digits; input pixels scaled to 0..1 "
                        "(sklearn's 0..16 divided by 16).")
    onnx.checker.check_model(model, full_check=True)
    return model


def load_split(seed: int = SEED) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Scaled images [N,1,8,8] float32 and int64 labels: train and test (20%, stratified)."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split

    digits = load_digits()
    images = (digits.images / 16.0).astype(np.float32)[:, None, :, :]
    labels = digits.target.astype(np.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        images, labels, test_size=0.2, random_state=seed, stratify=labels)
    return x_train, y_train, x_test, y_test


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--out-dir", type=Path, default=HERE)
    args = parser.parse_args(argv)

    rng = np.random.default_rng(SEED)
    x_train, y_train, x_test, y_test = load_split()
    print(f"train {len(x_train)} images, test {len(x_test)} images")
    start = time.perf_counter()
    params = train(x_train, y_train, args.epochs, args.batch, args.lr, rng)
    print(f"trained in {time.perf_counter() - start:.1f} s")
    numpy_acc = float((forward(params, x_test).argmax(axis=1) == y_test).mean())
    print(f"test accuracy (numpy): {numpy_acc:.4f}")

    args.out_dir.mkdir(parents=True, exist_ok=True)
    model_path = args.out_dir / "digits_cnn.onnx"
    data_path = args.out_dir / "digits_test.npz"
    onnx.save(to_onnx(params), str(model_path))
    np.savez_compressed(data_path, images=x_test, labels=y_test)
    print(f"wrote {model_path} and {data_path}")

    try:
        import onnxruntime as ort
    except ImportError:
        print("onnxruntime is not installed; skipping the check of the exported model")
        return
    session = ort.InferenceSession(str(model_path), providers=["CPUExecutionProvider"])
    logits = session.run(["logits"], {"image": x_test})[0]
    ort_acc = float((logits.argmax(axis=1) == y_test).mean())
    print(f"test accuracy (onnxruntime): {ort_acc:.4f}")


if __name__ == "__main__":
    main()
