"""The llvm backend reports its progress within a region (``CompileOptions.progress``): each
fused group lowered (its IR generated with it), then LLVM's optimisation and emission;
``build_module`` given functions made already reports each function's IR."""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases.support import conv_block_model

from tessera.api import partition_model
from tessera.partition.partitioner import REGION_OP
from tessera.plugin.backend import CompileOptions
from tessera.plugin.manager import get_backend
from tessera.plugin.target import TargetKind
from tessera.progress import Progress, ProgressEvent
from tessera_llvm.build import IR_PHASE, LLVM_PHASE, build_module
from tessera_llvm.lowering import LOWER_PHASE


def test_llvm_reports_groups_functions_and_llvm_steps() -> None:
    model, _ = conv_block_model()
    graph = partition_model(model, target="llvm").graph
    region = next(n.body for n in graph.nodes if n.op == REGION_OP and n.body is not None)
    events: list[ProgressEvent] = []
    compiled = get_backend("llvm").compile(region, TargetKind("llvm"),
                                           CompileOptions(progress=Progress(events.append)))
    kernels = len(compiled.kernels)
    # each kernel's IR is generated as it is lowered (ModuleBuilder): no phase of its own
    assert [e.phase for e in events] == [LOWER_PHASE] * (kernels + 1) + [LLVM_PHASE] * 3
    lowering = [e for e in events if e.phase == LOWER_PHASE]
    assert [(e.done, e.total) for e in lowering] == [(i, kernels) for i in range(kernels + 1)]
    assert any("Conv" in e.detail for e in lowering)  # the group under way, with its ops
    assert [(e.done, e.detail.split()[0] if e.detail else "") for e in events[-3:]] == \
        [(0, "optimizing"), (1, "emitting"), (2, "")]


def test_llvm_compiles_without_a_listener(capsys: pytest.CaptureFixture[str]) -> None:
    import tessera

    model, inputs = conv_block_model()
    module = tessera.compile(model, target="llvm")
    assert np.isfinite(module.run(**inputs)["y"]).all()
    assert capsys.readouterr().err == ""


def test_build_module_reports_each_function() -> None:
    from tessera import tir

    funcs = []
    for k in range(3):
        a, c, i = tir.Buffer("A", [8], "float32"), tir.Buffer("C", [8], "float32"), tir.Var("i")
        funcs.append(tir.PrimFunc(f"f{k}", [a, c], tir.For(i, 0, 8, tir.ForKind.SERIAL,
                                                           tir.BufferStore(c, a[i] * 2.0, [i]))))
    events: list[ProgressEvent] = []
    build_module(funcs, "m", progress=Progress(events.append))
    assert [(e.phase, e.done, e.total) for e in events] == \
        [(IR_PHASE, i, 3) for i in range(4)] + [(LLVM_PHASE, i, 2) for i in range(3)]
