"""Target strings in tvmc's forms."""

from __future__ import annotations

import pytest

from tessera.errors import TargetError
from tessera.plugin.target import Target


@pytest.mark.parametrize("text, expected", [
    ("llvm", [("llvm", {})]),
    ("llvm -mcpu=znver3", [("llvm", {"mcpu": "znver3"})]),
    ("cuda -libs=cudnn,cublas", [("cuda", {"libs": "cudnn,cublas"})]),
    ("a, b, llvm", [("a", {}), ("b", {}), ("llvm", {})]),
    ("a,b", [("a", {}), ("b", {})]),
    ("vta_sim, cuda -libs=cudnn,cublas, llvm -mcpu=x",
     [("vta_sim", {}), ("cuda", {"libs": "cudnn,cublas"}), ("llvm", {"mcpu": "x"})]),
    ("cuda -libs=cudnn,cublas -arch=sm_90, llvm",
     [("cuda", {"libs": "cudnn,cublas", "arch": "sm_90"}), ("llvm", {})]),
    ("vta_sim -sim=tsim, ref", [("vta_sim", {"sim": "tsim"}), ("ref", {})]),
    ("llvm -fast", [("llvm", {"fast": ""})]),
])
def test_parse(text, expected):
    target = Target.parse(text)
    assert [(k.name, k.options) for k in target.kinds] == expected
    assert Target.parse(str(target)) == target


def test_libs_list():
    kind = Target.parse("cuda -libs=cudnn,cublas").kinds[0]
    assert kind.get_list("libs") == ["cudnn", "cublas"]
    assert kind.get_list("nothing") == []


@pytest.mark.parametrize("text, message", [
    ("", "empty target"),
    ("llvm, , ref", "empty entry"),
    ("llvm mcpu=x", "expected -key=value"),
    ("9llvm", "bad target kind"),
    ("llvm, llvm", "more than once"),
    ("llvm -=x", "empty key"),
])
def test_bad_targets(text, message):
    with pytest.raises(TargetError, match=message):
        Target.parse(text)


def test_unknown_option_for_a_backend_is_refused():
    from tessera.plugin.manager import resolve_target

    with pytest.raises(TargetError, match="'ref' does not know option.*-foo.*options: none"):
        resolve_target("ref -foo=1")
