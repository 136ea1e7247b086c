"""``tessera export``: the digits CNN as a C library folder (and a shared library where there
is a C compiler); what it cannot export gets one clear error line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from cli.support import assert_error

from tessera.cli.main import main
from tessera.deploy import find_cc

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits" / "digits_cnn.onnx"


def test_export_writes_the_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "digits_c"
    shared = ["--shared", str(out / "libdigits.so")] if find_cc() else []
    code = main(["export", str(DIGITS), "--input-shapes", "image:[2,1,8,8]", "-o", str(out),
                 "--prefix", "digits", *shared])
    printed = capsys.readouterr().out
    assert code == 0
    for name in ("digits.h", "digits.c", "digits_weights.S", "digits_weights.bin", "Makefile",
                 "region0_llvm.o", "tessera_pool.o", "export.json"):
        assert (out / name).is_file(), name
    summary = json.loads((out / "export.json").read_text())
    assert summary["inputs"] == [{"name": "image", "dtype": "float32", "shape": [2, 1, 8, 8],
                                  "bytes": 512}]
    assert f"arena:    {summary['arena_bytes']} bytes" in printed
    if shared:
        assert (out / "libdigits.so").is_file() and "library:" in printed


def test_export_refuses_what_it_cannot_take(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["export", str(DIGITS), "--shape-mode", "specialize", "-o", str(tmp_path / "a")])
    assert_error(capsys, code, "DynamicModule", "--input-shapes")
    code = main(["export", str(DIGITS), "--input-shapes", "image:[1,1,8,8]", "--target", "ref",
                 "-o", str(tmp_path / "b")])
    assert_error(capsys, code, "region0_ref (ref)", "cannot hand over its code")
    tar = tmp_path / "digits.tar"
    assert main(["compile", str(DIGITS), "--input-shapes", "image:[1,1,8,8]",
                 "-o", str(tar)]) == 0
    capsys.readouterr()
    code = main(["export", str(tar), "-o", str(tmp_path / "c")])
    assert_error(capsys, code, "compiled without its LLVM IR")


def test_a_symbolic_model_exports_its_sizes(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["export", str(DIGITS), "--dim-bounds", "N=0..16", "-o", str(tmp_path / "s"),
                 "--prefix", "digits"]) == 0
    assert "sizes:" in capsys.readouterr().out
    summary = json.loads((tmp_path / "s" / "export.json").read_text())
    assert summary["sizes"] == [{"name": "N", "low": 0, "high": 16}]
    assert summary["inputs"][0]["shape"] == ["N", 1, 8, 8]
    assert "digits_run_sized" in (tmp_path / "s" / "digits.h").read_text()


def test_an_artifact_compiled_for_export_exports(tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    tar = tmp_path / "digits.tar"
    assert main(["compile", str(DIGITS), "--input-shapes", "image:[1,1,8,8]", "--for-export",
                 "-o", str(tar)]) == 0
    assert main(["export", str(tar), "-o", str(tmp_path / "c"), "--prefix", "digits"]) == 0
    assert "kernel calls" in capsys.readouterr().out
    assert (tmp_path / "c" / "region0_llvm.o").is_file()
