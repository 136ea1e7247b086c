"""``tessera plugins`` through the command's entry point: a short status column whose long
reasons are given in full below the table (wrapped, each once), ``-v`` without over-long lines
or repeated composites, and what to install where a GPU plugin lacks NVIDIA's libraries."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from tessera.cli.main import main
from tessera.cli.plugins import WIDTH, short_reason

LONG = ("no CUDA driver on this machine (DynamicLibNotFoundError: \"cuda\" is an NVIDIA driver "
        "library and can only be found via system search.\nEnsure the NVIDIA display driver is "
        "installed.); it still compiles for a named GPU (cuda -arch=sm_90) into artifacts that "
        "run where the GPU is")


class _Backend:
    def __init__(self, name: str, reason: str | None, device: str = "cuda") -> None:
        self.name, self.device, self._reason = name, device, reason

    def available(self) -> str | None:
        return self._reason

    def version(self) -> str:
        return "1.0"


def _fake_registry(monkeypatch: pytest.MonkeyPatch, backends: dict[str, _Backend]) -> None:
    import tessera.plugin
    from tessera.plugin.manager import PluginInfo

    registry = SimpleNamespace(
        backends=backends,
        plugins=[PluginInfo("gpu", "tessera-gpu", "1.0", list(backends))])
    monkeypatch.setattr(tessera.plugin, "get_registry", lambda: registry)


def _table(out: str) -> list[str]:
    return out.split("backends:\n", 1)[1].split("\n\n", 1)[0].splitlines()


def test_long_reasons_are_cut_in_the_table_and_given_in_full_once(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _fake_registry(monkeypatch, {"gpu": _Backend("gpu", LONG), "gpu2": _Backend("gpu2", LONG),
                                 "npu": _Backend("npu", "no NPU found", "npu")})
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    rows = _table(out)
    assert rows[2].endswith("unavailable: no CUDA driver on this machine"), rows
    assert rows[4].endswith("unavailable: no NPU found"), rows  # short: as it is
    assert all(len(row) <= WIDTH for row in rows), rows
    why = out.split("why unavailable:\n", 1)[1].split("\n\n", 1)[0]
    assert why.startswith("  gpu, gpu2: no CUDA driver on this machine (DynamicLibNotFoundError")
    assert " ".join(why.split()) == "gpu, gpu2: " + " ".join(LONG.split())
    assert all(len(line) <= WIDTH for line in why.splitlines()), why
    assert "npu" not in why


def test_short_reason() -> None:
    assert short_reason(LONG) == "no CUDA driver on this machine"
    assert short_reason("a; b") == "a"
    assert short_reason("word " * 30) == ("word " * 11).strip() + " ..."
    assert len(short_reason("word " * 30)) <= 60


@pytest.fixture
def idle_llvm_pool(monkeypatch: pytest.MonkeyPatch) -> None:
    """The llvm kernel pool's status as on an idle machine (no load cap, no straggler
    sit-outs): both depend on the machine's load (another pytest-xdist worker) and on the
    tests that ran before in this process, and they lengthen the "host threads" line."""
    try:
        from tessera_llvm import parallel
    except ImportError:
        return
    monkeypatch.setattr(parallel, "load_cap", lambda: 0)
    monkeypatch.setattr(parallel, "sit_outs", lambda: 0)


def test_verbose_listing_wraps_and_names_each_composite_once(
        idle_llvm_pool: None, capsys: pytest.CaptureFixture[str]) -> None:
    from tessera.plugin import get_registry
    from tessera.plugin.target import TargetKind

    assert main(["plugins", "-v"]) == 0
    out = capsys.readouterr().out
    table = set(_table(out))
    for line in out.splitlines():
        if line not in table:
            assert len(line) <= WIDTH, line
    for name, backend in get_registry().backends.items():
        block = out.split(f"\n{name}:\n", 1)[1].split("\n\n", 1)[0]
        composites = {p.name for p in backend.claims(TargetKind(name)) if p.inputs}
        if not composites:
            assert "composites" not in block
            continue
        text = block.split("  composites (", 1)[1]
        count, listed = text.split("): ", 1)
        names = " ".join(listed.split()).split(", ")
        assert int(count) == len(names) == len(set(names)) == len(composites), block
        assert set(names) == composites


def test_host_threads_line_wraps_under_load(monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    parallel = pytest.importorskip("tessera_llvm.parallel")
    monkeypatch.setattr(parallel, "load_cap", lambda: 1)
    monkeypatch.setattr(parallel, "sit_outs", lambda: 12)
    assert main(["plugins", "-v"]) == 0
    out = capsys.readouterr().out
    assert "12 straggler sit-outs so far" in " ".join(out.split())
    table = set(_table(out))
    long = [line for line in out.splitlines() if line not in table and len(line) > WIDTH]
    assert not long, long


def test_plugins_say_what_to_install_where_nvidia_libraries_are_missing(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    nvrtc = pytest.importorskip("tessera_cuda.nvrtc")
    libs = pytest.importorskip("tessera_cudnn.libs")
    pathfinder = pytest.importorskip("cuda.pathfinder")

    def not_found(*args: object, **kwargs: object) -> object:
        raise RuntimeError('Failure finding "libnvrtc.so.13":\nNo such file')

    monkeypatch.setattr(nvrtc, "_nvrtc", lambda: SimpleNamespace(nvrtcVersion=not_found))
    monkeypatch.setattr(pathfinder, "load_nvidia_dynamic_lib", not_found)
    nvrtc.nvrtc_missing.cache_clear()
    libs.forget()
    try:
        assert main(["plugins"]) == 0
        out = capsys.readouterr().out
    finally:
        nvrtc.nvrtc_missing.cache_clear()
        libs.forget()
    rows = {row.split()[0]: row for row in _table(out)[2:]}
    assert rows["cuda"].endswith('unavailable: NVRTC is missing: pip install "tessera-cuda[libs]"')
    assert rows["cudnn"].endswith(
        'unavailable: libcudnn is missing: pip install "tessera-cudnn[libs]"')
    assert rows["cublas"].endswith(
        'unavailable: libcublasLt is missing: pip install "tessera-cudnn[libs]"')
    why = " ".join(out.split("why unavailable:\n", 1)[1].split())
    assert "NVIDIA's nvidia-cuda-nvrtc wheel; RuntimeError: Failure finding" in why
    assert "NVIDIA's nvidia-cudnn-cu13 wheel" in why and "NVIDIA's nvidia-cublas wheel" in why
