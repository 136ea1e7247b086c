"""Deployable artifacts: ``Module.export("model.tar")`` and ``tessera.load("model.tar")``.

The tar (format 2) holds:

- ``manifest.json``: format, Tessera version, target, each backend's distribution and version,
  the input/output signature, where each stored array is used (``params``: graph constant
  name -> array hash; ``arrays``: region -> the key a backend's ``save`` gave -> array hash)
  and the SHA-256 of every other member (arrays are named by theirs);
- ``graph.json``: the partitioned graph without constant data; a constant the backend of its
  region keeps in its compiled form (``Backend.keeps_constants``) is marked ``held_by``;
- ``report.json``: the partition report;
- ``backends/<backend>/<region>/``: the files each backend's ``save`` returned;
- ``constants/<sha256>.npy``: every array, once. An array is named by the SHA-256 of its
  ``.npy`` bytes, so a graph parameter and a backend's array with the same dtype, shape and
  bytes (or two regions' arrays) are one member. Graph parameters are stored only where a
  backend reads them from the region graph (the reference backend), and a backend's packed
  weights are the only copy of what its kernels read: each weight is stored once, in the form
  its backend uses.

Export writes a :class:`~tessera.runtime.compiled.CompiledModel`; loading
(:func:`load_model`) rebuilds one: its regions' backends, target kinds, devices and matches are
read back from ``graph.json`` (:meth:`~tessera.partition.regions.PartitionedGraph.from_graph`;
a region that lacks them is refused with a request to compile the model again), and
``tessera.load`` plans it into a module.

Loading reads members into memory (nothing is extracted to disk), except the arrays of an
uncompressed tar, which are mapped from it (:mod:`tessera.runtime.mapped_members`: a loaded
module's weights are the file's pages, shared between processes); it accepts only regular
files with plain relative names, checks every hash, and reads arrays with
``allow_pickle=False``.
Format 1 (parameters in ``params.npz``, backends' constants inside their own files) still
loads where its backends accept their files. The tar is written atomically with the mode of
any new file (``0o666`` less the umask).
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import os
import posixpath
import secrets
import tarfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from tessera._version import __version__
from tessera.errors import ArtifactError, IRError, PartitionError, PluginArtifactError, TargetError
from tessera.ir.cast import is_low_precision
from tessera.ir.graph import Function
from tessera.ir.mapped import MAP_MIN_BYTES, mapping_enabled
from tessera.ir.serialize import FORMAT_VERSION as GRAPH_FORMAT
from tessera.ir.serialize import from_json, function_to_dict
from tessera.ir.symbolic import dim_str
from tessera.ir.types import DType
from tessera.partition.regions import PartitionedGraph
from tessera.partition.report import CopyInfo, PartitionReport, RegionInfo
from tessera.plugin import contract
from tessera.plugin.backend import Backend, CompiledRegion, CompileOptions, SavedBackend
from tessera.plugin.kernel_cache import default_kernel_cache
from tessera.plugin.manager import backend_unavailable, get_backend, get_registry
from tessera.plugin.subgraphs import SubgraphCompiler
from tessera.runtime.compiled import CompiledModel
from tessera.runtime.mapped_members import MappedMember, Member, load_npy, member_sha256

FORMAT = 2
#: Artifact formats ``load_model`` reads.
READS_FORMATS = (1, 2)
MANIFEST = "manifest.json"
CONSTANTS_DIR = "constants"


def sha256(data: Member) -> str:
    return member_sha256(data)


class _ConstantStore:
    """The artifact's content-addressed arrays: each distinct array once, as
    ``constants/<sha256 of its .npy bytes>.npy``."""

    def __init__(self) -> None:
        self.members: dict[str, bytes] = {}

    def put(self, array: np.ndarray, what: str) -> str:
        a = np.asarray(array)
        if not a.flags.c_contiguous:  # one byte order per content, so one hash
            a = a.copy(order="C")
        low = a.dtype.name if is_low_precision(a.dtype) else None
        if low is not None:  # .npy cannot name ml_dtypes types: their bytes, typed in the key
            a = a.view(np.uint16 if a.dtype.itemsize == 2 else np.uint8)
        buf = io.BytesIO()
        try:
            np.lib.format.write_array(buf, a, allow_pickle=False)
        except ValueError as e:
            raise ArtifactError(f"cannot store {what} ({a.dtype}): {e}") from None
        data = buf.getvalue()
        digest = sha256(data)
        self.members.setdefault(f"{CONSTANTS_DIR}/{digest}.npy", data)
        return f"{digest}:{low}" if low is not None else digest


def _graph_params(partitioned: PartitionedGraph, held: dict[str, set[str]]
                  ) -> dict[str, np.ndarray]:
    """The constants stored in graph form: every constant outside regions, and each region's
    constants except those its backend keeps (``held``: region name -> constant names)."""
    graph = partitioned.graph
    params: dict[str, np.ndarray] = {}
    for fn in [graph, *(r.body for r in partitioned.regions)]:
        kept = held.get(fn.name, set()) if fn is not graph else set()
        for v in fn.constants():
            if v.name in kept:
                continue
            if v.is_held:
                raise ArtifactError(f"constant {v.name!r} of {fn.name} is held by backend "
                                    f"{v.held_by!r}, which does not keep it any more; compile "
                                    f"the model again")
            data = v.data
            assert data is not None
            known = params.get(v.name)
            if known is not None and known is not data and not np.array_equal(known, data):
                raise ArtifactError(f"two different constants are named {v.name!r}")
            params[v.name] = data
    return params


def _graph_json(graph: Function, held: dict[str, set[str]], backend_of: dict[str, str]
                ) -> bytes:
    """``graph.json``: the graph without data, the constants each backend keeps marked
    ``held_by`` it."""
    doc = function_to_dict(graph, with_data=False)
    for node, entry in zip(graph.nodes, doc["nodes"]):
        if node.body is None or node.body.name not in held:
            continue
        consts = entry["body"]["constants"]
        for name in held[node.body.name]:
            consts[name] = {"type": consts[name]["type"],
                            "held_by": backend_of[node.body.name]}
    return json.dumps({"format": GRAPH_FORMAT, "function": doc}).encode()


def _saved(backend: Backend, cr: Any, name: str) -> dict[str, bytes | np.ndarray]:
    saved = contract.call(backend, "save()", backend.save, cr, region=name,
                          cls=PluginArtifactError)
    if not isinstance(saved, dict) or not all(
            isinstance(k, str) and isinstance(v, (bytes, np.ndarray))
            for k, v in saved.items()):
        raise contract.violation(backend, "save() returns a dict of file name -> bytes and "
                                 "key -> numpy array", f"save() returned "
                                 f"{_describe(saved)}", name, PluginArtifactError)
    return saved


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        bad = next(((k, v) for k, v in value.items() if not isinstance(k, str)
                    or not isinstance(v, (bytes, np.ndarray))), None)
        if bad is not None:
            return f"a dict with {bad[0]!r} -> {type(bad[1]).__name__}"
    return type(value).__name__


def export_model(model: CompiledModel, path: Path) -> Path:
    """Write ``model`` to ``path`` atomically (a temp file renamed into place)."""
    check_export_path(path)
    return write_members(artifact_members(model), path)


def check_export_path(path: Path) -> None:
    """Refuse an export path that is a folder, before any work."""
    if path.is_dir():
        raise ArtifactError(f"cannot export to {str(path)!r}: it is a folder; expected a file "
                            f"name, e.g. {str(path / 'model.tar')!r}")


def artifact_members(model: CompiledModel) -> dict[str, bytes]:
    """The members of ``model``'s artifact: member name -> bytes (the manifest first)."""
    store = _ConstantStore()
    files: dict[str, bytes] = {}
    plugins: dict[str, dict[str, str]] = {}
    arrays: dict[str, dict[str, str]] = {}
    held: dict[str, set[str]] = {}
    backend_of: dict[str, str] = {}
    registry = get_registry()
    for region, cr in model.compiled_regions():
        name = region.name
        backend: Backend = model.backends[region.backend]
        plugins[backend.name] = {"distribution": registry.owner(backend.name),
                                 "version": registry.plugin_version(backend.name)
                                 or backend.version(),
                                 "artifact_version": str(backend.artifact_version)}
        backend_of[name] = backend.name
        for rel, data in _saved(backend, cr, name).items():
            if isinstance(data, np.ndarray):
                key = store.put(data, f"array {rel!r} of {backend.name} region {name}")
                arrays.setdefault(name, {})[rel] = key
                continue
            member = posixpath.join("backends", backend.name, name, rel)
            if not _safe_name(member):
                raise ArtifactError(f"backend {backend.name!r} returned an unsafe file name "
                                    f"{rel!r}")
            files[member] = data
        kept = model.kept_constants(region)
        if kept:
            held[name] = kept
    params = {k: store.put(v, f"constant {k!r}")
              for k, v in _graph_params(model.partitioned, held).items()}
    files = {"graph.json": _graph_json(model.graph, held, backend_of),
             "report.json": json.dumps(dataclasses.asdict(model.report)).encode(),
             **files}
    options = model.options or CompileOptions()
    manifest = {
        "format": FORMAT,
        "tessera_version": __version__,
        "target": model.target,
        "plugins": plugins,
        "inputs": [{"name": n, "shape": [d if isinstance(d, int) else dim_str(d)
                                         for d in t.shape], "dtype": t.dtype.value}
                   for n, t in model.input_types.items()],
        "outputs": [{"name": n} for n in model.output_names],
        "options": {"opt_level": options.opt_level,
                    "pass_config": {k: v for k, v in options.pass_config.items()
                                    if isinstance(v, (bool, int, float, str))}},
        "params": params,
        "arrays": arrays,
        "files": {name: sha256(data) for name, data in files.items()},
    }
    return {MANIFEST: json.dumps(manifest, indent=2).encode(), **files, **store.members}


