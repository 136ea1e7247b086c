"""tessera-cudnn without a GPU: library discovery and its errors, descriptors, claims and the
reasons for declining, target options, artifacts of the plans."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto, helper

import tessera
from plugins.cudnn.tests.conftest import CROSS, model, needs_libs, rand
from tessera.errors import TargetError
from tessera.plugin.backend import CompileOptions
from tessera.plugin.target import TargetKind
from tessera_cudnn import cudnn_api as dnn
from tessera_cudnn import libs
from tessera_cudnn.backend import CuBLASBackend, CuDNNBackend
from tessera_cudnn.conv import ConvDescriptors, ConvPlan

pytestmark = needs_libs


def test_libraries_are_found_with_their_versions() -> None:
    cudnn, lt = libs.load("cudnn"), libs.load("cublasLt")
    assert cudnn.version[0] == libs.CUDNN_MAJOR and cudnn.path.endswith("libcudnn.so.9")
    assert lt.version[0] == libs.CUBLAS_MAJOR and "cublasLt" in lt.path


def test_a_missing_library_names_the_package(monkeypatch) -> None:  # noqa: ANN001
    def nowhere(name: str) -> str:
        raise libs.LibraryMissing(f"lib{name} is not installed: pip install nvidia-cudnn-cu13")

    libs.forget()
    try:
        with pytest.raises(libs.LibraryMissing, match="pip install nvidia-cudnn-cu13"):
            libs.load("cudnn", locate=nowhere)
        assert "nvidia-cudnn-cu13" in CuDNNBackend().available()
        with pytest.raises(TargetError, match="nvidia-cudnn-cu13"):
            tessera.compile(model([helper.make_node("Relu", ["x"], ["y"])], {"x": (2,)},
                                  {"y": (2,)}, {}), target=CROSS)
    finally:
        libs.forget()
    libs.forget()
    try:
        # a file that is not the library
        with pytest.raises(libs.LibraryMissing, match="cannot be loaded"):
            libs.load("cublasLt", locate=lambda name: "/nonexistent/libcublasLt.so.13")
    finally:
        libs.forget()
    assert libs.missing("cudnn") is None


def test_descriptors_agree_with_the_graph_and_refuse_what_cudnn_refuses() -> None:
    plan = ConvPlan(name="c", op="Conv", inputs=["x", "w", "b"], outputs=["y"], flops=0,
                    workspace=0, x_shape=[1, 4, 9, 9], w_shape=[8, 2, 3, 3],
                    y_shape=[1, 8, 5, 5], pads=[1, 1], strides=[2, 2], dilations=[1, 1],
                    groups=2)
    ConvDescriptors(plan)
    plan.y_shape = [1, 8, 4, 4]  # not what cuDNN computes
    with pytest.raises(dnn.DescriptorError, match=r"cuDNN computes output shape \[1, 8, 5, 5\]"):
        ConvDescriptors(plan)
    with pytest.raises(dnn.DescriptorError, match="convolution descriptor"):
        dnn.ConvDesc([1, 1], [0, 1], [1, 1], 1)  # a zero stride


def test_declined_nodes_are_reported_with_the_reason() -> None:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2],
                              ceil_mode=1),
             helper.make_node("Flatten", ["p"], ["f"]),
             helper.make_node("MatMul", ["f", "W"], ["m"]),
             helper.make_node("Gelu", ["m"], ["g"]),  # exact (erf) GELU: not fused
             helper.make_node("MatMul", ["g", "v"], ["y"])]  # matrix-vector
    m = model(nodes, {"x": (1, 2, 5, 5)}, {"y": (1,)},
              {"W": rand(rng, 18, 6), "v": rand(rng, 6)})
    mod = tessera.compile(m, target=CROSS)
    report = mod.partition_report()
    declined = {d[1]: d for d in report.declined}
    assert declined["MaxPool"][2:] == ("cudnn", declined["MaxPool"][3], "cuda")
    assert "ceil_mode" in declined["MaxPool"][3]
    assert "1-D operand" in declined["MatMul"][3] and declined["MatMul"][0] == "MatMul_y"
    assert "declined" in report.table() and "cudnn declined (ceil_mode" in report.table()
    assert report.backend_counts()["cublas"] == 1  # the first MatMul, without the Gelu


def test_claims_by_target_string() -> None:
    rng = np.random.default_rng(1)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"]), helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Flatten", ["r"], ["f"]), helper.make_node("MatMul", ["f", "W"],
                                                                         ["y"])]
    m = model(nodes, {"x": (1, 3, 4, 4)}, {"y": (1, 5)},
              {"w": rand(rng, 2, 3, 1, 1), "W": rand(rng, 32, 5)})

    def counts(target: str) -> dict[str, int]:
        return tessera.compile(m, target=target).partition_report().backend_counts()

    assert counts(CROSS) == {"cudnn": 2, "cuda": 1, "cublas": 1}
    assert counts("cuda -arch=sm_90 -libs=cudnn, llvm") == {"cudnn": 2, "cuda": 2}
    assert counts("cuda -arch=sm_90 -libs=cublas, llvm") == {"cuda": 3, "cublas": 1}
    assert counts("cublas -arch=sm_90, cuda -arch=sm_90") == {"cuda": 3, "cublas": 1}
    assert counts("cuda -arch=sm_90, llvm") == {"cuda": 4}


def test_integer_and_float64_convolutions_stay_on_cuda() -> None:
    rng = np.random.default_rng(2)
    m = model([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (1, 2, 4, 4)},
              {"y": (1, 3, 4, 4)}, {"w": rng.standard_normal((3, 2, 1, 1))},
              elem=TensorProto.DOUBLE)
    report = tessera.compile(m, target=CROSS).partition_report()
    assert report.backend_counts() == {"cuda": 1}
    assert "float32" in report.declined[0][3]


def _compile_region(target: str, nodes, inputs, outputs, weights):  # noqa: ANN001, ANN202
    mod = tessera.compile(model(nodes, inputs, outputs, weights), target=target)
    return next(c for c in mod.compiled.values() if c.backend in ("cudnn", "cublas"))


def test_target_options_reach_the_plans() -> None:
    rng = np.random.default_rng(3)
    conv = ([helper.make_node("Conv", ["x", "w"], ["y"])], {"x": (1, 2, 4, 4)},
            {"y": (1, 3, 4, 4)}, {"w": rand(rng, 3, 2, 1, 1)})
    (plan,) = _compile_region(CROSS, *conv).handle["plans"]
    assert plan.math == dnn.FMA_MATH and plan.workspace == 32 << 20
    (plan,) = _compile_region("cudnn -arch=sm_90 -tf32=1 -workspace_mb=4, cuda -arch=sm_90",
                              *conv).handle["plans"]
    assert plan.math == dnn.DEFAULT_MATH and plan.workspace == 4 << 20
    mm = ([helper.make_node("MatMul", ["a", "b"], ["y"])], {"a": (2, 3)}, {"y": (2, 4)},
          {"b": rand(rng, 3, 4)})
    (plan,) = _compile_region("cublas -arch=sm_90 -tf32=1, cuda -arch=sm_90",
                              *mm).handle["plans"]
    assert plan.compute == 77  # CUBLAS_COMPUTE_32F_FAST_TF32
    for bad in ("-tf32=maybe", "-workspace_mb=-1"):
        with pytest.raises(TargetError, match=bad.split("=")[0]):
            _compile_region(f"cublas -arch=sm_90 {bad}, cuda -arch=sm_90", *mm)


def test_without_arch_the_gpu_must_be_here() -> None:
    from tessera_cuda.driver import driver_missing

    if driver_missing() is None:
        pytest.skip("this machine has a GPU")
    assert CuBLASBackend().available_for(TargetKind("cublas", {})) is not None
    assert "-arch=sm_90" in CuDNNBackend().available_for(TargetKind("cudnn", {}))
    assert CuDNNBackend().available_for(TargetKind("cudnn", {"arch": "sm_90"})) is None


def test_plans_and_constants_round_trip_through_the_artifact(tmp_path) -> None:  # noqa: ANN001
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[0, 1, 1, 0]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("GlobalAveragePool", ["r"], ["y"])]
    m = model(nodes, {"x": (1, 2, 5, 5)}, {"y": (1, 3, 1, 1)}, {"w": rand(rng, 3, 2, 2, 2)})
    mod = tessera.compile(m, target=CROSS)
    (name,) = [n for n, c in mod.compiled.items() if c.backend == "cudnn"]
    compiled = mod.compiled[name]
    backend = CuDNNBackend()
    files = backend.save(compiled)
    again = backend.load(compiled.region, files, TargetKind("cudnn", {"arch": "sm_90"}),
                         CompileOptions())
    assert [p.to_json() for p in again.handle["plans"]] == \
        [p.to_json() for p in compiled.handle["plans"]]
    for k, v in compiled.handle["constants"].items():
        np.testing.assert_array_equal(again.handle["constants"][k], v)
    assert [k.name for k in again.kernels] == [k.name for k in compiled.kernels]
    assert again.kernels[0].workspace_bytes == compiled.kernels[0].workspace_bytes > 32 << 20
    path = tmp_path / "m.tar"
    mod.export(path)  # the whole module, cuda region and all
    import tarfile

    assert any(n.endswith("plans.json") for n in tarfile.open(path).getnames())


def test_a_damaged_artifact_is_an_artifact_error() -> None:
    from tessera.errors import ArtifactError

    rng = np.random.default_rng(5)
    compiled = _compile_region(CROSS, [helper.make_node("MatMul", ["a", "b"], ["y"])],
                               {"a": (2, 3)}, {"y": (2, 4)}, {"b": rand(rng, 3, 4)})
    files = CuBLASBackend().save(compiled)
    files["plans.json"] = b"{not json"
    with pytest.raises(ArtifactError, match="cannot read the saved plans"):
        CuBLASBackend().load(compiled.region, files, TargetKind("cublas", {"arch": "sm_90"}),
                             CompileOptions())


def test_tessera_plugins_lists_both_backends(capsys) -> None:  # noqa: ANN001
    from tessera.cli.main import main

    assert main(["plugins", "-v"]) == 0
    out = capsys.readouterr().out
    assert "cudnn" in out and "cublas" in out and "tessera-cudnn" in out


def test_the_partition_picture_shows_why_a_library_declined() -> None:
    from tessera.partition.html import to_html

    m = model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                                ceil_mode=1)], {"x": (1, 2, 5, 5)}, {"y": (1, 2, 3, 3)}, {})
    mod = tessera.compile(m, target=CROSS)
    page = to_html(mod.graph, report=mod.partition_report())
    assert "declined by cudnn: ceil_mode output size [3, 3]" in page


def test_one_handle_per_device_and_library() -> None:
    made = []

    class A(libs.PerDevice):
        def __init__(self, device: object) -> None:
            made.append(("A", device))

    class B(libs.PerDevice):
        def __init__(self, device: object) -> None:
            made.append(("B", device))

    d0, d1 = object(), object()
    assert A.of(d0) is A.of(d0) and A.of(d1) is not A.of(d0)
    assert isinstance(B.of(d0), B)
    assert made == [("A", d0), ("A", d1), ("B", d0)]

