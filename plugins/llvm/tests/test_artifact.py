"""Artifacts of llvm modules: ``export`` keeps the object code, ``tessera.load`` links it
without compiling again (in this process and in a fresh one), and damaged artifacts are
refused with an ArtifactError."""

from __future__ import annotations

import hashlib
import io
import json
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import numpy as np
import pytest
from backend_cases.support import conv_block_model, run_onnxruntime, x86_only
from onnx import TensorProto, helper

import tessera
import tessera_llvm
from tessera.errors import ArtifactError
from tessera_llvm import backend as llvm_backend
from tessera_llvm import build, lowering

ROOT = Path(__file__).resolve().parents[3]  # the repository root


def read_tar(path: Path) -> dict[str, bytes]:
    with tarfile.open(path) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()  # type: ignore
                if m.isfile()}


def write_tar(path: Path, members: dict[str, bytes], fix_manifest: bool) -> Path:
    """Write ``members`` as a tar; with ``fix_manifest`` the manifest's hashes are recomputed
    (a damaged file that the manifest check cannot catch)."""
    if fix_manifest:
        manifest = json.loads(members["manifest.json"])
        manifest["files"] = {n: hashlib.sha256(d).hexdigest() for n, d in members.items()
                             if n != "manifest.json"}
        members = {**members, "manifest.json": json.dumps(manifest).encode()}
    with tarfile.open(path, "w") as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return path


def llvm_member(members: dict[str, bytes], file: str) -> str:
    (name,) = [n for n in members if n.startswith("backends/llvm/") and n.endswith("/" + file)]
    return name


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict, dict]:
    """The conv block compiled for llvm, exported; its inputs and outputs."""
    model, inputs = conv_block_model(seed=4)
    module = tessera.compile(model, target="llvm")
    outputs = module.run(**inputs)
    path = module.export(tmp_path_factory.mktemp("artifact") / "block.tar")
    return path, inputs, outputs


def forbid_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("tessera.load compiled the model again")

    monkeypatch.setattr(build, "build_module", refuse)
    monkeypatch.setattr(lowering, "lower_region", refuse)
    monkeypatch.setattr(llvm_backend, "lower_region", refuse)
    monkeypatch.setattr(llvm_backend.LLVMBackend, "compile", refuse)


def test_load_runs_the_saved_code_without_compiling(exported: tuple, monkeypatch:
                                                    pytest.MonkeyPatch) -> None:
    path, inputs, outputs = exported
    forbid_compiling(monkeypatch)
    loaded = tessera.load(path)
    assert {cr.backend for cr in loaded.compiled.values()} == {"llvm"}
    got = loaded.run(**inputs)
    assert got is not None and list(got) == ["y"]
    np.testing.assert_array_equal(got["y"], outputs["y"])
    # and again with other inputs: the loaded kernels compute, they do not replay
    other = {k: v[..., ::-1].copy() for k, v in inputs.items()}
    got2 = loaded.run(**other)
    assert got2 is not None and not np.array_equal(got2["y"], got["y"])


def test_loaded_module_matches_onnxruntime_on_new_inputs(exported: tuple) -> None:
    path, inputs, _ = exported
    model, _ = conv_block_model(seed=4)
    rng = np.random.default_rng(11)
    other = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in inputs.items()}
    got = tessera.load(path).run(**other)
    assert got is not None
    np.testing.assert_allclose(got["y"], run_onnxruntime(model, other)["y"], rtol=1e-5,
                               atol=1e-5)


