"""Winograd convolution (tessera.topi.nn.winograd, tessera_llvm.schedules.winograd): the
transform matrices, the weight transform, and compiled models whose tuning records choose
``template=winograd`` compared with a float64 reference and with the direct convolution.

Tolerances. Errors are measured as ``max |y - y64| / max |y64|`` against a float64 reference
on random normal data. Observed on ResNet-50's layers (64 to 512 input channels,
benchmarks/winograd_layers.py): the direct convolution 7e-7 to 2.4e-6, F(2x2, 3x3) 3e-7 to
9e-7 (its sums over the input channels are 9 times shorter than the direct convolution's),
F(4x4, 3x3) 4e-6 to 2.3e-5 (its transforms scale by up to 8 and 1/24). The tests allow 1e-5
for F(2x2, 3x3) and 1e-4 for F(4x4, 3x3): at least 4 times the largest error observed at 512
channels, for the smaller channel counts here (observed at most 2.8e-7 and 5e-6).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import tessera
from tessera.autotune.records import TuningRecord, append_records
from tessera.autotune.tasks import tasks_of_module
from tessera.topi.nn.winograd import winograd_matrices, winograd_weight_transform

#: Largest error relative to the output's largest magnitude, per output tile m.
TOLERANCE = {2: 1e-5, 4: 1e-4}


def conv_model(n: int, c: int, h: int, w: int, o: int, pad: int, seed: int = 0,
               residual: bool = False) -> tuple[Any, dict[str, np.ndarray], np.ndarray]:
    """ONNX ``Relu(Conv(x, w, b) [+ skip])`` with random weights, its inputs and the float64
    reference output."""
    import onnx
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, h, w)).astype(np.float32)
    wt = (rng.standard_normal((o, c, 3, 3)) / np.sqrt(9 * c)).astype(np.float32)
    b = rng.standard_normal(o).astype(np.float32)
    oh, ow = h + 2 * pad - 2, w + 2 * pad - 2
    inputs = {"x": x}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[pad] * 4, name="conv")]
    ins = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, list(x.shape))]
    last = "c"
    if residual:
        inputs["skip"] = rng.standard_normal((n, o, oh, ow)).astype(np.float32)
        ins.append(helper.make_tensor_value_info("skip", onnx.TensorProto.FLOAT,
                                                 [n, o, oh, ow]))
        nodes.append(helper.make_node("Add", ["c", "skip"], ["s"], name="add"))
        last = "s"
    nodes.append(helper.make_node("Relu", [last], ["y"], name="relu"))
    graph = helper.make_graph(
        nodes, "conv", ins,
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n, o, oh, ow])],
        [numpy_helper.from_array(wt, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    xp = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    ref = np.zeros((n, o, oh, ow))
    for r in range(3):
        for s in range(3):
            ref += np.einsum("nchw,oc->nohw", xp[:, :, r:r + oh, s:s + ow],
                             wt[:, :, r, s].astype(np.float64))
    ref += b[None, :, None, None]
    if residual:
        ref += inputs["skip"]
    return model, inputs, np.maximum(ref, 0)


def conv_task(mod: tessera.Module) -> Any:
    (task,) = [t for t in tasks_of_module(mod) if t.template == "conv2d_NCHWc"]
    return task


def schedule_config(mod: tessera.Module) -> dict[str, Any]:
    """The config of the module's convolution kernel (its schedule report)."""
    for cr in mod.compiled.values():
        for sched in cr.info["schedules"].values():
            if sched["template"] == "conv2d_NCHWc":
                return {**sched["config"], "tuned": sched["configs"][0]["tuned"]}
    raise AssertionError("no convolution kernel")


def with_config(model: Any, task: Any, config: dict[str, Any], path: Path) -> tessera.Module:
    """``model`` compiled with a tuning record giving the convolution ``config``."""
    workload = json.loads(task.key)[1]
    append_records(path, [TuningRecord(key=task.key, template=task.template, workload=workload,
                                       config={**task.default, **config}, backend="llvm",
                                       target="llvm", costs=[1e-3])])
    return tessera.compile(model, target="llvm", tuning_records=str(path))


