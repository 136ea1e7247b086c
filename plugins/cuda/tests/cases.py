"""The op cases the cuda tests run: the llvm op-case families (tests/backend_cases), each
trimmed to the first cases of every op it holds, so that every op family and every op the
backend claims is generated, compiled and executed, at a cost CI can pay on two cores."""

from __future__ import annotations

import backend_cases.op_cases_elementwise  # noqa: F401 - registers its families
import backend_cases.op_cases_nn  # noqa: F401 - registers its families
from backend_cases import op_cases
from backend_cases.op_cases import FAMILIES
from backend_cases.support import Case, build_function

from tessera_cuda.backend import node_unsupported

#: Cases kept per op and family.
PER_OP = 2


def family_cases(name: str, per_op: int = PER_OP) -> list[Case]:
    """The first ``per_op`` cases of each op of family ``name`` that the cuda backend claims
    (float16 cases are not claimed yet), with the family's usual random data."""
    op_cases.reseed()
    cases = FAMILIES[name]()
    _, nodes, _, _ = build_function(cases)
    kept: list[Case] = []
    count: dict[str, int] = {}
    for case, node in zip(cases, nodes):
        if node_unsupported(node) is not None:
            continue
        if count.get(case.op, 0) < per_op:
            count[case.op] = count.get(case.op, 0) + 1
            kept.append(case)
    return kept


FAMILY_NAMES = sorted(FAMILIES)
