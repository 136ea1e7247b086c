"""What ./run-demo.sh and ./run-tests.sh install (scripts/setup-env.sh, scripts/install_set.py):
the demo none of the NVIDIA library wheels, the tests all of them (the GPU plugins' ``libs``
extra), constraints.txt a pin for every package either asks for; pip's progress as one line per
package; run-tests.sh runs every tier in parallel (``-n auto --dist loadgroup --all-tiers``), and
a ``-q`` or ``-v`` of the user's replaces its ``-q``.

The scripts run for real with a stand-in for the environment's Python (a shell script that
records what it is asked and answers as pip and pytest would), so no package is installed."""

from __future__ import annotations

import importlib.util
import os
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
NVIDIA_LIBS = {"nvidia-cudnn-cu13", "nvidia-cublas", "nvidia-cuda-nvrtc"}


def _install_set() -> ModuleType:
    path = ROOT / "scripts" / "install_set.py"
    spec = importlib.util.spec_from_file_location("install_set", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


install_set = _install_set()


def _script_extras(script: str) -> str:
    """The EXTRAS a script passes to setup_env (``setup_env "test,libs"``)."""
    text = (ROOT / script).read_text()
    calls = re.findall(r'setup_env "([^"]*)"', text)
    assert len(calls) == 1, f"{script}: expected one setup_env call, found {calls}"
    return calls[0]


def _pinned() -> dict[str, str]:
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, _, version = line.partition("==")
            assert version, f"constraints.txt: {line!r} is not an exact pin"
            pins[install_set.normalize(name)] = version
    return pins


def test_the_demo_installs_no_nvidia_library() -> None:
    demo = install_set.requirements(_script_extras("run-demo.sh"))
    assert not {name for name in demo if name.startswith("nvidia-")}, sorted(demo)
    assert {"numpy", "onnx", "llvmlite", "cuda-bindings"} <= demo
    # nor does any extra of any project but `libs` (and `test`, which run-tests.sh adds)
    for folder, _ in install_set.install_set(""):
        project = install_set._project(folder)
        for extra in project.get("optional-dependencies", {}):
            if extra in ("libs", "test"):
                continue
            asked = install_set.requirements([extra])
            assert not {n for n in asked if n.startswith("nvidia-")}, (folder, extra, asked)


def test_the_tests_install_every_nvidia_library() -> None:
    extras = _script_extras("run-tests.sh")
    assert set(extras.split(",")) == {"test", "libs", "zoo"}
    tests = install_set.requirements(extras)
    assert NVIDIA_LIBS <= tests
    assert {"pytest", "pytest-xdist", "onnxruntime", "ruff"} <= tests
    assert {"torch", "transformers", "onnxscript"} <= tests  # the model-zoo tests
    # scripts/test-latest.sh checks the same set on the newest releases
    assert _script_extras("scripts/test-latest.sh") == extras


def test_the_gpu_plugins_offer_their_libraries_as_an_extra() -> None:
    cuda = install_set.requirements(["libs"], ROOT) - install_set.requirements([], ROOT)
    assert cuda == NVIDIA_LIBS
    assert install_set.specs("test,libs") == [
        ".[test]", "plugins/cuda[test,libs]", "plugins/cudnn[test,libs]", "plugins/llvm[test]",
        "plugins/vta_sim[test]"]
    assert install_set.specs("") == [".", "plugins/cuda", "plugins/cudnn", "plugins/llvm",
                                      "plugins/vta_sim"]


def test_constraints_pin_everything_the_scripts_install() -> None:
    pins = _pinned()
    asked = install_set.requirements("test,libs,zoo") | install_set.requirements("")
    missing = sorted(asked - set(pins))
    assert not missing, f"constraints.txt has no pin for {missing}"
    assert "setuptools" in pins  # what the editable installs build with


def test_install_set_prints_one_requirement_per_line() -> None:
    out = subprocess.run([sys.executable, str(ROOT / "scripts" / "install_set.py"), "test,libs"],
                         capture_output=True, text=True, check=True).stdout
    assert out.splitlines() == install_set.specs("test,libs")


PIP_OUTPUT = """\
Looking in indexes: https://example.invalid/simple
Obtaining file://{root}
  Installing build dependencies: started
  Installing build dependencies: finished with status 'done'
Obtaining file://{root}/plugins/cuda
Processing /wheels/numpy-2.4.6-cp311-cp311-manylinux_2_28_x86_64.whl (from tessera==0.1.0)
Collecting onnx>=1.16 (from tessera==0.1.0)
  Downloading onnx-1.23.2-cp311-cp311-manylinux_2_28_x86_64.whl (8.9 MB)
     ---------------------------------------- 8.9/8.9 MB 300.0 MB/s eta 0:00:00
Requirement already satisfied: pluggy>=1.5 in ./venv (from tessera==0.1.0) (1.7.0)
Collecting pyverilator-mm>=0.7.6 (from tessera-vta==0.1.0)
  Using cached pyverilator_mm-0.7.6-py3-none-any.whl
Building wheels for collected packages: tessera, tessera-cuda
  Building editable for tessera (pyproject.toml): started
  Building editable for tessera (pyproject.toml): finished with status 'done'
  Created wheel for tessera: filename=tessera-0.1.0-0.editable-py3-none-any.whl size=15550
Successfully built tessera tessera-cuda
Installing collected packages: numpy, onnx, tessera, tessera-cuda
Successfully installed numpy-2.4.6 onnx-1.23.2 tessera-0.1.0 tessera-cuda-0.1.0
"""


@pytest.fixture
def fake_venv(tmp_path: Path) -> Path:
    """A VENV whose bin/python runs install_set.py for real, records every other call in
    calls.log, prints PIP_OUTPUT for pip and exits 0."""
    venv = tmp_path / "venv"
    (venv / "bin").mkdir(parents=True)
    (tmp_path / "pip-output.txt").write_text(PIP_OUTPUT.format(root=ROOT))
    python = venv / "bin" / "python"
    python.write_text(f"""#!/usr/bin/env bash
if [[ "$1" == scripts/install_set.py ]]; then exec {sys.executable} "$@"; fi
echo "$*" >> {tmp_path}/calls.log
if [[ "$1 $2" == "-m pip" ]]; then cat {tmp_path}/pip-output.txt; fi
exit 0
""")
    python.chmod(0o755)
    return venv


def _run(script: str, venv: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, VENV=str(venv), WITH_SYSTEM_DEPS="0")
    return subprocess.run(["bash", str(ROOT / script), *args], capture_output=True, text=True,
                          env=env, timeout=120)


def _calls(venv: Path) -> list[str]:
    log = venv.parent / "calls.log"
    return log.read_text().splitlines() if log.exists() else []


def test_run_demo_installs_without_the_libraries_and_shows_progress(fake_venv: Path) -> None:
    done = _run("run-demo.sh", fake_venv, "--target", "ref")
    assert done.returncode == 0, done.stderr
    pip, demo = _calls(fake_venv)
    assert pip.startswith("-m pip install --no-compile -c constraints.txt -e . -e plugins/cuda -e "
                          "plugins/cudnn -e plugins/llvm -e plugins/vta_sim"), pip
    assert "libs" not in pip and "[test" not in pip
    assert demo == "examples/digits/demo.py --target ref"
    progress = [line for line in done.stderr.splitlines() if line.startswith("run-demo:")]
    assert progress == [
        f"run-demo: installing {pip.split('constraints.txt ')[1]} (pip, one line per package)",
        "run-demo:   preparing .",
        "run-demo:   preparing plugins/cuda",
        "run-demo:   collecting numpy==2.4.6",
        "run-demo:   collecting onnx>=1.16",
        "run-demo:     downloading onnx==1.23.2 (8.9 MB)",
        "run-demo:   collecting pyverilator-mm>=0.7.6",
        "run-demo:     using cached pyverilator_mm==0.7.6",
        "run-demo:   building editable for tessera",
        f"run-demo:   installing 4 packages into {fake_venv}",
        "run-demo:   done",
    ]
    # a second run skips the install (the stamp matches)
    again = _run("run-demo.sh", fake_venv)
    assert again.returncode == 0 and "installing" not in again.stderr
    assert _calls(fake_venv)[2:] == ["examples/digits/demo.py"]


def test_run_demo_stops_when_pip_fails(fake_venv: Path) -> None:
    python = fake_venv / "bin" / "python"
    python.write_text(python.read_text().replace("exit 0", 'echo "ERROR: no such package" >&2\n'
                                                 '[[ "$1 $2" == "-m pip" ]] && exit 1\nexit 0'))
    done = _run("run-demo.sh", fake_venv)
    assert done.returncode == 1
    assert "ERROR: no such package" in done.stderr
    assert not any("demo.py" in call for call in _calls(fake_venv))
    assert not list(fake_venv.glob(".tessera-install-*"))


@pytest.mark.parametrize("args, quiet", [
    ((), True), (("tests/cli", "-x"), True), (("-q",), False), (("-v",), False),
    (("-vv",), False), (("-xq",), False), (("--verbose",), False), (("--verbosity=2",), False),
    (("-k", "quiet"), True)])
def test_run_tests_adds_q_unless_the_user_sets_verbosity(fake_venv: Path, args: tuple[str, ...],
                                                         quiet: bool) -> None:
    done = _run("run-tests.sh", fake_venv, *args)
    assert done.returncode == 0, done.stderr
    pip, pytest_call = _calls(fake_venv)
    assert "-e plugins/cuda[test,libs] -e plugins/cudnn[test,libs]" in pip
    expected = ["-m", "pytest", "-n", "auto", "--dist", "loadgroup", "--all-tiers",
                *(["-q"] if quiet else []), *args]
    assert pytest_call.split() == expected
