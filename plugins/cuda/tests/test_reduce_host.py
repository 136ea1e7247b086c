"""Long reductions computed by a block of threads per output element (``cuda_block_reduce``:
each thread's share in a register, then folds through shared memory), executed on the host
through the project's CUDA header (real barriers) against the op reference: sums, maxima and
minima, lengths that the block does not divide and that are not powers of two, several
reduce axes, reductions with epilogues (mean, L2 norm), softmax and layer norm; short
reductions keep one output per thread; a missing barrier gives a wrong result."""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases.support import Case, build_function, compare

from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.ops.registry import get_schema
from tessera_cuda.emulate import run_on_host
from tessera_cuda.lowering import lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

pytestmark = [needs_cxx, needs_nvrtc]
RNG = np.random.default_rng(23)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-3, 3, shape).astype(np.float32)


CASES = {
    "sum-300": Case("ReduceSum", [rand(6, 300)], {"axes": [1], "keepdims": 0}),
    "max-axes": Case("ReduceMax", [rand(3, 9, 11, 4)], {"axes": [1, 2], "keepdims": 1}),
    "min-1000": Case("ReduceMin", [rand(2, 1000)], {"axes": [-1], "keepdims": 0}),
    "mean-77": Case("ReduceMean", [rand(4, 5, 77)], {"axes": [-1], "keepdims": 1}),
    "l2-axis0": Case("ReduceL2", [rand(130, 3)], {"axes": [0], "keepdims": 0}),
    "softmax-77": Case("Softmax", [rand(2, 3, 77)], {"axis": -1}),
    "softmax-1000": Case("Softmax", [rand(3, 1000)], {"axis": -1}),
    "layernorm": Case("LayerNormalization", [rand(5, 384), rand(384), rand(384)], {"axis": -1},
                      consts=(1, 2)),
}


def _lower(cases: list[Case], gpu: GPUInfo | None = None) -> tuple:
    g, nodes, feeds, outs = build_function(cases)
    lowered = lower_region(g, gpu or GPUInfo())
    assert compile_cuda(lowered.source.text, "sm_90").cubin
    return lowered, nodes, feeds, outs


@pytest.mark.parametrize("name", list(CASES))
def test_block_reductions_match_the_reference(name: str) -> None:
    case = CASES[name]
    lowered, nodes, feeds, outs = _lower([case])
    assert "cuda_block_reduce" in {g.template for g in lowered.groups}
    got = run_on_host(lowered, feeds)
    want = get_schema(case.op).evaluate([np.asarray(a) for a in case.inputs], nodes[0].attrs)
    for name_, w in zip(outs[0], want):
        problem = compare(got[name_], w, 1e-5, 1e-5)
        assert not problem, problem


def test_threads_knob_and_thread_limit() -> None:
    case = CASES["sum-300"]
    lowered, *_ = _lower([case], GPUInfo(max_threads_per_block=64))
    (group,) = lowered.groups
    assert group.config == {"threads": 64}
    assert group.kernels.kernels[0].launch.block == (64, 1, 1)
    assert group.kernels.kernels[0].launch.grid == (6, 1, 1)


def test_short_reductions_keep_one_output_per_thread() -> None:
    case = Case("ReduceSum", [rand(40, 9)], {"axes": [1], "keepdims": 0})
    lowered, nodes, feeds, outs = _lower([case])
    assert [g.template for g in lowered.groups] == ["cuda_reduce"]
    got = run_on_host(lowered, feeds)[outs[0][0]]
    np.testing.assert_allclose(got, case.inputs[0].sum(1), rtol=1e-5, atol=1e-5)


def test_missing_barrier_makes_the_reduction_wrong() -> None:
    from tessera import te
    from tessera_cuda.codegen import CudaSource
    from tessera_cuda.host_exec import HostModule
    from tessera_cuda.pipeline import gpu_pipeline
    from tessera_cuda.schedules import schedule_group

    a = te.placeholder((4, 500), "float32", name="A")
    r = te.reduce_axis((0, 500), name="r")
    c = te.compute((4,), lambda i: te.sum(a[i, r], axis=r), name="C")
    sched = schedule_group([c], GPUInfo())
    assert sched.template == "cuda_block_reduce"
    av = rand(4, 500)
    for sync in (True, False):
        pipeline = gpu_pipeline() if sync else gpu_pipeline().without("thread_sync")
        src = CudaSource()
        group = src.add(pipeline.run(te.lower(sched.schedule, [a, c], "k")))
        out = np.zeros(4, np.float32)
        HostModule(src).run_group(group, {"A": av, "C": out})
        right = np.allclose(out, av.sum(1), rtol=1e-4, atol=1e-4)
        assert right if sync else not right
