"""The cuda backend as a plugin: registration, availability, claims, target options, the
region build (lowering + NVRTC, no GPU needed) and its dumps; the device's contract."""

from __future__ import annotations

import numpy as np
import pytest
from backend_cases.support import Case, build_function, conv_block_model

import tessera
from plugins.cuda.tests.conftest import needs_nvrtc
from tessera.errors import TargetError
from tessera.frontend.onnx import import_onnx
from tessera.ir.types import TensorType
from tessera.passes import PassManager
from tessera.plugin.backend import CompileOptions
from tessera.plugin.manager import get_backend
from tessera.plugin.target import TargetKind
from tessera_cuda.backend import CUDABackend, build_region, gpu_info, node_unsupported
from tessera_cuda.driver import CudaBuffer, CUDADevice, driver_missing


def test_registered_through_the_entry_point() -> None:
    backend = get_backend("cuda")
    assert isinstance(backend, CUDABackend)
    assert backend.device == "cuda" and backend.device_api().name == "cuda"
    assert backend.code_forms == ("cu", "ptx", "tir")


@pytest.mark.skipif(driver_missing() is None, reason="this machine has a GPU")
def test_available_says_what_is_missing() -> None:
    reason = CUDABackend().available()
    assert reason is not None and "driver" in reason
    with pytest.raises(tessera.TesseraError, match="cuda"):
        tessera.compile(build_function([Case("Relu", [np.ones(4, np.float32)])])[0],
                        target="cuda")


def test_float16_nodes_are_not_claimed() -> None:
    x16 = np.ones((4,), np.float16)
    _, nodes, _, _ = build_function([Case("Relu", [x16]), Case("Relu", [x16.astype("f4")])])
    assert "float16" in node_unsupported(nodes[0])
    assert node_unsupported(nodes[1]) is None


def test_target_options_are_checked() -> None:
    assert gpu_info(TargetKind("cuda", {})).arch == "sm_90"
    assert gpu_info(TargetKind("cuda", {"max_threads_per_block": "128"})).max_threads_per_block \
        == 128
    with pytest.raises(TargetError, match="max_threads_per_block=2000"):
        gpu_info(TargetKind("cuda", {"max_threads_per_block": "2000"}))
    with pytest.raises(TargetError, match="fast-math=2"):
        CUDABackend().available_for(TargetKind("cuda", {"fast-math": "2"}))


@needs_nvrtc
def test_build_region_of_a_model(tmp_path) -> None:  # noqa: ANN001
    model, _ = conv_block_model()
    graph = PassManager(opt_level=3).run(import_onnx(model))
    target = TargetKind("cuda", {"arch": "sm_80", "max_threads_per_block": "128"})
    options = CompileOptions(extra={"dump_dir": str(tmp_path)})
    built = build_region(graph, target, options, want_ptx=True)
    assert built.arch == "sm_80" and built.cubin[:4] == b"\x7fELF"
    launches = [x for entry in built.table for x in entry["launches"]]
    assert launches and all(np.prod(x["block"]) <= 128 for x in launches)
    # the batch norm folded into the conv, the residual add and relu fused into it
    assert [e["op"] for e in built.table] == ["Conv+Add+Relu"]
    from tessera_cuda.backend import _dump

    written = _dump(options, "block", {"cu", "ptx", "tir"}, built)
    assert "__global__" in (tmp_path / "block.cu").read_text()
    assert ".target sm_80" in (tmp_path / "block.ptx").read_text()
    assert "thread_binding" in (tmp_path / "block.tir").read_text()
    assert set(written) == {"cu", "ptx", "tir"}


def test_device_objects_are_shared_per_index() -> None:
    dev = CUDADevice.get(0)
    assert dev is CUDABackend().device_api() and dev.instance(0) is dev
    one = dev.instance(1)
    assert one is not dev and one.key == "cuda:1" and one.instance(1) is one
    assert dev.alignment == 256 and not dev.host_memory
    with pytest.raises(TargetError):
        dev.instance(-1)


def test_device_buffers_are_not_numpy_readable() -> None:
    buf = CudaBuffer(0x1000, TensorType((4,), "float32"))
    with pytest.raises(TypeError, match="numpy cannot read it"):
        np.asarray(buf)


@needs_nvrtc
def test_tuning_records_choose_the_cuda_schedule() -> None:
    from tessera.autotune.records import TuningHistory, TuningRecord

    model, _ = conv_block_model()
    graph = PassManager(opt_level=3).run(import_onnx(model))
    target = TargetKind("cuda", {"arch": "sm_90"})
    plain = build_region(graph, target, CompileOptions())
    group = plain.lowered.groups[0]
    assert group.template == "cuda_conv2d_direct"
    knobs = group.configs[0].space.knobs
    name = next(n for n, k in knobs.items() if len(k.candidates) > 1)
    value = next(c for c in knobs[name].candidates if c != group.config[name])
    rec = TuningRecord(key=group.key, template=group.template, workload=[],
                       config={name: value}, backend="cuda", costs=[1e-5])
    tuned = build_region(graph, target, CompileOptions(tuning_records=TuningHistory([rec])))
    assert tuned.lowered.groups[0].config[name] == value
    assert tuned.lowered.groups[0].configs[0].tuned
