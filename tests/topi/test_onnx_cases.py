"""Every ONNX node test case (the ``onnx`` package's generated cases) whose nodes all have topi
computes, built with ``build_te`` and evaluated by the numpy TE oracle, against the expected
outputs. Cases Tessera cannot import, or with a node some compute does not support, are
skipped (they are counted)."""

from __future__ import annotations

import numpy as np
import pytest
from topi.te_eval import evaluate

from tessera.errors import ModelImportError, TesseraError
from tessera.frontend.onnx import import_onnx
from tessera.testing.conformance import all_tensor_cases, run_case
from tessera.topi import build_te
from tessera.topi.registry import unsupported_reason


class _Skip(TesseraError):
    """A case outside the topi computes (not a failure)."""


def _engine(model, inputs: dict[str, np.ndarray], target: str,
            freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    shapes = {k: list(v.shape) for k, v in inputs.items() if k not in freeze}
    try:
        fn = import_onnx(model, input_shapes=shapes, freeze_inputs=freeze)
    except ModelImportError as e:
        if type(e) is not ModelImportError:  # NeedsConstantError: the runner retries
            raise
        raise _Skip(f"import: {e}") from None
    for node in fn.nodes:
        reason = unsupported_reason(node)
        if reason is not None:
            raise _Skip(reason)
    group = build_te(fn.nodes, fn.inputs, fn.outputs)
    feed = {ph: (v.data if v.data is not None else inputs[v.name])
            for v, ph in zip(group.inputs, group.placeholders)}
    return evaluate(group.outputs, feed)  # type: ignore[return-value]


@pytest.mark.slow
def test_onnx_node_cases() -> None:
    passed, skipped, failures = 0, 0, []
    for case in all_tensor_cases():
        result = run_case(case, engine=_engine)
        if result.ok:
            passed += 1
        elif "_Skip" in result.reason:
            skipped += 1
        else:
            failures.append(f"{case.name}: {result.reason}")
    assert not failures, "\n".join(failures)
    assert passed >= 1150, (passed, skipped)
