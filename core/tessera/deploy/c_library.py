"""``tessera export --format c``: a compiled model as a C library that runs without Python.

:func:`export_c` reads the execution plan of a :class:`~tessera.runtime.module.Module`
compiled with ``for_export=True`` (every region on the host; fixed input shapes, or symbolic
ones: the library then runs at any size within the bounds, binding and checking the sizes as
``Module.run`` does, :mod:`.c_sizes`), asks each
region's backend for its code (``Backend.export_code``: position-independent objects, one
``void symbol(void **args)`` per kernel), and writes into a folder:

- ``<prefix>.h`` and ``<prefix>.c``: the C API and the plan (:mod:`.c_source`): the inputs
  copied into the arena, one call per kernel with the arguments' addresses in the arena or
  the weights, the outputs copied out;
- ``<prefix>_weights.bin`` and ``<prefix>_weights.S``: every constant the kernels read
  (packed weights as the backends keep them), once each, 64-byte aligned, embedded in the
  library by ``.incbin``;
- the backends' objects, ``<prefix>.map`` (the shared library exports the API only),
  a ``Makefile`` (``make`` builds ``lib<prefix>.so`` and ``lib<prefix>.a``) and
  ``export.json`` (what was exported: triple, CPU features, arena, inputs, outputs);
- with ``shared`` and a C compiler (``cc``, or ``$CC``): ``lib<prefix>.so`` linked now.

A region whose backend cannot export (a device without a C driver path, the numpy
reference, control flow through Python) makes the export fail with an
:class:`~tessera.errors.ExportError` naming every such region.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tessera._version import __version__
from tessera.errors import ExportError, TesseraError
from tessera.plugin.exported import ExportedCode
from tessera.runtime.module import Module
from tessera.runtime.plan import workspace_name

from .c_sizes import dim_c, relation_c
from .c_source import (
    ALIGN,
    CCall,
    CPlan,
    CTensor,
    Place,
    check_prefix,
    header,
    source,
    version_script,
    weights_assembly,
)


@dataclass
class CExport:
    """What :func:`export_c` wrote: the folder, its files, the shared library (None when
    not linked, ``link_note`` says why), the arena and weights in bytes, the triple and the
    kernel calls of the plan."""

    folder: Path
    files: list[str]
    shared_library: Path | None
    link_note: str
    arena_bytes: int
    weights_bytes: int
    triple: str
    calls: int
    libraries: list[str] = field(default_factory=list)


def export_c(module: Module, folder: str | Path, prefix: str = "model",
             shared: bool = True, cc: str | None = None, serial: bool = False) -> CExport:
    """Write ``module`` as a C library into ``folder`` (see the module doc); with ``shared``,
    link ``lib<prefix>.so`` with ``cc`` (default ``$CC``, else ``cc``) when there is one
    and the code is for this machine's architecture. With ``serial`` the code starts no
    threads (parallel loops run in the calling thread; no pthreads needed)."""
    check_prefix(prefix)
    _check_exportable(module)
    codes = _region_code(module, serial)
    triples = {c.triple for c in codes.values()}
    if len(triples) > 1:
        raise ExportError(f"the regions' code is for several triples ({', '.join(triples)})")
    triple = triples.pop() if triples else ""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    blob, offsets = _weights(module)
    plan = _c_plan(module, prefix, codes, offsets, blob)
    files: dict[str, bytes | str] = {
        f"{prefix}.h": header(plan), f"{prefix}.c": source(plan),
        f"{prefix}_weights.S": weights_assembly(prefix, f"{prefix}_weights.bin", not blob),
        f"{prefix}.map": version_script(prefix)}
    objects: dict[str, bytes] = {}
    made = {f"{prefix}.o", f"{prefix}_weights.o"}  # what the Makefile compiles
    for region, code in codes.items():
        clash = made & set(code.objects)
        if clash:
            raise ExportError(f"prefix {prefix!r}: the Makefile's {', '.join(sorted(clash))} "
                              f"would overwrite region {region}'s object; choose another")
        for name, data in code.objects.items():
            if name in objects and objects[name] != data:
                raise ExportError(f"region {region}'s object {name!r} differs from another "
                                  f"region's object of that name")
            objects[name] = data
    files.update(objects)
    libraries = list(dict.fromkeys(lib for c in codes.values() for lib in c.libraries))
    files["Makefile"] = _makefile(prefix, list(objects), libraries)
    files["export.json"] = json.dumps(_summary(module, plan, triple, libraries), indent=2)
    for name, data in files.items():
        path = out / name
        if isinstance(data, str):
            path.write_text(data)
        else:
            path.write_bytes(data)
    with open(out / f"{prefix}_weights.bin", "wb") as f:
        for chunk in blob:
            f.write(chunk if isinstance(chunk, bytes) else chunk.data)
    written = [*files, f"{prefix}_weights.bin"]
    library, note = None, "not asked for (shared=False)"
    if shared:
        library, note = _link(out, prefix, list(objects), libraries, triple, cc)
        if library is not None:
            written.append(library.name)
    return CExport(out, sorted(written), library, note, plan.arena_bytes, plan.weights_bytes,
                   triple, len(plan.calls), libraries)


def _check_exportable(module: Module) -> None:
    if module.sequences is not None:
        raise ExportError("the module has sequence inputs or outputs (lists of arrays), "
                          "which the C API does not take")
    off_host = sorted({t.device for t in module.plan.tensors.values() if t.device != "cpu"})
    if off_host:
        raise ExportError(f"tensors of the module live on {', '.join(off_host)}; export takes "
                          f"models whose regions all run on the host CPU")


def _region_code(module: Module, serial: bool) -> dict[str, ExportedCode]:
    """Each region's exported code; every region that cannot export named in one error."""
    codes: dict[str, ExportedCode] = {}
    refused: list[str] = []
    for region in dict.fromkeys(s.region for s in module.plan.steps if s.region):
        compiled = module.compiled[region]
        backend = module.backends[compiled.backend]
        try:
            code = backend.export_code(compiled, serial=serial)
        except TesseraError as e:
            refused.append(f"{region} ({compiled.backend}): {e}")
            continue
        except Exception as e:  # noqa: BLE001 - a plugin's failure, named
            refused.append(f"{region} ({compiled.backend}): export_code failed: "
                           f"{type(e).__name__}: {e}")
            continue
        if not isinstance(code, ExportedCode):
            refused.append(f"{region} ({compiled.backend}): export_code returned "
                           f"{type(code).__name__}, not ExportedCode")
            continue
        missing = [k.name for k in compiled.kernels if k.name not in code.symbols]
        if missing:
            refused.append(f"{region} ({compiled.backend}): no symbol for kernel(s) "
                           f"{', '.join(missing[:5])}")
            continue
        codes[region] = code
    if refused:
        raise ExportError("these regions hold the export back: " + "; ".join(refused))
    return codes


