"""``tessera compile --dump-code``: the llvm backend writes each region's generated code (LLVM
IR, assembly, loop-level TIR) next to the artifact, and refuses unknown forms."""

from __future__ import annotations

import platform
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli.support import assert_error
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.cli.main import main
from tessera.plugin.manager import get_backends

pytestmark = pytest.mark.skipif("llvm" not in get_backends(),
                                reason="the tessera-llvm plugin is not installed")


def save_model(tmp_path: Path, with_topk: bool = False) -> Path:
    """Conv -> Relu -> Gemm (and TopK, which only ref runs, between two llvm regions)."""
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv", pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"], name="relu"),
             helper.make_node("Flatten", ["r"], ["f"], name="flatten"),
             helper.make_node("Gemm", ["f", "fw"], ["y"], name="fc", transB=1)]
    inits = [numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w"),
             numpy_helper.from_array(rng.standard_normal((10, 16 * 36)).astype(np.float32),
                                     "fw")]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 10])]
    if with_topk:
        nodes += [helper.make_node("TopK", ["y", "k"], ["v", "i"], name="topk"),
                  helper.make_node("Exp", ["v"], ["e"], name="exp")]
        inits.append(numpy_helper.from_array(np.array([3], np.int64), "k"))
        outputs = [helper.make_tensor_value_info("e", TensorProto.FLOAT, [1, 3])]
    graph = helper.make_graph(
        nodes, "net", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 6, 6])],
        outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "net.onnx"
    onnx.save(model, str(path))
    return path


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="checks x86-64 assembly")
def test_dump_code_writes_ll_asm_and_tir(tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    model = save_model(tmp_path)
    out = tmp_path / "out"
    code = main(["compile", str(model), "--target", "llvm", "--dump-code", "ll,asm,tir",
                 "-o", str(out / "m.tar")])
    assert code == 0, capsys.readouterr().err
    assert (out / "m.tar").is_file()
    mod = tessera.load(out / "m.tar")
    regions = [r.name for r in mod.partition_report().regions]
    assert regions and all(r.endswith("llvm") for r in regions)
    kernels = [k.name for cr in mod.compiled.values() for k in cr.kernels]
    dumped = sorted(p.name for p in out.iterdir() if p.suffix != ".tar")
    assert dumped == sorted(f"{r}.{form}" for r in regions for form in ("asm", "ll", "tir"))
    region = regions[0]

    ll = (out / f"{region}.ll").read_text()
    assert re.search(r'^target triple = "x86_64', ll, re.M)
    assert re.search(r'^target datalayout = "', ll, re.M)
    for name in kernels:
        assert re.search(rf"^define void @{name}\(ptr", ll, re.M), name
    assert "<16 x float>" in ll or "<8 x float>" in ll  # vectorized

    asm = (out / f"{region}.asm").read_text()
    # code in .text, or .ltext under the large code model the JIT'd x86-64 code uses
    assert re.search(r"^\s*(\.text|\.section\s+\.l?text)", asm, re.M)
    for name in kernels:
        assert re.search(rf"^\s*\.globl\s+{name}$", asm, re.M), name
        assert re.search(rf"^{name}:", asm, re.M), name
    assert re.search(r"\bv?fmadd\w*|\bvmulps\b", asm) and re.search(r"^\s*retq?\b", asm, re.M)

    tir = (out / f"{region}.tir").read_text()
    for name in kernels:
        assert re.search(rf"^def {name}\(\w+: \w+\[\d+\]", tir, re.M), name
    assert "for " in tir and "# parallel" in tir and "ramp(" in tir
    assert "conv" in tir


def test_single_form_into_the_dump_ir_folder(tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    model = save_model(tmp_path)
    dumps = tmp_path / "dumps"
    code = main(["compile", str(model), "--target", "llvm", "--dump-code", "tir",
                 "--dump-ir", str(dumps), "-o", str(tmp_path / "out" / "m.tar")])
    assert code == 0, capsys.readouterr().err
    code_files = sorted(p.suffix for p in dumps.iterdir() if p.suffix in (".ll", ".asm", ".tir"))
    assert code_files and set(code_files) == {".tir"}
    assert any(p.name.endswith("_FoldConstants.txt") for p in dumps.iterdir())  # graph IR too
    assert not [p for p in (tmp_path / "out").iterdir() if p.suffix != ".tar"]


def test_only_llvm_regions_are_dumped(tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    model = save_model(tmp_path, with_topk=True)
    out = tmp_path / "out"
    code = main(["compile", str(model), "--target", "llvm", "--dump-code", "ll",
                 "-o", str(out / "m.tar")])
    assert code == 0, capsys.readouterr().err
    report = tessera.load(out / "m.tar").partition_report()
    assert [r.backend for r in report.regions] == ["llvm", "ref", "llvm"]
    llvm = sorted(f"{r.name}.ll" for r in report.regions if r.backend == "llvm")
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".tar") == llvm


@pytest.mark.parametrize("forms", ["ll,bogus", "svg"])
def test_unknown_form_is_a_one_line_error(forms: str, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    model = save_model(tmp_path)
    out = tmp_path / "out" / "m.tar"
    code = main(["compile", str(model), "--target", "llvm", "--dump-code", forms,
                 "-o", str(out)])
    bad = forms.split(",")[-1]
    line = assert_error(capsys, code, "--dump-code", repr(bad), "ll", "asm", "tir")
    assert line.count("\n") == 0
    assert not out.exists()


@pytest.mark.parametrize("target", ["ref", "llvm"])
def test_forms_no_backend_writes_are_refused_before_compiling(
        target: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--target ref`` writes no code at all; ``svg`` is no form of any backend of the
    target: both are errors, not silently ignored."""
    model = save_model(tmp_path)
    out = tmp_path / "out" / "m.tar"
    forms = "ll" if target == "ref" else "svg"
    code = main(["compile", str(model), "--target", target, "--dump-code", forms,
                 "-o", str(out)])
    wanted = ("no backend", repr(target)) if target == "ref" else (repr("svg"), "ll, asm, tir")
    assert_error(capsys, code, "--dump-code", *wanted)
    assert not out.exists()


def test_python_api_dump_code(tmp_path: Path) -> None:
    model = save_model(tmp_path)
    mod = tessera.compile(str(model), target="llvm", dump_code=["asm", "ll"],
                          dump_dir=tmp_path / "code")
    (cr,) = [c for c in mod.compiled.values() if c.backend == "llvm"]
    dumped = cr.info["dumped"]
    assert set(dumped) == {"asm", "ll"}
    for form, path in dumped.items():
        assert Path(path) == tmp_path / "code" / f"{cr.region.name}.{form}"
        assert Path(path).stat().st_size > 0