def relative_error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("m", [2, 4])
def test_matrices_compute_a_correlation(m: int) -> None:
    """``A^T [(G g) * (B^T d)]`` is the valid correlation of ``alpha`` inputs with 3 taps,
    and the 2-D transform is the 2-D correlation (float64, exact up to rounding)."""
    at, g, bt = winograd_matrices(m)
    rng = np.random.default_rng(m)
    d, k = rng.standard_normal(m + 2), rng.standard_normal(3)
    want = np.array([d[i:i + 3] @ k for i in range(m)])
    np.testing.assert_allclose(at @ ((g @ k) * (bt @ d)), want, rtol=1e-12, atol=1e-12)
    d2, k2 = rng.standard_normal((m + 2, m + 2)), rng.standard_normal((3, 3))
    want2 = np.array([[np.sum(d2[i:i + 3, j:j + 3] * k2) for j in range(m)] for i in range(m)])
    got2 = at @ ((g @ k2 @ g.T) * (bt @ d2 @ bt.T)) @ at.T
    np.testing.assert_allclose(got2, want2, rtol=1e-12, atol=1e-12)


def test_weight_transform_of_packed_weights() -> None:
    from tessera.ops.layout import pack_conv_weight

    rng = np.random.default_rng(3)
    w = rng.standard_normal((32, 16, 3, 3)).astype(np.float32)
    packed = pack_conv_weight(w, 8, 16)  # (2, 2, 3, 3, 8, 16)
    u = winograd_weight_transform(packed, 2)
    assert u.shape == (4, 4, 2, 2, 8, 16) and u.dtype == np.float32
    _, g, _ = winograd_matrices(2)
    o, i = 17, 11  # output channel 17: block 1 lane 1; input channel 11: block 1 lane 3
    np.testing.assert_allclose(u[:, :, 1, 1, 3, 1], g @ w[o, i].astype(np.float64) @ g.T,
                               rtol=1e-6)
    with pytest.raises(ValueError, match="3x3"):
        winograd_weight_transform(pack_conv_weight(w[:, :, :1, :1], 8, 16), 2)


# (n, c, h, w, o, pad): spatial sizes that are not multiples of the tile, outputs smaller than
# a tile, padding 0 and 1, batch 1 and 2, channels that the 16-lane vector width does not
# divide (blocks of 8 and 4)
SHAPES = [
    (1, 16, 9, 11, 32, 1),
    (2, 24, 13, 7, 40, 0),
    (1, 20, 10, 10, 12, 1),
    (2, 64, 15, 15, 48, 1),
    (1, 32, 5, 6, 16, 0),
]


