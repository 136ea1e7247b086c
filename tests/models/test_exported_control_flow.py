"""Control flow as PyTorch's exporter writes it: ``torch.cond`` becomes an ONNX ``If`` and
``while_loop`` a ``Loop`` (``torch.onnx.export(..., dynamo=True)``); both compile for ref and
llvm and match onnxruntime and PyTorch at run-time conditions and trip counts. Skips without
torch (``pip install -e '.[zoo]'``)."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from optional import require

import tessera
from tessera.plugin.manager import get_backends

ort = require("onnxruntime")
torch = pytest.importorskip("torch")

# one xdist worker imports PyTorch for all the zoo's tests (tests/models/test_hf_zoo.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hf_zoo")]
TARGETS = ["ref"] + (["llvm"] if "llvm" in get_backends() else [])


def _export(module: object, args: tuple) -> object:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        program = torch.onnx.export(module, args, dynamo=True, opset_version=18, verbose=False)
    return program.model_proto


class _Cond(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(8, 5)
        self.b = torch.nn.Linear(8, 5)

    def forward(self, x: object, flag: object) -> object:
        return torch.cond(flag.all(), lambda x: torch.relu(self.a(x)),
                          lambda x: torch.tanh(self.b(x)) * 2, (x,))


class _While(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x: object, n: object) -> object:
        from torch._higher_order_ops.while_loop import while_loop

        def cond(i: object, h: object) -> object:
            return i < n

        def body(i: object, h: object) -> tuple:
            return i + 1, torch.tanh(self.lin(h))

        _, h = while_loop(cond, body, (torch.zeros((), dtype=torch.int64), x))
        return h


@pytest.fixture(scope="module")
def exported() -> dict[str, object]:
    torch.manual_seed(0)
    cond, loop = _Cond().eval(), _While().eval()
    return {"cond": (cond, _export(cond, (torch.randn(3, 8), torch.tensor(True)))),
            "while": (loop, _export(loop, (torch.randn(2, 8), torch.tensor(5))))}


def _check(model: object, torch_module: object, feeds: dict[str, np.ndarray],
           target: str, mod: object = None) -> object:
    ops = {n.op_type for n in model.graph.node}  # type: ignore[attr-defined]
    assert ops & {"If", "Loop"}, ops
    mod = mod or tessera.compile(model, target=target)
    names = [i.name for i in model.graph.input]  # type: ignore[attr-defined]
    got = mod.run(dict(zip(names, feeds.values())))  # type: ignore[attr-defined]
    session = ort.InferenceSession(model.SerializeToString(),  # type: ignore[attr-defined]
                                   providers=["CPUExecutionProvider"])
    want = session.run(None, dict(zip(names, feeds.values())))
    with torch.no_grad():
        reference = torch_module(*(torch.from_numpy(v) for v in feeds.values()))  # type: ignore[operator]
    value = next(iter(got.values()))
    np.testing.assert_allclose(value, want[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(value, reference.numpy(), rtol=1e-4, atol=1e-5)
    return mod


@pytest.mark.parametrize("target", TARGETS)
def test_torch_cond_exports_an_if_that_runs_either_branch(exported: dict, target: str) -> None:
    module, model = exported["cond"]
    rng = np.random.default_rng(0)
    mod = None
    for flag in (True, False, True):
        feeds = {"x": rng.standard_normal((3, 8)).astype(np.float32), "flag": np.array(flag)}
        mod = _check(model, module, feeds, target, mod)


@pytest.mark.parametrize("target", TARGETS)
def test_torch_while_loop_exports_a_loop_with_a_run_time_trip_count(exported: dict,
                                                                    target: str) -> None:
    module, model = exported["while"]
    rng = np.random.default_rng(1)
    mod = None
    for n in (0, 1, 5, 9):
        feeds = {"x": rng.standard_normal((2, 8)).astype(np.float32), "n": np.array(n)}
        mod = _check(model, module, feeds, target, mod)
