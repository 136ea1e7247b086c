"""Artifacts whose weights are mapped from the .tar (tessera.runtime.mapped_members): the
packed weights of a loaded module are the file's pages (64-byte aligned, read-only, not read
at load), its outputs are the exported module's, every hash is still checked, and a
compressed tar (or TESSERA_MAP_WEIGHTS=0) is read as before."""

from __future__ import annotations

import gzip
import shutil
import sys
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.errors import ArtifactError
from tessera.ir.mapped import MAP_MIN_BYTES, mapped_region, resident_bytes
from tessera.runtime import mapped_members
from tessera.runtime.artifact import read_members
from tessera.runtime.mapped_members import MappedMember, load_npy, member_sha256

RNG = np.random.default_rng(29)


def _model() -> onnx.ModelProto:
    """x[n, 256] -> MatMul (256 x 512: 512 KiB) -> Relu -> MatMul (512 x 64) -> y."""
    w1 = RNG.standard_normal((256, 512)).astype(np.float32) / 16
    w2 = RNG.standard_normal((512, 64)).astype(np.float32) / 16
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
         helper.make_node("MatMul", ["r", "W2"], ["y"])], "mlp",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n", 256])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", 64])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(w2, "W2")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


def _constants(mod: tessera.Module) -> list[np.ndarray]:
    return [a for cr in mod.model.compiled.values() for a in cr.constants.values()
            if isinstance(a, np.ndarray) and a.nbytes >= MAP_MIN_BYTES]


@pytest.fixture
def exported(tmp_path: Path) -> tuple[tessera.Module, Path]:
    mod = tessera.compile(_model(), "llvm", input_shapes={"x": [3, 256]})
    return mod, mod.export(tmp_path / "mlp.tar")


def test_a_loaded_modules_weights_are_mapped_from_the_tar(
        exported: tuple[tessera.Module, Path]) -> None:
    mod, path = exported
    loaded = tessera.load(path)
    weights = _constants(loaded)
    assert weights and all(mapped_region(a) is not None for a in weights)
    assert all(a.ctypes.data % 64 == 0 and not a.flags.writeable for a in weights)
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], mod.run(x=x)["y"])


def test_members_left_in_the_file_are_the_arrays(exported: tuple[tessera.Module, Path]
                                                 ) -> None:
    _, path = exported
    members = read_members(path)
    mapped = {k: v for k, v in members.items() if isinstance(v, MappedMember)}
    assert mapped and all(k.startswith("constants/") for k in mapped)
    with tarfile.open(path) as tar:
        for name, member in mapped.items():
            data = tar.extractfile(name).read()
            assert member_sha256(member) == member_sha256(data)
            np.testing.assert_array_equal(load_npy(member), load_npy(data))


def test_a_damaged_mapped_array_is_still_refused(exported: tuple[tessera.Module, Path],
                                                 tmp_path: Path) -> None:
    _, path = exported
    member = next(v for v in read_members(path).values() if isinstance(v, MappedMember))
    damaged = tmp_path / "damaged.tar"
    shutil.copy(path, damaged)
    with open(damaged, "r+b") as f:
        f.seek(member.offset + member.size - 3)
        byte = f.read(1)
        f.seek(-1, 1)
        f.write(bytes([byte[0] ^ 0x40]))
    with pytest.raises(ArtifactError, match="does not match the SHA-256"):
        tessera.load(damaged)


def test_a_compressed_artifact_is_read_into_memory(exported: tuple[tessera.Module, Path],
                                                   tmp_path: Path) -> None:
    mod, path = exported
    packed = tmp_path / "mlp.tar.gz"
    with open(path, "rb") as src, gzip.open(packed, "wb") as dst:
        shutil.copyfileobj(src, dst)
    assert not any(isinstance(v, MappedMember) for v in read_members(packed).values())
    loaded = tessera.load(packed)
    assert not any(mapped_region(a) is not None for a in _constants(loaded))
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], mod.run(x=x)["y"])


def test_mapping_can_be_turned_off(exported: tuple[tessera.Module, Path],
                                   monkeypatch: pytest.MonkeyPatch) -> None:
    _, path = exported
    monkeypatch.setenv("TESSERA_MAP_WEIGHTS", "0")
    loaded = tessera.load(path)
    assert not any(mapped_region(a) is not None for a in _constants(loaded))


def test_a_dynamic_artifacts_specialisations_are_mapped_too(tmp_path: Path) -> None:
    mod = tessera.compile(_model(), "llvm", shape_mode="specialize")
    x = RNG.standard_normal((2, 256)).astype(np.float32)
    want = mod.run(x=x)["y"]
    path = mod.export(tmp_path / "dyn.tar")
    members = read_members(path)
    assert any(isinstance(v, MappedMember) and k.startswith("specializations/")
               for k, v in members.items())
    loaded = tessera.load(path)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], want)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/smaps")
def test_loading_reads_no_weight_into_memory(exported: tuple[tessera.Module, Path]) -> None:
    _, path = exported
    loaded = tessera.load(path)
    weights = _constants(loaded)
    # the hash check read them, and let their pages go
    resident = sum(resident_bytes(a) or 0 for a in weights)
    assert resident < sum(a.nbytes for a in weights) // 4


def test_a_file_that_cannot_be_mapped_is_read(exported: tuple[tessera.Module, Path],
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    mod, path = exported

    def refuse(*args: object, **kwargs: object) -> None:
        raise OSError("mmap: operation not supported")

    monkeypatch.setattr(mapped_members, "map_readonly", refuse)
    loaded = tessera.load(path)
    assert not any(mapped_region(a) is not None for a in _constants(loaded))
    x = RNG.standard_normal((3, 256)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run(x=x)["y"], mod.run(x=x)["y"])
