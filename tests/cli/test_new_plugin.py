"""``tessera new-plugin``: the package it writes installs with pip and passes its own tests,
before and after it is extended to three ops (the kit prints the per-backend counts)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from cli.support import assert_error

from tessera.cli.main import main
from tessera.errors import TesseraError
from tessera.scaffold import new_plugin

ROOT = Path(__file__).parents[2]


def _pip_install(package: Path, site: Path) -> None:
    env = dict(os.environ, PIP_CONSTRAINT=str(ROOT / "constraints.txt"))
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--target",
                    str(site), str(package)], check=True, env=env, capture_output=True)


def _pytest(package: Path, site: Path) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(site), env_path()]))
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           str(package / "tests")], cwd=package, env=env, capture_output=True,
                          text=True, timeout=600)


def env_path() -> str:
    return os.environ.get("PYTHONPATH", "")


THREE_OPS = '''OPS: dict[str, Callable[..., np.ndarray]] = {
    "Relu": lambda x: np.maximum(x, 0),
    "Neg": np.negative,
    "Sigmoid": lambda x: 1 / (1 + np.exp(-x)),
}'''


@pytest.mark.slow
def test_generated_plugin_installs_and_passes_its_tests(tmp_path: Path, capsys) -> None:
    assert main(["new-plugin", "mynpu", "--dir", str(tmp_path / "tessera-mynpu")]) == 0
    assert "wrote" in capsys.readouterr().out
    package = tmp_path / "tessera-mynpu"
    site = tmp_path / "site"
    _pip_install(package, site)
    assert (site / "tessera_mynpu" / "backend.py").is_file()
    entry_points = next(site.glob("tessera_mynpu-*.dist-info")) / "entry_points.txt"
    assert "mynpu = tessera_mynpu.plugin" in entry_points.read_text()
    run = _pytest(package, site)
    assert run.returncode == 0, run.stdout + run.stderr
    assert "backend 'mynpu': ran 1 nodes in 1 passing cases; 0 failed" in run.stdout

    backend = package / "tessera_mynpu" / "backend.py"
    text = backend.read_text()
    start = text.index("OPS: dict")
    end = text.index("}", start) + 1
    backend.write_text(text[:start] + THREE_OPS + text[end:])
    _pip_install(package, site)
    run = _pytest(package, site)
    assert run.returncode == 0, run.stdout + run.stderr
    line = next(li for li in run.stdout.splitlines() if li.startswith("backend 'mynpu'"))
    ran = int(line.split("ran ")[1].split(" nodes")[0])
    assert ran >= 3 and " 0 failed" in line, line


def test_new_plugin_refuses_bad_names_and_non_empty_folders(tmp_path: Path) -> None:
    with pytest.raises(TesseraError, match="lower-case identifier"):
        new_plugin("My-NPU", tmp_path / "x")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "keep.txt").write_text("mine")
    with pytest.raises(TesseraError, match="not empty"):
        new_plugin("mynpu", tmp_path / "full")
    assert new_plugin("mynpu", tmp_path / "full", force=True) == tmp_path / "full"
    assert (tmp_path / "full" / "keep.txt").read_text() == "mine"


@pytest.mark.parametrize("name, fragment", [
    ("llvm", "'llvm' is reserved: Tessera's CPU backend"),
    ("ref", "'ref' is reserved: the built-in numpy reference backend"),
    ("auto", "'auto' is reserved: the target that picks"),
    ("vta", "'vta' is reserved: the distribution tessera-vta"),
    ("cublas", "'cublas' is reserved")])
def test_new_plugin_refuses_names_that_are_taken(name: str, fragment: str, tmp_path: Path,
                                                 capsys) -> None:  # noqa: ANN001
    folder = tmp_path / f"tessera-{name}"
    code = main(["new-plugin", name, "--dir", str(folder), "--force"])
    line = assert_error(capsys, code, f"plugin name {name!r} is taken", fragment,
                        f"a package tessera-{name} would replace it")
    assert "Choose another name" in line
    assert not folder.exists()


def test_new_plugin_refuses_an_installed_backend_or_distribution(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # noqa: ANN001
    import importlib.metadata as md

    import tessera.plugin

    registry = SimpleNamespace(backends={"mynpu": object()}, owner=lambda name: "tessera-acme")
    monkeypatch.setattr(tessera.plugin, "get_registry", lambda: registry)
    code = main(["new-plugin", "mynpu", "--dir", str(tmp_path / "a")])
    assert_error(capsys, code, "'mynpu' is an installed backend (from tessera-acme)")

    monkeypatch.setattr(tessera.plugin, "get_registry", lambda: SimpleNamespace(backends={}))
    real = md.distribution
    monkeypatch.setattr(md, "distribution", lambda name: SimpleNamespace(version="2.0")
                        if name == "tessera-othernpu" else real(name))
    code = main(["new-plugin", "othernpu", "--dir", str(tmp_path / "b")])
    assert_error(capsys, code, "the distribution tessera-othernpu 2.0 is installed")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_generated_readme_installs_the_test_extra(tmp_path: Path, capsys) -> None:  # noqa: ANN001
    assert main(["new-plugin", "mynpu", "--dir", str(tmp_path / "p")]) == 0
    out = capsys.readouterr().out
    assert f"next: pip install -e '{tmp_path / 'p'}[test]' && python -m pytest" in out
    readme = (tmp_path / "p" / "README.md").read_text()
    assert 'pip install -e ".[test]"' in readme
    pyproject = (tmp_path / "p" / "pyproject.toml").read_text()
    assert 'test = ["pytest>=8"]' in pyproject  # the extra the README names