def write_members(files: dict[str, bytes], path: Path) -> Path:
    """A tar of ``files`` (member name -> bytes) written atomically to ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with _atomic_file(path) as raw, tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
    return path


@contextlib.contextmanager
def _atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A new file next to ``path`` that replaces ``path`` when the block ends without an
    error, and is removed otherwise. It is created like any new file (``0o666`` less the
    umask, and the folder's default ACL), not ``0o600`` as ``tempfile.mkstemp`` would."""
    tmp = path.parent / f".tessera-{secrets.token_hex(8)}.tar.part"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except OSError as e:  # name the user's path, not the temp file's
        raise ArtifactError(f"cannot write {str(path)!r}: {e.strerror or e}") from None
    try:
        with os.fdopen(fd, "wb") as raw:
            yield raw
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _safe_name(name: str) -> bool:
    if not name or name.startswith("/") or "\\" in name or "\x00" in name:
        return False
    parts = name.split("/")
    return all(p not in ("", ".", "..") for p in parts)


def read_members(path: Path) -> dict[str, Member]:
    """Every member of the tar, refusing links, special files and unsafe names. Of an
    uncompressed tar, the large arrays (``constants/``) and model data are left in the file
    (:class:`~tessera.runtime.mapped_members.MappedMember`: mapped, not read)."""
    if not path.is_file():
        raise ArtifactError(f"artifact {str(path)!r} does not exist")
    members: dict[str, Member] = {}
    where = str(path.resolve())
    try:
        with _open_tar(path) as (tar, plain):
            in_place = plain and mapping_enabled()
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
                if in_place and info.size >= MAP_MIN_BYTES and _left_in_file(info.name):
                    members[info.name] = MappedMember(where, info.offset_data, info.size)
                    continue
                f = tar.extractfile(info)
                members[info.name] = f.read() if f is not None else b""
    except tarfile.TarError as e:
        if not tarfile.is_tarfile(path):
            raise ArtifactError(f"{str(path)!r} is not a Tessera artifact: not a tar file "
                                f"(tessera compile writes one)") from None
        reason = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        raise ArtifactError(f"{str(path)!r} is a damaged tar file: {reason}") from None
    except EOFError:
        raise ArtifactError(f"{str(path)!r} is truncated") from None
    return members


