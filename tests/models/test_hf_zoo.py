"""The Hugging Face model zoo (:mod:`tessera.testing.hf_zoo`) compiled for ``llvm`` against
onnxruntime: every zoo model at its small size from the TorchScript exporter, two from the
dynamo exporter too (``benchmarks/hf_zoo.py`` runs all of them from both), on random inputs.
The error is the largest absolute difference over the largest absolute value of
onnxruntime's output (per output).

Two tiny models run in the fast tier; the rest are slow. The exported files are cached in
``$TESSERA_ZOO_CACHE`` or ``~/.cache/tessera/hf_zoo`` (exports take seconds each), so a second
run only compiles. The whole module skips without torch, transformers and onnxscript
(``pip install -e '.[zoo]'``).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from models.support import run_onnxruntime
from optional import require
from tiers import slow_except

import tessera
from tessera.plugin.manager import get_backends
from tessera.runtime.module import Module
from tessera.testing import hf_zoo

require("onnxruntime")
if hf_zoo.missing():
    pytest.skip(f"the Hugging Face zoo needs {', '.join(hf_zoo.missing())}: "
                f"pip install -e '.[zoo]'", allow_module_level=True)
# One xdist worker runs them all (--dist loadgroup): PyTorch and transformers are imported
# by one process, not by every worker.
pytestmark = [pytest.mark.skipif("llvm" not in get_backends(),
                                 reason="the tessera-llvm plugin is not installed"),
              pytest.mark.xdist_group("hf_zoo")]

#: Largest error relative to the output's scale (observed: about 1e-6).
REL_TOL = 1e-4
#: In the fast tier: two of the quickest to export and compile (a CNN and an encoder LM).
FAST = {"resnet-torchscript", "bert-torchscript"}
#: Models also checked from the dynamo exporter (its graphs differ: no Shape/Constant chains,
#: GatherND, Reciprocal, ReduceMean for pooling).
#: Two only, as a dynamo export takes about 9 s: a decoder LM, and EfficientNet, whose
#: squeeze-and-excitation pools with ReduceMean.
DYNAMO = ("gpt2", "efficientnet")

CASES = slow_except([(name, exporter) for exporter, names in (("torchscript", list(hf_zoo.ZOO)),
                                                                ("dynamo", DYNAMO))
                      for name in names], FAST, ids=lambda case: f"{case[0]}-{case[1]}")


def relative_errors(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> dict[str, float]:
    """Per output: max |got - want| / max |want| (float64)."""
    out = {}
    for name, w in want.items():
        w64 = w.astype(np.float64)
        scale = float(np.abs(w64).max())
        out[name] = float(np.abs(got[name].astype(np.float64) - w64).max()) / max(scale, 1e-30)
    return out


@pytest.mark.parametrize("case", CASES)
def test_zoo_model_matches_onnxruntime(case: tuple[str, str]) -> None:
    name, exporter = case
    path = hf_zoo.export(name, "small", exporter)
    model = onnx.load(str(path))
    feeds = hf_zoo.inputs(name, "small", seed=3)
    names = [o.name for o in model.graph.output]
    want = dict(zip(names, run_onnxruntime(model, feeds)))
    for out, value in want.items():  # the data exercises the model: finite, not all zero
        assert np.isfinite(value).all() and np.abs(value).max() > 1e-3, (name, out)

    mod = tessera.compile(model, target="llvm")
    got = mod.run(feeds)
    assert got is not None and list(got) == names, (name, list(got or ()))
    for out, value in want.items():
        assert got[out].dtype == value.dtype and got[out].shape == value.shape, (name, out)
    errors = relative_errors(got, want)
    assert max(errors.values()) <= REL_TOL, f"{name} ({exporter}): relative errors {errors}"


def test_inputs_are_realistic_and_seeded() -> None:
    """Token ids lie in the vocabulary, masks are 0/1 with the first token kept, images are
    standard normal, audio has unit variance; the same seed gives the same data."""
    bert = hf_zoo.inputs("bert", "realistic", seed=1)
    assert bert["input_ids"].dtype == np.int64 and bert["input_ids"].shape == (1, 128)
    assert 0 < bert["input_ids"].min() and bert["input_ids"].max() < 30522
    assert set(np.unique(bert["attention_mask"])) == {0, 1} and bert["attention_mask"][0, 0] == 1
    image = hf_zoo.inputs("vit", "realistic", seed=1)["pixel_values"]
    assert image.shape == (1, 3, 224, 224) and abs(float(image.std()) - 1) < 0.05
    audio = hf_zoo.inputs("wav2vec2", "small", seed=1)["input_values"]
    assert audio.dtype == np.float32 and abs(float(audio.std()) - 1) < 1e-3
    again = hf_zoo.inputs("bert", "realistic", seed=1)
    assert all(np.array_equal(bert[k], again[k]) for k in bert)
    assert not np.array_equal(bert["input_ids"], hf_zoo.inputs("bert", "realistic", 2)["input_ids"])


def test_zoo_covers_the_families() -> None:
    families = {m.family for m in hf_zoo.ZOO.values()}
    assert len(hf_zoo.ZOO) >= 15
    assert {"decoder-lm", "encoder-lm", "seq2seq-encoder", "vision-transformer", "cnn",
            "mobile-cnn", "segmentation", "speech", "multimodal"} <= families
    for m in hf_zoo.ZOO.values():
        assert set(m.sizes) == set(hf_zoo.SIZES), m.name


#: Models also exported with symbolic batch and sequence, compiled once without input_shapes
#: and run at three sizes (``benchmarks/dynamic_shapes.py`` runs every zoo model): an encoder
#: LM with a padding mask and a decoder LM with its causal mask built from the shapes.
DYNAMIC = ("bert", "gpt2")
#: (batch, seq): the small models' positions end at 64.
DYNAMIC_SIZES = ((1, 7), (3, 32), (2, 64))


@pytest.mark.slow
@pytest.mark.parametrize("name", DYNAMIC)
def test_dynamic_export_runs_at_every_size(name: str) -> None:
    path = hf_zoo.export(name, "small", "torchscript", dynamic=True)
    model = onnx.load(str(path))
    mod = tessera.compile(model, target="llvm")  # no input_shapes
    assert set(mod.variables) == {"batch", "seq"}
    names = [o.name for o in model.graph.output]
    for batch, seq in DYNAMIC_SIZES:
        feeds = hf_zoo.inputs(name, "small", seed=batch, batch=batch, seq=seq)
        want = dict(zip(names, run_onnxruntime(model, feeds)))
        got = mod.run(feeds)
        errors = relative_errors(got, want)
        assert max(errors.values()) <= REL_TOL, f"{name} at {batch} x {seq}: {errors}"
    assert isinstance(mod, Module) and mod.shape_vars is not None  # one compile, every size