@pytest.mark.slow
@pytest.mark.parametrize("shape", SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_winograd_matches_reference_and_direct(shape: tuple[int, ...], tmp_path: Path) -> None:
    model, inputs, want = conv_model(*shape, seed=sum(shape))
    direct = tessera.compile(model, target="llvm")
    task = conv_task(direct)
    assert task.knobs["template"] == ["direct", "winograd"]
    assert task.knobs["winograd_tile"] == [2, 4]
    direct = with_config(model, task, {"template": "direct"}, tmp_path / "direct.jsonl")
    assert schedule_config(direct)["template"] == "direct"
    base = direct.run(**inputs)["y"]
    assert relative_error(base, want) < 1e-5
    for m in (2, 4):
        mod = with_config(model, task, {"template": "winograd", "winograd_tile": m},
                          tmp_path / f"f{m}.jsonl")
        cfg = schedule_config(mod)
        assert cfg["template"] == "winograd" and cfg["winograd_tile"] == m and cfg["tuned"]
        assert mod.tuning_summary()[0] == 1
        got = mod.run(**inputs)["y"]
        assert relative_error(got, want) < TOLERANCE[m], (m, relative_error(got, want))
        assert np.abs(got - base).max() < TOLERANCE[m] * np.abs(base).max()
        assert (got == 0).mean() > 0.2  # relu fused: about half the outputs are clamped


@pytest.mark.slow
def test_residual_epilogue_and_tuned_tiles(tmp_path: Path) -> None:
    """Conv + Add + Relu (a residual block's tail) with the product's register tile knobs."""
    model, inputs, want = conv_model(1, 64, 14, 14, 64, 1, seed=5, residual=True)
    task = conv_task(tessera.compile(model, target="llvm"))
    for k, (oc_tile, reg_n) in enumerate([(1, 16), (4, 4), (2, 6)]):
        mod = with_config(model, task, {"template": "winograd", "winograd_tile": 2,
                                        "winograd_oc_tile": oc_tile,
                                        "winograd_reg_n": reg_n}, tmp_path / f"r{k}.jsonl")
        cfg = schedule_config(mod)
        assert (cfg["winograd_oc_tile"], cfg["winograd_reg_n"]) == (oc_tile, reg_n)
        assert relative_error(mod.run(**inputs)["y"], want) < TOLERANCE[2]


def test_template_switches_the_lowered_code() -> None:
    """The knob changes the kernel: Winograd's stages and transformed weights appear in the
    lowered function, and the direct convolution's do not."""
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType
    from tessera_llvm.cpu import cpu_info
    from tessera_llvm.lowering import lower_region

    rng = np.random.default_rng(1)
    func = Function("conv")
    x = func.add_input("x", TensorType.of(np.zeros((1, 16, 9, 9), np.float32)))
    w = func.constant(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w")
    func.outputs = [func.op("Relu", func.op("Conv", x, w, pads=[1, 1, 1, 1]))]
    cpu = cpu_info("skylake-avx512")  # lowered, not run: the default direct on any host
    direct = lower_region(func, cpu)
    conv = next(k for k in direct.kernels if "ConvNCHWc" in k.op)
    key = conv.configs[0].key()
    assert conv.config["template"] == "direct"
    wino = lower_region(func, cpu, overrides={key: {"template": "winograd"}})
    kernel = next(k for k in wino.kernels if "ConvNCHWc" in k.op)
    assert kernel.config["template"] == "winograd" and kernel.configs[0].key() == key
    text, base = str(kernel.func), str(conv.func)
    assert "winograd_gemm" in text and "winograd_input" in text and "winograd" not in base
    assert any(name.endswith("_winograd2") for name in kernel.inputs)
    assert any(name.endswith("_winograd2") for name in wino.constants)


def test_default_template_follows_the_measured_rule() -> None:
    """ResNet-50's shapes default to Winograd (F(4x4) from 16x16 outputs up, F(2x2) below;
    on AVX2 F(4x4) also below 16x16 with fewer than 256 input channels, and from 32
    channels); few channels, strides and 1x1 kernels stay direct; NEON's 4 lanes (not
    measured) stay direct."""
    from tessera_llvm.schedules.common import CPUInfo
    from tessera_llvm.schedules.winograd import default_reg_n, default_template, default_tile

    avx512, avx2 = CPUInfo(vector_lanes=16), CPUInfo(vector_lanes=8, vector_registers=16)
    assert default_template(1, 4, 56, 56, 16, 64, avx512) == "winograd"
    assert default_template(1, 32, 7, 7, 16, 512, avx512) == "winograd"
    assert default_template(1, 2, 56, 56, 16, 32, avx512) == "direct"
    assert default_template(1, 4, 56, 56, 16, 16, avx512) == "direct"
    assert default_template(1, 8, 56, 56, 8, 64, avx2) == "winograd"
    assert default_template(1, 4, 56, 56, 8, 32, avx2) == "winograd"
    assert default_template(1, 2, 56, 56, 8, 16, avx2) == "direct"
    assert default_template(1, 4, 56, 56, 8, 16, avx2) == "direct"  # 16 input channels
    neon = CPUInfo(vector_lanes=4, vector_registers=32)
    assert default_template(1, 16, 56, 56, 4, 64, neon) == "direct"
    # tiles per register tile: the least rounding from half the limit up, all when fewer
    assert [default_reg_n(t, 8) for t in (196, 49, 16, 4, 200)] == [7, 7, 8, 4, 8]
    assert default_reg_n(49, 6) == 5
    assert (default_tile(56, 56), default_tile(28, 28), default_tile(14, 14),
            default_tile(7, 7)) == (4, 4, 2, 2)
    assert [default_tile(s, s, c, 8) for s, c in [(56, 64), (14, 128), (7, 64), (14, 256),
                                                  (7, 512)]] == [4, 4, 4, 2, 2]
    for shape, strides, kernel in [((1, 16, 12, 12, 16, 1), 1, 3), ((1, 64, 12, 12, 64, 1), 2, 3),
                                   ((1, 64, 12, 12, 64, 0), 1, 1)]:
        _check_not_eligible(shape, strides, kernel)


def _check_not_eligible(shape: tuple[int, ...], strides: int, kernel: int) -> None:
    import onnx
    from onnx import helper, numpy_helper

    n, c, h, _, o, pad = shape
    rng = np.random.default_rng(0)
    w = rng.standard_normal((o, c, kernel, kernel)).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], pads=[pad] * 4, strides=[strides] * 2)],
        "conv", [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [n, c, h, h])],
        [helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [n, o, None, None])],
        [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    task = conv_task(tessera.compile(model, target="llvm"))
    assert task.default.get("template", "direct") == "direct"
    if strides != 1 or kernel != 3:
        assert "template" not in task.knobs


@pytest.mark.slow
def test_tuning_candidate_checked_within_the_winograd_tolerance() -> None:
    """A Winograd candidate of ``tessera tune`` is checked against the default (direct)
    schedule's outputs with the tolerance it declares, so it is measured, not rejected as a
    wrong result."""
    from tessera.autotune.measure import check_outputs
    from tessera.plugin.target import Target
    from tessera_llvm.tuning import WINOGRAD_TOLERANCE

    # 16 input channels: direct by default with AVX-512 and with AVX2 (32 would be Winograd
    # on AVX2: test_default_template_follows_the_measured_rule)
    model, _, _ = conv_model(1, 16, 12, 12, 16, 1, seed=9)
    mod = tessera.compile(model, target="llvm", keep_graph_weights=True)
    task = conv_task(mod)
    assert task.default["template"] == "direct"
    cr = next(cr for cr in mod.compiled.values() if task.kernels[0] in cr.info["schedules"])
    backend, kind = mod.backends[cr.backend], Target.parse(task.target).kinds[0]
    base = backend.tuning_candidate(cr.region, task.kernels[0], {}, kind, mod.compile_options)
    wino = backend.tuning_candidate(cr.region, task.kernels[0],
                                    {task.key: {"template": "winograd", "winograd_tile": 4}},
                                    kind, mod.compile_options)
    assert (base.tolerance, wino.tolerance) == (0.0, WINOGRAD_TOLERANCE)
    base.run()
    wino.run()
    got, want = wino.outputs(), base.outputs()
    assert not np.array_equal(got[0], want[0])  # rounded differently
    assert check_outputs(got, want, wino.tolerance) is None
    assert check_outputs([got[0] + 3 * WINOGRAD_TOLERANCE * np.abs(want[0]).max()], want,
                         wino.tolerance) is not None


@pytest.mark.slow
def test_default_winograd_model_exports_and_loads(tmp_path: Path) -> None:
    """A model whose 64-channel convolution defaults to Winograd (on 16-lane CPUs) keeps its
    transformed weights in the artifact."""
    from tessera_llvm.cpu import cpu_info

    model, inputs, want = conv_model(1, 64, 16, 16, 64, 1, seed=7)
    mod = tessera.compile(model, target="llvm")
    if cpu_info().vector_lanes >= 16:
        assert schedule_config(mod)["template"] == "winograd"
    got = mod.run(**inputs)["y"]
    assert relative_error(got, want) < TOLERANCE[4]
    loaded = tessera.load(mod.export(tmp_path / "model.tar"))
    np.testing.assert_array_equal(loaded.run(**inputs)["y"], got)