def test_tar_holds_object_code_and_kernel_table(exported: tuple) -> None:
    path, _, _ = exported
    members = read_tar(path)
    manifest = json.loads(members["manifest.json"])
    assert manifest["plugins"]["llvm"]["distribution"] == "tessera-llvm"
    assert manifest["plugins"]["llvm"]["version"] == tessera_llvm.__version__
    assert manifest["target"] == "llvm"
    obj = members[llvm_member(members, "kernels.o")]
    assert obj[:4] == b"\x7fELF"
    table = json.loads(members[llvm_member(members, "kernels.json")])
    assert table["format"] == llvm_backend.ARTIFACT_FORMAT
    names = [k["name"] for k in table["kernels"]]
    assert len(names) == 4 and all(n.encode() in obj for n in names)  # exported symbols
    assert any(k["op"] == "ConvNCHWc+Add+Relu" for k in table["kernels"])
    region = llvm_member(members, "kernels.o").split("/")[2]
    arrays = manifest["arrays"][region]  # the packed (blocked) weights the lowering created
    assert arrays and all(k.startswith(llvm_backend.CONSTANT_KEY) for k in arrays)
    packed = [np.load(io.BytesIO(members[f"constants/{h}.npy"])) for h in arrays.values()]
    assert any(a.ndim == 6 for a in packed)
    # the region's own constants are not stored again: llvm keeps them (packed)
    assert manifest["params"] == {}
    graph = json.loads(members["graph.json"])["function"]
    (body,) = [n["body"] for n in graph["nodes"] if "body" in n]
    assert body["constants"] and all(c.get("held_by") == "llvm"
                                     for c in body["constants"].values())
    for name in members:
        digest = hashlib.sha256(members[name]).hexdigest()
        if name.startswith("constants/"):
            assert name == f"constants/{digest}.npy"
        elif name != "manifest.json":
            assert manifest["files"][name] == digest