@contextlib.contextmanager
def _open_tar(path: Path) -> Iterator[tuple[tarfile.TarFile, bool]]:
    """The tar at ``path`` opened for reading, and whether it is plain (uncompressed: its
    members sit in the file as they are, so they can be mapped)."""
    try:
        tar, plain = tarfile.open(path, mode="r:"), True
    except tarfile.ReadError:
        tar, plain = tarfile.open(path, mode="r:*"), False
    with tar:
        yield tar, plain


def _left_in_file(name: str) -> bool:
    """Members read in place (arrays, a dynamic artifact's specialisations' arrays too, and a
    model's external data): the rest is read."""
    folder, file = posixpath.split(name)
    return (posixpath.basename(folder) == CONSTANTS_DIR and file.endswith(".npy")) or \
        name == "model.data"


def load_model(path: Path, devices: dict[str, int] | None = None) -> CompiledModel:
    """Rebuild the compiled model of an artifact without recompiling where backends keep
    code (``tessera.load`` plans it into a module)."""
    return model_from_members(read_members(path), str(path), devices)


def model_from_members(members: dict[str, Member], where: str,
                       devices: dict[str, int] | None = None,
                       subgraphs: Callable[[str], SubgraphCompiler] | None = None
                       ) -> CompiledModel:
    """:func:`load_model` of an artifact's members (``read_members``); ``where`` names the
    artifact in errors. ``subgraphs`` gives the sub-graph compiler for the artifact's target
    (``CompileOptions.subgraphs``: control-flow bodies are compiled again on load)."""
    if MANIFEST not in members:
        raise ArtifactError(f"{where!r} has no {MANIFEST}; not a Tessera artifact")
    try:
        manifest = json.loads(members[MANIFEST])
    except json.JSONDecodeError as e:
        raise ArtifactError(f"{MANIFEST} is not valid JSON: {e}") from None
    fmt = manifest.get("format")
    if fmt not in READS_FORMATS:
        newer = " (written by a newer Tessera)" if isinstance(fmt, int) and fmt > FORMAT else ""
        raise ArtifactError(f"artifact format {fmt!r}{newer} is not supported: this Tessera "
                            f"({__version__}) reads formats "
                            f"{', '.join(map(str, READS_FORMATS))}; export the model again "
                            f"with this version")
    listed = _mapping(manifest, "files")
    used = _array_hashes(manifest) if fmt != 1 else set()
    for name, data in members.items():
        if name == MANIFEST:
            continue
        digest = _stored_hash(name) if fmt != 1 else None
        if digest is not None:  # constants/<sha256>.npy: named by its hash
            if digest not in used:
                raise ArtifactError(f"artifact member {name!r} is not used by the manifest "
                                    f"(tampered artifact?)")
            if sha256(data) != digest:
                raise ArtifactError(f"artifact member {name!r} does not match the SHA-256 it "
                                    f"is named by (tampered or corrupted artifact)")
            continue
        check_listed(name, data, listed)
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
    store = _StoredArrays(members)
    try:
        if fmt == 1:
            with np.load(io.BytesIO(members["params.npz"]), allow_pickle=False) as npz:
                params = {k: npz[k] for k in npz.files}
        else:
            params = {str(k): store.get(v) for k, v in _mapping(manifest, "params").items()}
        graph = from_json(members["graph.json"], params)
    except (IRError, ValueError, OSError, KeyError) as e:
        raise ArtifactError(f"artifact graph or parameters are malformed: {e}") from None
    for v in graph.constants():
        if v.is_held:
            raise ArtifactError(f"graph constant {v.name!r} is marked held by {v.held_by!r} "
                                f"outside any region (malformed graph.json)")
    arrays = _mapping(manifest, "arrays") if fmt != 1 else {}
    opts = manifest.get("options", {})
    options = CompileOptions(opt_level=int(opts.get("opt_level", 3)),
                             pass_config=dict(opts.get("pass_config", {})),
                             devices=dict(devices or {}),
                             kernel_cache=default_kernel_cache())
    if subgraphs is not None:
        options.subgraphs = subgraphs(str(manifest.get("target", "")) or "auto")
    report = _report_from(_json_member(members, "report.json"))
    try:
        partitioned = PartitionedGraph.from_graph(graph, report)
    except PartitionError as e:
        raise ArtifactError(f"the artifact's graph.json is not a partitioned graph this "
                            f"Tessera reads ({e}); compile the model again") from None
    compiled: dict[str, CompiledRegion] = {}
    for region in partitioned.regions:
        body, bname = region.body, region.backend
        if bname not in backends:
            raise ArtifactError(f"region {body.name} names backend {bname!r}, which the "
                                f"manifest does not list")
        for v in body.constants():
            if v.is_held and v.held_by != bname:
                raise ArtifactError(f"constant {v.name!r} of region {body.name} ({bname}) is "
                                    f"marked held by {v.held_by!r} (malformed graph.json)")
        prefix = f"backends/{bname}/{body.name}/"
        files: dict[str, bytes | np.ndarray] = {
            k[len(prefix):]: v for k, v in members.items() if k.startswith(prefix)}
        region_arrays = arrays.get(body.name, {})
        if not isinstance(region_arrays, dict):
            raise ArtifactError(f"manifest arrays of region {body.name} are malformed")
        for key, digest in region_arrays.items():
            files[str(key)] = store.get(digest)
        backend = backends[bname]
        loaded = contract.call(backend, "load()", backend.load, body, files, region.kind,
                               options, region=body.name, cls=PluginArtifactError)
        compiled[body.name] = contract.check_compiled(backend, body, loaded)
    return CompiledModel(partitioned, compiled, backends, manifest.get("target", ""), [],
                         options)


