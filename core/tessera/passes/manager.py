"""The pass manager: runs an ordered list of graph passes over a function.

A pass is a small object with a ``name``, the lowest ``opt_level`` at which it runs, and a
``run(fn) -> Function`` method that may edit ``fn`` in place (and return it) or return a new
function. The manager skips passes below its ``opt_level`` and passes switched off by name
(``pass_config={"FoldConstants": False}`` or ``disabled={"Canonicalize"}``), records how long each
pass took, optionally writes the printed IR after each pass to ``dump_dir/NN_<PassName>.txt``, and
optionally runs the IR verifier after each pass::

    pm = PassManager(opt_level=3, disabled={"Canonicalize"}, dump_dir="ir_dumps", verify=True)
    fn = pm.run(fn)
    for name, ms in pm.timings:
        print(f"{name:24s} {ms:8.2f} ms")

:class:`Pass` and :class:`Rewriter` (the graph-editing helper the rewriting passes share) are in
:mod:`tessera.passes.base`, which the passes import; this module re-exports them.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tessera.errors import PassError, TesseraError
from tessera.ir.graph import Function
from tessera.ir.printer import format_function
from tessera.ir.symbolic import dim_bounds_scope
from tessera.ir.verifier import verify
from tessera.passes import (
    canonicalize,
    dce,
    fold_constants,
    gather_before_matmul,
    qdq_to_integer,
    simplify_inference,
)
from tessera.passes.base import Pass, Rewriter, take_name

__all__ = ["Pass", "PassManager", "Rewriter", "check_pass_switches", "default_passes",
           "take_name"]


def _pipeline() -> list[Pass]:
    return [qdq_to_integer.QDQToInteger(), fold_constants.FoldConstants(),
            simplify_inference.SimplifyInference(),
            canonicalize.Canonicalize(), gather_before_matmul.GatherBeforeMatMul(),
            fold_constants.FoldConstants(), dce.DeadCodeElimination()]


def _drop_repeats(passes: Iterable[Pass]) -> list[Pass]:
    """Drop a pass that would run right after another run of the same pass (nothing changed)."""
    out: list[Pass] = []
    for p in passes:
        if not out or out[-1].name != p.name:
            out.append(p)
    return out


def default_passes(opt_level: int = 3) -> list[Pass]:
    """The standard pipeline for ``opt_level``.

    * 0: no passes;
    * 1: FoldConstants, DeadCodeElimination;
    * 2 and up: QDQToInteger, FoldConstants, SimplifyInference, Canonicalize,
      GatherBeforeMatMul, FoldConstants, DeadCodeElimination.

    QDQToInteger runs before anything folds the 8-bit weights it reads; FoldConstants then
    folds the dequantizations it left (the importer keeps those of 8-bit constants as nodes).
    FoldConstants runs early so that BatchNormalization parameters computed from constants are
    constants when SimplifyInference looks at them, and again after Canonicalize, whose rewrites
    may leave nodes with only constant inputs (a Reshape of a constant); DeadCodeElimination
    last removes whatever the others left unused.
    """
    return _drop_repeats(p for p in _pipeline() if p.opt_level <= opt_level)


def _known_pass_names() -> set[str]:
    return {p.name for p in _pipeline()}


def check_pass_switches(pass_config: dict[str, Any] | None, disabled: Iterable[str] | None = None,
                        known: Iterable[str] | None = None) -> None:
    """Raise :class:`~tessera.errors.PassError` unless every name in ``pass_config`` and
    ``disabled`` is a known pass and every ``pass_config`` value is a switch (True/False, 1/0).

    ``known`` defaults to the standard pipeline's passes.
    """
    names = sorted(set(known) if known is not None else _known_pass_names())
    config = dict(pass_config or {})
    unknown = sorted((set(config) | set(disabled or ())) - set(names))
    if unknown:
        options = [u for u in unknown if "." in u]
        note = (f" (a pass config switches a whole pass on or off; passes have no options such "
                f"as {options[0]!r})" if options else "")
        raise PassError(f"unknown pass name(s) {', '.join(unknown)}; known passes: "
                        f"{', '.join(names)}{note}")
    for name, value in config.items():
        if not _is_switch(value):
            raise PassError(f"pass config {name}={value!r}: expected on or off (True/False or "
                            f"1/0)")


def _is_switch(value: Any) -> bool:
    """True for True/False (numpy's too) and the integers 0 and 1."""
    if isinstance(value, (bool, np.bool_)):
        return True
    return isinstance(value, (int, np.integer)) and value in (0, 1)


class PassManager:
    """Runs passes in order over a function.

    ``passes`` defaults to the standard pipeline (see :func:`default_passes`). A pass runs when
    ``pass.opt_level <= opt_level`` and it is not switched off: ``pass_config`` maps pass names to
    ``True``/``False`` (``True`` forces a pass on even below its level; 1/0 too), ``disabled`` is
    a set of pass names to skip. Unknown names in either, or a switch that is neither on nor off,
    raise :class:`~tessera.errors.PassError` listing what is allowed
    (:func:`check_pass_switches`). A pass that would run twice in a row (because the passes
    between its two places in the pipeline are off) runs once.
    """

    def __init__(self, opt_level: int = 3, pass_config: dict[str, Any] | None = None,
                 disabled: Iterable[str] | None = None, dump_dir: str | Path | None = None,
                 verify: bool = False, passes: Sequence[Pass] | None = None):
        self.opt_level = int(opt_level)
        #: The candidate passes in order; :meth:`selected` filters them by level and switches.
        self.passes: list[Pass] = list(passes) if passes is not None else _pipeline()
        self.pass_config: dict[str, Any] = dict(pass_config or {})
        self.disabled: set[str] = set(disabled or ())
        self.dump_dir = Path(dump_dir) if dump_dir is not None else None
        self.verify = verify
        #: (pass name, milliseconds) for every pass run by the last :meth:`run`.
        self.timings: list[tuple[str, float]] = []

        check_pass_switches(self.pass_config, self.disabled,
                            _known_pass_names() | {p.name for p in self.passes})

    def enabled(self, p: Pass) -> bool:
        """Whether ``p`` runs under this manager's level and switches."""
        if p.name in self.disabled:
            return False
        switch = self.pass_config.get(p.name)
        if switch is not None:
            return bool(switch)
        return p.opt_level <= self.opt_level

    def selected(self) -> list[Pass]:
        """The passes :meth:`run` would run, in order."""
        return _drop_repeats(p for p in self.passes if self.enabled(p))

    def run(self, fn: Function) -> Function:
        """Run the selected passes over ``fn`` and return the result.

        With ``verify`` the input is verified first (an :class:`~tessera.errors.IRError` when it
        is malformed) and the output of every pass after it (a
        :class:`~tessera.errors.PassError` naming the pass).
        """
        self.timings = []
        if self.verify:
            verify(fn)  # a malformed input is the caller's problem (IRError), not a pass's
        if self.dump_dir is not None:
            self.dump_dir.mkdir(parents=True, exist_ok=True)
            (self.dump_dir / "00_input.txt").write_text(format_function(fn) + "\n")
        for index, p in enumerate(self.selected(), start=1):
            start = time.perf_counter()
            try:
                with dim_bounds_scope(fn.attrs.get("dim_bounds")):
                    result = p.run(fn)
            except PassError:
                raise
            except Exception as e:  # noqa: BLE001 - a pass bug: say which pass
                raise PassError(f"pass {p.name} failed on {fn.name}: "
                                f"{type(e).__name__}: {e}") from e
            self.timings.append((p.name, (time.perf_counter() - start) * 1e3))
            if not isinstance(result, Function):
                raise PassError(f"pass {p.name} returned {type(result).__name__}, "
                                f"not a Function")
            fn = result
            if self.dump_dir is not None:
                path = self.dump_dir / f"{index:02d}_{p.name}.txt"
                path.write_text(format_function(fn) + "\n")
            if self.verify:
                try:
                    verify(fn)
                except TesseraError as e:
                    raise PassError(f"the IR is malformed after pass {p.name}: {e}") from e
        return fn
