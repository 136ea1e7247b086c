"""NC[D]HW geometry helpers (tessera.ops.spatial): ``auto_pad`` resolution."""

from __future__ import annotations

import pytest

from tessera.ops.spatial import resolve_auto_pad


@pytest.mark.parametrize("mode,want", [("SAME_UPPER", [0, 1, 1, 1]), ("SAME_LOWER", [1, 1, 0, 1]),
                                       ("VALID", [0, 0, 0, 0]), ("NOTSET", [0, 0, 0, 0])])
def test_resolve_auto_pad(mode: str, want: list[int]) -> None:
    # 5x7 input, kernel 2x3, strides 2x1: H needs 1 pixel of padding (odd), W needs 2
    assert resolve_auto_pad(mode, [5, 7], [2, 3], [2, 1], [1, 1]) == want