def _weights(module: Module) -> tuple[list[Any], dict[str, int]]:
    """The weights blob (chunks: padding bytes and constants' bytes as uint8 arrays, each
    constant once, aligned) and each constant's offset."""
    chunks: list[Any] = []
    offsets: dict[str, int] = {}
    seen: dict[tuple[int, int], int] = {}
    size = 0
    named: dict[str, Any] = {name: buf for name, (_dev, buf) in module.plan.constants.items()}
    named.update({f"output/{k}": v for k, v in module.plan.output_constants.items()})
    for name, buf in named.items():
        array = np.ascontiguousarray(np.asarray(buf))
        key = (array.__array_interface__["data"][0], int(array.nbytes))
        if key in seen:
            offsets[name] = seen[key]
            continue
        pad = -size % ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            size += pad
        offsets[name] = seen[key] = size
        chunks.append(array.reshape(-1).view(np.uint8))
        size += int(array.nbytes)
    return chunks, offsets


def _c_plan(module: Module, prefix: str, codes: dict[str, ExportedCode],
            offsets: dict[str, int], blob: list[bytes]) -> CPlan:
    plan, memory = module.plan, module.memory

    def place(name: str) -> Place:
        if name in offsets:
            return ("weights", offsets[name])
        return ("arena", memory.offset(name)[1])

    sizes, index, relations = _sizes(module)
    region_index = {region: r for r, region in enumerate(plan.region_sizes)}
    calls: list[CCall] = []
    for i, step in enumerate(plan.steps):
        if i in memory.elided:
            continue  # its inputs already sit inside its output
        if step.is_copy:
            raise ExportError(f"step {step.name} copies between devices {step.src} and "
                              f"{step.dst}; export takes host-only models")
        symbol = codes[step.region].symbols[step.name]
        args = [place(n) for n in step.inputs + step.outputs]
        if step.region in region_index:  # buffers, the workspace or null, the sizes
            if not step.outputs or step.outputs[-1] != workspace_name(step.name):
                args.append(("null", 0))
            args.append(("sizes", region_index[step.region]))
        calls.append(CCall(symbol, args, f"{step.name} ({step.op})"))
    inputs = [_tensor(module, name, name, place(name), index) for name in plan.inputs]
    outputs = []
    for out_name, tensor in zip(module.signature.output_names, module.signature.output_tensors):
        if tensor in plan.output_constants:
            value = np.asarray(plan.output_constants[tensor])
            outputs.append(CTensor(out_name, str(value.dtype), tuple(value.shape),
                                   int(value.nbytes), ("weights", offsets[f"output/{tensor}"])))
            continue
        outputs.append(_tensor(module, out_name, tensor, place(tensor), index))
    arena = max((dp.total_bytes for dp in memory.devices.values()), default=0)
    set_threads = list(dict.fromkeys(c.set_threads for c in codes.values() if c.set_threads))
    features = sorted({f for c in codes.values() for f in c.cpu_features})
    return CPlan(prefix, module.graph.name, arena, sum(len(c) for c in blob), inputs, outputs,
                 calls, set_threads, features, __version__, sizes,
                 [[index[n] for n in names] for names in plan.region_sizes.values()],
                 relations)


