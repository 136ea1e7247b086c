"""Putting tests in the slow tier (the rules are in the root conftest.py).

A whole slow file says ``pytestmark = pytest.mark.slow``, a slow test ``@pytest.mark.slow``.
A parametrized family keeps a representative case or two in the fast tier and the rest slow::

    @pytest.mark.parametrize("name", slow_except(sorted(FAMILIES), fast={"cast", "matmul"}))

The same works for fixture params (``@pytest.fixture(params=slow_except(...))``).
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable
from typing import Any

import pytest

SLOW = pytest.mark.slow


def slow_except(values: Iterable[Any], fast: Collection[str],
                ids: Callable[[Any], str] | None = None) -> list[Any]:
    """``values`` as ``pytest.param``s, those whose id is in ``fast`` in the fast tier and the
    others marked slow. The id is ``ids(value)``, else the value itself when it is a string
    (pytest's id for it). Every name in ``fast`` must be one of the ids, so that a renamed
    case cannot drop out of the fast tier unnoticed."""
    params, seen = [], set()
    for value in values:
        if ids is not None:
            name = ids(value)
        elif isinstance(value, str):
            name = value
        else:
            raise TypeError(f"slow_except: no id for {value!r}; pass ids=")
        seen.add(name)
        params.append(pytest.param(value, id=name, marks=() if name in fast else SLOW))
    missing = set(fast) - seen
    if missing:
        raise ValueError(f"slow_except: fast cases {sorted(missing)} are not among the values")
    return params
