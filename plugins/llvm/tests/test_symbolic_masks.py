"""A symbolic attention mask and relative-position bias as exporters write them (T5, and the
masks of Hugging Face's index functions): the mask read through a ``Gather`` of the flattened
mask at ``Range(seq) + Range(batch) * seq``, the bias gathered per head from buckets computed
from the sizes. The mask's kernel reads the mask where it lies (the Ranges fused, the
Gather's clamp and the reshape's divisions simplified away: an index a vector loop can take),
the buckets are computed once per size, and the results equal numpy's at every size."""

from __future__ import annotations

import numpy as np
import pytest

import tessera
from tessera import tir
from tessera.testing.size_models import relative_bias_expected, relative_bias_model
from tessera.tir.functor import nodes_of
from tessera.tir.transform import pipeline


@pytest.fixture(scope="module")
def compiled():  # noqa: ANN201 - (module, lowered functions)
    lowered: list[tir.PrimFunc] = []
    run = pipeline.Pipeline.run

    def keep(self, func):  # noqa: ANN001, ANN202
        out = run(self, func)
        lowered.append(out)
        return out

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(pipeline.Pipeline, "run", keep)
        mod = tessera.compile(relative_bias_model(), "llvm", kernel_cache=False)
    return mod, lowered


def test_the_mask_is_read_where_it_lies(compiled) -> None:
    _, lowered = compiled
    (func,) = [f for f in lowered if any(p.name == "mask" for p in f.params)]
    loads = [x for x in nodes_of(func.body, tir.BufferLoad) if x.buffer.name == "mask"]
    # the mask is read at j + b * seq: no clamp, no division, no select of a negative index
    assert loads
    for x in loads:
        for kind in (tir.Min, tir.Max, tir.FloorDiv, tir.FloorMod, tir.Select):
            assert not nodes_of(x.indices[-1], kind), x


def test_the_buckets_are_computed_once_per_size(compiled) -> None:
    mod, lowered = compiled
    (bucket,) = [f for f in lowered if any(x.name == "log" for x in nodes_of(f.body, tir.Call))]
    assert not any(p.name in ("x", "mask") for p in bucket.params)  # sizes and constants only
    assert mod.plan.once_per_sizes.steps


def test_results_at_every_size(compiled) -> None:
    mod, _ = compiled
    rng = np.random.default_rng(7)
    for batch, seq in ((1, 1), (1, 7), (2, 9), (3, 33), (2, 0), (1, 7), (4, 64), (2, 9)):
        x = rng.standard_normal((batch, 4, seq, seq)).astype(np.float32)
        mask = rng.integers(0, 3, (batch, seq)).astype(np.int64)
        np.testing.assert_array_equal(mod.run(x=x, mask=mask)["y"],
                                      relative_bias_expected(x, mask))
