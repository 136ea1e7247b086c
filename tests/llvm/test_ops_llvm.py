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

import exact
import llvm.op_cases_elementwise  # noqa: F401 - registers its families
import llvm.op_cases_nn  # noqa: F401 - registers its families
import numpy as np
import pytest
from llvm import op_cases
from llvm.op_cases import FAMILIES
from llvm.support import Case, check_cases

from tessera.topi.registry import registered_ops


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    op_cases.reseed()
    yield


# -- the tests ------------------------------------------------------------------------------------

@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_matches_reference(name: str) -> None:
    check_cases(FAMILIES[name]())


@pytest.mark.parametrize("src", ["float32", "float64"])
def test_float_to_integer_cast_saturates(src: str) -> None:
    """Native casts clamp out-of-range values (±inf too) to the integer type's limits and give 0
    for NaN, in the vector body and the scalar tail, against the exact oracle."""
    rng = np.random.default_rng(5)
    dsts = [*exact.INT_TYPES, "uint64"]
    cases = [Case("Cast", [exact.cast_values(src, dst, rng, n_random=150)], {"to": dst},
                  label=f"Cast {src}->{dst}") for dst in dsts]
    built = check_cases(cases)
    got = built.module.run(**built.feeds)
    for case, names in zip(cases, built.outputs):
        np.testing.assert_array_equal(got[names[0]],
                                      exact.saturating_cast(case.inputs[0], case.attrs["to"]),
                                      err_msg=case.label)


def test_every_claimed_op_is_covered() -> None:
    """Each op with a topi compute (what the backend claims) is in some family above."""
    covered: set[str] = set()
    for make in FAMILIES.values():
        covered |= {c.op for c in make()}
    missing = sorted(set(registered_ops()) - covered - {"TestOnlyWrongType"})
    assert not missing, missing
