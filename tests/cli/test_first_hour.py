"""What a new user met in a first hour with the ``tessera`` command, each through ``main([...])``:
pass switches, output paths checked before compiling, an artifact where a model is expected,
and one-line messages for files and models that are not what a flag expects."""

from __future__ import annotations

import os
import re
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.cli.main import build_parser, main
from tessera.errors import ArtifactError, ModelImportError, PassError


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: dict[str, list[int]],
          output: list[int], opset: int = 17) -> Path:
    graph = helper.make_graph(
        nodes, path.stem,
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs.items()],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, output)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    onnx.save(model, str(path))
    return path


@pytest.fixture
def relu_model(tmp_path: Path) -> Path:
    return _save(tmp_path / "relu.onnx", [helper.make_node("Relu", ["x"], ["y"], name="relu")],
                 {"x": [2, 3]}, [2, 3])


@pytest.fixture
def relu_tar(relu_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "relu.tar"
    assert main(["compile", str(relu_model), "--target", "ref", "-o", str(out)]) == 0
    capsys.readouterr()
    return out


def _error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if not line.startswith("tessera:")]


# -- 1. --pass-config: the help's example works, values are checked ------------------------------

def test_pass_config_help_example_compiles(relu_model: Path, tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    commands = next(a for a in parser._actions if a.choices and "compile" in a.choices)
    help_text = next(a.help for a in commands.choices["compile"]._actions  # type: ignore
                     if "--pass-config" in a.option_strings)
    example = re.search(r'e\.g\. "([^"]+)"', help_text or "")
    assert example is not None, help_text
    code = main(["compile", str(relu_model), "--target", "ref", "--pass-config", example.group(1),
                 "-o", str(tmp_path / "m.tar")])
    assert code == 0, capsys.readouterr().err


@pytest.mark.parametrize("setting, fragments", [
    ("FuseOps.max_depth=4", ["unknown pass name(s) FuseOps.max_depth", "known passes: "
                             "Canonicalize, DeadCodeElimination, FoldConstants", "on or off"]),
    ("FoldConstants=maybe", ["FoldConstants=maybe", "expected on or off", "1/0"]),
    ("FoldConstants=2", ["expected on or off"]),
])
def test_pass_config_refuses_what_it_cannot_do(setting: str, fragments: list[str],
                                               relu_model: Path, tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(relu_model), "--pass-config", setting,
                 "-o", str(tmp_path / "m.tar")])
    err = capsys.readouterr().err
    assert "importing" not in err  # refused before any work
    assert_error_text(err, code, "--pass-config", *fragments)


def assert_error_text(err: str, code: int, *fragments: str) -> None:
    assert code == 1, err
    lines = _error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    for fragment in fragments:
        assert fragment in lines[0], err


@pytest.mark.parametrize("pass_config, fragment", [
    ({"FoldConstants": "maybe"}, "expected on or off"),
    ({"FuseOps.max_depth": 4}, "unknown pass name(s) FuseOps.max_depth"),
])
def test_api_pass_config_is_checked_before_the_import(pass_config: dict[str, object],
                                                      fragment: str, tmp_path: Path) -> None:
    missing = tmp_path / "not-read.onnx"  # the switches are refused before the model is read
    with pytest.raises(PassError, match=re.escape(fragment)):
        tessera.compile(str(missing), target="ref", pass_config=pass_config)


# -- 7. output paths are checked before compiling ------------------------------------------------

@pytest.mark.parametrize("output, fragments", [
    ("outdir/", ["--output", "outdir/' is a folder", "relu.tar"]),
    ("outdir", ["--output", "outdir' is a folder"]),
    ("afile/m.tar", ["afile' is a file, not a folder"]),
])
def test_output_path_is_checked_before_compiling(output: str, fragments: list[str],
                                                 relu_model: Path, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "outdir").mkdir()
    (tmp_path / "afile").write_text("x")
    code = main(["compile", str(relu_model), "-o", output])
    err = capsys.readouterr().err
    assert "compiling" not in err and ".tessera-" not in err
    assert_error_text(err, code, *fragments)


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root may write anywhere")
def test_output_in_a_read_only_folder(relu_model: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o555)
    try:
        code = main(["compile", str(relu_model), "-o", str(folder / "m.tar")])
    finally:
        folder.chmod(0o755)
    assert_error_text(capsys.readouterr().err, code, "is not writable", str(folder))


