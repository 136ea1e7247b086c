"""The runtime on a device whose memory numpy cannot read (tessera.testing.opaque): copies,
streams, alignment, freeing, shared devices, event timing, threads."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import CompileError, RunError, TargetError
from tessera.partition.patterns import Pattern
from tessera.plugin.device import CPU
from tessera.plugin.target import TargetKind
from tessera.runtime.memory import plan_memory
from tessera.testing.kit import register_backend
from tessera.testing.opaque import OpaqueBackend, OpaqueBuffer, OpaqueDevice

RNG = np.random.default_rng(11)
W = RNG.standard_normal((16, 8)).astype(np.float32)
B = RNG.standard_normal(8).astype(np.float32)
C = RNG.standard_normal(8).astype(np.float32)


def _model() -> onnx.ModelProto:
    """x -> MatMul W -> Add b -> Relu -> Softmax -> Mul c -> Tanh -> y (Softmax is not
    claimed by the opaque backend: it runs on the CPU, between two copies)."""
    nodes = [helper.make_node("MatMul", ["x", "W"], ["m"], name="mm"),
             helper.make_node("Add", ["m", "b"], ["a"], name="bias"),
             helper.make_node("Relu", ["a"], ["r"], name="relu"),
             helper.make_node("Softmax", ["r"], ["s"], name="softmax", axis=-1),
             helper.make_node("Mul", ["s", "c"], ["p"], name="scale"),
             helper.make_node("Tanh", ["p"], ["y"], name="tanh")]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])],
        [numpy_helper.from_array(W, "W"), numpy_helper.from_array(B, "b"),
         numpy_helper.from_array(C, "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    r = np.maximum(x @ W + B, 0)
    e = np.exp(r - r.max(-1, keepdims=True))
    return np.tanh(e / e.sum(-1, keepdims=True) * C)


@pytest.fixture
def opaque() -> Iterator[OpaqueBackend]:
    backend = OpaqueBackend()
    with register_backend(backend, "tessera-opaque-test"):
        yield backend


def _x(seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((4, 16)).astype(np.float32)


def test_buffers_are_not_numpy_readable() -> None:
    device = OpaqueDevice()
    buf = device.from_host(np.arange(4, dtype=np.float32))
    with pytest.raises(TypeError, match="numpy cannot read"):
        np.asarray(buf)
    out = np.zeros(4, np.float32)
    device.copy_to_host(buf, out)
    assert not out.any()  # queued, not done
    device.synchronize()
    np.testing.assert_array_equal(out, np.arange(4, dtype=np.float32))


def test_model_across_the_host_and_an_opaque_device(opaque: OpaqueBackend) -> None:
    mod = tessera.compile(_model(), target="opaque")
    placed = {r.backend: r.ops for r in mod.report.regions}
    assert "Softmax" not in placed["opaque"] and any("Softmax" in ops for b, ops in
                                                    placed.items() if b != "opaque")
    assert len(mod.report.copies) >= 2
    x = _x()
    np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)
    # buffers on the opaque device were only ever opaque handles
    state = mod.states.acquire()
    try:
        on_device = [n for n, t in state.plan.tensors.items() if t.device == "opaque"]
        assert on_device and all(isinstance(state.buffers[n], OpaqueBuffer) for n in on_device)
    finally:
        mod.states.release(state)


def test_fused_pattern_and_per_device_alignment(opaque: OpaqueBackend) -> None:
    mod = tessera.compile(_model(), target="opaque")
    region = next(cr for cr in mod.compiled.values() if cr.backend == "opaque")
    assert [k.op for k in region.kernels][:2] == ["MatMulAdd", "Relu"]
    plans = mod.memory.devices
    assert plans["opaque"].alignment == 256 and plans["cpu"].alignment == 64
    assert all(off % 256 == 0 for off in plans["opaque"].offsets.values())
    assert all(off % 64 == 0 for off in plans["cpu"].offsets.values())
    with pytest.raises(ValueError, match="power of two"):
        plan_memory(mod.plan, {"opaque": 96})


def test_arenas_are_freed_with_the_module(opaque: OpaqueBackend) -> None:
    device = opaque.memory
    mod = tessera.compile(_model(), target="opaque")
    mod.run(x=_x())
    assert device.live_arenas >= 1
    del mod
    gc.collect()
    assert device.live_arenas == 0
    assert device.stats.frees == device.stats.allocations


def test_outputs_into_the_callers_buffer(opaque: OpaqueBackend) -> None:
    mod = tessera.compile(_model(), target="opaque")
    x = _x(3)
    mod.set_input("x", x)
    mod.run()
    out = np.empty((4, 8), np.float32)
    assert mod.get_output(0, out=out) is out
    np.testing.assert_allclose(out, _expected(x), rtol=1e-5, atol=1e-6)
    with pytest.raises(RunError, match=r"out must be a writable C-contiguous float32 array "
                                       r"of shape \[4, 8\], got float64 \[4, 8\]"):
        mod.get_output("y", out=np.empty((4, 8)))
    with pytest.raises(RunError, match="C-contiguous"):
        mod.get_output(0, out=np.empty((8, 4), np.float32).T)


def test_profile_times_device_steps_with_its_events(opaque: OpaqueBackend) -> None:
    mod = tessera.compile(_model(), target="opaque")
    before = opaque.memory.stats.events
    profile = mod.profile(runs=2, x=_x())
    assert opaque.memory.stats.events > before
    assert len(profile.kernels) == len(mod.plan.steps)
    assert all(k.ms >= 0 for k in profile.kernels)


def test_concurrent_runs_share_one_stream_correctly(opaque: OpaqueBackend) -> None:
    mod = tessera.compile(_model(), target="opaque")
    errors: list[str] = []

    def work(seed: int) -> None:
        for i in range(5):
            x = _x(seed * 10 + i)
            got = mod.run(x=x)["y"]
            if not np.allclose(got, _expected(x), rtol=1e-5, atol=1e-6):
                errors.append(f"thread {seed} run {i}")

    threads = [threading.Thread(target=work, args=(s,)) for s in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


class _TanhOnly(OpaqueBackend):
    def claims(self, target: TargetKind) -> list[Pattern]:
        return [p for p in super().claims(target) if p.op == "Tanh"]


def test_two_backends_on_one_device_share_its_object_and_arena(opaque: OpaqueBackend) -> None:
    tanh = _TanhOnly("opaque_tanh", device=opaque.memory)
    with register_backend(tanh, "tessera-opaque-test-b"):
        mod = tessera.compile(_model(), target="opaque_tanh, opaque")
        assert {r.backend for r in mod.report.regions} >= {"opaque", "opaque_tanh"}
        assert list(mod.memory.devices) == ["cpu", "opaque"] or \
            set(mod.memory.devices) == {"cpu", "opaque"}
        allocations = opaque.memory.stats.allocations
        mod.states.release(mod.states.acquire())  # an idle state: no new arena
        x = _x(5)
        np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)
        assert opaque.memory.stats.allocations == allocations
        other = _TanhOnly("opaque_tanh2", device=OpaqueDevice())
        with register_backend(other, "tessera-opaque-test-c"):
            with pytest.raises(CompileError, match="different device objects"):
                tessera.compile(_model(), target="opaque_tanh2, opaque")


def test_copies_between_two_opaque_devices_go_through_a_staging_buffer(
        opaque: OpaqueBackend) -> None:
    tanh = _TanhOnly("other_tanh", device=OpaqueDevice("other"))
    with register_backend(tanh, "tessera-opaque-test-d"):
        mod = tessera.compile(_model(), target="other_tanh, opaque")
        pairs = {(c.src, c.dst) for c in mod.report.copies}
        assert ("opaque", "other") in pairs
        x = _x(9)
        np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)


def test_artifact_round_trip_on_the_opaque_device(opaque: OpaqueBackend, tmp_path) -> None:
    mod = tessera.compile(_model(), target="opaque")
    path = mod.export(tmp_path / "m.tar")
    loaded = tessera.load(path)
    x = _x(2)
    np.testing.assert_allclose(loaded.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)


def test_device_instances_are_chosen_per_module(opaque: OpaqueBackend, tmp_path) -> None:
    second = opaque.memory.instance(1)
    assert second is opaque.memory.instance(1) and second.key == "opaque:1"
    assert opaque.memory.key == "opaque:0" and opaque.memory.instance(0) is opaque.memory
    mod = tessera.compile(_model(), target="opaque", devices={"opaque": 1})
    x = _x(4)
    np.testing.assert_allclose(mod.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)
    assert second.stats.kernels > 0 and second.live_arenas >= 1
    loaded = tessera.load(mod.export(tmp_path / "m.tar"), devices={"opaque": 0})
    before = second.stats.kernels
    np.testing.assert_allclose(loaded.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)
    assert second.stats.kernels == before  # ran on opaque:0
    with pytest.raises(CompileError, match="no backend of this module runs on a 'cuda'"):
        tessera.compile(_model(), target="opaque", devices={"cuda": 0})
    with pytest.raises(TargetError, match="device 'cpu' has no instance 2"):
        CPU.instance(2)


def test_a_module_for_an_absent_device_exports_but_does_not_run(opaque: OpaqueBackend,
                                                                tmp_path) -> None:
    """Cross-compilation: compiling for a device this machine lacks (``Device.missing``)
    allocates nothing, running says why, and the artifact runs where the device is."""
    device = opaque.memory
    device.absent = "the test unplugged it"
    try:
        arenas = device.live_arenas
        mod = tessera.compile(_model(), target="opaque")
        assert "opaque:0: the test unplugged it" in (mod.missing_devices or "")
        assert device.live_arenas == arenas
        x = _x(5)
        with pytest.raises(RunError, match="cannot run .*unplugged.*export it"):
            mod.run(x=x)
        with pytest.raises(RunError, match="unplugged"):
            mod.set_input("x", x)
        path = mod.export(tmp_path / "m.tar")
    finally:
        device.absent = None
    assert mod.missing_devices is None
    loaded = tessera.load(path)
    np.testing.assert_allclose(loaded.run(x=x)["y"], _expected(x), rtol=1e-5, atol=1e-6)
