"""Artifacts: round trip, and every way a tampered or unsafe tar is refused."""

from __future__ import annotations

import io
import json
import tarfile

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import tessera
from tessera.errors import ArtifactError


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 6])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6])
    w = onnx.numpy_helper.from_array(np.linspace(-1, 1, 6, dtype=np.float32), "w")
    nodes = [helper.make_node("Mul", ["x", "w"], ["m"]), helper.make_node("Relu", ["m"], ["y"])]
    return helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                             opset_imports=[helper.make_opsetid("", 17)])


@pytest.fixture
def artifact(tmp_path):
    mod = tessera.compile(_model(), target="ref")
    return mod, mod.export(tmp_path / "model.tar")


def _members(path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def _write(path, members: dict[str, bytes], extra=None) -> None:
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info)


def test_round_trip(artifact, rng):
    mod, path = artifact
    x = rng.standard_normal((2, 6)).astype(np.float32)
    loaded = tessera.load(path)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], mod.run(x=x)["y"])
    manifest = json.loads(_members(path)["manifest.json"])
    assert manifest["inputs"] == [{"name": "x", "shape": [2, 6], "dtype": "float32"}]
    assert manifest["plugins"]["ref"]["distribution"] == "tessera"
    assert {"graph.json", "report.json"} <= set(manifest["files"])
    assert set(manifest["params"]) == {"w"}  # the reference backend reads the graph's
    assert str(loaded.partition_report()) == str(mod.partition_report())


def test_tampered_params_are_detected(artifact, tmp_path):
    _, path = artifact
    members = _members(path)
    name = "constants/" + json.loads(members["manifest.json"])["params"]["w"] + ".npy"
    w = np.load(io.BytesIO(members[name]))
    buf = io.BytesIO()
    np.save(buf, w * 2)
    members[name] = buf.getvalue()
    bad = tmp_path / "bad.tar"
    _write(bad, members)
    with pytest.raises(ArtifactError, match=f"{name}.*SHA-256"):
        tessera.load(bad)


def test_unlisted_member_is_refused(artifact, tmp_path):
    _, path = artifact
    members = _members(path)
    members["backends/ref/evil.py"] = b"print('hi')"
    bad = tmp_path / "bad.tar"
    _write(bad, members)
    with pytest.raises(ArtifactError, match="not listed in the manifest"):
        tessera.load(bad)


@pytest.mark.parametrize("name", ["../escape.txt", "/abs/path.txt", "a/../../b"])
def test_unsafe_paths_are_refused(artifact, tmp_path, name):
    _, path = artifact
    members = _members(path)
    members[name] = b"x"
    bad = tmp_path / "bad.tar"
    _write(bad, members)
    with pytest.raises(ArtifactError, match="unsafe path"):
        tessera.load(bad)
    assert not (tmp_path / "escape.txt").exists()


def test_links_are_refused(artifact, tmp_path):
    _, path = artifact
    link = tarfile.TarInfo("backends/ref/link")
    link.type = tarfile.SYMTYPE
    link.linkname = "/etc/passwd"
    bad = tmp_path / "bad.tar"
    _write(bad, _members(path), [link])
    with pytest.raises(ArtifactError, match="link or special file"):
        tessera.load(bad)


def test_truncated_and_garbage_files(artifact, tmp_path):
    _, path = artifact
    data = path.read_bytes()
    cut = tmp_path / "cut.tar"
    cut.write_bytes(data[: len(data) // 3])
    with pytest.raises(ArtifactError):
        tessera.load(cut)
    junk = tmp_path / "junk.tar"
    junk.write_bytes(b"not a tar at all" * 10)
    with pytest.raises(ArtifactError):
        tessera.load(junk)
    with pytest.raises(ArtifactError, match="does not exist"):
        tessera.load(tmp_path / "missing.tar")


def test_missing_manifest(artifact, tmp_path):
    _, path = artifact
    members = _members(path)
    del members["manifest.json"]
    bad = tmp_path / "bad.tar"
    _write(bad, members)
    with pytest.raises(ArtifactError, match="no manifest.json"):
        tessera.load(bad)


def test_failed_export_leaves_nothing(artifact, tmp_path, monkeypatch):
    mod, _ = artifact
    backend = mod.backends["ref"]
    monkeypatch.setattr(type(backend), "save", lambda self, cr: {"../bad": b""})
    target = tmp_path / "out" / "never.tar"
    with pytest.raises(ArtifactError, match="unsafe file name"):
        mod.export(target)
    assert not target.exists()
    out_dir = tmp_path / "out"
    leftovers = list(out_dir.iterdir()) if out_dir.exists() else []
    assert leftovers == []
