"""The plugin boundary, point by point as a vendor met it (issue: "A vendor's path from nothing
to a tested backend plugin"): each test names the friction point it covers."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import (
    ArtifactError,
    CompileError,
    PluginArtifactError,
    PluginCompileError,
    PluginError,
    PluginRunError,
    RunError,
)
from tessera.ir.graph import Function, Node
from tessera.partition.patterns import Pattern, region_matches
from tessera.plugin import Backend, CompiledRegion, CompileOptions, CPUDevice, Kernel
from tessera.plugin.contract import strict_contracts
from tessera.plugin.manager import get_registry, reload_plugins
from tessera.plugin.target import TargetKind
from tessera.testing.kit import NodeConformance, check_backend, node_conformance, register_backend

HAS_LLVM = "llvm" in get_registry().backends and get_registry().backends["llvm"].available() is None


def _np_kernel(node: Node) -> Callable[..., np.ndarray]:
    if node.op == "Relu":
        return lambda x: np.maximum(x, 0)
    if node.op == "Add":
        return np.add
    raise AssertionError(node.op)


class NPU(Backend):
    """A small backend whose bugs the tests switch on one at a time."""

    device = "cpu"

    def __init__(self, name: str = "kitnpu", bug: str = "", check: Callable[[Node], bool]
                 | None = None):
        self.name = name
        self.bug = bug
        self._check = check
        self.seen_matches: list[list[tuple[str, list[str]]]] = []

    def claims(self, target: TargetKind) -> list[Pattern]:
        if self.bug == "claims-raise":
            raise KeyError("claims")
        return [Pattern("Relu", inputs=[Pattern("Add")], name="AddRelu"),
                Pattern("Relu", check=self._check)]

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> Any:
        if self.bug == "compile-none":
            return None
        matches = region_matches(region)
        self.seen_matches.append([(m.pattern, [n.name for n in m.nodes]) for m in matches])
        kernels = []
        for m in matches:
            if m.pattern == "AddRelu":
                add = m.nodes[1]
                names = [v.name for v in add.inputs]

                def fn(ins: list[Any], outs: list[Any]) -> None:
                    np.maximum(ins[0] + ins[1], 0, out=outs[0])
            else:
                names = [m.root.inputs[0].name]
                compute = _np_kernel(m.root)

                def fn(ins: list[Any], outs: list[Any], compute=compute) -> Any:
                    if self.bug == "kernel-returns":
                        return compute(*ins)
                    np.copyto(outs[0], compute(*ins))
                    return None
            kernels.append(Kernel(m.root.name, fn, names, [m.root.outputs[0].name],
                                  m.pattern))
        if self.bug == "no-kernels":
            kernels = []
        tensors = {v.name: v.type for v in region.inputs}
        for node in region.nodes:
            tensors.update({o.name: o.type for o in node.outputs})
        return CompiledRegion(self.name, region, kernels, tensors,
                              {v.name: v.data for v in region.constants()},
                              handle=[k.name for k in kernels])

    def save(self, compiled: CompiledRegion) -> dict[str, bytes]:
        return {"kernels.txt": "\n".join(compiled.handle).encode()}


@pytest.fixture
def npu() -> Iterator[Callable[..., NPU]]:
    registered = []

    def make(*args: Any, **kwargs: Any) -> NPU:
        backend = NPU(*args, **kwargs)
        registered.append(register_backend(backend, "tessera-kitnpu", "0.3"))
        return backend

    yield make
    for r in registered:
        r.remove()


def _model(ops: tuple[str, ...] = ("Add", "Relu", "Exp", "Relu")) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])
    b = onnx.numpy_helper.from_array(np.linspace(-1, 1, 8, dtype=np.float32), "b")
    nodes, prev = [], "x"
    for i, op in enumerate(ops):
        out = "y" if i == len(ops) - 1 else f"t{i}"
        ins = [prev, "b"] if op == "Add" else [prev]
        nodes.append(helper.make_node(op, ins, [out], name=f"n{i}_{op}"))
        prev = out
    graph = helper.make_graph(nodes, "g", [x], [y], [b])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(x: np.ndarray) -> np.ndarray:
    return np.maximum(np.exp(np.maximum(x + np.linspace(-1, 1, 8, dtype=np.float32), 0)), 0)


X = np.random.default_rng(7).standard_normal((2, 8)).astype(np.float32)


# -- 1. a backend can be tested: claimed-only conformance with per-backend counts ------------

def _relu_case() -> Any:
    return next(c for c in NodeConformance("ref", ops={"Relu"}).cases if c.name == "test_relu")


def test_1_claimed_only_counts_what_the_backend_ran(npu) -> None:
    npu()
    suite = NodeConformance("kitnpu", ops={"Relu"})
    result = suite.run(_relu_case())
    assert result.status == "passed" and result.nodes == {"kitnpu": 1}
    assert suite.outcome(result) == ("pass", "")


def test_1_claiming_nothing_it_should_is_a_failure_not_a_pass(npu, monkeypatch) -> None:
    # the failure below is on purpose: keep it out of the session's per-backend summary
    monkeypatch.setattr(node_conformance, "_TALLY", {})
    npu(check=lambda node: False)  # a check that refuses every node
    suite = NodeConformance("kitnpu", ops={"Relu"})
    result = suite.run(_relu_case())
    assert result.status == "unclaimed" and "kitnpu" not in result.nodes
    verdict, message = suite.outcome(result)
    assert verdict == "fail" and "claims Relu but took none" in message
    with pytest.raises(pytest.fail.Exception):
        suite.check(_relu_case())


def test_1_baseline_lists_known_failures_and_goes_stale(npu, tmp_path: Path) -> None:
    npu(check=lambda node: False)
    baseline = tmp_path / "known.txt"
    baseline.write_text("## not claimed\ntest_relu  # refused on purpose\n")
    suite = NodeConformance("kitnpu", ops={"Relu"}, baseline=baseline)
    assert suite.outcome(suite.run(_relu_case())) == ("xfail", "refused on purpose")
    passing = NodeConformance("kitnpu", ops={"Relu"}, baseline=baseline)
    ok = passing.run(_relu_case())
    ok.status = "passed"
    assert passing.outcome(ok)[0] == "fail"  # listed but passes: remove the line


def test_1_unregistered_backend_is_an_error_not_a_skip() -> None:
    with pytest.raises(PluginError, match="unknown target kind 'nosuchnpu'"):
        NodeConformance("nosuchnpu", ops={"Relu"}).run(_relu_case())


# -- 2. bugs do not fail silently -----------------------------------------------------------

def _raising_check(node: Node) -> bool:
    return node.attr["alpha"] > 0  # type: ignore[attr-defined]  # the typo: attr for attrs


def test_2_check_that_raises_warns_by_default(npu) -> None:
    npu(check=_raising_check)
    with pytest.warns(RuntimeWarning, match=r"backend 'kitnpu' \(plugin tessera-kitnpu 0.3\).*"
                      r"check of pattern 'Relu' raised AttributeError"):
        mod = tessera.compile(_model(("Relu",)), target="kitnpu, ref")
    assert [r.backend for r in mod.partition_report().regions] == ["ref"]


def test_2_check_that_raises_is_an_error_in_strict_mode(npu) -> None:
    npu(check=_raising_check)
    with strict_contracts(), pytest.raises(PluginError, match="check of pattern 'Relu'"):
        tessera.compile(_model(("Relu",)), target="kitnpu, ref")


def test_2_kernel_that_returns_its_result_is_an_error(npu) -> None:
    npu(bug="kernel-returns")
    mod = tessera.compile(_model(("Relu",)), target="kitnpu, ref")
    with pytest.raises(PluginRunError, match=r"kernel n0_Relu \(Relu\) returned ndarray "
                       r"instead of None.*contract: a kernel writes its outputs") as err:
        mod.run(x=X)
    assert isinstance(err.value, RunError)
    assert (err.value.backend, err.value.plugin) == ("kitnpu", "tessera-kitnpu 0.3")


# -- 3. contract violations are PluginErrors naming the plugin ------------------------------

def test_3_compile_returning_none(npu) -> None:
    npu(bug="compile-none")
    with pytest.raises(PluginCompileError, match=r"backend 'kitnpu' \(plugin tessera-kitnpu "
                       r"0.3\) in region region0_kitnpu: compile\(\) returned NoneType") as err:
        tessera.compile(_model(), target="kitnpu, ref")
    assert isinstance(err.value, CompileError)
    assert err.value.contract == "compile() returns a CompiledRegion"


def test_3_region_without_kernels(npu) -> None:
    npu(bug="no-kernels")
    with pytest.raises(PluginCompileError, match="no kernel writes region output 't1'"):
        tessera.compile(_model(), target="kitnpu, ref")


def test_3_claims_that_raise(npu) -> None:
    npu(bug="claims-raise")
    with pytest.raises(PluginError, match=r"claims\(\) raised KeyError") as err:
        tessera.compile(_model(), target="kitnpu, ref")
    assert isinstance(err.value.__cause__, KeyError)


# -- 4. the graph API for backend authors is documented and what it says holds ---------------

DOC = Path(__file__).parents[2] / "docs" / "writing-a-backend.md"


def test_4_guide_documents_the_graph_api() -> None:
    text = DOC.read_text()
    for needle in ("Node.attrs", "auto_pad", "Value.type", "is_constant", "region_matches",
                   "@", "workspace_bytes", "artifact_version", "NodeConformance"):
        assert needle in text, needle


def test_4_attributes_reach_backends_normalised() -> None:
    """What the guide says: auto_pad becomes explicit pads and defaults are filled in."""
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 5, 5])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3, 5, 5])
    w = onnx.numpy_helper.from_array(np.ones((3, 2, 3, 3), np.float32), "w")
    node = helper.make_node("Conv", ["x", "w"], ["y"], auto_pad="SAME_UPPER")
    model = helper.make_model(helper.make_graph([node], "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 17)])
    from tessera.frontend.onnx import import_onnx

    conv = import_onnx(model).nodes[0]
    assert list(conv.attrs["pads"]) == [1, 1, 1, 1]
    assert list(conv.attrs["strides"]) == [1, 1] and conv.attrs["group"] == 1
    assert conv.inputs[1].is_constant and conv.inputs[1].data.shape == (3, 2, 3, 3)


# -- 5. the matched pattern reaches compile ----------------------------------------------------

def test_5_composite_name_reaches_compile_and_survives_export(npu, tmp_path: Path) -> None:
    backend = npu()
    mod = tessera.compile(_model(), target="kitnpu, ref")
    assert backend.seen_matches[0] == [("AddRelu", ["n1_Relu", "n0_Add"])]
    np.testing.assert_allclose(mod.run(x=X)["y"], _expected(x=X), rtol=1e-6)
    assert backend.seen_matches[1] == [("Relu", ["n3_Relu"])]
    before = len(backend.seen_matches)
    loaded = tessera.load(mod.export(tmp_path / "m.tar"))  # load() compiles again here
    assert backend.seen_matches[before] == [("AddRelu", ["n1_Relu", "n0_Add"])]
    np.testing.assert_allclose(loaded.run(x=X)["y"], _expected(X), rtol=1e-6)


def test_5_target_reaches_compile_as_the_partitioners_object(npu, monkeypatch) -> None:
    backend = npu()
    seen: list[TargetKind] = []
    original = backend.compile

    def spy(region: Function, target: TargetKind, options: CompileOptions) -> Any:
        seen.append(target)
        return original(region, target, options)

    monkeypatch.setattr(backend, "compile", spy)
    monkeypatch.setattr(type(backend), "options", {"level": "x"}, raising=False)
    tessera.compile(_model(), target="kitnpu -level=2, ref")
    assert seen and seen[0] == TargetKind("kitnpu", {"level": "2"})


# -- 7. device choice -------------------------------------------------------------------------

class _OwnDevice(CPUDevice):
    name = "kitdev"


def test_7_device_name_without_its_own_device_api_is_flagged() -> None:
    backend = NPU("kitmismatch")
    backend.device = "kitmismatch"  # but device_api() is the host's
    with pytest.warns(RuntimeWarning, match="device is 'kitmismatch' but device_api\\(\\) "
                      "returns the 'cpu' device"):
        handle = register_backend(backend)
    try:
        with pytest.raises(PluginError, match="device_api"):
            check_backend(backend)
        mod = tessera.compile(_model(), target="kitmismatch, ref")
        # the pointless copies the warning names: x, t1, t2 and y cross host memory to host memory
        assert len(mod.partition_report().copies) == 4
    finally:
        handle.remove()


def test_7_host_memory_backend_gets_no_copies(npu) -> None:
    npu()
    mod = tessera.compile(_model(), target="kitnpu, ref")
    assert mod.partition_report().copies == []
    own = NPU("kitown")
    own.device = "kitdev"
    own.device_api = lambda: _OwnDevice()  # type: ignore[method-assign]
    check_backend(own)  # a device of its own, named as the backend says: fine


# -- 8. artifacts: versions checked, a backend may refuse, broken vs missing ------------------

def test_8_artifact_version_is_checked(npu, tmp_path: Path) -> None:
    backend = npu()
    path = tessera.compile(_model(), target="kitnpu, ref").export(tmp_path / "m.tar")
    backend.artifact_version = "2"
    with pytest.raises(PluginArtifactError, match="saved in artifact version 1 .*reads version "
                       "2; compile the model again") as err:
        tessera.load(path)
    assert isinstance(err.value, ArtifactError) and err.value.backend == "kitnpu"


def test_8_backend_may_refuse_a_saved_region(npu, tmp_path: Path) -> None:
    backend = npu()
    path = tessera.compile(_model(), target="kitnpu, ref").export(tmp_path / "m.tar")
    backend.accepts_artifact = lambda saved: (  # type: ignore[method-assign]
        None if saved.version == "9.9" else f"made by {saved.distribution} {saved.version}")
    with pytest.raises(PluginArtifactError, match="made by tessera-kitnpu 0.3"):
        tessera.load(path)


_FAKE_PLUGIN = '''
import numpy as np
from tessera.partition.patterns import Pattern
from tessera.plugin import Backend, CompiledRegion, Kernel, hookimpl


class Neg(Backend):
    name = "kitneg"

    def claims(self, target):
        return [Pattern("Neg")]

    def compile(self, region, target, options):
        n = region.nodes[0]
        k = Kernel(n.name, lambda i, o: np.negative(i[0], out=o[0]), [n.inputs[0].name],
                   [n.outputs[0].name], "Neg")
        t = {v.name: v.type for v in region.inputs}
        t[n.outputs[0].name] = n.outputs[0].type
        return CompiledRegion(self.name, region, [k], t)


@hookimpl
def tessera_backends():
    return [Neg()]
'''


def test_8_installed_but_broken_plugin_is_not_called_missing(tmp_path: Path, monkeypatch) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "tplug_kitneg.py").write_text(_FAKE_PLUGIN)
    info = site / "tplug_kitneg-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tplug-kitneg\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[tessera.backends]\nkitneg = tplug_kitneg\n")
    monkeypatch.syspath_prepend(str(site))
    try:
        reload_plugins()
        x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])
        y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])
        model = helper.make_model(helper.make_graph([helper.make_node("Neg", ["x"], ["y"])],
                                                    "g", [x], [y]),
                                  opset_imports=[helper.make_opsetid("", 17)])
        path = tessera.compile(model, target="kitneg, ref").export(tmp_path / "m.tar")
        (site / "tplug_kitneg.py").write_text("raise ImportError('libnpu.so not found')\n")
        sys.modules.pop("tplug_kitneg", None)
        with pytest.warns(RuntimeWarning, match="libnpu.so"):
            reload_plugins()
        with pytest.raises(ArtifactError, match="plugin tplug-kitneg, which is installed "
                           r"\(1.0\) but failed to load: import failed: ImportError: libnpu.so"):
            tessera.load(path)
    finally:
        monkeypatch.undo()
        sys.modules.pop("tplug_kitneg", None)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            reload_plugins()


# -- 9. CLI: --verbose, plugins -v, the fallback ------------------------------------------------

def test_9_verbose_prints_the_cause(npu, tmp_path: Path, capsys) -> None:
    from tessera.cli.main import main

    npu(bug="claims-raise")
    model = tmp_path / "m.onnx"
    onnx.save(_model(), model)
    assert main(["compile", str(model), "--target", "kitnpu, ref", "-o",
                 str(tmp_path / "m.tar")]) == 1
    err = capsys.readouterr().err
    assert "error: backend 'kitnpu'" in err and "Traceback" not in err
    assert "--verbose shows the traceback" in err
    assert main(["compile", str(model), "--target", "kitnpu, ref", "-o",
                 str(tmp_path / "m.tar"), "--verbose"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" in err and "KeyError: 'claims'" in err
    assert main(["--verbose", "compile", str(model), "--target", "kitnpu, ref"]) == 1
    assert "KeyError: 'claims'" in capsys.readouterr().err


def test_9_plugins_verbose_lists_device_options_and_claims(npu, capsys) -> None:
    from tessera.cli.main import main

    npu()
    assert main(["plugins", "-v"]) == 0
    out = capsys.readouterr().out
    block = out[out.index("kitnpu:"):]
    assert "device: cpu (CPUDevice)" in block
    assert "claims 1 ops: Relu" in block and "composites (1): AddRelu" in block
    if HAS_LLVM:
        assert "-mcpu: LLVM CPU name" in out


@pytest.mark.skipif(not HAS_LLVM, reason="needs the llvm backend installed")
def test_9_unclaimed_nodes_run_on_the_best_cpu_backend(npu) -> None:
    npu()
    mod = tessera.compile(_model(), target="kitnpu")
    report = mod.partition_report()
    assert [(r.backend, r.ops) for r in report.regions] == [
        ("kitnpu", ["Add", "Relu"]), ("llvm", ["Exp"]), ("kitnpu", ["Relu"])]
    assert report.fallback == [("n2_Exp", "Exp", "llvm")]
    np.testing.assert_allclose(mod.run(x=X)["y"], _expected(X), rtol=1e-6)
