"""Artifacts of modules with symbolic shapes: ``DynamicModule.export`` and loading them back.

The tar holds:

- ``dynamic.json``: format, Tessera version, target, the inputs' symbolic shapes, the output
  names, the variables' bounds, the cache size, the variables not specialised on
  (``symbolic_dims``: split plans are made again where it loads), the settings that compile
  the model again (opt level, pass switches), where each specialisation is, and the SHA-256
  of every member outside ``specializations/``;
- ``model.onnx``: the model, so that a loaded module compiles new sizes on first use as the
  one exported did (the plugins the target names must be installed where it is loaded);
- ``model.data``: a model with external data keeps its tensors' bytes here (each at a 64-byte
  aligned offset; ``model.onnx`` names it as their location): a loaded module reads them
  from the artifact file itself, as it would from a data file beside a model (the tar must
  stay uncompressed);
- ``frozen.npz`` (inputs bound with ``freeze_inputs``) and ``records.jsonl`` (the tuning
  records it was compiled with), when there are any;
- ``specializations/<i>/``: each specialisation cached at export, a whole static artifact
  (:mod:`tessera.runtime.artifact`, its own manifest and hashes), loaded without compiling.
"""

from __future__ import annotations

import dataclasses
import io
import json
import tarfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from tessera._version import __version__
from tessera.errors import ArtifactError, TesseraError
from tessera.frontend.onnx.external_data import (
    BASE_KEY,
    PATH_KEY,
    external_tensors,
    pack_external_data,
    resolve_external_data,
)
from tessera.ir.symbolic import InputSpec, ShapeVars, check_bounds
from tessera.runtime.artifact import (
    artifact_members,
    check_export_path,
    check_listed,
    sha256,
    write_members,
)
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.mapped_members import MappedMember, Member

__all__ = ["DYNAMIC_MANIFEST", "DynamicSource", "StoredDynamic", "export_dynamic",
           "is_dynamic", "read_dynamic"]

DYNAMIC_MANIFEST = "dynamic.json"
DYNAMIC_FORMAT = 1
SPECIALIZATIONS = "specializations/"
#: The member holding the bytes of a model's external tensors.
MODEL_DATA = "model.data"


@dataclass(frozen=True)
class DynamicSource:
    """What compiles a model with symbolic shapes at new sizes: the ONNX model (serialized),
    the target and the settings that shape code (the rest, such as progress, are not kept)."""

    model: bytes
    target: str
    opt_level: int = 3
    pass_config: Mapping[str, bool] = field(default_factory=dict)
    disabled_passes: tuple[str, ...] = ()
    frozen: Mapping[str, np.ndarray] = field(default_factory=dict)
    records: str | None = None
    #: variables not specialised on (split plans; :mod:`tessera.runtime.split`), and
    #: whether more are chosen as calls meet them (``symbolic_dims="auto"``)
    symbolic: tuple[str, ...] = ()
    auto_symbolic: bool = False


@dataclass(frozen=True)
class StoredDynamic:
    """A dynamic artifact read back: its source, shapes, outputs, cache size, and each stored
    specialisation's variables' sizes with its static artifact's members."""

    source: DynamicSource
    shape_vars: ShapeVars
    output_names: list[str]
    max_specializations: int
    specializations: list[tuple[dict[str, int], dict[str, Member]]]


def export_dynamic(module: DynamicModule, source: DynamicSource, path: Path) -> Path:
    """Write ``module`` (its source and every cached specialisation) to ``path`` atomically."""
    check_export_path(path)
    files: dict[str, bytes] = dict(_model_members(source.model))
    if source.frozen:
        buf = io.BytesIO()
        np.savez(buf, **{k: np.asarray(v) for k, v in source.frozen.items()})
        files["frozen.npz"] = buf.getvalue()
    if source.records:
        files["records.jsonl"] = source.records.encode()
    listed = {name: sha256(data) for name, data in files.items()}
    stored = []
    for i, (sizes, mod) in enumerate(module.specializations()):
        prefix = f"{SPECIALIZATIONS}{i}/"
        files.update((prefix + name, data) for name, data in artifact_members(mod.model).items())
        stored.append({"sizes": sizes, "prefix": prefix})
    manifest = {
        "format": DYNAMIC_FORMAT,
        "tessera_version": __version__,
        "target": source.target,
        "inputs": [s.to_json() for s in module.shape_vars.inputs],
        "outputs": list(module.output_names),
        "bounds": {v: list(b) for v, b in module.shape_vars.bounds.items()},
        "max_specializations": module.max_specializations,
        "symbolic_dims": list(source.symbolic) + (["auto"] if source.auto_symbolic else []),
        "options": {"opt_level": source.opt_level, "pass_config": dict(source.pass_config),
                    "disabled_passes": list(source.disabled_passes)},
        "specializations": stored,
        "files": listed,
    }
    return write_members({DYNAMIC_MANIFEST: json.dumps(manifest, indent=2).encode(), **files},
                         path)


