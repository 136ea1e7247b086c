"""tessera-cuda's use of the driver, checked in CI on a fake driver
(:mod:`plugins.cuda.tests.fake_driver`): constants are uploaded in stream order, a failed CUDA
graph capture is ended and said, every handle has an owner that frees it, and each execution
state runs on a stream of its own. The kernels of these models run as host code, so their
results are checked too."""

from __future__ import annotations

import gc
import threading

import numpy as np
import pytest
from backend_cases.support import conv_block_model

import tessera
from plugins.cuda.tests.conftest import needs_cxx, needs_nvrtc
from tessera.ir.types import TensorType
from tessera_cuda.driver import CUDADevice, driver_api

pytestmark = [needs_nvrtc, needs_cxx]


def _readback(dev: CUDADevice, buf, stream=None) -> np.ndarray:  # noqa: ANN001
    """``buf`` copied on a stream of its own (not the one that uploaded it) and read back."""
    stream = stream or dev.create_stream()
    with dev.use_stream(stream):
        arena = dev.allocate(buf.nbytes)
        dst = dev.view(arena, 0, buf.type)
        dev.copy(dst, buf, buf.type)
        out = np.empty(buf.type.shape, buf.type.dtype.numpy)
        dev.copy_to_host(dst, out)
        dev.synchronize()
    dev.free(arena)
    dev.destroy_stream(stream)
    return out


