"""Helpers for the tessera-cuda tests: the plugin on the path, cases lowered once per family.

CI has no GPU: the generated CUDA C is compiled to cubin with NVRTC and executed on the host
through ``tessera_cuda/host/cuda_host.h`` (each block's threads as fibers, real barriers).
Tests marked ``gpu`` run where the cuda backend is available.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path

import pytest

if importlib.util.find_spec("tessera_cuda") is None:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

needs_cxx = pytest.mark.skipif(shutil.which("g++") is None,
                               reason="host emulation of CUDA C needs g++ (C++20)")


def _nvrtc_missing() -> str | None:
    try:
        from tessera_cuda.nvrtc import nvrtc_missing
    except ImportError as err:  # pragma: no cover - the plugin's own dependency
        return str(err)
    return nvrtc_missing()


needs_nvrtc = pytest.mark.skipif(_nvrtc_missing() is not None,
                                 reason=f"NVRTC: {_nvrtc_missing()}")


def _gpu_missing() -> str | None:
    try:
        from tessera_cuda.backend import CUDABackend
    except ImportError as err:  # pragma: no cover
        return str(err)
    return CUDABackend().available()


needs_gpu = pytest.mark.skipif(_gpu_missing() is not None, reason=f"no GPU: {_gpu_missing()}")


@pytest.fixture
def fake_gpu(monkeypatch: pytest.MonkeyPatch):  # noqa: ANN201 - yields a FakeDriver
    """tessera-cuda on a fake driver (:mod:`plugins.cuda.tests.fake_driver`): memory, streams,
    capture and graphs modelled on the host, and the kernels of every region compiled in the
    block run as host code (their CUDA C through ``cuda_host.h``)."""
    from plugins.cuda.tests.fake_driver import FakeDriver
    from tessera_cuda import backend
    from tessera_cuda.driver import use_driver

    fake = FakeDriver()
    real = backend.build_region

    def build(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        built = real(*args, **kwargs)
        fake.programs[bytes(built.cubin)] = built.lowered.source
        return built

    monkeypatch.setattr(backend, "build_region", build)
    with use_driver(fake):
        yield fake
