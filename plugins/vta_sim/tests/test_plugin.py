"""The vta_sim Tessera backend: claims of quantized ONNX layers, bit-exact runs against the
reference backend, partition reports with device copies, counters, artifacts, errors."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

tessera = pytest.importorskip("tessera")

from tessera.errors import CompileError, RunError, TargetError  # noqa: E402
from tessera.plugin import get_backend, get_backends  # noqa: E402
from tessera_vta import backend as vta_backend  # noqa: E402
from tessera_vta import patterns  # noqa: E402
from tessera_vta.errors import CompileError as VTACompileError  # noqa: E402
from tessera_vta.errors import SimulationError  # noqa: E402
from tessera_vta.tsim import unavailable_reason  # noqa: E402

OPSET = 17

pytestmark = pytest.mark.skipif(
    "vta_sim" not in get_backends(),
    reason="the vta_sim entry point is not registered (pip install -e plugins/vta_sim)")


def _model(nodes, inits, x_shape, y_shape, x_type=TensorProto.FLOAT, y_type=TensorProto.FLOAT):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", x_type, x_shape)],
                              [helper.make_tensor_value_info("y", y_type, y_shape)],
                              [numpy_helper.from_array(a, n) for n, a in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    onnx.checker.check_model(model)
    return model


def qdq_layer(rng, kind="conv", n=1, c=16, h=8, w=8, o=16, k=3, stride=1, pad=1, relu=True,
              shift=9, x_exp=-5, w_exp=-7, bias=True, dense_op="Gemm", x_zp_type=np.int8,
              y_exp=None):
    """A float-in, float-out QDQ model of one int8 layer with power-of-two scales:
    x -> Q -> DQ -> Conv/Gemm/MatMul(DQ(int8 W), DQ(int32 B)) [-> Relu] -> Q -> DQ -> y."""
    zp = np.zeros((), x_zp_type)
    y_exp = x_exp + w_exp + shift if y_exp is None else y_exp
    inits = {"x_s": np.float32(2.0**x_exp), "y_s": np.float32(2.0**y_exp), "zp": zp,
             "w_s": np.float32(2.0**w_exp), "w_zp": np.zeros((), np.int8),
             "b_s": np.float32(2.0 ** (x_exp + w_exp)), "b_zp": np.zeros((), np.int32)}
    if kind == "conv":
        inits["w_q"] = rng.integers(-127, 128, (o, c, k, k)).astype(np.int8)
        x_shape = [n, c, h, w]
        oh, ow = (h + 2 * pad - k) // stride + 1, (w + 2 * pad - k) // stride + 1
        y_shape = [n, o, oh, ow]
    else:
        inits["w_q"] = rng.integers(-127, 128, (o, c) if dense_op == "Gemm" else (c, o)
                                    ).astype(np.int8)
        x_shape, y_shape = [n, c], [n, o]
    inits["b_q"] = rng.integers(-3000, 3000, o).astype(np.int32)
    nodes = [helper.make_node("QuantizeLinear", ["x", "x_s", "zp"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "x_s", "zp"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["wd"]),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["bd"])]
    operands = ["xd", "wd"] + (["bd"] if bias else [])
    if kind == "conv":
        nodes.append(helper.make_node("Conv", operands, ["c"], name="layer", kernel_shape=[k, k],
                                      strides=[stride, stride], pads=[pad] * 4))
    elif dense_op == "Gemm":
        nodes.append(helper.make_node("Gemm", operands, ["c"], name="layer", transB=1))
    else:
        nodes.append(helper.make_node("MatMul", ["xd", "wd"], ["m"], name="layer"))
        nodes.append(helper.make_node("Add", ["m", "bd"], ["c"]))
    last = "c"
    if relu:
        nodes.append(helper.make_node("Relu", ["c"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "y_s", "zp"], ["yq"], name="requant"),
              helper.make_node("DequantizeLinear", ["yq", "y_s", "zp"], ["y"])]
    return _model(nodes, inits, x_shape, y_shape), x_shape


def run_both(model, x_shape, rng, target="vta_sim, ref", config=None):
    x = (rng.standard_normal(x_shape) * 1.5).astype(np.float32)
    mod = tessera.compile(model, target=target, config=config)
    got = mod.run(x=x)["y"]
    want = tessera.compile(model, target="ref", config=config).run(x=x)["y"]
    return mod, got, want


def vta_regions(mod):
    return [r for r in mod.partition_report().regions if r.backend == "vta_sim"]


CONV_CASES = [
    dict(),
    dict(relu=False, shift=2),
    dict(n=2, c=20, h=7, w=9, o=33, stride=2, shift=8),
    dict(c=3, o=5, k=1, pad=0, shift=4, bias=False),
    dict(c=32, h=6, w=6, o=24, k=5, pad=2, shift=10),
]


@pytest.mark.parametrize("case", CONV_CASES, ids=[str(i) for i in range(len(CONV_CASES))])
def test_qdq_conv_bit_exact_with_ref(case, rng):
    model, shape = qdq_layer(rng, "conv", **case)
    mod, got, want = run_both(model, shape, rng)
    assert len(vta_regions(mod)) == 1
    np.testing.assert_array_equal(got, want)
    assert np.unique(got).size > 4  # not a saturated or all-zero output


@pytest.mark.parametrize("dense_op", ["Gemm", "MatMul"])
@pytest.mark.parametrize("relu", [True, False])
@pytest.mark.parametrize("integer_pass", [True, False])
def test_qdq_dense_bit_exact_with_ref(dense_op, relu, integer_pass, rng):
    # the graph passes rewrite the product into the integer form (QDQToInteger); with that
    # pass switched off it arrives as written
    model, shape = qdq_layer(rng, "dense", n=3, c=70, o=40, relu=relu, shift=8,
                             dense_op=dense_op)
    config = tessera.CompileConfig(disabled_passes=[] if integer_pass else ["QDQToInteger"])
    mod, got, want = run_both(model, shape, rng, config=config)
    region = vta_regions(mod)
    assert len(region) == 1
    assert ("MatMulInteger" if integer_pass else dense_op) in region[0].ops
    np.testing.assert_array_equal(got, want)


def test_partition_report_shows_vta_region_and_copies(rng):
    model, shape = qdq_layer(rng, "conv")
    mod = tessera.compile(model, target="vta_sim, ref")
    report = mod.partition_report()
    assert [r.backend for r in report.regions] == ["ref", "vta_sim", "ref"]
    vta = report.regions[1]
    assert vta.device == "vta"
    assert sorted(vta.ops) == ["Conv", "DequantizeLinear", "QuantizeLinear", "Relu"]
    copies = {(c.value, c.src, c.dst) for c in report.copies}
    assert copies == {("xq", "cpu", "vta"), ("yq", "vta", "cpu")}
    assert "vta_sim" in report.table() and "cpu -> vta" in report.table()


def test_two_layers_share_one_region_without_copies_between(rng):
    first, _ = qdq_layer(rng, "conv", o=16, shift=9)
    # chain a second conv onto the first's int8 output (yq) inside one graph
    g = first.graph
    w2 = rng.integers(-127, 128, (8, 16, 3, 3)).astype(np.int8)
    g.initializer.extend([numpy_helper.from_array(w2, "w2_q"),
                          numpy_helper.from_array(np.float32(2.0**-4), "y2_s")])
    for node in g.node:
        if node.op_type == "DequantizeLinear" and node.input[0] == "yq":
            node.output[0] = "y1"
    g.node.extend([helper.make_node("DequantizeLinear", ["w2_q", "w_s", "w_zp"], ["w2d"]),
                   helper.make_node("Conv", ["y1", "w2d"], ["c2"], pads=[1, 1, 1, 1]),
                   helper.make_node("QuantizeLinear", ["c2", "y2_s", "zp"], ["y2q"]),
                   helper.make_node("DequantizeLinear", ["y2q", "y2_s", "zp"], ["y"])])
    g.output[0].type.tensor_type.shape.dim[1].dim_value = 8
    onnx.checker.check_model(first)
    mod, got, want = run_both(first, [1, 16, 8, 8], rng)
    regions = vta_regions(mod)
    assert len(regions) == 1 and regions[0].ops.count("Conv") == 2
    assert {c.value for c in mod.partition_report().copies} == {"xq", "y2q"}
    np.testing.assert_array_equal(got, want)


def qlinear_conv_model(rng):
    w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    inits = {"xs": np.float32(2**-5), "xz": np.int8(0), "w": w, "ws": np.float32(2**-7),
             "wz": np.int8(0), "ys": np.float32(2**-3), "yz": np.int8(0),
             "b": rng.integers(-3000, 3000, 16).astype(np.int32)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearConv", ["xq", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"],
                              ["yq"], pads=[1, 1, 1, 1], name="qconv"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return _model(nodes, inits, [1, 16, 8, 8], [1, 16, 8, 8]), [1, 16, 8, 8]


def qlinear_matmul_model(rng):
    b = rng.integers(-127, 128, (70, 20)).astype(np.int8)
    inits = {"xs": np.float32(2**-5), "xz": np.int8(0), "b": b, "bs": np.float32(2**-6),
             "bz": np.int8(0), "ys": np.float32(2**-4), "yz": np.int8(0)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "xz"], ["xq"]),
             helper.make_node("QLinearMatMul", ["xq", "xs", "xz", "b", "bs", "bz", "ys", "yz"],
                              ["yq"], name="qmm"),
             helper.make_node("DequantizeLinear", ["yq", "ys", "yz"], ["y"])]
    return _model(nodes, inits, [4, 70], [4, 20]), [4, 70]


def integer_model(rng, op="ConvInteger", relu=True):
    """ConvInteger/MatMulInteger -> Cast -> Mul(scale) -> Add(bias) -> Relu -> Q."""
    if op == "ConvInteger":
        w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
        bias = (rng.integers(-3000, 3000, (16, 1, 1)) * 2.0**-12).astype(np.float32)
        shape, out = [1, 16, 8, 8], [1, 16, 8, 8]
        attrs = {"pads": [1, 1, 1, 1]}
    else:
        w = rng.integers(-127, 128, (70, 20)).astype(np.int8)
        bias = (rng.integers(-3000, 3000, 20) * 2.0**-12).astype(np.float32)
        shape, out, attrs = [4, 70], [4, 20], {}
    inits = {"xs": np.float32(2**-5), "z": np.int8(0), "w": w, "acc_s": np.float32(2**-12),
             "bias": bias, "ys": np.float32(2**-3)}
    nodes = [helper.make_node("QuantizeLinear", ["x", "xs", "z"], ["xq"]),
             helper.make_node(op, ["xq", "w"], ["acc"], name="intlayer", **attrs),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["accf", "acc_s"], ["scaled"]),
             helper.make_node("Add", ["bias", "scaled"], ["biased"])]
    last = "biased"
    if relu:
        nodes.append(helper.make_node("Relu", ["biased"], ["r"]))
        last = "r"
    nodes += [helper.make_node("QuantizeLinear", [last, "ys", "z"], ["yq"]),
              helper.make_node("DequantizeLinear", ["yq", "ys", "z"], ["y"])]
    return _model(nodes, inits, shape, out), shape


@pytest.mark.parametrize("build", [qlinear_conv_model, qlinear_matmul_model,
                                   lambda rng: integer_model(rng, "ConvInteger"),
                                   lambda rng: integer_model(rng, "MatMulInteger", relu=False)],
                         ids=["QLinearConv", "QLinearMatMul", "ConvInteger", "MatMulInteger"])
def test_qlinear_and_integer_forms_bit_exact(build, rng):
    model, shape = build(rng)
    mod, got, want = run_both(model, shape, rng)
    assert len(vta_regions(mod)) == 1
    np.testing.assert_array_equal(got, want)
    assert np.unique(got).size > 4


@pytest.mark.parametrize("change, reason", [
    (dict(x_zp_type=np.uint8), "uint8, not int8"),
    (dict(y_exp=-0.5), "not a power of two"),
    (dict(shift=-1), "outside 0..31"),
], ids=["uint8", "scale", "shift"])
def test_layers_vta_cannot_run_stay_on_cpu(change, reason, rng):
    if change.get("y_exp") == -0.5:
        model, shape = qdq_layer(rng, "conv")
        for t in model.graph.initializer:
            if t.name == "y_s":
                t.CopyFrom(numpy_helper.from_array(np.float32(0.3), "y_s"))
    else:
        model, shape = qdq_layer(rng, "conv", **change)
    mod, got, want = run_both(model, shape, rng)
    assert vta_regions(mod) == []
    np.testing.assert_array_equal(got, want)
    from tessera.frontend.onnx.importer import import_onnx

    fn = import_onnx(model)
    root = [n for n in fn.nodes if n.op == "QuantizeLinear"][-1]
    assert reason in get_backend("vta_sim").explain(root)


def test_weight_matching_helpers():
    w = np.array([[3, -128], [127, 0]], np.float64) * 2.0**-7
    q, e = patterns.int8_weight(w.astype(np.float32))
    assert e == -7 and q.tolist() == [[3, -128], [127, 0]]
    assert patterns.int8_weight(np.array([6.0, 2.0]))[1] == -4  # 96 * 2^-4 = 6
    with pytest.raises(patterns.NotALayer):
        patterns.int8_weight(np.array([0.1, 0.2], np.float32))
    assert patterns.pow2_exponent(0.25) == -2 and patterns.pow2_exponent(0.3) is None
    assert patterns.int32_bias(np.array([0.5, -1.0]), -2, 2).tolist() == [2, -4]
    with pytest.raises(patterns.NotALayer, match="integer multiple"):
        patterns.int32_bias(np.array([0.1]), -2, 1)


def test_profile_shows_counters_updated_per_run(rng):
    model, shape = qdq_layer(rng, "conv")  # 16 -> 16 channels, 3x3, 8x8
    mod = tessera.compile(model, target="vta_sim, ref")
    compiled = next(cr for cr in mod.compiled.values() if cr.backend == "vta_sim")
    assert compiled.info["counters"] == {}  # nothing ran yet
    profile = mod.profile(x=rng.standard_normal(shape).astype(np.float32))
    counters = profile.counters["vta_sim"]
    assert counters["gemm_macs"] == 8 * 8 * 9 * 16 * 16  # pixels x taps x 16x16 block
    assert counters["bytes_loaded_wgt"] == 16 * 16 * 9
    assert counters["bytes_stored"] == 16 * 8 * 8
    assert counters["cycles"] > 0 and counters["alu_ops"] > 0 and counters["instructions"] > 0
    assert "counters (vta_sim)" in profile.table() and "gemm_macs" in profile.table()
    # per run, not accumulated
    mod.run(x=rng.standard_normal(shape).astype(np.float32))
    assert compiled.info["counters"]["gemm_macs"] == counters["gemm_macs"]


def test_export_and_load_do_not_recompile(rng, tmp_path, monkeypatch):
    model, shape = qdq_layer(rng, "conv", n=2, c=20, o=24)
    mod = tessera.compile(model, target="vta_sim, ref")
    x = rng.standard_normal(shape).astype(np.float32)
    want = mod.run(x=x)["y"]
    path = mod.export(tmp_path / "m.tar")

    def no_compiling(*args, **kwargs):
        raise AssertionError("tessera.load recompiled a vta_sim region")

    monkeypatch.setattr(patterns.Layer, "lower", no_compiling)
    monkeypatch.setattr(vta_backend.VTABackend, "compile", no_compiling)
    loaded = tessera.load(path)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], want)
    vta = next(cr for cr in loaded.compiled.values() if cr.backend == "vta_sim")
    assert vta.info["counters"]["cycles"] > 0


def test_tampered_layer_metadata_is_an_artifact_error(rng):
    from tessera.errors import ArtifactError

    model, _ = qdq_layer(rng, "conv")
    mod = tessera.compile(model, target="vta_sim, ref")
    backend = get_backend("vta_sim")
    compiled = next(cr for cr in mod.compiled.values() if cr.backend == "vta_sim")
    files = backend.save(compiled)
    assert set(files) == {"layers.json", "layer0.insn", "layer0.dram"}
    files["layer0.insn"] = files["layer0.insn"][:-3]
    kind = tessera.api.kind_of_region(compiled.region)
    with pytest.raises(ArtifactError, match="malformed"):
        backend.load(compiled.region, files, kind, None)


def test_target_options(rng, tmp_path, monkeypatch):
    with pytest.raises(TargetError, match="-sim=gpu: expected one of fsim, tsim"):
        tessera.compile(qdq_layer(rng)[0], target="vta_sim -sim=gpu, ref")
    with pytest.raises(TargetError, match="does not know option"):
        tessera.compile(qdq_layer(rng)[0], target="vta_sim -fast=1, ref")
    with pytest.raises(TargetError, match="cannot read a VTA configuration"):
        tessera.compile(qdq_layer(rng)[0], target=f"vta_sim -config={tmp_path}/none.json, ref")
    # a configuration file: 8x8 blocks
    from tessera_vta.config import VTAConfig

    VTAConfig(log_block=3, log_inp_buff_size=14, log_wgt_buff_size=16,
              log_acc_buff_size=16).save(tmp_path / "vta8.json")
    model, shape = qdq_layer(rng, "conv", c=12, o=20)
    mod, got, want = run_both(model, shape, rng,
                              target=f"vta_sim -config={tmp_path}/vta8.json, ref")
    np.testing.assert_array_equal(got, want)
    assert mod.compiled[vta_regions(mod)[0].name].plans[0].program.config.block == 8
    # the artifact carries the configuration: loading needs no -config file
    path = mod.export(tmp_path / "m8.tar")
    (tmp_path / "vta8.json").unlink()
    x = rng.standard_normal(shape).astype(np.float32)
    np.testing.assert_array_equal(tessera.load(path).run(x=x)["y"], mod.run(x=x)["y"])


def test_tsim_unavailable_is_refused_with_the_reason(rng, monkeypatch):
    import tessera_vta.tsim as tsim

    monkeypatch.setattr(tsim, "unavailable_reason", lambda: "the 'verilator' executable is "
                        "not on PATH")
    with pytest.raises(TargetError, match="vta_sim.*unavailable here: -sim=tsim: .*verilator"):
        tessera.compile(qdq_layer(rng)[0], target="vta_sim -sim=tsim, ref")
    # fsim still needs nothing
    tessera.compile(qdq_layer(rng)[0], target="vta_sim, ref")


@pytest.mark.skipif(unavailable_reason() is not None, reason=f"tsim: {unavailable_reason()}")
def test_tsim_small_layer_bit_exact(rng, tmp_path, monkeypatch):
    model, shape = qdq_layer(rng, "conv", c=8, h=5, w=6, o=16, shift=7)
    mod, got, want = run_both(model, shape, rng, target="vta_sim -sim=tsim, ref")
    np.testing.assert_array_equal(got, want)
    compiled = mod.compiled[vta_regions(mod)[0].name]
    assert compiled.info["simulator"] == "tsim"
    assert compiled.info["counters"]["cycles"] > 0 and compiled.info["counters"]["gemm_macs"] > 0
    # an artifact compiled for tsim refuses to load where tsim is missing, saying why
    import tessera_vta.tsim as tsim
    from tessera.errors import ArtifactError

    path = mod.export(tmp_path / "tsim.tar")
    monkeypatch.setattr(tsim, "unavailable_reason", lambda: "pyverilator cannot be imported")
    with pytest.raises(ArtifactError, match="-sim=tsim.*pyverilator cannot be imported"):
        tessera.load(path)


def test_vta_errors_become_tessera_errors_naming_the_node(rng, monkeypatch):
    model, shape = qdq_layer(rng, "conv")

    def broken_lower(self, config):
        raise VTACompileError("weight rows exceed the 16-bit x_stride")

    with monkeypatch.context() as m:
        m.setattr(patterns.Layer, "lower", broken_lower)
        with pytest.raises(CompileError, match="node requant: cannot lower conv2d.*x_stride"):
            tessera.compile(model, target="vta_sim, ref")

    mod = tessera.compile(model, target="vta_sim, ref")

    def broken_run(program, x, sim="fsim"):
        raise SimulationError("#3 'GEMM ...': input index 4096 beyond the buffer")

    monkeypatch.setattr(vta_backend, "run_program", broken_run)
    with pytest.raises(RunError, match="vta_sim layer requant .*conv2d.* fsim.*index 4096"):
        mod.run(x=rng.standard_normal(shape).astype(np.float32))


def test_cli_run_profile_prints_counters(rng, tmp_path, capsys):
    from tessera.cli.main import main

    model, _ = qdq_layer(rng, "conv")
    path = tmp_path / "q.onnx"
    onnx.save(model, str(path))
    assert main(["run", str(path), "--target", "vta_sim, ref", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "vta.conv2d" in out and "counters (vta_sim):" in out
    assert "bytes_loaded_wgt" in out and "cycles" in out