def check_listed(name: str, data: Member, listed: dict[str, Any]) -> None:
    """Refuse a member the manifest's ``files`` (name -> SHA-256) does not list, or whose
    bytes do not match its hash."""
    if name not in listed:
        raise ArtifactError(f"artifact member {name!r} is not listed in the manifest "
                            f"(tampered artifact?)")
    if sha256(data) != listed[name]:
        raise ArtifactError(f"artifact member {name!r} does not match its SHA-256 in the "
                            f"manifest (tampered or corrupted artifact)")


def _json_member(members: dict[str, bytes], name: str) -> Any:
    try:
        return json.loads(members[name])
    except (KeyError, json.JSONDecodeError) as e:
        raise ArtifactError(f"artifact member {name} is missing or not valid JSON "
                            f"({e}); compile the model again") from None


def _stored_hash(member: str) -> str | None:
    """The hash of a ``constants/<sha256>.npy`` member, None for any other member."""
    head, _, tail = member.partition("/")
    if head != CONSTANTS_DIR or not tail.endswith(".npy"):
        return None
    return tail[:-len(".npy")]


def _array_hashes(manifest: dict[str, Any]) -> set[str]:
    """Every array hash the manifest refers to (graph parameters and backends' arrays)."""
    used = {str(d) for d in _mapping(manifest, "params").values()}
    for region in _mapping(manifest, "arrays").values():
        if not isinstance(region, dict):
            raise ArtifactError("manifest 'arrays' is malformed")
        used.update(str(d) for d in region.values())
    return {d.partition(":")[0] for d in used}  # "<hash>:<low-precision dtype>" names a view


