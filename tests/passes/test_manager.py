"""Tests for tessera.passes.manager: pipeline, switches, timings, dumps, verification."""

import numpy as np
import pytest

from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import IRError, PassError
from tessera.ir.graph import Function
from tessera.ir.types import DType, TensorType
from tessera.ir.verifier import verify
from tessera.passes import (
    Canonicalize,
    DeadCodeElimination,
    FoldConstants,
    GatherBeforeMatMul,
    Pass,
    PassManager,
    QDQToInteger,
    SimplifyInference,
    default_passes,
)
from tessera.passes.manager import Rewriter

F32 = DType.float32


def rand(r, *shape):
    return r.standard_normal(shape).astype(np.float32)


def small_cnn() -> Function:
    """Conv -> BatchNorm -> Relu -> Identity -> Flatten -> Gemm, with constant subgraphs,
    a no-op Dropout, a Transpose pair and dead code."""
    r = np.random.default_rng(7)
    fn = Function("cnn", {"output_names": ["logits", "aux"]})
    x = fn.add_input("x", TensorType((2, 3, 6, 6), F32))
    w = fn.op("Add", fn.constant(rand(r, 4, 3, 3, 3), "w0"), fn.constant(rand(r, 4, 3, 3, 3)),
              name="w")  # constant subgraph: folded
    conv = fn.op("Conv", x, w, fn.constant(rand(r, 4), "b"), name="conv", pads=[1, 1, 1, 1],
                 strides=[2, 2])
    var = fn.op("Relu", fn.constant(rand(r, 4)), name="var_relu")
    var = fn.op("Add", var, fn.constant(np.full(4, 0.5, np.float32)), name="var")
    bn = fn.op("BatchNormalization", conv, fn.constant(rand(r, 4)), fn.constant(rand(r, 4)),
               fn.constant(rand(r, 4)), var, name="bn")
    relu = fn.op("Relu", bn, name="relu")
    ident = fn.op("Identity", relu, name="ident")
    drop = fn.add_node("Dropout", [ident], {"ratio": 0.0}, name="drop").outputs[0]
    t1 = fn.op("Transpose", drop, perm=[0, 2, 3, 1], name="t1")
    t2 = fn.op("Transpose", t1, perm=[0, 3, 1, 2], name="t2")
    flat = fn.op("Flatten", t2, axis=1, name="flat")
    logits = fn.op("Gemm", flat, fn.constant(rand(r, 5, 36), "fc_w"),
                   fn.constant(rand(r, 5), "fc_b"), name="fc", transB=1)
    fn.op("Relu", logits, name="dead")
    aux = fn.op("Squeeze", fn.op("Unsqueeze", x, axes=[0], name="unsq"), axes=[0], name="sq")
    fn.outputs = [logits, aux]
    verify(fn)
    return fn


def positional(fn, feeds):
    res = evaluate_function(fn, feeds)
    return [res[v.name] for v in fn.outputs]


FEEDS = {"x": np.random.default_rng(8).standard_normal((2, 3, 6, 6)).astype(np.float32)}


def names(passes):
    return [p.name for p in passes]


def test_default_passes_per_level():
    assert default_passes(0) == []
    assert names(default_passes(1)) == ["FoldConstants", "DeadCodeElimination"]
    full = ["QDQToInteger", "FoldConstants", "SimplifyInference", "Canonicalize",
            "GatherBeforeMatMul", "FoldConstants", "DeadCodeElimination"]
    assert names(default_passes(2)) == full
    assert names(default_passes(3)) == full
    assert names(default_passes()) == full


def test_pass_classes_and_levels():
    for cls, level in [(FoldConstants, 1), (DeadCodeElimination, 1), (SimplifyInference, 2),
                       (Canonicalize, 2), (GatherBeforeMatMul, 2), (QDQToInteger, 2)]:
        p = cls()
        assert isinstance(p, Pass)
        assert p.name == cls.__name__ and p.opt_level == level


