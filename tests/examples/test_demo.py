"""The digits demo: the committed model imports, and Tessera classifies the test split exactly
as onnxruntime does, on every installed CPU backend."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from optional import require

import tessera
from tessera.plugin import get_registry

DIGITS = Path(__file__).resolve().parents[2] / "examples" / "digits"
MODEL = DIGITS / "digits_cnn.onnx"


def cpu_backends() -> list[str]:
    registry = get_registry()
    return [name for name, backend in registry.backends.items()
            if backend.device == "cpu" and not backend.available()]


def load_demo() -> ModuleType:
    spec = importlib.util.spec_from_file_location("digits_demo", DIGITS / "demo.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def test_split() -> tuple[np.ndarray, np.ndarray]:
    with np.load(DIGITS / "digits_test.npz", allow_pickle=False) as data:
        return data["images"], data["labels"]


@pytest.fixture(scope="module")
def onnxruntime_logits(test_split: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    ort = require("onnxruntime")
    session = ort.InferenceSession(str(MODEL), providers=["CPUExecutionProvider"])
    return session.run(["logits"], {"image": test_split[0]})[0]


def test_committed_files() -> None:
    model = onnx.load(str(MODEL))
    onnx.checker.check_model(model)
    assert [o.version for o in model.opset_import if o.domain in ("", "ai.onnx")] == [17]
    assert [i.name for i in model.graph.input] == ["image"]
    assert [o.name for o in model.graph.output] == ["logits"]
    with np.load(DIGITS / "digits_test.npz", allow_pickle=False) as data:
        images, labels = data["images"], data["labels"]
    assert images.dtype == np.float32 and images.shape[1:] == (1, 8, 8)
    assert labels.dtype == np.int64 and labels.shape == (len(images),)
    assert 0.0 <= images.min() and images.max() <= 1.0
    assert sorted(set(labels.tolist())) == list(range(10))


@pytest.mark.parametrize("target", cpu_backends())
def test_accuracy_matches_onnxruntime(target: str, test_split: tuple[np.ndarray, np.ndarray],
                                      onnxruntime_logits: np.ndarray) -> None:
    images, labels = test_split
    module = tessera.compile(str(MODEL), target=target,
                             input_shapes={"image": list(images.shape)})
    logits = module.run(image=images)["logits"]
    assert logits.shape == (len(images), 10) and logits.dtype == np.float32
    np.testing.assert_allclose(logits, onnxruntime_logits, rtol=1e-4, atol=1e-4)
    predicted = logits.argmax(axis=1)
    np.testing.assert_array_equal(predicted, onnxruntime_logits.argmax(axis=1))
    assert (predicted == labels).mean() > 0.9


def test_demo_script(capsys: pytest.CaptureFixture[str], test_split: tuple[np.ndarray, np.ndarray],
                     onnxruntime_logits: np.ndarray) -> None:
    demo = load_demo()
    assert demo.main(["--repeat", "2", "--number", "2"]) == 0
    out = capsys.readouterr().out
    images, labels = test_split
    accuracy = (onnxruntime_logits.argmax(axis=1) == labels).mean()
    assert f"accuracy: {accuracy:.4f}" in out
    assert f"same prediction on {len(labels)}/{len(labels)} images" in out
    assert "latency (batch 1" in out and "Conv" in out


@pytest.mark.slow
def test_demo_int8_on_vta(capsys: pytest.CaptureFixture[str]) -> None:
    if "vta_sim" not in get_registry().backends:
        pytest.skip("the tessera-vta plugin is not installed")
    demo = load_demo()
    assert demo.main(["--int8", "--target", "vta_sim, ref"]) == 0
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("accuracy on"))
    float_acc, int8_acc = (float(part.split()[-1]) for part in line.split(":")[1].split(","))
    assert float_acc > 0.9 and abs(float_acc - int8_acc) <= 0.02
    assert "vta_sim counters for one image: cycles" in out
    assert "region1_vta_sim  vta_sim  vta" in out
