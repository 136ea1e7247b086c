"""The CLI with a model of symbolic shapes: compile keeps them (with --dim-bounds and
--specialize), the .tar runs at any size with --inputs, inspect shows a specialisation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from cli.support import assert_error
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.cli.main import main
from tessera.runtime.dynamic import DynamicModule


@pytest.fixture
def symbolic_model(tmp_path: Path) -> Path:
    """y = relu(x @ W) over x: [batch, seq, 4]."""
    w = np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", "seq", 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["batch", "seq", 3])
    nodes = [helper.make_node("MatMul", ["x", "W"], ["h"]), helper.make_node("Relu", ["h"], ["y"])]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y],
                                                [numpy_helper.from_array(w, "W")]),
                              opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    path = tmp_path / "symbolic.onnx"
    onnx.save(model, str(path))
    return path


def _want(x: np.ndarray) -> np.ndarray:
    return np.maximum(x @ np.linspace(-1, 1, 12, dtype=np.float32).reshape(4, 3), 0)


def test_compile_keeps_symbolic_dims_and_run_takes_any_size(
        symbolic_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tar = tmp_path / "m.tar"
    code = main(["compile", str(symbolic_model), "--target", "ref", "-o", str(tar),
                 "--dim-bounds", "batch=1..8,seq=1..64", "--specialize", "x:[2,5,4]"])
    out = capsys.readouterr().out
    assert code == 0
    assert "x: float32[batch, seq, 4]; 1 <= batch <= 8, 1 <= seq <= 64" in out
    assert "specialisation batch=2, seq=5" in out
    loaded = tessera.load(tar)
    assert isinstance(loaded, DynamicModule) and loaded.cache_info().cached == \
        [{"batch": 2, "seq": 5}]
    x = np.random.default_rng(0).standard_normal((3, 7, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", x=x)
    code = main(["run", str(tar), "--inputs", str(tmp_path / "in.npz"), "--outputs",
                 str(tmp_path / "out.npz")])
    captured = capsys.readouterr()
    assert code == 0 and "specialisation batch=3, seq=7" in captured.err
    np.testing.assert_allclose(np.load(tmp_path / "out.npz")["y"], _want(x), rtol=1e-6)
    np.savez(tmp_path / "big.npz", x=np.ones((9, 2, 4), np.float32))
    code = main(["run", str(tar), "--inputs", str(tmp_path / "big.npz")])
    assert_error(capsys, code, "outside its bounds 1 <= batch <= 8")
    code = main(["run", str(tar)])
    assert_error(capsys, code, "symbolic input shapes", "--inputs")
    code = main(["compile", str(tar)])
    assert_error(capsys, code, "is a compiled Tessera artifact")


def test_input_shapes_may_name_variables(symbolic_model: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    tar = tmp_path / "m.tar"
    assert main(["compile", str(symbolic_model), "--target", "ref", "-o", str(tar),
                 "--input-shapes", "x:[1,tokens,4]"]) == 0
    assert "x: float32[1, tokens, 4]" in capsys.readouterr().out
    assert tessera.load(tar).variables == ["tokens"]
    code = main(["compile", str(symbolic_model), "--target", "ref", "-o", str(tar),
                 "--specialize", "x:[1,n,4]"])
    assert_error(capsys, code, "--specialize", "must be a size")


def test_inspect_compile_shows_a_specialisation(symbolic_model: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(symbolic_model), "--target", "ref", "--compile",
                 "--shape-mode", "specialize"]) == 0
    captured = capsys.readouterr()
    assert "symbolic dimensions taken as 1 (batch=1, seq=1)" in captured.err
    assert "x float32[1,1,4]" in captured.out
    # by default one module for every size, shown as such
    assert main(["inspect", str(symbolic_model), "--target", "ref", "--compile"]) == 0
    captured = capsys.readouterr()
    assert "one module for every size" in captured.err
    assert "compiled once for every size" in captured.out


def test_symbolic_dims_flag_is_kept_in_the_tar(symbolic_model: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    tar = tmp_path / "m.tar"
    code = main(["compile", str(symbolic_model), "--target", "ref", "-o", str(tar),
                 "--symbolic-dims", "seq"])
    out = capsys.readouterr().out
    assert code == 0 and "split:   seq not specialised on" in out
    loaded = tessera.load(tar)
    assert isinstance(loaded, DynamicModule) and loaded.symbolic == ("seq",)
    code = main(["compile", str(symbolic_model), "--target", "ref", "-o", str(tar),
                 "--symbolic-dims", "length"])
    assert_error(capsys, code, "'length' not among the model's variables (batch, seq)")


def test_inspect_shows_the_symbolic_output_shapes(symbolic_model: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["inspect", str(symbolic_model), "--compile", "--target", "ref"])
    err = capsys.readouterr().err
    assert code == 0 and "symbolic shapes: outputs y[batch, seq, 3]" in err
