"""Control flow compiled and run: If, Loop and Scan around bodies compiled for the module's
target, checked against onnxruntime on random data (tessera.testing.control_flow_models)."""

from __future__ import annotations

import threading

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import RunError, TesseraError
from tessera.testing import control_flow_models as cfm

ort = pytest.importorskip("onnxruntime")

def _targets() -> list[str]:
    from tessera.plugin.manager import get_registry

    backend = get_registry().backends.get("llvm")
    return ["ref"] + (["llvm"] if backend is not None and backend.available() is None else [])


def ort_run(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def check(model: onnx.ModelProto, feeds: dict[str, np.ndarray], target: str,
          module: object = None) -> object:
    mod = module or tessera.compile(model, target=target)
    got = mod.run(feeds)
    want = ort_run(model, feeds)
    assert list(got) == [o.name for o in model.graph.output]
    for (name, g), w in zip(got.items(), want):
        assert g.shape == w.shape and g.dtype == w.dtype, name
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5, err_msg=name)
    return mod


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("target", _targets())
def test_if_runs_the_branch_the_condition_picks(target: str) -> None:
    rng = np.random.default_rng(0)
    model = cfm.if_model()
    mod = None
    for mode in (True, False, True):
        feeds = {"x": rand(rng, 3, 8), "mode": np.array(mode), "scale": rand(rng, 1)}
        mod = check(model, feeds, target, mod)
    regions = [r.backend for r in mod.report.regions]  # type: ignore[attr-defined]
    assert regions == ["controlflow"]
    info = mod.compiled[mod.report.regions[0].name].info  # type: ignore[attr-defined]
    # both branches compiled for the target: their MatMuls run on it
    assert len(info["subgraphs"]) == 2
    if target == "llvm":
        assert all("on llvm" in line for line in info["subgraphs"])


@pytest.mark.parametrize("target", _targets())
def test_greedy_decoder_stops_at_the_end_token(target: str) -> None:
    model = cfm.greedy_decoder(stop_early=True)
    mod = None
    counts = set()
    for seed in range(6):
        rng = np.random.default_rng(seed)
        feeds = {"h0": rand(rng, 1, 32), "token0": np.array([seed % 16]),
                 "max_steps": np.array(8 + seed)}
        mod = check(model, feeds, target, mod)
        counts.add(int(mod.run(feeds)["count"]))  # type: ignore[attr-defined]
    assert len(counts) > 1  # the trip count is a run-time value


@pytest.mark.parametrize("target", _targets())
def test_loop_scan_outputs_stack_one_slice_per_iteration(target: str) -> None:
    rng = np.random.default_rng(1)
    model = cfm.greedy_decoder(steps=9, stop_early=False)
    mod = check(model, {"h0": rand(rng, 1, 32), "token0": np.array([5])}, target)
    assert mod.run(h0=rand(rng, 1, 32), token0=np.array([2]))["tokens"].shape == (9, 1)


@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("target", _targets())
def test_scan_rnn(target: str, reverse: bool) -> None:
    rng = np.random.default_rng(2)
    model = cfm.scan_rnn(reverse=reverse)
    check(model, {"h0": rand(rng, 2, 10), "x": rand(rng, 7, 2, 6)}, target)


@pytest.mark.parametrize("target", _targets())
def test_nested_if_in_loop_reads_a_value_two_scopes_out(target: str) -> None:
    rng = np.random.default_rng(3)
    model = cfm.nested_model()
    mod = None
    for n in (0, 1, 5):
        feeds = {"n": np.array(n), "acc0": rand(rng, 1, 4), "bias": rand(rng, 1, 4)}
        mod = check(model, feeds, target, mod)


@pytest.mark.parametrize("target", _targets())
def test_loop_equals_the_unrolled_model(target: str) -> None:
    rng = np.random.default_rng(4)
    x = rand(rng, 4, 16)
    looped = tessera.compile(cfm.loop_or_unrolled(12, 16), target=target)
    unrolled = tessera.compile(cfm.loop_or_unrolled(12, 16, unrolled=True), target=target)
    np.testing.assert_allclose(looped.run(x=x)["y"], unrolled.run(x=x)["y"], rtol=1e-5,
                               atol=1e-6)


def test_scan8_with_a_batch_axis() -> None:
    """Opset 8's Scan: every operand has a leading batch axis the body does not see."""
    rng = np.random.default_rng(5)
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "x_t"], ["s_out"]),
         helper.make_node("Mul", ["s_out", "x_t"], ["y_t"])], "body",
        [helper.make_tensor_value_info("s_in", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("x_t", TensorProto.FLOAT, [3])],
        [helper.make_tensor_value_info("s_out", TensorProto.FLOAT, [3]),
         helper.make_tensor_value_info("y_t", TensorProto.FLOAT, [3])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["", "s0", "xs"], ["s", "ys"], body=body, num_scan_inputs=1,
                          directions=[1])], "scan8",
        [helper.make_tensor_value_info("s0", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("xs", TensorProto.FLOAT, [2, 5, 3])],
        [helper.make_tensor_value_info("s", TensorProto.FLOAT, [2, 3]),
         helper.make_tensor_value_info("ys", TensorProto.FLOAT, [2, 5, 3])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 8)])
    model.ir_version = 7
    s0, xs = rand(rng, 2, 3), rand(rng, 2, 5, 3)
    mod = tessera.compile(model, target="ref")
    got = mod.run(s0=s0, xs=xs)
    want_s, want_y = [], []
    for b in range(2):  # directions=[1]: the input runs backwards, outputs in step order
        s, ys = s0[b].copy(), []
        for t in reversed(range(5)):
            s = s + xs[b, t]
            ys.append(s * xs[b, t])
        want_s.append(s)
        want_y.append(np.stack(ys))
    np.testing.assert_allclose(got["s"], np.stack(want_s), rtol=1e-6)
    np.testing.assert_allclose(got["ys"], np.stack(want_y), rtol=1e-6)
    check(model, {"s0": s0, "xs": xs}, "ref", mod)