def _mapping(manifest: dict[str, Any], key: str) -> dict[str, Any]:
    value = manifest.get(key, {})
    if not isinstance(value, dict):
        raise ArtifactError(f"manifest {key!r} is not a mapping (malformed manifest)")
    return value


def _low_precision_view(array: np.ndarray, name: str, member: str) -> np.ndarray:
    """The stored bytes of a low-precision array (``put``) viewed as its type ``name``."""
    try:
        dtype = DType(name)
    except ValueError:
        dtype = None
    if dtype is None or not dtype.is_low_precision or array.dtype.itemsize != dtype.itemsize:
        raise ArtifactError(f"artifact member {member} is referred to as {name!r}, which is not "
                            f"a low-precision element type of its item size (malformed "
                            f"manifest)")
    return array.view(dtype.numpy)


class _StoredArrays:
    """The arrays of an artifact's ``constants/`` members, each read once (when first
    asked for) and shared read-only by every graph constant and region that uses it."""

    def __init__(self, members: dict[str, Member]) -> None:
        self.members = members
        self.arrays: dict[str, np.ndarray] = {}

    def get(self, digest: Any) -> np.ndarray:
        if not isinstance(digest, str):
            raise ArtifactError(f"the manifest refers to array {digest!r}, not a hash "
                                f"(malformed manifest)")
        array = self.arrays.get(digest)
        if array is not None:
            return array
        digest, _, low = digest.partition(":")
        member = f"{CONSTANTS_DIR}/{digest}.npy"
        data = self.members.get(member)
        if data is None:
            raise ArtifactError(f"the manifest refers to array {digest!r}, which the artifact "
                                f"lacks ({member})")
        try:
            array = load_npy(data)  # mapped from the artifact where it can be
        except (ValueError, OSError) as e:
            raise ArtifactError(f"artifact member {member} is not a readable array: "
                                f"{e}") from None
        if not isinstance(array, np.ndarray):
            raise ArtifactError(f"artifact member {member} is not a .npy array")
        if low:
            array = _low_precision_view(array, low, member)
        if array.flags.writeable:
            array.flags.writeable = False
        self.arrays[digest + (f":{low}" if low else "")] = array
        return array


def _report_from(d: dict[str, Any]) -> PartitionReport:
    return PartitionReport(d.get("target", ""),
                           [RegionInfo(**r) for r in d.get("regions", [])],
                           [CopyInfo(**c) for c in d.get("copies", [])],
                           [tuple(f) for f in d.get("fallback", [])],  # type: ignore[misc]
                           [tuple(f) for f in d.get("declined", [])],  # type: ignore[misc]
                           [tuple(f) for f in d.get("placed", [])])  # type: ignore[misc]
