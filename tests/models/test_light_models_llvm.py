"""The nine light model-zoo topologies (:mod:`tessera.testing.light_models`, random weights)
compiled for the ``llvm`` target and compared with onnxruntime on the same weights and input,
with the reference backend's tolerances; every node must run on llvm (no fallback to ref)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from models.support import Compiled, assert_outputs_match, compile_light

from tessera.plugin.manager import get_backends
from tessera.testing.light_models import LIGHT_MODELS

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif("llvm" not in get_backends(),
                                 reason="the tessera-llvm plugin is not installed")]


# slow: 3 to 20 s per model (tests/runtime/test_artifact_storage.py compiles a small
# SqueezeNet-like model for llvm in the fast tier)
@pytest.fixture(scope="module", params=LIGHT_MODELS)
def compiled(request: pytest.FixtureRequest) -> Iterator[Compiled]:
    yield compile_light(request.param, "llvm")


def test_every_node_runs_on_llvm(compiled: Compiled) -> None:
    report = compiled.mod.partition_report()
    assert not report.fallback, report.table()
    assert {r.backend for r in report.regions} == {"llvm"}, report.table()
    assert {cr.backend for cr in compiled.mod.compiled.values()} == {"llvm"}
    kernels = [k for cr in compiled.mod.compiled.values() for k in cr.kernels]
    nodes = sum(len(r.nodes) for r in report.regions)
    assert kernels and len(kernels) < nodes + 4  # fused: far fewer kernels than nodes
    convs = [k.op for k in kernels if "Conv" in k.op]
    assert convs and all(op.startswith("ConvNCHWc") for op in convs)  # blocked layout


def test_matches_onnxruntime(compiled: Compiled) -> None:
    for _ in range(2):  # a second run on the same buffers gives the same answer
        got = compiled.mod.run(**compiled.light.inputs)
        assert got is not None and list(got) == compiled.light.output_names
        assert_outputs_match(got, compiled.want, compiled.light.name)