def _model_members(model: bytes) -> list[tuple[str, bytes]]:
    """``model.onnx`` (and ``model.data`` for a model with external data: the bytes of its
    external tensors, which may sit anywhere on this machine, gathered into the artifact)."""
    proto = onnx.load_model_from_string(model)
    if next(external_tensors(proto), None) is None:
        return [("model.onnx", model)]
    packed, data = pack_external_data(proto, MODEL_DATA)
    return [("model.onnx", packed.SerializeToString()), (MODEL_DATA, data)]


def _located_model(model: bytes, where: str, data: Member) -> bytes:
    """``model.onnx`` of an artifact with ``model.data``, its external tensors located in
    the artifact file (where that member's bytes start in the tar)."""
    if isinstance(data, MappedMember):
        start = data.offset
    else:
        try:
            with tarfile.open(where, mode="r:") as tar:
                info = tar.getmember(MODEL_DATA)
        except (OSError, KeyError, tarfile.TarError) as e:
            raise ArtifactError(f"{where!r}: the model's external data ({MODEL_DATA}) is read "
                                f"from the artifact file, which must be an uncompressed tar "
                                f"({e})") from None
        if info.size != len(data):
            raise ArtifactError(f"{where!r}: {MODEL_DATA} changed while the artifact loaded")
        start = info.offset_data
    proto = onnx.load_model_from_string(model)
    path = str(Path(where).resolve())
    for t in external_tensors(proto):
        for e in list(t.external_data):
            if e.key in (PATH_KEY, BASE_KEY):
                t.external_data.remove(e)
        t.external_data.add(key=PATH_KEY, value=path)
        t.external_data.add(key=BASE_KEY, value=str(start))
    try:
        resolve_external_data(proto, None, f"model.onnx of {where!r}")
    except TesseraError as e:
        raise ArtifactError(f"{where!r}: {e}") from None
    return proto.SerializeToString()


def is_dynamic(members: Mapping[str, Member]) -> bool:
    """Whether an artifact's members are a dynamic artifact's."""
    return DYNAMIC_MANIFEST in members


def read_dynamic(members: dict[str, Member], where: str) -> StoredDynamic:
    """A dynamic artifact's members checked (format, hashes, no stray member) and read."""
    try:
        manifest = json.loads(members[DYNAMIC_MANIFEST])
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{DYNAMIC_MANIFEST} of {where!r} is not valid JSON: {e}") from None
    fmt = manifest.get("format")
    if fmt != DYNAMIC_FORMAT:
        raise ArtifactError(f"{where!r}: dynamic artifact format {fmt!r} is not supported: this "
                            f"Tessera ({__version__}) reads format {DYNAMIC_FORMAT}; export "
                            f"the model again with this version")
    try:
        listed = dict(manifest["files"])
        specs = [(dict(s["sizes"]), str(s["prefix"])) for s in manifest["specializations"]]
        inputs = tuple(InputSpec.from_json(d) for d in manifest["inputs"])
        shape_vars = ShapeVars(inputs, check_bounds(manifest.get("bounds")))
        options: dict[str, Any] = dict(manifest.get("options", {}))
        outputs = [str(n) for n in manifest["outputs"]]
        max_size = int(manifest.get("max_specializations", 1))
        named = [str(v) for v in manifest.get("symbolic_dims", ())]
        symbolic = tuple(v for v in named if v != "auto")
    except (KeyError, TypeError, ValueError, TesseraError) as e:
        raise ArtifactError(f"{DYNAMIC_MANIFEST} of {where!r} is malformed ({e}); export the "
                            f"model again") from None
    prefixes = [p for _, p in specs]
    for name, data in members.items():
        if name == DYNAMIC_MANIFEST:
            continue
        if name.startswith(SPECIALIZATIONS):
            if not any(name.startswith(p) for p in prefixes):
                raise ArtifactError(f"artifact member {name!r} belongs to no specialisation "
                                    f"the manifest lists (tampered artifact?)")
            continue  # checked by that specialisation's own manifest when it loads
        check_listed(name, data, listed)
    missing = [n for n in listed if n not in members]
    if missing:
        raise ArtifactError(f"artifact member(s) {', '.join(missing)} of {where!r} are missing")
    frozen: dict[str, np.ndarray] = {}
    if "frozen.npz" in members:
        with np.load(io.BytesIO(members["frozen.npz"]), allow_pickle=False) as npz:
            frozen = {k: npz[k] for k in npz.files}
    records = members["records.jsonl"].decode() if "records.jsonl" in members else None
    source = DynamicSource(members["model.onnx"], str(manifest.get("target", "")),
                           int(options.get("opt_level", 3)),
                           dict(options.get("pass_config", {})),
                           tuple(options.get("disabled_passes", ())), frozen, records,
                           symbolic, "auto" in named)
    if MODEL_DATA in members:
        source = dataclasses.replace(source, model=_located_model(
            source.model, where, members[MODEL_DATA]))
    stored = [(sizes, {k[len(p):]: v for k, v in members.items() if k.startswith(p)})
              for sizes, p in specs]
    return StoredDynamic(source, shape_vars, outputs, max(1, max_size), stored)