@pytest.mark.parametrize("opt_level", [0, 1, 2, 3])
def test_pipeline_preserves_numerics(opt_level):
    fn = small_cnn()
    want = positional(fn.copy(), FEEDS)
    pm = PassManager(opt_level=opt_level, verify=True)
    out = pm.run(fn)
    verify(out)
    got = positional(out, FEEDS)
    for g, w in zip(got, want, strict=True):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4)
    assert out.attrs["output_names"] == ["logits", "aux"]
    assert names(pm.selected()) == names(default_passes(opt_level))
    assert [t[0] for t in pm.timings] == names(default_passes(opt_level))


def test_full_pipeline_result():
    fn = PassManager(opt_level=3).run(small_cnn())
    assert [n.op for n in fn.nodes] == ["Conv", "Relu", "Reshape", "Gemm"]
    assert fn.outputs[1] is fn.inputs[0]  # Unsqueeze+Squeeze of the input is the input


def test_level_zero_changes_nothing():
    fn = small_cnn()
    text = str(fn)
    pm = PassManager(opt_level=0)
    assert pm.run(fn) is fn and str(fn) == text
    assert pm.timings == []


def test_timings():
    pm = PassManager()
    pm.run(small_cnn())
    assert [name for name, _ in pm.timings] == names(default_passes(3))
    assert all(isinstance(ms, float) and ms >= 0 for _, ms in pm.timings)
    pm.run(small_cnn())
    assert len(pm.timings) == 7  # reset per run


def test_switch_off_by_pass_config_and_disabled():
    pm = PassManager(pass_config={"FoldConstants": False}, disabled={"Canonicalize"})
    assert names(pm.selected()) == ["QDQToInteger", "SimplifyInference", "GatherBeforeMatMul",
                                    "DeadCodeElimination"]
    fn = pm.run(small_cnn())
    ops = [n.op for n in fn.nodes]
    assert "Flatten" in ops and "Identity" not in ops and "Dropout" not in ops
    # unfolded, the variance is computed, so the BatchNormalization cannot be simplified
    assert "BatchNormalization" in ops and "Add" in ops


def test_pass_config_can_force_a_pass_on():
    pm = PassManager(opt_level=1, pass_config={"Canonicalize": True})
    assert names(pm.selected()) == ["FoldConstants", "Canonicalize", "FoldConstants",
                                    "DeadCodeElimination"]


def test_disabling_middle_passes_runs_fold_once():
    pm = PassManager(disabled={"QDQToInteger", "SimplifyInference", "Canonicalize",
                               "GatherBeforeMatMul"})
    assert names(pm.selected()) == ["FoldConstants", "DeadCodeElimination"]


@pytest.mark.parametrize("kwargs", [{"disabled": {"Canonicalise"}},
                                    {"pass_config": {"FoldConstant": False}}])
def test_unknown_pass_names(kwargs):
    with pytest.raises(PassError, match=r"unknown pass name\(s\) (Canonicalise|FoldConstant); "
                                        r"known passes: Canonicalize, DeadCodeElimination, "
                                        r"FoldConstants, GatherBeforeMatMul, "
                                        r"QDQToInteger, SimplifyInference"):
        PassManager(**kwargs)


def test_dump_dir(tmp_path):
    dump = tmp_path / "dumps"
    fn = small_cnn()
    first = str(fn)
    PassManager(dump_dir=dump).run(fn)
    files = sorted(p.name for p in dump.iterdir())
    assert files == ["00_input.txt", "01_QDQToInteger.txt", "02_FoldConstants.txt",
                     "03_SimplifyInference.txt", "04_Canonicalize.txt",
                     "05_GatherBeforeMatMul.txt", "06_FoldConstants.txt",
                     "07_DeadCodeElimination.txt"]
    assert (dump / "00_input.txt").read_text() == first + "\n"
    assert (dump / "07_DeadCodeElimination.txt").read_text() == str(fn) + "\n"
    assert "BatchNormalization" in (dump / "02_FoldConstants.txt").read_text()
    assert "BatchNormalization" not in (dump / "03_SimplifyInference.txt").read_text()


class BreakTypes(Pass):
    name = "BreakTypes"

    def run(self, fn):
        fn.nodes[0].outputs[0].type = TensorType((1,), F32)
        return fn


class Crash(Pass):
    def run(self, fn):
        raise KeyError("oops")


class ReturnsNothing(Pass):
    def run(self, fn):
        return None


