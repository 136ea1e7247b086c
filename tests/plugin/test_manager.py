"""Plugin manager: built-ins through the hook, broken plugins, clashes, target resolution."""

from __future__ import annotations

import inspect
import sys
from pathlib import Path

import pytest

from tessera.errors import TargetError
from tessera.plugin import get_registry, hookspecs, reload_plugins
from tessera.plugin.manager import Registry, default_cpu_target, resolve_target


def _fake_dist(site: Path, dist: str, module: str, source: str, ep_name: str) -> None:
    (site / f"{module}.py").write_text(source)
    info = site / f"{dist.replace('-', '_')}-1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(f"[tessera.backends]\n{ep_name} = {module}\n")


@pytest.fixture
def site(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    monkeypatch.undo()
    for name in [m for m in sys.modules if m.startswith("tplug_")]:
        del sys.modules[name]
    reload_plugins()


def test_reference_backend_registers_through_the_hook():
    registry = get_registry()
    assert "ref" in registry.backends
    ref_plugin = [p for p in registry.plugins if "ref" in p.backends][0]
    assert ref_plugin.distribution == "tessera"
    assert registry.pm.get_plugin(ref_plugin.name) is not None
    assert default_cpu_target() in registry.backends


def test_broken_import_warns_and_is_listed(site):
    _fake_dist(site, "tplug-broken", "tplug_broken", "raise RuntimeError('no driver')\n", "broken")
    with pytest.warns(RuntimeWarning, match="tplug-broken.*no driver"):
        registry = reload_plugins()
    info = [p for p in registry.plugins if p.distribution == "tplug-broken"][0]
    assert "no driver" in info.error and info.backends == []
    assert "ref" in registry.backends


def test_hook_that_raises_is_listed_not_fatal(site):
    src = ("from tessera.plugin import hookimpl\n"
           "@hookimpl\ndef tessera_backends():\n    raise ValueError('boom')\n")
    _fake_dist(site, "tplug-raises", "tplug_raises", src, "raises")
    with pytest.warns(RuntimeWarning, match="boom"):
        registry = reload_plugins()
    assert any(p.error and "boom" in p.error for p in registry.plugins)


def test_name_clash_disables_the_later_plugin_not_tessera(site, capsys):
    """Friction 6: a plugin naming a backend another provides is disabled with a warning;
    ``tessera plugins`` and every other target keep working."""
    from tessera.cli.main import main

    src = ("from tessera.plugin import hookimpl\n"
           "from tessera.backends.reference import ReferenceBackend\n"
           "@hookimpl\ndef tessera_backends():\n    return [ReferenceBackend()]\n")
    _fake_dist(site, "tplug-dup", "tplug_dup", src, "dup")
    with pytest.warns(RuntimeWarning, match="'ref' is already provided by tessera.*disabled"):
        registry = Registry()
        registry.load()
    info = [p for p in registry.plugins if p.distribution == "tplug-dup"][0]
    assert info.backends == [] and "already provided" in info.error
    assert registry.owner("ref") == "tessera"
    with pytest.warns(RuntimeWarning, match="already provided"):
        reload_plugins()
    assert [b.name for b, _ in resolve_target("ref")] == ["ref"]
    assert main(["plugins"]) == 0
    out = capsys.readouterr().out
    assert "broken plugins" in out and "tplug-dup" in out


def test_unavailable_backend_is_refused_with_reason(site):
    src = ("from tessera.plugin import hookimpl, Backend\n"
           "class Gpu(Backend):\n    name = 'tgpu'\n    device = 'cpu'\n"
           "    def available(self):\n        return 'no GPU found'\n"
           "    def claims(self, target):\n        return []\n"
           "    def compile(self, region, target, options):\n        raise NotImplementedError\n"
           "@hookimpl\ndef tessera_backends():\n    return [Gpu()]\n")
    _fake_dist(site, "tplug-gpu", "tplug_gpu", src, "tgpu")
    reload_plugins()
    with pytest.raises(TargetError, match="tgpu.*unavailable here: no GPU found"):
        resolve_target("tgpu, ref")
    assert default_cpu_target() != "tgpu"


def test_every_hook_is_documented_and_tested():
    """datasette-style meta-test: each hookspec has a docstring and a test that names it."""
    specs = [name for name, fn in inspect.getmembers(hookspecs, inspect.isfunction)
             if name.startswith("tessera_")]
    assert specs, "no hookspecs found"
    tests_text = "".join(p.read_text() for p in Path(__file__).parents[1].rglob("*.py"))
    for name in specs:
        doc = inspect.getdoc(getattr(hookspecs, name)) or ""
        assert len(doc) > 80, f"hook {name} needs a docstring saying when/what/returns"
        assert tests_text.count(name) >= 2, f"hook {name} has no test"


def test_availability_can_depend_on_target_options(site):
    src = ("from tessera.plugin import hookimpl, Backend\n"
           "class Sim(Backend):\n    name = 'tsimx'\n    options = {'sim': 'fast or rtl'}\n"
           "    def available_for(self, target):\n"
           "        return 'no verilator' if target.get('sim') == 'rtl' else None\n"
           "    def claims(self, target):\n        return []\n"
           "    def compile(self, region, target, options):\n        raise NotImplementedError\n"
           "@hookimpl\ndef tessera_backends():\n    return [Sim()]\n")
    _fake_dist(site, "tplug-sim", "tplug_sim", src, "tsimx")
    reload_plugins()
    assert [b.name for b, _ in resolve_target("tsimx -sim=fast, ref")] == ["tsimx", "ref"]
    with pytest.raises(TargetError, match="tsimx.*unavailable here: no verilator"):
        resolve_target("tsimx -sim=rtl, ref")
