"""Every op the llvm backend claims, compiled by ``tessera.compile(..., target="llvm")`` and run
as native code, against the op's numpy reference (the registry's ``evaluate``).

The shapes and attributes come from the case tables of the topi tests (tests/topi), so the same
odd sizes, paddings, strides, dilations, groups, broadcasts, negative axes and dtypes that check
the computes on the numpy TE oracle run through the real code generator here, plus larger
convolution, pooling and matrix-product workloads that exercise the blocked (NCHWc) layout and
the register-tiled schedules. The families of cases live in :mod:`llvm.op_cases_elementwise` and
:mod:`llvm.op_cases_nn`; each is one graph of independent nodes compiled at once
(:mod:`llvm.support`); every node must be claimed by llvm (no fallback to ``ref``).
"""

from __future__ import annotations

from collections.abc import Iterator

import llvm.op_cases_elementwise  # noqa: F401 - registers its families
import llvm.op_cases_nn  # noqa: F401 - registers its families
import pytest
from llvm import op_cases
from llvm.op_cases import FAMILIES
from llvm.support import check_cases

from tessera.topi.registry import registered_ops


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    op_cases.reseed()
    yield


# -- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_reference(name: str) -> None:
    check_cases(FAMILIES[name]())


def test_every_claimed_op_is_covered() -> None:
    """Each op with a topi compute (what the backend claims) is in some family above."""
    covered: set[str] = set()
    for make in FAMILIES.values():
        covered |= {c.op for c in make()}
    missing = sorted(set(registered_ops()) - covered - {"TestOnlyWrongType"})
    assert not missing, missing
