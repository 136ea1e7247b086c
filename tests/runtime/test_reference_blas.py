"""The reference backend limits numpy's BLAS threads while its kernels run, and restores them."""

from __future__ import annotations

import threading

import numpy as np
import pytest
from onnx import TensorProto, helper
from threadpoolctl import ThreadpoolController

import tessera
from tessera.backends.reference import blas


def _blas_threads() -> list[int]:
    """The thread counts of numpy's own BLAS libraries (others, such as scipy's, may be
    loaded later and are not the reference kernels' concern)."""
    return [lib["num_threads"] for lib in ThreadpoolController().select(user_api="blas").info()
            if "numpy" in lib["filepath"]]


def _matmul_model() -> object:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])
    node = helper.make_node("MatMul", ["x", "x"], ["y"])
    return helper.make_model(helper.make_graph([node], "mm", [x], [y]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def two_blas_threads():
    if not _blas_threads():
        pytest.skip("numpy has no BLAS threadpoolctl can control")
    controller = ThreadpoolController()
    with controller.limit(limits=2, user_api="blas"):
        yield


def test_limit_while_a_region_runs_and_restored_after(two_blas_threads, monkeypatch, rng):
    seen: list[list[int]] = []
    original = np.matmul

    def spying_matmul(*args, **kwargs):
        seen.append(_blas_threads())
        return original(*args, **kwargs)

    mod = tessera.compile(_matmul_model(), target="ref")
    x = rng.standard_normal((64, 64)).astype(np.float32)
    monkeypatch.setattr(np, "matmul", spying_matmul)
    got = mod.run(x=x)["y"]
    monkeypatch.undo()
    np.testing.assert_allclose(got, x @ x, rtol=1e-5, atol=1e-4)
    assert seen and all(threads == [1] * len(threads) for threads in seen), seen
    assert set(_blas_threads()) == {2}  # restored


class _FakeController:
    """Records the limits a BlasLimit sets and restores (a real BLAS's thread count is
    process-wide, and OpenBLAS ignores some changes made from other threads)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    def limit(self, limits: int, user_api: str) -> object:
        self.events.append(f"limit {limits} {user_api}")
        outer = self

        class Limiter:
            def restore_original_limits(self) -> None:
                outer.events.append("restore")

        return Limiter()


def test_nested_and_concurrent_entries_limit_once_and_restore_once():
    limit = blas.BlasLimit()
    fake = _FakeController()
    limit._controller = fake
    inside = threading.Barrier(3)
    leave = threading.Event()

    def hold() -> None:
        with limit:
            with limit:  # nested
                inside.wait(timeout=30)
                leave.wait(timeout=30)

    threads = [threading.Thread(target=hold, daemon=True) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        inside.wait(timeout=30)
        during = list(fake.events)
    finally:
        leave.set()
        for t in threads:
            t.join()
    assert during == ["limit 1 blas"]
    assert fake.events == ["limit 1 blas", "restore"]
    with limit:
        pass
    assert fake.events[-2:] == ["limit 1 blas", "restore"]


def test_environment(monkeypatch, two_blas_threads):
    monkeypatch.setenv("TESSERA_REF_BLAS_THREADS", "0")
    with blas.BlasLimit():
        assert set(_blas_threads()) == {2}  # left alone
    assert "as numpy has them" in blas.BlasLimit().describe()
    monkeypatch.setenv("TESSERA_REF_BLAS_THREADS", "2")
    assert blas.configured_threads() == 2
    monkeypatch.setenv("TESSERA_REF_BLAS_THREADS", "junk")
    assert blas.configured_threads() == 1


def test_without_threadpoolctl_the_kernels_still_run(monkeypatch):
    """An environment installed with --no-deps (a lent GPU machine's) may lack threadpoolctl:
    the reference kernels then run with numpy's own BLAS setting, after one warning."""
    import sys

    monkeypatch.setitem(sys.modules, "threadpoolctl", None)  # import raises ImportError
    monkeypatch.setenv(blas.ENV_VAR, "1")
    limit = blas.BlasLimit()
    with pytest.warns(RuntimeWarning, match="threadpoolctl is not installed"):
        with limit:
            pass
    with limit:  # warned once: the missing module is remembered
        pass
    assert "threadpoolctl is not installed" in limit.describe()
