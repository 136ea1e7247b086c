"""The ``tessera`` command: compile -> run -> inspect -> plugins, and its error handling.

Most tests call ``main([...])`` in-process on a tiny two-input model; one runs the real command
in a subprocess on the digits demo model.
"""

from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import onnx
import pytest
from cli.support import assert_error
from onnx import TensorProto, helper, numpy_helper

from tessera.cli.compile import compile_kwargs
from tessera.cli.main import build_parser, main

ROOT = Path(__file__).resolve().parents[2]
DIGITS = ROOT / "examples" / "digits"
BIAS = np.array([0.5, -1.0, 2.0], np.float32)


def expected(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """What the tiny model computes: Relu(x + bias) * y."""
    return np.maximum(x + BIAS, 0) * y


@pytest.fixture
def tiny_model(tmp_path: Path) -> Path:
    """``out = Relu(x + bias) * y`` with x [N,3] (symbolic batch) and y [1,3]."""
    graph = helper.make_graph(
        [helper.make_node("Add", ["x", "bias"], ["s"], name="add"),
         helper.make_node("Relu", ["s"], ["r"], name="relu"),
         helper.make_node("Mul", ["r", "y"], ["out"], name="mul")],
        "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3]),
         helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, ["N", 3])],
        initializer=[numpy_helper.from_array(BIAS, "bias")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    path = tmp_path / "tiny.onnx"
    onnx.save(model, str(path))
    return path


@pytest.fixture
def tiny_tar(tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    out = tmp_path / "tiny.tar"
    assert main(["compile", str(tiny_model), "--target", "ref", "--input-shapes", "x:[2,3]",
                 "-o", str(out)]) == 0
    capsys.readouterr()
    return out


def inputs_file(tmp_path: Path, rng: np.random.Generator, **extra: np.ndarray) -> tuple[
        Path, dict[str, np.ndarray]]:
    arrays = {"x": rng.standard_normal((2, 3)).astype(np.float32),
              "y": rng.standard_normal((1, 3)).astype(np.float32), **extra}
    path = tmp_path / "inputs.npz"
    np.savez(path, **arrays)
    return path, arrays


# -- the happy path ------------------------------------------------------------------------------

def test_compile_prints_summary_and_reports(tiny_model: Path, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "m.tar"
    code = main(["compile", str(tiny_model), "--target", "ref", "--input-shapes", "x:[2,3]",
                 "-O", "2", "-o", str(out)])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert out.is_file() and tarfile.is_tarfile(out)
    assert "target:  ref" in captured.out
    assert "x float32[2,3]" in captured.out and "y float32[1,3]" in captured.out
    assert "outputs: out" in captured.out
    assert "Relu" in captured.out.split("outputs: out", 1)[1]  # the partition table
    assert "compiling" in captured.err and "wrote" in captured.err  # progress on stderr


def test_compile_pass_switches(tiny_model: Path, tmp_path: Path,
                               capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["compile", str(tiny_model), "--input-shapes", "x:[2,3]", "-o",
                 str(tmp_path / "m.tar"), "--pass-config", "FoldConstants=0",
                 "--disabled-pass", "Canonicalize,SimplifyInference"]) == 0
    code = main(["compile", str(tiny_model), "--input-shapes", "x:[2,3]", "-o",
                 str(tmp_path / "m.tar"), "--disabled-pass", "NoSuchPass"])
    assert_error(capsys, code, "NoSuchPass")


def test_compile_options_reach_tessera_compile(tmp_path: Path) -> None:
    np.save(tmp_path / "m.npy", np.ones((1, 3), np.float32))
    args = build_parser().parse_args([
        "compile", "model.onnx", "--target", "llvm -mcpu=znver3", "--input-shapes",
        "a:[1,2] b:[3]", "-O", "1", "--pass-config", "FoldConstants=0", "--pass-config",
        "Canonicalize=on", "--disabled-pass", "Canonicalize,SimplifyInference",
        "--disabled-pass", "DeadCodeElimination",
        "--freeze-input", f"mask={tmp_path / 'm.npy'}", "--dump-ir", "dumps",
        "--dump-code", "ll,tir", "--no-kernel-cache", "--for-export"])
    kwargs = compile_kwargs(args)
    frozen = kwargs.pop("freeze_inputs")
    assert kwargs == {"target": "llvm -mcpu=znver3", "input_shapes": {"a": [1, 2], "b": [3]},
                      "opt_level": 1, "tuning_records": None,
                      "pass_config": {"FoldConstants": False, "Canonicalize": True},
                      "disabled_passes": ["Canonicalize", "SimplifyInference",
                                          "DeadCodeElimination"], "dump_ir": "dumps",
                      "dump_code": "ll,tir", "dump_dir": "dumps", "dim_bounds": None,
                      "specialize": None, "symbolic_dims": None, "shape_mode": "auto",
                      "kernel_cache": False, "for_export": True}
    np.testing.assert_array_equal(frozen["mask"], np.ones((1, 3), np.float32))
    defaults = compile_kwargs(build_parser().parse_args(["compile", "model.onnx"]))
    assert defaults == {"target": "auto", "input_shapes": None, "opt_level": 3,
                        "tuning_records": None, "pass_config": None, "disabled_passes": None,
                        "freeze_inputs": None, "dump_ir": None, "dump_code": None,
                        "dump_dir": ".", "dim_bounds": None, "specialize": None,
                        "symbolic_dims": None, "shape_mode": "auto", "kernel_cache": None,
                        "for_export": False}


def test_compile_default_output_name(tiny_model: Path, tmp_path: Path,
                                     monkeypatch: pytest.MonkeyPatch,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    monkeypatch.chdir(workdir)
    assert main(["compile", str(tiny_model), "--input-shapes", "x:[1,3]"]) == 0
    assert (workdir / "tiny.tar").is_file()
    assert "target:" in capsys.readouterr().out


def test_run_with_inputs_and_outputs(tiny_tar: Path, tmp_path: Path, rng: np.random.Generator,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    inputs, arrays = inputs_file(tmp_path, rng)
    outputs = tmp_path / "outputs.npz"
    code = main(["run", str(tiny_tar), "--inputs", str(inputs), "--outputs", str(outputs)])
    assert code == 0, capsys.readouterr().err
    with np.load(outputs) as result:
        assert list(result.files) == ["out"]
        np.testing.assert_allclose(result["out"], expected(arrays["x"], arrays["y"]), rtol=1e-6)


@pytest.mark.parametrize("mode, value", [("zeros", 0.0), ("ones", 1.0)])
def test_run_fill_modes(tiny_tar: Path, tmp_path: Path, mode: str, value: float,
                        capsys: pytest.CaptureFixture[str]) -> None:
    outputs = tmp_path / "o.npz"
    assert main(["run", str(tiny_tar), "--fill-mode", mode, "--outputs", str(outputs)]) == 0
    x = np.full((2, 3), value, np.float32)
    with np.load(outputs) as result:
        np.testing.assert_allclose(result["out"], expected(x, x[:1]), rtol=1e-6)


def test_run_fills_inputs_missing_from_file(tiny_tar: Path, tmp_path: Path,
                                            rng: np.random.Generator,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    x = rng.standard_normal((2, 3)).astype(np.float32)
    np.savez(tmp_path / "x_only.npz", x=x)
    outputs = tmp_path / "o.npz"
    assert main(["run", str(tiny_tar), "--inputs", str(tmp_path / "x_only.npz"),
                 "--fill-mode", "ones", "--outputs", str(outputs)]) == 0
    assert "'y' not in" in capsys.readouterr().err
    with np.load(outputs) as result:
        np.testing.assert_allclose(result["out"], expected(x, np.ones((1, 3), np.float32)))


def test_run_print_top_time_and_profile(tiny_tar: Path, tmp_path: Path,
                                        rng: np.random.Generator,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    inputs, arrays = inputs_file(tmp_path, rng)
    code = main(["run", str(tiny_tar), "--inputs", str(inputs), "--print-top", "2",
                 "--print-time", "--repeat", "3", "--number", "2", "--profile"])
    out = capsys.readouterr().out
    assert code == 0
    want = expected(arrays["x"], arrays["y"])
    top = int(np.argmax(want[0]))
    assert "top 2 of out" in out and f"[0] {top}: {want[0, top]:.6g}" in out
    assert "median" in out
    assert "mul" in out  # the profile names the kernels


def test_run_prints_output_summary(tiny_tar: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(tiny_tar), "--fill-mode", "ones"]) == 0
    assert "out: float32[2, 3]" in capsys.readouterr().out


def test_run_compiles_onnx_on_the_fly(tiny_model: Path, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    outputs = tmp_path / "o.npz"
    assert main(["run", str(tiny_model), "--input-shapes", "x:[4,3]", "--fill-mode", "ones",
                 "--outputs", str(outputs)]) == 0
    with np.load(outputs) as result:
        assert result["out"].shape == (4, 3)


def test_run_takes_symbolic_shapes_from_the_inputs_file(tiny_model: Path, tmp_path: Path,
                                                        rng: np.random.Generator,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    """``tessera run model.onnx --inputs x.npz`` on a model with a symbolic batch: without
    --input-shapes the arrays' shapes fix the symbolic dimensions (said on stderr); a fixed
    dimension the arrays contradict stays the model's and is run's shape error."""
    inputs, arrays = inputs_file(tmp_path, rng, x=rng.standard_normal((5, 3)).astype(np.float32))
    outputs = tmp_path / "o.npz"
    code = main(["run", str(tiny_model), "--target", "ref", "--inputs", str(inputs),
                 "--outputs", str(outputs)])
    assert code == 0, capsys.readouterr().err
    assert f"input shapes from {inputs}: x:[5,3]" in capsys.readouterr().err
    with np.load(outputs) as result:
        np.testing.assert_allclose(result["out"], expected(arrays["x"], arrays["y"]), rtol=1e-6)
    wrong = tmp_path / "wrong.npz"
    np.savez(wrong, x=arrays["x"], y=np.ones((2, 3), np.float32))
    code = main(["run", str(tiny_model), "--target", "ref", "--inputs", str(wrong)])
    assert_error(capsys, code, "input 'y': expected shape [1, 3], got [2, 3]")
    # --input-shapes still wins over the file
    code = main(["run", str(tiny_model), "--target", "ref", "--inputs", str(inputs),
                 "--input-shapes", "x:[2,3]"])
    assert_error(capsys, code, "input 'x': expected shape [2, 3], got [5, 3]")


def test_inspect_onnx_and_tar(tiny_model: Path, tiny_tar: Path,
                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny_model), "--target", "ref", "--input-shapes", "x:[2,3]",
                 "--compile"]) == 0
    from_onnx = capsys.readouterr().out
    assert main(["inspect", str(tiny_tar)]) == 0
    from_tar = capsys.readouterr().out
    assert main(["inspect", str(tiny_model), "--target", "ref", "--input-shapes", "x:[2,3]"]) == 0
    uncompiled = capsys.readouterr().out
    for out in (from_onnx, from_tar, uncompiled):
        assert "target:  ref" in out and "x float32[2,3]" in out
    # The reports of the compiled and of the reloaded module agree.
    assert "Relu" in from_onnx
    assert from_onnx[from_onnx.index("region"):] == from_tar[from_tar.index("region"):]
    # Without --compile: the same partition, the memory plan estimated, no kernels
    table = from_onnx[from_onnx.index("region"):from_onnx.index("device  tensors")]
    assert table in uncompiled and "an estimate before code generation" in uncompiled


def test_inspect_tar_warns_about_ignored_compile_flags(
        tiny_tar: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inspect", str(tiny_tar), "--target", "ref", "-O", "1"]) == 0
    assert "--target, --opt-level ignored" in capsys.readouterr().err


def test_plugins(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if line.startswith("ref "))
    assert row.split()[:3] == ["ref", "cpu", "tessera"] and "available" in row
    assert "default CPU target (auto):" in out


class _FakeBackend:
    def __init__(self, name: str, device: str, reason: str | None):
        self.name, self.device, self._reason = name, device, reason

    def available(self) -> str | None:
        return self._reason

    def version(self) -> str:
        return "9.9"


def test_plugins_shows_unavailable_and_broken(monkeypatch: pytest.MonkeyPatch,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    import tessera.plugin
    from tessera.plugin.manager import PluginInfo

    registry = SimpleNamespace(
        backends={"gpu": _FakeBackend("gpu", "cuda", "no NVIDIA GPU found")},
        plugins=[PluginInfo("gpu", "tessera-gpu", "9.9", ["gpu"]),
                 PluginInfo("bad", "tessera-bad", "0.1", [], "import failed: ImportError: x")])
    monkeypatch.setattr(tessera.plugin, "get_registry", lambda: registry)
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "gpu      cuda    tessera-gpu   9.9      unavailable: no NVIDIA GPU found" in out
    broken = out.split("broken plugins:", 1)[1]
    assert "bad" in broken and "tessera-bad" in broken and "import failed: ImportError: x" in broken


def test_help_and_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    assert "compile" in capsys.readouterr().out
    assert main(["compile", "--help"]) == 0
    assert "--input-shapes" in capsys.readouterr().out
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.startswith("tessera ")


# -- errors ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("command", ["compile", "run", "inspect"])
def test_missing_model_file(command: str, tmp_path: Path,
                            capsys: pytest.CaptureFixture[str]) -> None:
    code = main([command, str(tmp_path / "nope.onnx")])
    assert_error(capsys, code, "does not exist", "nope.onnx")


@pytest.mark.parametrize("shapes, fragment", [
    ("x:[2,a-b]", "dimension 'a-b'"),
    ("x[2,3]", "cannot parse"),
    ("x:[2,3", "missing ']'"),
])
def test_bad_input_shapes(tiny_model: Path, tmp_path: Path, shapes: str, fragment: str,
                          capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(tiny_model), "--input-shapes", shapes,
                 "-o", str(tmp_path / "m.tar")])
    assert_error(capsys, code, "--input-shapes", fragment)


def test_input_shapes_for_unknown_input(tiny_model: Path, tmp_path: Path,
                                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(tiny_model), "--input-shapes", "nosuch:[1,3]",
                 "-o", str(tmp_path / "m.tar")])
    assert_error(capsys, code, "nosuch")


def test_unknown_target(tiny_model: Path, tmp_path: Path,
                        capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["compile", str(tiny_model), "--target", "nosuchbackend",
                 "--input-shapes", "x:[2,3]", "-o", str(tmp_path / "m.tar")])
    line = assert_error(capsys, code, "nosuchbackend")
    assert "ref" in line  # the installed backends are listed


@pytest.mark.parametrize("argv, fragment", [
    (["compile", "{model}", "-O", "7"], "invalid choice"),
    (["compile", "{model}", "--pass-config", "novalue"], "--pass-config"),
    (["compile", "{model}", "--freeze-input", "y={tmp}/missing.npy"], "--freeze-input"),
    (["compile"], "required"),
    (["frobnicate"], "invalid choice"),
    (["run", "{model}", "--fill-mode", "pink"], "--fill-mode"),
    (["run", "{model}", "--repeat", "0", "--input-shapes", "x:[2,3]"], "--repeat"),
])
def test_bad_arguments(argv: list[str], fragment: str, tiny_model: Path, tmp_path: Path,
                       capsys: pytest.CaptureFixture[str]) -> None:
    code = main([a.format(model=tiny_model, tmp=tmp_path) for a in argv])
    assert_error(capsys, code, fragment)


def test_no_command(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([]) == 1
    assert "usage:" in capsys.readouterr().err


def test_run_rejects_mistyped_inputs(tiny_tar: Path, tmp_path: Path,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    np.savez(tmp_path / "f64.npz", x=np.ones((2, 3)), y=np.ones((1, 3), np.float32))
    code = main(["run", str(tiny_tar), "--inputs", str(tmp_path / "f64.npz")])
    assert_error(capsys, code, "float32", "float64")
    assert_error(capsys, main(["run", str(tiny_tar), "--inputs", str(tmp_path / "none.npz")]),
                 "none.npz")


def test_freeze_input(tiny_model: Path, tmp_path: Path,
                      capsys: pytest.CaptureFixture[str]) -> None:
    y = np.array([[1.0, 2.0, 3.0]], np.float32)
    np.save(tmp_path / "y.npy", y)
    out = tmp_path / "frozen.tar"
    assert main(["compile", str(tiny_model), "--input-shapes", "x:[2,3]", "--freeze-input",
                 f"y={tmp_path / 'y.npy'}", "-o", str(out)]) == 0
    capsys.readouterr()
    outputs = tmp_path / "o.npz"
    assert main(["run", str(out), "--fill-mode", "ones", "--outputs", str(outputs)]) == 0
    assert "y float32" not in capsys.readouterr().out
    with np.load(outputs) as result:
        np.testing.assert_allclose(result["out"], expected(np.ones((2, 3), np.float32), y))


def _rewrite_tar(src: Path, dst: Path, change: str) -> None:
    """Copy a tar, changing one byte of member ``change``."""
    with tarfile.open(src) as tin, tarfile.open(dst, "w") as tout:
        for member in tin.getmembers():
            data = tin.extractfile(member).read() if member.isfile() else b""  # type: ignore
            if member.name == change:
                data = data[:-2] + bytes([data[-2] ^ 1]) + data[-1:]
            info = tarfile.TarInfo(member.name)
            info.size = len(data)
            tout.addfile(info, io.BytesIO(data))


@pytest.mark.parametrize("member", ["graph.json", "constants/"])
def test_tampered_tar(tiny_tar: Path, tmp_path: Path, member: str,
                      capsys: pytest.CaptureFixture[str]) -> None:
    with tarfile.open(tiny_tar) as tar:  # "constants/": the first stored array
        member = next(n for n in tar.getnames() if n.startswith(member))
    bad = tmp_path / "tampered.tar"
    _rewrite_tar(tiny_tar, bad, member)
    for command in ("run", "inspect"):
        assert_error(capsys, main([command, str(bad)]))


def test_not_a_module(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "garbage.tar"
    bad.write_bytes(b"this is not a tar file" * 50)
    assert_error(capsys, main(["run", str(bad)]))


# -- the real command on the demo model ----------------------------------------------------------

def _tessera_command() -> list[str]:
    script = Path(sys.executable).parent / "tessera"
    return [str(script)] if script.is_file() else [sys.executable, "-m", "tessera.cli.main"]


@pytest.mark.slow
def test_subprocess_on_demo_model(tmp_path: Path) -> None:
    tessera = _tessera_command()

    def call(*args: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run([*tessera, *args], capture_output=True, text=True, timeout=300,
                              cwd=tmp_path)
        assert done.returncode == 0, done.stderr
        return done

    with np.load(DIGITS / "digits_test.npz") as data:
        image, label = data["images"][:1], int(data["labels"][0])
    np.savez(tmp_path / "image.npz", image=image)
    compiled = call("compile", str(DIGITS / "digits_cnn.onnx"), "--input-shapes",
                    "image:[1,1,8,8]", "-o", "digits.tar")
    assert "image float32[1,1,8,8]" in compiled.stdout
    ran = call("run", "digits.tar", "--inputs", "image.npz", "--print-top", "1", "--print-time",
               "--repeat", "3")
    assert f"top 1 of logits float32[1, 10]:\n  {label}: " in ran.stdout
    assert "Execution time summary" in ran.stdout
    inspected = call("inspect", "digits.tar")
    assert "Conv" in inspected.stdout
    assert "ref" in call("plugins").stdout

    failed = subprocess.run([*tessera, "run", "missing.tar"], capture_output=True, text=True,
                            timeout=120, cwd=tmp_path)
    assert failed.returncode == 1
    assert failed.stderr.strip().splitlines() == ["error: model file 'missing.tar' does not exist"]


def test_compile_with_quantize_flag(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    digits = DIGITS
    with np.load(digits / "digits_test.npz") as data:
        np.savez(tmp_path / "calib.npz", image=data["images"][:32])
    out = tmp_path / "q.tar"
    code = main(["compile", str(digits / "digits_cnn.onnx"), "--quantize",
                 str(tmp_path / "calib.npz"), "--target", "ref", "--input-shapes",
                 "image:[1,1,8,8]", "-o", str(out)])
    assert code == 0, capsys.readouterr().err
    captured = capsys.readouterr()
    assert "quantizing" in captured.err
    assert "QuantizeLinear" in captured.out and "DequantizeLinear" in captured.out
    assert main(["compile", str(digits / "digits_cnn.onnx"), "--quantize",
                 str(tmp_path / "missing.npz"), "-o", str(out)]) == 1
    assert "error: --quantize: file" in capsys.readouterr().err