def test_tampered_object_code_is_refused(exported: tuple, tmp_path: Path) -> None:
    path, _, _ = exported
    members = read_tar(path)
    name = llvm_member(members, "kernels.o")
    obj = bytearray(members[name])
    obj[len(obj) // 2] ^= 0xFF
    bad = write_tar(tmp_path / "bad.tar", {**members, name: bytes(obj)}, fix_manifest=False)
    with pytest.raises(ArtifactError, match=f"{name}.*SHA-256"):
        tessera.load(bad)


@pytest.mark.parametrize("damage", ["not json", "wrong format", "no kernels"])
def test_corrupt_kernel_table_names_the_region(exported: tuple, tmp_path: Path,
                                               damage: str) -> None:
    path, _, _ = exported
    members = read_tar(path)
    name = llvm_member(members, "kernels.json")
    region = name.split("/")[2]
    table = json.loads(members[name])
    if damage == "not json":
        data = members[name][: len(members[name]) // 2]
    elif damage == "wrong format":
        data = json.dumps({**table, "format": 99}).encode()
    else:
        data = json.dumps({k: v for k, v in table.items() if k != "kernels"}).encode()
    bad = write_tar(tmp_path / "bad.tar", {**members, name: data}, fix_manifest=True)
    with pytest.raises(ArtifactError, match=f"llvm region {region}"):
        tessera.load(bad)


def test_missing_object_file_names_the_region(exported: tuple, tmp_path: Path) -> None:
    path, _, _ = exported
    members = read_tar(path)
    name = llvm_member(members, "kernels.o")
    region = name.split("/")[2]
    rest = {k: v for k, v in members.items() if k != name}
    bad = write_tar(tmp_path / "bad.tar", rest, fix_manifest=True)
    with pytest.raises(ArtifactError, match=f"llvm region {region}: the artifact has no "
                                            "kernels.o"):
        tessera.load(bad)


def _load_in_subprocess(path: Path, inputs: dict[str, np.ndarray], tmp_path: Path
                        ) -> subprocess.CompletedProcess:
    feeds = tmp_path / "inputs.npz"
    np.savez(feeds, **inputs)
    script = textwrap.dedent(f"""
        import numpy as np, tessera
        from tessera.errors import TesseraError
        try:
            mod = tessera.load({str(path)!r})
            with np.load({str(feeds)!r}) as f:
                out = mod.run(**{{k: f[k] for k in f.files}})
            np.savez({str(tmp_path / 'outputs.npz')!r}, **out)
            print("ok")
        except TesseraError as err:
            print(type(err).__name__ + ":", err)
        """)
    return subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)


@pytest.mark.slow
def test_fresh_process_loads_and_runs_the_artifact(exported: tuple, tmp_path: Path) -> None:
    path, inputs, outputs = exported
    proc = _load_in_subprocess(path, inputs, tmp_path)
    assert proc.returncode == 0 and proc.stdout.strip() == "ok", proc.stderr[-2000:]
    with np.load(tmp_path / "outputs.npz") as out:
        np.testing.assert_array_equal(out["y"], outputs["y"])


@pytest.mark.parametrize("damage", ["truncated", "garbage"])
@pytest.mark.slow
def test_invalid_object_code_is_an_artifact_error(exported: tuple, tmp_path: Path,
                                                  damage: str) -> None:
    path, inputs, _ = exported
    members = read_tar(path)
    name = llvm_member(members, "kernels.o")
    obj = members[name]
    data = obj[: len(obj) // 2] if damage == "truncated" else b"\x7fELF" + bytes(200)
    bad = write_tar(tmp_path / "bad.tar", {**members, name: data}, fix_manifest=True)
    proc = _load_in_subprocess(bad, inputs, tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.startswith("ArtifactError:") and name.split("/")[2] in proc.stdout


def test_mixed_llvm_and_ref_module_round_trips(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    nodes = [helper.make_node("Sigmoid", ["x"], ["s"], name="sigmoid"),
             helper.make_node("TopK", ["s", "k"], ["v", "i"], name="topk", axis=-1),
             helper.make_node("Exp", ["v"], ["y"], name="exp")]
    from onnx import numpy_helper

    graph = helper.make_graph(
        nodes, "mixed", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 33])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 5]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [4, 5])],
        [numpy_helper.from_array(np.array([5], np.int64), "k")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    module = tessera.compile(model, target="llvm")
    assert [r.backend for r in module.partition_report().regions] == ["llvm", "ref", "llvm"]
    x = np.random.default_rng(2).standard_normal((4, 33)).astype(np.float32)
    want = module.run(x=x)
    path = module.export(tmp_path / "mixed.tar")
    members = read_tar(path)
    assert len([n for n in members if n.endswith("/kernels.o")]) == 2
    forbid_compiling(monkeypatch)
    loaded = tessera.load(path)
    assert [r.backend for r in loaded.partition_report().regions] == ["llvm", "ref", "llvm"]
    got = loaded.run(x=x)
    assert got is not None and want is not None
    for k in ("y", "i"):
        np.testing.assert_array_equal(got[k], want[k])


@x86_only
def test_target_options_survive_the_round_trip(tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    model, inputs = conv_block_model(seed=6)
    module = tessera.compile(model, target="llvm -mcpu=x86-64-v2")
    want = module.run(**inputs)
    path = module.export(tmp_path / "v2.tar")
    table = json.loads(read_tar(path)[llvm_member(read_tar(path), "kernels.json")])
    assert table["mcpu"] == "x86-64-v2"
    forbid_compiling(monkeypatch)
    first, second = tessera.load(path), tessera.load(path)
    assert first.target == "llvm -mcpu=x86-64-v2"
    for loaded in (first, second, first):
        (cr,) = loaded.compiled.values()
        assert cr.handle.mcpu == "x86-64-v2"
        got = loaded.run(**inputs)
        assert got is not None and want is not None
        np.testing.assert_array_equal(got["y"], want["y"])


def test_code_for_features_this_cpu_lacks_is_refused(exported: tuple, tmp_path: Path) -> None:
    """An artifact whose object code needs CPU features the host lacks would die of an illegal
    instruction: loading refuses it, naming the features."""
    path, inputs, _ = exported
    members = read_tar(path)
    name = llvm_member(members, "kernels.json")
    meta = json.loads(members[name])
    assert meta["features"]  # recorded at compile time
    meta["features"] += ",+no-such-feature"
    bad = write_tar(tmp_path / "bad.tar", {**members, name: json.dumps(meta).encode()},
                    fix_manifest=True)
    with pytest.raises(ArtifactError, match="no-such-feature"):
        tessera.load(bad)