@pytest.mark.parametrize("nbytes", [4096, 3 << 20])
def test_constants_are_uploaded_before_any_stream_reads_them(fake_gpu, nbytes: int) -> None:  # noqa: ANN001
    dev = CUDADevice.get(0)
    a = np.random.default_rng(1).standard_normal(nbytes // 4).astype(np.float32)
    buf = dev.from_host(a)
    np.testing.assert_array_equal(_readback(dev, buf), a)


def test_the_fake_shows_the_race_of_a_legacy_stream_upload(fake_gpu) -> None:  # noqa: ANN001
    """The check above can fail: a synchronous cuMemcpyHtoD (queued on the legacy stream,
    which a non-blocking stream does not wait for) is read as NaN by another stream."""
    dev = CUDADevice.get(0)
    a = np.arange(1024, dtype=np.float32)
    arena = dev.allocate(a.nbytes)
    buf = dev.view(arena, 0, TensorType.of(a))
    driver_api().cuMemcpyHtoD(buf.ptr, a.ctypes.data, a.nbytes)
    assert np.isnan(_readback(dev, buf)).all()
    dev.free(arena)


def test_staged_uploads_reuse_pinned_buffers_in_order(fake_gpu, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setattr(CUDADevice, "PINNED_MIN_BYTES", 1024)
    monkeypatch.setattr(CUDADevice, "PINNED_CHUNK_BYTES", 4096)
    dev = CUDADevice.get(0)
    a = np.random.default_rng(2).standard_normal(10_000).astype(np.float32)  # 10 chunks
    buf = dev.from_host(a)
    np.testing.assert_array_equal(_readback(dev, buf), a)
    assert fake_gpu.live()["pinned memory"] == 2


def _region_info(mod) -> dict:  # noqa: ANN001
    (cr,) = [c for c in mod.compiled.values() if c.backend == "cuda"]
    return cr.info


def test_a_model_runs_as_one_cuda_graph_and_matches_the_reference(fake_gpu) -> None:  # noqa: ANN001
    model, inputs = conv_block_model()
    want = tessera.compile(model, target="ref").run(**inputs)["y"]
    mod = tessera.compile(model, target="cuda")
    np.testing.assert_allclose(mod.run(**inputs)["y"], want, rtol=1e-4, atol=1e-4)
    assert _region_info(mod)["cuda_graph"] is True
    assert "one CUDA graph" in mod.partition_report().table()
    assert "one CUDA graph" in mod.profile(**inputs).table()


def test_a_failed_capture_is_ended_said_and_falls_back(fake_gpu) -> None:  # noqa: ANN001
    model, inputs = conv_block_model()
    want = tessera.compile(model, target="ref").run(**inputs)["y"]
    fake_gpu.fail_next("cuLaunchKernel")  # the first launch is inside the first capture
    with pytest.warns(RuntimeWarning, match="capture failed.*capture of kernel"):
        mod = tessera.compile(model, target="cuda")
    why = _region_info(mod)["cuda_graph"]
    assert isinstance(why, str) and "CUDA_ERROR_LAUNCH_FAILED" in why
    assert "kernel launches (capture failed" in mod.partition_report().table()
    assert not fake_gpu._capturing_here()
    live = fake_gpu.live()
    assert live["graph"] == 0 and live["graph exec"] == 0
    np.testing.assert_allclose(mod.run(**inputs)["y"], want, rtol=1e-4, atol=1e-4)


def test_graphs_can_be_turned_off(fake_gpu, monkeypatch) -> None:  # noqa: ANN001
    monkeypatch.setenv("TESSERA_CUDA_GRAPHS", "0")
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="cuda")
    assert "TESSERA_CUDA_GRAPHS" in _region_info(mod)["cuda_graph"]
    assert fake_gpu.live()["graph exec"] == 0
    assert np.isfinite(mod.run(**inputs)["y"]).all()


def _run_from_three_threads(fake_gpu) -> None:  # noqa: ANN001
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="cuda")
    want = mod.run(**inputs)["y"]
    barrier = threading.Barrier(3)
    got: list[np.ndarray] = []

    def work() -> None:
        barrier.wait()
        got.append(mod.run(**inputs)["y"])

    threads = [threading.Thread(target=work) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 3 and all(np.array_equal(g, want) for g in got)
    live = fake_gpu.live()
    # one executable per state the pool keeps; a state dropped past max_idle took its own
    assert live["module"] == 1 and live["graph exec"] == mod.states.idle
    assert live["stream"] == 1 + mod.states.idle


@pytest.mark.slow
def test_every_handle_is_freed_with_its_owner(fake_gpu) -> None:  # noqa: ANN001
    _run_from_three_threads(fake_gpu)
    gc.collect()
    # what is left belongs to the device object for the process: its default stream
    assert fake_gpu.live() == {"stream": 1}


def test_each_execution_state_runs_on_a_stream_of_its_own(fake_gpu) -> None:  # noqa: ANN001
    model, inputs = conv_block_model()
    mod = tessera.compile(model, target="cuda")
    first = mod.states.acquire()
    second = mod.states.acquire()
    try:
        (a,), (b,) = first.streams.values(), second.streams.values()
        assert a is not b
        default = CUDADevice.get(0)._stream
        assert default not in (a, b)
        for state in (first, second):
            for name, value in inputs.items():
                state.set_input(name, value)
        fake_gpu.graph_launches.clear()
        first.run()
        second.run()
        assert fake_gpu.graph_launches == [a, b]
        np.testing.assert_array_equal(first.get("y"), second.get("y"))
    finally:
        mod.states.release(first)
        mod.states.release(second)


@pytest.mark.slow
def test_a_tuning_candidate_unloads_its_module_when_dropped(fake_gpu) -> None:  # noqa: ANN001
    from tessera.plugin.backend import CompileOptions
    from tessera.plugin.target import TargetKind
    from tessera_cuda.backend import CUDABackend

    model, _ = conv_block_model()
    mod = tessera.compile(model, target="cuda", keep_graph_weights=True)
    (cr,) = [c for c in mod.compiled.values() if c.backend == "cuda"]
    kernel = cr.kernels[0].name
    before = fake_gpu.live()
    candidate = CUDABackend().tuning_candidate(cr.region, kernel, {}, TargetKind("cuda", {}),
                                               CompileOptions())
    candidate.run()
    assert candidate.timer is not None and candidate.timer(2) >= 0
    assert all(np.isfinite(o).all() for o in candidate.outputs())
    assert fake_gpu.live()["module"] == before["module"] + 1
    del candidate
    gc.collect()
    assert fake_gpu.live() == before


def test_models_with_symbolic_shapes_compile_once_or_specialise(fake_gpu) -> None:  # noqa: ANN001
    # the kit's check: the encoder compiled once for every size (run-time extents), the
    # convolutions refused at run-time sizes and compiled per size on first use (a cache with
    # hits), and split plans' compiled parts, each right against the reference
    from tessera.testing.kit import check_symbolic_shapes

    result = check_symbolic_shapes("cuda")
    assert all(result.nodes_per_size) and result.split_nodes > 0
    sizes = len(result.nodes_per_size)  # three per model run at sizes
    checks = {c.model: c for c in result.checks}
    assert checks["kit_encoder"].symbolic and not checks["kit_encoder"].refused
    assert not checks["kit_conv"].symbolic and "(Conv)" in checks["kit_conv"].refused
    assert sizes == 6 and (result.compiles, result.hits) == (1 + 3, 3)
