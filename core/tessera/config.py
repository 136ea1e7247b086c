"""What a user asks of :func:`tessera.compile`, as one object: :class:`CompileConfig`.

``tessera.compile(model, target, config)`` takes one; the same settings may also be given as
keyword arguments (``tessera.compile(model, "llvm", input_shapes={...}, opt_level=2)``), which
override the config's fields. :func:`tessera.api.partition_model` takes the same object and
ignores the fields that only code generation reads (``tuning_records``, ``dump_code``,
``dump_dir``, ``kernel_cache``).

Not to be confused with :class:`tessera.plugin.backend.CompileOptions`, what each *backend*
receives: the core builds that from this config, with the tuning records already resolved into
each region's schedule overrides.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from tessera.plugin.records import TuningHistory

__all__ = ["CompileConfig", "merge_config"]

C = TypeVar("C")


@dataclass(frozen=True)
class CompileConfig:
    """How to compile a model (every field optional).

    - ``input_shapes``: input name -> shape, fixing or naming the inputs' dimensions: each
      an int (fixed), a variable name (``{"input_ids": ["batch", 128]}``), or None (the
      model's own). With a variable left, the model compiles as ``shape_mode`` says.
    - ``shape_mode``: how a model whose inputs keep symbolic dimensions compiles.
      ``"symbolic"``: once, into one :class:`~tessera.runtime.module.Module` for every size
      within ``dim_bounds`` (its kernels take the sizes at run time; every backend that gets
      a region with symbolic shapes must take run-time extents, ``Backend.symbolic_extents``).
      ``"specialize"``: a :class:`~tessera.runtime.dynamic.DynamicModule`, which compiles the
      model per size on first use (``specialize``, ``symbolic_dims``, ``background_compile``
      and ``max_specializations`` are its settings). ``"auto"`` (default): symbolic when the
      target's backends and the model allow it, else specialize (with a warning when the
      symbolic compile failed); any of the dynamic module's settings, or tuning records
      (they are per size), chooses specialize.
    - ``dim_bounds``: variable -> ``(low, high)``: the sizes a symbolic or dynamic module
      accepts; a symbolic module plans its memory at the upper bounds. A variable left out
      takes the bound the model implies, else a default
      (:mod:`tessera.frontend.onnx.dim_bounds`; ``Module.dim_bound_notes`` says which).
    - ``specialize``: input shapes (each a mapping like ``input_shapes``, every dimension an
      int) a dynamic module compiles at once rather than on first use (and exports).
    - ``symbolic_dims``: variables a dynamic module does not specialise on, because they
      change on nearly every call (a decoder's cache length: ``["past", "total"]``): for
      each size of the other variables the model is split once into the parts whose shapes
      do not depend on them, compiled once, and the parts that do, evaluated at each call's
      sizes (:mod:`tessera.runtime.split`). ``"auto"`` (alone or with names): a variable
      seen at three sizes joins them, unless the model does not split on it.
    - ``background_compile``: a dynamic module's call at a size not compiled yet does not
      wait for the compile: it runs on the evaluator (the model in numpy, at any size) while
      the module for its size compiles in a background thread; later calls use the compiled
      module once it is ready (``DynamicModule.wait_compiles()`` waits for it).
    - ``max_specializations``: how many specialised modules a dynamic module keeps (least
      recently used dropped first; default 8).
    - ``opt_level``: 0-3, the graph passes that run (3: all).
    - ``tuning_records``: a JSON-lines file of ``tessera tune`` or a
      :class:`~tessera.plugin.records.TuningHistory`: each workload gets its best measured
      schedule (``apply_history_best``).
    - ``pass_config`` / ``disabled_passes``: switch passes on or off by name
      (``{"FoldConstants": False}``), checked before the import.
    - ``freeze_inputs``: bind inputs to constant values.
    - ``dump_ir``: write the IR after each pass into that folder.
    - ``progress``: print each stage (and each region compiled, with what its backend reports
      within it) to stderr.
    - ``dump_code`` (``"ll,asm,tir"`` or a list) / ``dump_dir``: code-generating backends
      write those forms of each region's code into ``dump_dir`` (default: the current
      directory) as ``<region>.<form>``.
    - ``devices``: which device of a kind runs its regions (``{"cuda": 1}``: ``cuda:1``;
      default: index 0).
    - ``keep_graph_weights``: the module's graph keeps its copy of the weights its backends
      keep in their compiled form (packed, transformed). By default the graph drops them
      after the compile (they are *held*, as in a module loaded from an artifact), so each
      weight lives once; the tuner, which lowers the graph's regions again, keeps them.
    - ``kernel_cache``: the persistent cache of compiled code
      (:mod:`tessera.plugin.kernel_cache`): None (default) as the environment says
      (``TESSERA_CACHE_DIR``, ``TESSERA_KERNEL_CACHE=0`` for off), False off, True on, or a
      folder. A second compile of the same model then skips code generation.
    - ``for_export``: the backends keep what handing their code to a program without
      Python needs (``Backend.export_code``; the llvm backend: its optimised IR), for
      :func:`tessera.deploy.export_c` (``tessera export``).
    """

    input_shapes: Mapping[str, Sequence[int | str | None]] | None = None
    shape_mode: str = "auto"
    dim_bounds: Mapping[str, Sequence[int]] | None = None
    specialize: Sequence[Mapping[str, Sequence[int]]] | None = None
    max_specializations: int = 8
    symbolic_dims: Sequence[str] | str | None = None
    background_compile: bool = False
    opt_level: int = 3
    tuning_records: str | Path | TuningHistory | None = None
    pass_config: Mapping[str, bool] | None = None
    disabled_passes: Iterable[str] | None = None
    freeze_inputs: Mapping[str, np.ndarray] | None = None
    dump_ir: str | Path | None = None
    progress: bool = False
    dump_code: str | Iterable[str] | None = None
    dump_dir: str | Path | None = None
    devices: Mapping[str, int] | None = None
    keep_graph_weights: bool = False
    kernel_cache: bool | str | Path | None = None
    for_export: bool = False

    def code_forms(self) -> list[str]:
        """The ``dump_code`` forms asked for, as a list (empty: none)."""
        if not self.dump_code:
            return []
        forms = self.dump_code.split(",") if isinstance(self.dump_code, str) \
            else list(self.dump_code)
        return [f.strip() for f in forms if f.strip()]


def merge_config(cls: type[C], config: C | None, overrides: Mapping[str, Any],
                 where: str) -> C:
    """``config`` (default: ``cls()``) with the keyword arguments ``overrides`` applied, for
    ``where`` (``"compile()"``). An unknown keyword or a config of another type is a
    ``TypeError`` naming the known ones, as Python's own for a bad keyword."""
    if config is None:
        config = cls()
    elif not isinstance(config, cls):
        raise TypeError(f"{where}: config must be a {cls.__name__}, not "
                        f"{type(config).__name__} (give settings such as input_shapes as "
                        f"keyword arguments, or in a {cls.__name__})")
    if not overrides:
        return config
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(f"{where} got unexpected keyword argument(s) "
                        f"{', '.join(map(repr, unknown))}; known: {', '.join(sorted(known))}")
    return dataclasses.replace(config, **overrides)  # type: ignore[type-var]