def test_verify_after_each_pass_names_the_pass():
    pm = PassManager(passes=[FoldConstants(), BreakTypes()], verify=True)
    with pytest.raises(PassError, match=r"malformed after pass BreakTypes: function cnn: node "):
        pm.run(small_cnn())
    # without verification the broken graph goes through
    PassManager(passes=[BreakTypes()]).run(small_cnn())


def test_pass_bug_is_reported_with_its_name():
    assert Crash.name == "Crash"
    with pytest.raises(PassError, match=r"pass Crash failed on cnn: KeyError: 'oops'"):
        PassManager(passes=[Crash()]).run(small_cnn())
    with pytest.raises(PassError, match=r"pass ReturnsNothing returned NoneType"):
        PassManager(passes=[ReturnsNothing()]).run(small_cnn())


def test_custom_pass_list_respects_levels_and_names():
    class Late(Pass):
        opt_level = 4

        def run(self, fn):
            fn.attrs["late"] = True
            return fn

    pm = PassManager(opt_level=3, passes=[DeadCodeElimination(), Late()])
    fn = pm.run(small_cnn())
    assert "late" not in fn.attrs
    fn = PassManager(opt_level=4, passes=[Late()]).run(small_cnn())
    assert fn.attrs["late"] is True
    assert names(PassManager(passes=[Late()], disabled={"Late"}).selected()) == []


def test_op_errors_inside_a_pass_name_the_pass():
    class BadRewrite(Pass):
        def run(self, fn):
            Rewriter(fn).add("Add", [fn.inputs[0]])  # one input short
            return fn

    with pytest.raises(PassError, match=r"pass BadRewrite failed on cnn: OpError: .*expected 2"):
        PassManager(passes=[BadRewrite()]).run(small_cnn())


# -- Rewriter ------------------------------------------------------------------------------------

def chain_fn():
    fn = Function()
    x = fn.add_input("x", TensorType((2, 3), F32))
    a = fn.op("Relu", x, name="a")
    b = fn.op("Add", a, a, name="b")
    c = fn.op("Relu", b, name="c")
    fn.outputs = [c, a]
    return fn, x, a, b, c


def test_rewriter_counts_and_replaces():
    fn, x, a, b, c = chain_fn()
    rw = Rewriter(fn)
    assert (rw.count(x), rw.count(a), rw.count(b), rw.count(c)) == (1, 3, 1, 1)
    assert [n.name for n in rw.readers(a)] == ["b", "b"]
    rw.replace(a, x)
    assert fn.node_by_name("b").inputs == [x, x] and fn.outputs == [c, x]
    assert (rw.count(a), rw.count(x)) == (0, 4)
    rw.remove_if_unused([a.producer])
    rw.finish()
    assert [n.name for n in fn.nodes] == ["b", "c"]
    verify(fn)


def test_rewriter_set_input_add_and_finish_sorts():
    fn, x, a, b, c = chain_fn()
    rw = Rewriter(fn)
    neg = rw.add("Relu", [x], name="late")  # appended after its future reader
    rw.set_input(c.producer, 0, neg.output)
    assert rw.count(b) == 0 and rw.count(neg.output) == 1
    rw.remove_if_unused([b.producer])  # b goes; a stays (a function output)
    assert rw.is_removed(b.producer) and not rw.is_removed(a.producer)
    rw.finish()
    assert [n.name for n in fn.nodes] == ["a", "late", "c"]
    verify(fn)


def test_malformed_input_is_an_ir_error():
    fn = small_cnn()
    fn.nodes.reverse()
    with pytest.raises(IRError, match="used before"):
        PassManager(verify=True).run(fn)


@pytest.mark.parametrize("value", ["maybe", 2, 0.5, None, [True]])
def test_pass_config_values_must_be_switches(value):
    with pytest.raises(PassError, match=r"pass config FoldConstants=.*: expected on or off"):
        PassManager(pass_config={"FoldConstants": value})


def test_pass_options_are_not_pass_names():
    with pytest.raises(PassError, match=r"unknown pass name\(s\) FuseOps\.max_depth; .*passes "
                                        r"have no options such as 'FuseOps\.max_depth'"):
        PassManager(pass_config={"FuseOps.max_depth": 4})
    PassManager(pass_config={"FoldConstants": 0, "Canonicalize": np.True_})