def test_missing_output_folders_are_created(relu_model: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "new" / "sub" / "m.tar"
    assert main(["compile", str(relu_model), "--target", "ref", "-o", str(out)]) == 0
    assert out.is_file()


def test_run_outputs_and_inspect_pictures_are_checked_first(
        relu_tar: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["run", str(relu_tar), "--outputs", str(tmp_path)])
    assert_error_text(capsys.readouterr().err, code, "--outputs", "is a folder")
    code = main(["inspect", str(relu_tar), "--html", str(tmp_path) + "/"])
    err = capsys.readouterr().err
    assert "loading" not in err
    assert_error_text(err, code, "--html", "is a folder", "partition.html")


def test_run_outputs_says_which_file_it_wrote(relu_tar: Path, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(relu_tar), "--outputs", str(tmp_path / "new" / "y")]) == 0
    assert f"wrote {tmp_path / 'new' / 'y.npz'}" in capsys.readouterr().err
    assert (tmp_path / "new" / "y.npz").is_file()


def test_export_to_a_folder_names_the_folder(relu_tar: Path, tmp_path: Path) -> None:
    module = tessera.load(relu_tar)
    with pytest.raises(ArtifactError, match=f"cannot export to '{re.escape(str(tmp_path))}': "
                                            "it is a folder"):
        module.export(tmp_path)


# -- 8. an artifact where an ONNX model is expected -----------------------------------------------

def test_compile_given_an_artifact_says_to_run_it(relu_tar: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(relu_tar)])
    assert_error_text(capsys.readouterr().err, code,
                      f"{relu_tar} is a compiled Tessera artifact, not an ONNX model: use "
                      f"`tessera run {relu_tar}`")


@pytest.mark.parametrize("command", [["tune", "{tar}", "--tasks", "list"],
                                     ["quantize", "{tar}", "--calibration", "{calib}", "-o",
                                      "{tmp}/q.onnx"]])
def test_other_commands_given_an_artifact(command: list[str], relu_tar: Path, tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "calib.npz", x=np.ones((4, 2, 3), np.float32))
    code = main([a.format(tar=relu_tar, calib=tmp_path / "calib.npz", tmp=tmp_path)
                 for a in command])
    assert_error_text(capsys.readouterr().err, code,
                      "is a compiled Tessera artifact, not an ONNX model", "tessera run")


def test_api_compile_given_an_artifact(relu_tar: Path) -> None:
    with pytest.raises(ModelImportError, match="is a compiled Tessera artifact, not an ONNX "
                                               r"model; load it with tessera.load\(\)"):
        tessera.compile(str(relu_tar), target="ref")


def test_run_accepts_both(relu_model: Path, relu_tar: Path,
                          capsys: pytest.CaptureFixture[str]) -> None:
    for model in (relu_tar, relu_model):
        assert main(["run", str(model), "--target", "ref", "--fill-mode", "ones"]) == 0
        assert "y: float32[2, 3]" in capsys.readouterr().out


def test_an_onnx_model_named_tar_still_compiles(relu_model: Path, tmp_path: Path) -> None:
    renamed = tmp_path / "model-v2.tar"
    renamed.write_bytes(relu_model.read_bytes())
    assert main(["compile", str(renamed), "--target", "ref", "-o", str(tmp_path / "o.tar")]) == 0


# -- 11. one-line messages ------------------------------------------------------------------------

