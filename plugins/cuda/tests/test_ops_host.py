"""Every op family's generated CUDA C, executed on the host CPU through the project's CUDA
header (real barriers) and compiled to cubin by NVRTC, against the op's numpy reference."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from backend_cases.support import Case, build_function, compare
from tiers import slow_except

from plugins.cuda.tests.cases import FAMILY_NAMES, family_cases
from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.ops.registry import get_schema
from tessera_cuda.emulate import run_on_host
from tessera_cuda.lowering import lower_region
from tessera_cuda.nvrtc import compile_cuda
from tessera_cuda.schedules import GPUInfo

# Each family's host build is a g++ compile (about 1 s, cached in ~/.cache/tessera/cuda-host;
# large_parallel 17 s): the fast tier builds one family per kind of kernel, the rest are slow.
FAST_FAMILIES = {"binary_arithmetic", "cast", "gathers", "reshape_like", "matmul",
                 "conv_topi_cases", "pooling_blocked_workloads", "softmax_family"}


#: Rows of a CumSum input the host runs. The cuda kernel computes one output per block of 256
#: threads (a reduction over the row with nine barriers), so from two rows on the generated
#: CUDA C is the same text and only the grid grows: large_parallel's 37 x 531 input launched
#: 19,647 blocks, whose fibers took 9 of the family's 12 s on the host.
HOST_CUMSUM_ROWS = 3


def host_sized(cases: list[Case]) -> list[Case]:
    """``cases`` with the rows of large CumSum inputs cut to :data:`HOST_CUMSUM_ROWS`."""
    out = []
    for case in cases:
        x = case.inputs[0] if case.inputs else None
        if case.op == "CumSum" and x is not None and x.ndim == 2 and \
                case.attrs.get("axis") in (1, -1) and x.shape[0] > HOST_CUMSUM_ROWS:
            case = dataclasses.replace(case, inputs=[x[:HOST_CUMSUM_ROWS], *case.inputs[1:]])
        out.append(case)
    return out


@needs_cxx
@needs_nvrtc
@pytest.mark.parametrize("family", slow_except(FAMILY_NAMES, FAST_FAMILIES))
def test_family_on_host_and_nvrtc(family: str) -> None:
    cases = host_sized(family_cases(family))
    if not cases:
        pytest.skip(f"no case of {family} is claimed by cuda")
    g, nodes, feeds, outs = build_function(cases)
    lowered = lower_region(g, GPUInfo())
    compiled = compile_cuda(lowered.source.text, "sm_90")
    assert compiled.cubin[:4] == b"\x7fELF"  # cubin is an ELF image
    got = run_on_host(lowered, feeds)
    failures = []
    for case, node, names in zip(cases, nodes, outs):
        want = get_schema(case.op).evaluate(
            [None if a is None else np.asarray(a) for a in case.inputs], node.attrs)
        for k, (name, w) in enumerate(zip(names, want)):
            problem = compare(got[name], w, case.rtol, case.atol)
            if problem:
                failures.append(f"{case.name} output {k}: {problem}")
    assert not failures, f"{len(failures)} of {len(cases)} cases differ:\n" + "\n".join(failures)
