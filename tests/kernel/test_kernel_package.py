"""tessera.kernel (what the code-generating backends share) and the artifact-file helper of
the contract (tessera.plugin.artifact_files)."""

from __future__ import annotations

import numpy as np
import pytest

from tessera import te
from tessera.errors import ArtifactError
from tessera.ir.types import TensorType
from tessera.kernel import ScheduleTable, Template
from tessera.plugin.artifact_files import CONSTANT_KEY, ArtifactFiles
from tessera.plugin.backend import Backend, CompiledRegion


class _Saver(Backend):
    name = "saver"
    artifact_version = "4"

    def claims(self, target):  # noqa: ANN001, ANN201
        return []

    def compile(self, region, target, options):  # noqa: ANN001, ANN201
        raise NotImplementedError


LAYOUT = ArtifactFiles("table.json", files=("code.bin",), hashes={"code_sha256": "code.bin"},
                       keys=("kernels", "tensors"))


def _saved() -> dict:
    return LAYOUT.save(_Saver(), {"kernels": [1, 2]}, {"code.bin": b"\x00code"},
                       {"w": np.arange(3, dtype=np.float32)},
                       {"x": TensorType((2, 3), "float32")})


def test_save_and_load_round_trip() -> None:
    files = _saved()
    assert isinstance(files[CONSTANT_KEY + "w"], np.ndarray)
    saved = LAYOUT.load(_Saver(), "region0_saver", files)
    assert saved.table["format"] == 4 and saved.table["kernels"] == [1, 2]
    assert saved.files == {"code.bin": b"\x00code"}
    np.testing.assert_array_equal(saved.constants["w"], np.arange(3, dtype=np.float32))
    assert saved.tensors == {"x": TensorType((2, 3), "float32")}


@pytest.mark.parametrize("damage, message", [
    ("missing", "the artifact has no code.bin"),
    ("format", "table.json has artifact format 99, this plugin reads 4"),
    ("hash", "code.bin does not match the hash table.json records"),
    ("json", "cannot read the saved kernels"),
    ("key", "cannot read the saved kernels .*no 'kernels'"),
])
def test_damage_is_an_artifact_error_naming_the_region(damage: str, message: str) -> None:
    import json

    files = _saved()
    table = json.loads(files["table.json"])
    if damage == "missing":
        del files["code.bin"]
    elif damage == "format":
        files["table.json"] = json.dumps({**table, "format": 99}).encode()
    elif damage == "hash":
        files["code.bin"] = b"other"
    elif damage == "json":
        files["table.json"] = b"{not json"
    else:
        files["table.json"] = json.dumps({k: v for k, v in table.items()
                                          if k != "kernels"}).encode()
    with pytest.raises(ArtifactError, match=f"saver region region0_saver: .*{message}|"
                                            f"saver region region0_saver: {message}"):
        LAYOUT.load(_Saver(), "region0_saver", files)


def test_handle_of_another_backend_is_refused() -> None:
    from tessera.ir.graph import Function

    compiled = CompiledRegion("saver", Function("region0_saver"), [], {}, {}, {}, handle=None)
    with pytest.raises(ArtifactError, match="not compiled by this backend .no code."):
        LAYOUT.handle(_Saver(), compiled, bytes, "no code")


def _matmul_relu() -> list[te.Tensor]:
    a = te.placeholder((4, 8), "float32", name="A")
    b = te.placeholder((8, 4), "float32", name="B")
    r = te.reduce_axis((0, 8), name="r")
    c = te.compute((4, 4), lambda i, j: te.sum(a[i, r] * b[r, j], axis=r), name="C")
    d = te.compute((4, 4), lambda i, j: c[i, j] + c[i, j], name="D")
    return [d]


def test_schedule_table_tries_templates_in_order_then_the_fallback() -> None:
    seen: list[str] = []

    def find_reduction(ops):  # noqa: ANN001, ANN202
        return next((op for op in ops if op.reduce_axis), None)

    def apply(ctx, anchor):  # noqa: ANN001, ANN202
        seen.append(f"apply {anchor.name}")

    table = ScheduleTable(
        (Template("never", lambda ops: None, apply),
         Template("refuses", find_reduction, apply, accepts=lambda ctx, a: False),
         Template("takes", find_reduction, apply)),
        fallback=lambda ctx: seen.append("fallback"), default_template="mine")
    result = table.schedule_group(_matmul_relu(), target=None)
    assert seen == ["apply C"] and result.template == "mine"

    seen.clear()
    stop = ScheduleTable(
        (Template("refuses", find_reduction, apply, accepts=lambda ctx, a: False,
                  refused="fallback"), Template("takes", find_reduction, apply)),
        fallback=lambda ctx: seen.append("fallback"))
    stop.schedule_group(_matmul_relu(), target=None)
    assert seen == ["fallback"]


def test_moved_passes_keep_their_old_import_paths() -> None:
    import tessera.kernel.alter_layout as new_layout
    import tessera.kernel.fuse_ops as new_fuse
    import tessera.passes.alter_layout as old_layout
    import tessera.passes.fuse_ops as old_fuse

    assert old_fuse.fuse_ops is new_fuse.fuse_ops
    assert old_layout.alter_conv_layout is new_layout.alter_conv_layout