def _sizes(module: Module) -> tuple[list[tuple[str, int, int]], dict[str, int],
                                    list[tuple[str, str]]]:
    """A symbolic module's size variables (name, lowest, highest or -1), each one's index in
    the C sizes array, and its relations as C: empty for a static module."""
    if module.shape_vars is None:
        return [], {}, []
    names = list(dict.fromkeys(d for spec in module.shape_vars.inputs for d in spec.dims
                               if isinstance(d, str)))
    names += [n for n in module.plan.size_names if n not in names]
    index = {n: k for k, n in enumerate(names)}
    bounds = module.shape_vars.bounds
    sizes = []
    for n in names:
        lo, hi = bounds.get(n, (0, None))
        sizes.append((n, int(lo), -1 if hi is None else int(hi)))
    relations = [(relation_c(r["check"], index), str(r.get("text", r["check"])))
                 for r in module.graph.attrs.get("size_relations") or []]
    return sizes, index, relations


def _tensor(module: Module, name: str, tensor: str, where: Place,
            index: dict[str, int]) -> CTensor:
    """Input or output ``name`` (plan tensor ``tensor``) of the C API."""
    info = module.plan.tensors[tensor]
    t = info.type
    out = CTensor(name, t.dtype.value, tuple(t.shape), int(t.nbytes), where,
                  itemsize=int(np.dtype(t.dtype.numpy).itemsize))
    if info.symbolic is not None:
        out.dims_c = [dim_c(d, index) for d in info.symbolic.shape]
    if module.shape_vars is not None and name in module.input_types:  # fixed ones checked too
        spec = next(s for s in module.shape_vars.inputs if s.name == name)
        out.spec = [("var", index[d]) if isinstance(d, str) else ("int", int(d))
                    for d in spec.dims]
    return out


