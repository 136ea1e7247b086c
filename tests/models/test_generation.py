"""Greedy generation with a key/value-cache decoder (:mod:`tessera.testing.kv_decoder`): one
module compiled without input shapes runs every step (each a new cache length) and gives
exactly PyTorch's tokens. Skips without torch and transformers (``pip install -e '.[zoo]'``).
"""

from __future__ import annotations

import pytest
from optional import require

import tessera
from tessera.plugin.manager import get_backends
from tessera.runtime.module import Module
from tessera.testing import hf_zoo

require("onnxruntime")
if hf_zoo.missing():
    pytest.skip(f"the decoder needs {', '.join(hf_zoo.missing())}: pip install -e '.[zoo]'",
                allow_module_level=True)

from tessera.testing import kv_decoder  # noqa: E402 (after the skip: it needs torch)

# one xdist worker imports PyTorch for all the zoo's tests (tests/models/test_hf_zoo.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("hf_zoo")]
PROMPT = [5, 7, 9, 11]


@pytest.fixture(scope="module")
def want() -> list[int]:
    return kv_decoder.torch_greedy(PROMPT, 32)


def test_reference_backend_generates_pytorchs_tokens(want: list[int]) -> None:
    mod = tessera.compile(str(kv_decoder.export()), "ref")
    tokens = kv_decoder.greedy(lambda f: list(mod.run(f).values()), PROMPT, 32)
    assert tokens == want
    assert isinstance(mod, Module) and mod.shape_vars is not None  # one compile, every step


@pytest.mark.skipif("llvm" not in get_backends(), reason="the tessera-llvm plugin is missing")
def test_llvm_generates_pytorchs_first_tokens(want: list[int]) -> None:
    # each step compiles (seconds on llvm): the prompt step (empty cache), one one-token step
    mod = tessera.compile(str(kv_decoder.export()), "llvm")
    assert kv_decoder.greedy(lambda f: list(mod.run(f).values()), PROMPT, 2) == want[:2]


@pytest.mark.skipif("llvm" not in get_backends(), reason="the tessera-llvm plugin is missing")
def test_llvm_with_the_cache_length_open_generates_every_token(want: list[int]) -> None:
    # past and total not specialised on: two split plans (the prompt's seq, then seq = 1),
    # compiled once each; every later step runs them at its own cache length
    mod = tessera.compile(str(kv_decoder.export()), "llvm", symbolic_dims=["past", "total"])
    tokens = kv_decoder.greedy(lambda f: list(mod.run(f).values()), PROMPT, 32)
    assert tokens == want
    info = mod.cache_info()
    assert info.compiles == 2 and info.split == 2 and info.split_fallbacks == 0
    assert [s for s, _ in mod.split_plans()] == [{"seq": len(PROMPT)}, {"seq": 1}]


@pytest.mark.skipif("llvm" not in get_backends(), reason="the tessera-llvm plugin is missing")
def test_the_dynamo_export_generates_every_token_too(want: list[int]) -> None:
    # opset 18, named torch.export.Dim's, different shape arithmetic from TorchScript's
    mod = tessera.compile(str(kv_decoder.export(exporter="dynamo")), "llvm",
                          symbolic_dims=["past", "total"])
    assert kv_decoder.greedy(lambda f: list(mod.run(f).values()), PROMPT, 32) == want
    assert mod.cache_info().split == 2
    assert "present_0[1, 2, past + seq, 16]" in mod.describe_outputs()
