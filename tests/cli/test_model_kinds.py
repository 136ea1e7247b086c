"""Every ``tessera`` command with the three kinds of model ``tessera.compile`` returns: a
static one (Module), one with symbolic input dimensions (DynamicModule) and one with
data-dependent output shapes (StagedModule). Each command succeeds or says one ``error:``
line; none prints a traceback (``tessera tune --tasks list`` on a symbolic model did, and
``run --profile``, ``inspect --compile`` and ``tune`` on a staged one)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from cli.support import assert_error
from model_kinds import KINDS, TARGET, kind_model
from onnx.reference import ReferenceEvaluator

from tessera.cli import main as cli_main
from tessera.cli.main import main


@pytest.fixture(params=KINDS)
def kind_files(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[str, Path, Path]:
    """(kind, model.onnx, inputs.npz) in tmp_path."""
    kind = request.param
    model = tmp_path / f"{kind}.onnx"
    onnx.save(kind_model(kind), str(model))
    shape = (3, 7, 8) if kind == "symbolic" else (2, 5, 8)
    inputs = tmp_path / "in.npz"
    np.savez(inputs, x=np.random.default_rng(2).standard_normal(shape).astype(np.float32))
    return kind, model, inputs


def _ok(code: int, capsys: pytest.CaptureFixture[str]) -> str:
    out, err = capsys.readouterr()
    assert code == 0 and "Traceback" not in err and "error:" not in err, err
    return out


def test_run_profile_and_time(kind_files: tuple[str, Path, Path],
                              capsys: pytest.CaptureFixture[str]) -> None:
    kind, model, inputs = kind_files
    out = _ok(main(["run", str(model), "--target", TARGET, "--inputs", str(inputs), "--profile",
                    "--print-time", "--repeat", "2", "--number", "1"]), capsys)
    assert "per backend:" in out and "median" in out
    if kind == "staged":
        assert "host" in out and "NonZero" in out  # the host node is in the profile
        x = np.load(inputs)["x"]
        want = ReferenceEvaluator(kind_model(kind)).run(None, {"x": x})[0]
        assert f"total: float32[]  min {float(want):.6g}" in out


def test_run_fill_mode(kind_files: tuple[str, Path, Path],
                       capsys: pytest.CaptureFixture[str]) -> None:
    kind, model, _ = kind_files
    code = main(["run", str(model), "--target", TARGET, "--fill-mode", "random"])
    if kind == "symbolic":
        assert_error(capsys, code, "has symbolic input shapes", "--inputs")
    else:
        _ok(code, capsys)


def test_tune_task_list(kind_files: tuple[str, Path, Path],
                        capsys: pytest.CaptureFixture[str]) -> None:
    kind, model, _ = kind_files
    code = main(["tune", str(model), "--target", TARGET, "--tasks", "list"])
    if kind == "symbolic":
        assert_error(capsys, code, "symbolic input dimensions", "--input-shapes")
        code = main(["tune", str(model), "--target", TARGET, "--tasks", "list",
                     "--input-shapes", "x:[1,4,8]"])
    out = _ok(code, capsys)
    assert "task(s) for" in out


def test_inspect_with_and_without_compiling(kind_files: tuple[str, Path, Path], tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    kind, model, _ = kind_files
    out = _ok(main(["inspect", str(model), "--target", TARGET, "--dot",
                    str(tmp_path / "p.dot")]), capsys)
    assert "region" in out and (tmp_path / "p.dot").is_file()
    out = _ok(main(["inspect", str(model), "--target", TARGET, "--compile", "--html",
                    str(tmp_path / "p.html")]), capsys)
    assert "kernels" in out and (tmp_path / "p.html").is_file()
    if kind == "staged":
        assert "stage1/region" in out and "on the host, per call: 'nz' (NonZero)" in out


def test_compile_and_the_artifact(kind_files: tuple[str, Path, Path], tmp_path: Path,
                                  capsys: pytest.CaptureFixture[str]) -> None:
    kind, model, inputs = kind_files
    tar = tmp_path / "m.tar"
    code = main(["compile", str(model), "--target", TARGET, "-o", str(tar)])
    if kind == "staged":  # a known limit, said as one line
        assert_error(capsys, code, "staged module", "cannot be exported yet")
        return
    _ok(code, capsys)
    _ok(main(["run", str(tar), "--inputs", str(inputs)]), capsys)
    _ok(main(["inspect", str(tar)]), capsys)


def test_dump_code_is_checked_for_every_kind(kind_files: tuple[str, Path, Path], tmp_path: Path,
                                             capsys: pytest.CaptureFixture[str]) -> None:
    """A symbolic model said nothing (its first compile was later); now all three refuse."""
    _, model, _ = kind_files
    code = main(["compile", str(model), "--target", "ref", "-o", str(tmp_path / "m.tar"),
                 "--dump-code", "ll"])
    assert_error(capsys, code, "--dump-code: no backend of target 'ref' generates code")


@pytest.mark.slow
@pytest.mark.skipif(TARGET != "llvm", reason="tuning needs a backend with tasks")
def test_tune_a_staged_model_tunes_its_first_stage(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "staged.onnx"
    onnx.save(kind_model("staged"), str(model))
    records = tmp_path / "t.jsonl"
    out = _ok(main(["tune", str(model), "--target", TARGET, "--trials", "2", "-o",
                    str(records)]), capsys)
    assert records.is_file() and "trial(s) in" in out


def test_an_unexpected_exception_is_one_error_line(monkeypatch: pytest.MonkeyPatch,
                                                   tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """A bug still ends in one line (with --verbose, the traceback too)."""
    def broken(args: object) -> int:
        raise AttributeError("'Thing' object has no attribute 'compiled'")

    parser = cli_main.build_parser()
    monkeypatch.setattr(cli_main, "build_parser", lambda: parser)
    parser._subparsers._group_actions[0].choices["plugins"].set_defaults(  # type: ignore[union-attr]
        handler=broken)
    line = assert_error(capsys, main(["plugins"]), "internal error in tessera plugins",
                        "AttributeError", "--verbose")
    assert "a bug in Tessera or a plugin" in line
    code = main(["plugins", "--verbose"])
    err = capsys.readouterr().err
    assert code == 1 and "Traceback" in err and "internal error" in err
    assert sys.exc_info() == (None, None, None)