def _summary(module: Module, plan: CPlan, triple: str, libraries: list[str]
             ) -> dict[str, Any]:
    def tensor(t: CTensor) -> dict[str, Any]:
        shape: list[Any] = list(t.shape)
        info = module.plan.tensors.get(t.name) if t.dims_c is not None else None
        if info is not None and info.symbolic is not None:
            shape = [d if isinstance(d, int) else str(d) for d in info.symbolic.shape]
        return {"name": t.name, "dtype": t.dtype, "shape": shape, "bytes": t.nbytes}

    return {"model": plan.model, "prefix": plan.prefix, "tessera": __version__,
            "target": module.target, "triple": triple, "cpu_features": plan.cpu_features,
            "arena_bytes": plan.arena_bytes, "weights_bytes": plan.weights_bytes,
            "kernel_calls": len(plan.calls), "libraries": libraries,
            "sizes": [{"name": n, "low": lo, "high": None if hi < 0 else hi}
                      for n, lo, hi in plan.sizes],
            "relations": [text for _, text in plan.relations],
            "inputs": [tensor(t) for t in plan.inputs],
            "outputs": [tensor(t) for t in plan.outputs]}


def _makefile(prefix: str, objects: list[str], libraries: list[str]) -> str:
    libs = " ".join(f"-l{lib}" for lib in libraries)
    objs = " ".join(objects)
    return "\n".join([
        f"# Builds lib{prefix}.so and lib{prefix}.a from the exported model (generated).",
        "CC ?= cc", "CFLAGS ?= -O2", "",
        f"all: lib{prefix}.so lib{prefix}.a", "",
        f"{prefix}.o: {prefix}.c {prefix}.h",
        f"\t$(CC) $(CFLAGS) -fPIC -c {prefix}.c -o $@", "",
        f"{prefix}_weights.o: {prefix}_weights.S {prefix}_weights.bin",
        f"\t$(CC) -fPIC -c {prefix}_weights.S -Wa,-I. -o $@", "",
        f"lib{prefix}.so: {prefix}.o {prefix}_weights.o {objs}",
        f"\t$(CC) -shared -o $@ $^ -Wl,--version-script={prefix}.map -Wl,-z,noexecstack "
        f"{libs}", "",
        f"lib{prefix}.a: {prefix}.o {prefix}_weights.o {objs}",
        "\t$(AR) rcs $@ $^", "",
        f"# link a program with: -l{prefix} {libs}", ""])


def find_cc(cc: str | None = None) -> str | None:
    """The C compiler: ``cc``, else ``$CC``, else ``cc`` on the PATH (None: none found)."""
    name = cc or os.environ.get("CC") or "cc"
    return shutil.which(name)


def _link(out: Path, prefix: str, objects: list[str], libraries: list[str], triple: str,
          cc: str | None) -> tuple[Path | None, str]:
    """Link ``lib<prefix>.so`` in ``out``: (its path, "") or (None, why not)."""
    compiler = find_cc(cc)
    if compiler is None:
        return None, "no C compiler found (cc, $CC): run make in the folder where there is one"
    arch = triple.split("-")[0]
    machine = os.uname().machine
    if arch and arch != {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine):
        return None, (f"the code is for {triple}; link it there (make), or with a cross "
                      f"compiler as cc")
    library = out / f"lib{prefix}.so"
    cmd = [compiler, "-shared", "-fPIC", "-O2", "-o", library.name, f"{prefix}.c",
           f"{prefix}_weights.S", "-Wa,-I.", *objects,
           f"-Wl,--version-script={prefix}.map", "-Wl,-z,noexecstack",
           *(f"-l{lib}" for lib in libraries)]
    proc = subprocess.run(cmd, cwd=out, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ExportError(f"linking lib{prefix}.so failed ({' '.join(cmd)}):\n"
                          f"{proc.stderr.strip()[-2000:]}")
    return library, ""
