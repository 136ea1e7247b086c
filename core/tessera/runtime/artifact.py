"""Deployable artifacts: ``Module.export("model.tar")`` and ``tessera.load("model.tar")``.

The tar holds ``manifest.json`` (format, Tessera version, target, each backend's distribution
and version, input/output signature, the SHA-256 of every other member), ``graph.json`` (the
partitioned graph without parameter data), ``params.npz`` (parameters, read back with
``allow_pickle=False``), ``report.json`` (the partition report) and ``backends/<backend>/<region>/``
with each backend's compiled code. Loading reads members into memory (nothing is extracted to
disk), accepts only regular files with plain relative names, and checks every hash.
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import json
import os
import posixpath
import tarfile
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

import tessera
from tessera.errors import ArtifactError, IRError, PluginArtifactError, TargetError
from tessera.ir.graph import Function
from tessera.ir.serialize import from_json, to_json
from tessera.partition.partitioner import REGION_OP
from tessera.partition.report import CopyInfo, PartitionReport, RegionInfo
from tessera.plugin import contract
from tessera.plugin.backend import Backend, CompileOptions, SavedBackend
from tessera.plugin.manager import backend_unavailable, get_backend, get_registry

FORMAT = 1
MANIFEST = "manifest.json"


def _all_constants(graph: Function) -> dict[str, np.ndarray]:
    params: dict[str, np.ndarray] = {}
    fns = [graph] + [n.body for n in graph.nodes if n.body is not None]
    for fn in fns:
        for v in fn.constants():
            assert v.data is not None
            if v.name in params and params[v.name] is not v.data and not np.array_equal(
                    params[v.name], v.data):
                raise ArtifactError(f"two different constants are named {v.name!r}")
            params[v.name] = v.data
    return params


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def export_module(module: Any, path: Path) -> Path:
    """Write ``module`` to ``path`` atomically (a temp file renamed into place)."""
    files: dict[str, bytes] = {}
    files["graph.json"] = to_json(module.graph, with_data=False).encode()
    buf = io.BytesIO()
    params = _all_constants(module.graph)
    np.savez(buf, **params)
    files["params.npz"] = buf.getvalue()
    files["report.json"] = json.dumps(dataclasses.asdict(module.report)).encode()
    plugins: dict[str, dict[str, str]] = {}
    registry = get_registry()
    for node in module.graph.nodes:
        if node.op != REGION_OP or node.body is None:
            continue
        name = node.body.name
        cr = module.compiled[name]
        backend: Backend = module.backends[cr.backend]
        plugins[backend.name] = {"distribution": registry.owner(backend.name),
                                 "version": registry.plugin_version(backend.name)
                                 or backend.version(),
                                 "artifact_version": str(backend.artifact_version)}
        saved = contract.call(backend, "save()", backend.save, cr, region=name,
                              cls=PluginArtifactError)
        if not isinstance(saved, dict) or not all(
                isinstance(k, str) and isinstance(v, bytes) for k, v in saved.items()):
            raise contract.violation(backend, "save() returns a dict of file name -> bytes",
                                     f"save() returned {type(saved).__name__}", name,
                                     PluginArtifactError)
        for rel, data in saved.items():
            member = posixpath.join("backends", backend.name, name, rel)
            if not _safe_name(member):
                raise ArtifactError(f"backend {backend.name!r} returned an unsafe file name "
                                    f"{rel!r}")
            files[member] = data
    options = module.compile_options or CompileOptions()
    manifest = {
        "format": FORMAT,
        "tessera_version": tessera.__version__,
        "target": module.target,
        "plugins": plugins,
        "inputs": [{"name": n, "shape": list(t.shape), "dtype": t.dtype.value}
                   for n, t in module.input_types.items()],
        "outputs": [{"name": n} for n in module.output_names],
        "options": {"opt_level": options.opt_level,
                    "pass_config": {k: v for k, v in options.pass_config.items()
                                    if isinstance(v, (bool, int, float, str))}},
        "files": {name: _sha256(data) for name, data in files.items()},
    }
    files = {MANIFEST: json.dumps(manifest, indent=2).encode(), **files}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tessera-", suffix=".tar", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as raw, tarfile.open(fileobj=raw, mode="w") as tar:
            for name, data in files.items():
                info = tarfile.TarInfo(name)
                info.size = len(data)
                info.mode = 0o644
                tar.addfile(info, io.BytesIO(data))
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return path


def _safe_name(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def read_members(path: Path) -> dict[str, bytes]:
    """Every member of the tar, refusing links, special files and unsafe names."""
    if not path.is_file():
        raise ArtifactError(f"artifact {str(path)!r} does not exist")
    members: dict[str, bytes] = {}
    try:
        with tarfile.open(path, mode="r:*") as tar:
            for info in tar.getmembers():
                if not _safe_name(info.name):
                    raise ArtifactError(f"artifact member {info.name!r} has an unsafe path "
                                        f"(absolute or with '..')")
                if info.isdir():
                    continue
                if not info.isfile():
                    raise ArtifactError(f"artifact member {info.name!r} is a link or special "
                                        f"file; only regular files are allowed")
                if info.name in members:
                    raise ArtifactError(f"artifact member {info.name!r} appears twice")
                f = tar.extractfile(info)
                members[info.name] = f.read() if f is not None else b""
    except tarfile.TarError as e:
        raise ArtifactError(f"{str(path)!r} is not a readable tar artifact: {e}") from None
    except EOFError:
        raise ArtifactError(f"{str(path)!r} is truncated") from None
    return members


def load_module(path: Path, devices: dict[str, int] | None = None) -> Any:
    """Rebuild a module from an artifact without recompiling where backends keep code."""
    from tessera.api import kind_of_region
    from tessera.runtime.module import Module

    members = read_members(path)
    if MANIFEST not in members:
        raise ArtifactError(f"{str(path)!r} has no {MANIFEST}; not a Tessera artifact")
    try:
        manifest = json.loads(members[MANIFEST])
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{MANIFEST} is not valid JSON: {e}") from None
    if manifest.get("format") != FORMAT:
        raise ArtifactError(f"artifact format {manifest.get('format')!r} is not supported "
                            f"(expected {FORMAT})")
    listed = manifest.get("files", {})
    for name, data in members.items():
        if name == MANIFEST:
            continue
        if name not in listed:
            raise ArtifactError(f"artifact member {name!r} is not listed in the manifest "
                                f"(tampered artifact?)")
        if _sha256(data) != listed[name]:
            raise ArtifactError(f"artifact member {name!r} does not match its SHA-256 in the "
                                f"manifest (tampered or corrupted artifact)")
    for name in listed:
        if name not in members:
            raise ArtifactError(f"artifact member {name!r} is missing")

    backends: dict[str, Backend] = {}
    for name, info in manifest.get("plugins", {}).items():
        dist = str(info.get("distribution", "?"))
        try:
            backend = get_backend(name)
        except TargetError:
            broken = get_registry().broken_distribution(dist)
            if broken is not None:
                raise ArtifactError(f"the artifact needs backend {name!r} from plugin {dist}, "
                                    f"which is installed ({broken.version}) but failed to "
                                    f"load: {broken.error}") from None
            raise ArtifactError(f"the artifact needs backend {name!r} from plugin {dist} "
                                f"{info.get('version', '')}, which is not installed; "
                                f"pip install {dist}") from None
        reason = backend_unavailable(backend)
        if reason:
            raise ArtifactError(f"the artifact needs backend {name!r}, which is installed but "
                                f"unavailable here: {reason}")
        saved_version = info.get("artifact_version")
        saved = SavedBackend(name, dist, str(info.get("version", "?")),
                             None if saved_version is None else str(saved_version))
        refusal = contract.call(backend, "accepts_artifact()", backend.accepts_artifact, saved,
                                cls=PluginArtifactError)
        if refusal:
            raise contract.violation(backend, "accepts_artifact() accepts the saved regions",
                                     f"cannot load this artifact: {refusal}", None,
                                     PluginArtifactError)
        backends[name] = backend
    try:
        with np.load(io.BytesIO(members["params.npz"]), allow_pickle=False) as npz:
            params = {k: npz[k] for k in npz.files}
        graph = from_json(members["graph.json"], params)
    except (IRError, ValueError, OSError) as e:
        raise ArtifactError(f"artifact graph or parameters are malformed: {e}") from None
    opts = manifest.get("options", {})
    options = CompileOptions(opt_level=int(opts.get("opt_level", 3)),
                             pass_config=dict(opts.get("pass_config", {})),
                             devices=dict(devices or {}))
    compiled = {}
    for node in graph.nodes:
        if node.op != REGION_OP or node.body is None:
            continue
        body = node.body
        bname = body.attrs.get("backend")
        if bname not in backends:
            raise ArtifactError(f"region {body.name} names backend {bname!r}, which the "
                                f"manifest does not list")
        prefix = f"backends/{bname}/{body.name}/"
        files = {k[len(prefix):]: v for k, v in members.items() if k.startswith(prefix)}
        backend = backends[bname]
        loaded = contract.call(backend, "load()", backend.load, body, files,
                               kind_of_region(body), options, region=body.name,
                               cls=PluginArtifactError)
        compiled[body.name] = contract.check_compiled(backend, body, loaded)
    report = _report_from(json.loads(members["report.json"]))
    return Module(graph, compiled, backends, manifest.get("target", ""), report, [], options)


def _report_from(d: dict[str, Any]) -> PartitionReport:
    return PartitionReport(d.get("target", ""),
                           [RegionInfo(**r) for r in d.get("regions", [])],
                           [CopyInfo(**c) for c in d.get("copies", [])],
                           [tuple(f) for f in d.get("fallback", [])],  # type: ignore[misc]
                           [tuple(f) for f in d.get("declined", [])])  # type: ignore[misc]