def test_a_file_that_is_not_a_tar_is_one_line(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "garbage.tar"
    bad.write_bytes(b"this is not a tar file" * 50)
    for command in ("run", "inspect"):
        code = main([command, str(bad)])
        assert_error_text(capsys.readouterr().err, code,
                          "garbage.tar' is not a Tessera artifact: not a tar file")


def test_an_op_outside_onnx_is_one_line(tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    model = _save(tmp_path / "custom.onnx", [helper.make_node("FooBar", ["x"], ["y"], name="foo")],
                  {"x": [2, 3]}, [2, 3])
    code = main(["compile", str(model), "-o", str(tmp_path / "m.tar")])
    assert_error_text(capsys.readouterr().err, code,
                      "node 'foo' (FooBar): 'FooBar' is not an ONNX operator")
    newer = _save(tmp_path / "gelu.onnx", [helper.make_node("Gelu", ["x"], ["y"], name="g")],
                  {"x": [2, 3]}, [2, 3], opset=17)
    code = main(["compile", str(newer), "-o", str(tmp_path / "m.tar")])
    assert_error_text(capsys.readouterr().err, code,
                      "node 'g' (Gelu): ONNX defines Gelu from opset 20; the model imports "
                      "opset 17")


def test_other_checker_errors_are_one_line(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    relu = helper.make_node("Relu", ["x"], ["y"], name="r", bogus=1)
    model = _save(tmp_path / "attr.onnx", [relu], {"x": [2, 3]}, [2, 3])
    code = main(["compile", str(model), "-o", str(tmp_path / "m.tar")])
    assert_error_text(capsys.readouterr().err, code, "malformed ONNX model: node 'r' (Relu): ",
                      "bogus")


def test_shape_error_names_the_node_once_hint_after(tmp_path: Path,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    model = _save(tmp_path / "shapes.onnx",
                  [helper.make_node("Add", ["a", "b"], ["y"], name="add1")],
                  {"a": [2, 3], "b": [4, 5]}, [2, 3])
    code = main(["compile", str(model), "-o", str(tmp_path / "m.tar")])
    lines = _error_lines(capsys.readouterr().err)
    assert code == 1
    assert lines == ["error: node 'add1' (Add, opset 17): shapes [2, 3], [4, 5] do not broadcast",
                     "(tessera --verbose shows the traceback of the cause)"]


def test_extra_arrays_in_inputs_warn_once_and_are_ignored(
        relu_tar: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "in.npz", x=np.ones((2, 3), np.float32), z=np.zeros(3), w=np.zeros(1))
    outputs = tmp_path / "o.npz"
    code = main(["run", str(relu_tar), "--inputs", str(tmp_path / "in.npz"),
                 "--outputs", str(outputs)])
    err = capsys.readouterr().err
    assert code == 0, err
    warnings = [line for line in err.splitlines() if line.startswith("warning:")]
    assert warnings == ["warning: --inputs: ignoring arrays 'w', 'z' of "
                        f"{tmp_path / 'in.npz'}, not inputs of the model (its inputs: x)"]
    with np.load(outputs) as result:
        np.testing.assert_array_equal(result["y"], np.ones((2, 3), np.float32))


@pytest.mark.parametrize("given, fragment", [
    ("{model}", "is an ONNX model, not a .npz file"),
    ("{tar}", "is a compiled Tessera artifact, not a .npz file"),
    ("{npy}", "is a .npy file (one unnamed array), not a .npz file"),
])
def test_inputs_that_are_not_an_npz(given: str, fragment: str, relu_model: Path,
                                    relu_tar: Path, tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    np.save(tmp_path / "x.npy", np.ones((2, 3), np.float32))
    path = given.format(model=relu_model, tar=relu_tar, npy=tmp_path / "x.npy")
    code = main(["run", str(relu_tar), "--inputs", path])
    err = capsys.readouterr().err
    assert "allow_pickle" not in err
    assert_error_text(err, code, "--inputs", fragment, "numpy.savez")


def test_freeze_input_that_is_not_an_npy(relu_model: Path, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(relu_model), "--freeze-input", f"x={relu_model}"])
    assert_error_text(capsys.readouterr().err, code, "--freeze-input x",
                      "is an ONNX model, not a .npy file")


def test_a_closed_pipe_ends_quietly(monkeypatch: pytest.MonkeyPatch,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    """``tessera plugins -v | head -1``: when the reader has gone, writing raises
    BrokenPipeError; tessera stops with SIGPIPE's status and no ``error: [Errno 32] Broken
    pipe``."""
    def writes_to_a_closed_pipe(args: object) -> int:
        raise BrokenPipeError(32, "Broken pipe")

    parser = build_parser()
    monkeypatch.setattr("tessera.cli.main.build_parser", lambda: parser)
    for action in parser._subparsers._group_actions:  # noqa: SLF001 - the handler argparse keeps
        action.choices["plugins"].set_defaults(handler=writes_to_a_closed_pipe)
    assert main(["plugins", "-v"]) == 141
    assert "Broken pipe" not in capsys.readouterr().err


def test_tune_checks_its_records_path_first(relu_model: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["tune", str(relu_model), "--trials", "1", "-o", str(tmp_path) + "/"])
    err = capsys.readouterr().err
    assert "tuning" not in err.split("error:")[0]
    assert_error_text(err, code, "is a folder", "tuning.jsonl")
