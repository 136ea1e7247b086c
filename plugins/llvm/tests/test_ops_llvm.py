"""Every op the llvm backend claims, compiled by ``tessera.compile(..., target="llvm")`` and run
as native code, against the op's numpy reference (the registry's ``evaluate``).

The shapes and attributes come from the case tables of the topi tests (tests/topi), so the same
odd sizes, paddings, strides, dilations, groups, broadcasts, negative axes and dtypes that check
the computes on the numpy TE oracle run through the real code generator here, plus larger
convolution, pooling and matrix-product workloads that exercise the blocked (NCHWc) layout and
the register-tiled schedules. The families of cases live in tests/backend_cases
(:mod:`op_cases_elementwise` and :mod:`op_cases_nn`, shared with the cuda tests); each is one
graph of independent nodes compiled at once (:mod:`backend_cases.support`); every node must be
claimed by llvm (no fallback to ``ref``). The fast tier runs the families that compile in well
under a second (one of them blocked pooling, one the register-tiled matmul); the others are slow.
"""

from __future__ import annotations

from collections.abc import Iterator

import backend_cases.op_cases_elementwise  # noqa: F401 - registers its families
import backend_cases.op_cases_nn  # noqa: F401 - registers its families
import exact
import numpy as np
import pytest
from backend_cases import op_cases
from backend_cases.op_cases import FAMILIES
from backend_cases.support import Case, check_cases
from tiers import slow_except

from tessera.topi.registry import registered_ops


@pytest.fixture(autouse=True)
def _seeded() -> Iterator[None]:
    op_cases.reseed()
    yield


# -- the tests ------------------------------------------------------------------------------------

FAST_FAMILIES = {"empty_tensors", "clip", "unary_special_values", "concat_split_slice",
                 "variadic_where_prelu", "gathers", "index_patterns", "reshape_like",
                 "pooling_blocked_workloads", "matmul"}


@pytest.mark.parametrize("name", slow_except(sorted(FAMILIES), FAST_FAMILIES))
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
    """Each op with a topi compute (what the backend claims) is in some family above, but
    the ops whose values come from the sizes alone (a static graph folds them: they run in
    symbolic graphs only, checked in test_size_values.py)."""
    covered: set[str] = set()
    for make in FAMILIES.values():
        covered |= {c.op for c in make()}
    sizes_only = {"Range", "ShapeValues", "ConstantOfShape"}
    missing = sorted(set(registered_ops()) - covered - {"TestOnlyWrongType"} - sizes_only)
    assert not missing, missing