def test_a_loop_that_stops_before_its_scan_length_raises() -> None:
    """Scan outputs are planned for the trip count known at compile time; a loop whose
    condition ends it earlier has outputs of data-dependent length: a RunError, not a
    half-written result."""
    body = helper.make_graph(
        [helper.make_node("Add", ["v_in", "one"], ["v_out"]),
         helper.make_node("Less", ["v_out", "stop"], ["cond_out"]),
         helper.make_node("Identity", ["v_out"], ["v_scan"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("v_scan", TensorProto.FLOAT, [])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["M", "", "v0"], ["v", "scan"], body=body)], "early",
        [helper.make_tensor_value_info("v0", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("stop", TensorProto.FLOAT, [])],
        [helper.make_tensor_value_info("v", TensorProto.FLOAT, []),
         helper.make_tensor_value_info("scan", TensorProto.FLOAT, [4])],
        [numpy_helper.from_array(np.array(4, np.int64), "M"),
         numpy_helper.from_array(np.array(1, np.float32), "one")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, target="ref")
    got = mod.run(v0=np.array(0, np.float32), stop=np.array(100, np.float32))
    np.testing.assert_array_equal(got["scan"], [1, 2, 3, 4])
    with pytest.raises(RunError, match="ran 2 iterations but its scan outputs were compiled "
                                       "for 4"):
        mod.run(v0=np.array(0, np.float32), stop=np.array(2, np.float32))


def test_branches_of_different_shapes_need_a_constant_condition() -> None:
    then_g = helper.make_graph([helper.make_node("Identity", ["x"], ["a"])], "t", [],
                               [helper.make_tensor_value_info("a", TensorProto.FLOAT, None)])
    else_g = helper.make_graph([helper.make_node("Concat", ["x", "x"], ["b"], axis=0)], "e",
                               [], [helper.make_tensor_value_info("b", TensorProto.FLOAT, None)])
    graph = helper.make_graph(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n"])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(TesseraError, match=r"output 0 is float32\[2\] in then_branch and "
                                           r"float32\[4\] in else_branch"):
        tessera.compile(model, target="ref")
    # with the condition frozen the branch taken is inlined: no If is left
    mod = tessera.compile(model, target="ref", freeze_inputs={"c": np.array(False)})
    assert all("If" not in r.ops for r in mod.report.regions)
    x = np.arange(2, dtype=np.float32)
    np.testing.assert_array_equal(mod.run(x=x)["y"], np.concatenate([x, x]))


@pytest.mark.parametrize("target", _targets())
def test_concurrent_calls_of_a_loop_module(target: str) -> None:
    model = cfm.greedy_decoder(stop_early=True)
    mod = tessera.compile(model, target=target)
    rng = np.random.default_rng(6)
    cases = [{"h0": rand(rng, 1, 32), "token0": np.array([k]), "max_steps": np.array(6 + k)}
             for k in range(8)]
    want = [ort_run(model, c) for c in cases]
    errors: list[str] = []

    def worker(k: int) -> None:
        for _ in range(15):
            got = mod.run(cases[k])
            for (name, g), w in zip(got.items(), want[k]):
                if not np.allclose(g, w, rtol=1e-5, atol=1e-5):
                    errors.append(f"thread {k}: {name}")

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(len(cases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors


@pytest.mark.parametrize("target", _targets())
def test_artifact_round_trip(target: str, tmp_path) -> None:
    rng = np.random.default_rng(7)
    model = cfm.scan_rnn()
    feeds = {"h0": rand(rng, 2, 10), "x": rand(rng, 7, 2, 6)}
    mod = tessera.compile(model, target=target)
    path = mod.export(tmp_path / "scan.tar")
    loaded = tessera.load(path)
    check(model, feeds, target, loaded)


def test_fold_constants_takes_the_branch_of_a_constant_condition() -> None:
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType
    from tessera.passes.dce import DeadCodeElimination
    from tessera.passes.fold_constants import FoldConstants

    def branch(op: str) -> Function:
        g = Function(op.lower())
        x = g.add_input("x", TensorType((3,), "float32"))
        g.outputs = [g.op(op, x)]
        return g

    fn = Function("main")
    x = fn.add_input("x", TensorType((3,), "float32"))
    cond = fn.constant(np.array(False))
    y = fn.add_node("If", [cond, x], {"then_branch": branch("Relu"),
                                     "else_branch": branch("Neg")}).outputs[0]
    fn.outputs = [fn.op("Exp", y)]
    fn = DeadCodeElimination().run(FoldConstants().run(fn))
    assert [n.op for n in fn.nodes] == ["Neg", "Identity", "Exp"]
    from tessera.ir.verifier import verify

    verify(fn)


def test_dump_code_puts_each_body_in_its_own_folder(tmp_path) -> None:
    """A body's regions are named like the model's (region0_llvm): each body dumps into a
    folder of its own, never over the model's files or another body's."""
    if "llvm" not in _targets():
        pytest.skip("the tessera-llvm plugin is missing")
    tessera.compile(cfm.if_model(), target="llvm", dump_code="ll", dump_dir=tmp_path)
    folders = sorted(p.name for p in tmp_path.iterdir() if p.is_dir())
    assert folders == ["subgraph0_then", "subgraph1_else"]
    for name in folders:
        assert list((tmp_path / name).glob("region*_llvm.ll"))
