"""The kit's check that a backend runs models with symbolic dimensions.

A backend that takes symbolic extents (``Backend.symbolic_extents``) gets regions whose
types keep the model's size variables, and a model with symbolic dimensions (``x:
float32[batch, seq, 8]``) compiles once into one module for every size: the check then
requires that one compile and runs it at every size. Any other backend gets static shapes:
the model is compiled once per input size it meets, on first use, and kept in a bounded cache
(:mod:`tessera.runtime.dynamic`); with ``symbolic_dims`` its parts
whose shapes do not depend on those variables are compiled once and the rest is evaluated
per call (:mod:`tessera.runtime.split`). A backend needs nothing of its own for either, but
it must be right at every size it is compiled for, and its regions must work as the
compiled parts of a split plan. :func:`check_symbolic_shapes` checks both on the backend's
target, against onnx's reference evaluator, with the kit's models whose ops the backend
claims (:mod:`tessera.testing.kit.symbolic_models`: attention and convolution) and the
backend's own, and says which nodes the backend ran: a backend that ran none of the nodes
of any of them has not been checked, and the check fails, with the reasons it gave for
declining them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import onnx
from onnx.reference import ReferenceEvaluator

from tessera.api import compile as compile_model
from tessera.api import partition_model
from tessera.errors import CompileError, RunError, TesseraError
from tessera.plugin import contract
from tessera.plugin.manager import resolve_target
from tessera.plugin.target import Target
from tessera.runtime.dynamic import DynamicModule
from tessera.runtime.module import Module
from tessera.testing.kit.symbolic_models import (
    PAST,
    SIZES,
    SymbolicModel,
    as_symbolic_model,
    cache_step_model,
    conv_model,
    conv_step_model,
    encoder_model,
    kit_models,
)

__all__ = ["PAST", "SIZES", "SymbolicModelCheck", "SymbolicModel", "SymbolicShapesResult",
           "cache_step_model", "check_symbolic_shapes", "conv_model", "conv_step_model",
           "encoder_model"]


@dataclass(frozen=True)
class SymbolicModelCheck:
    """One model :func:`check_symbolic_shapes` ran: ``nodes`` the backend ran at each of
    ``sizes`` (compiled per size), or in the split plan's compiled parts (one entry)."""

    model: str
    split: bool
    sizes: tuple[str, ...]
    nodes: tuple[int, ...]
    #: the dynamic module's cache after the runs (per-size models; 0 for a split plan; 1
    #: compile and no hits for a module of every size)
    compiles: int = 0
    hits: int = 0
    #: compiled once into a module for every size (the target's backends take symbolic
    #: extents, ``Backend.symbolic_extents``)
    symbolic: bool = False
    #: why a backend that takes symbolic extents refused the model's one compile (a
    #: CompileError's message: an op its schedules take at fixed sizes only); it was then
    #: checked per size
    refused: str = ""

    def __str__(self) -> str:
        if self.split:
            return (f"{self.model}: {self.nodes[0]} nodes in a split plan's compiled parts "
                    f"({'; '.join(self.sizes)})")
        how = ("one compile for every size" if self.symbolic else
               f"{self.compiles} compiles, {self.hits} hits")
        return (f"{self.model}: ran {', '.join(map(str, self.nodes))} nodes at "
                f"{'; '.join(self.sizes)} ({how})")


@dataclass(frozen=True)
class SymbolicShapesResult:
    """What :func:`check_symbolic_shapes` saw, model by model."""

    backend: str
    checks: tuple[SymbolicModelCheck, ...]
    #: kit models not run: the backend claims none of their ops
    skipped: tuple[str, ...] = ()

    @property
    def nodes_per_size(self) -> tuple[int, ...]:
        """Nodes the backend ran at each size of each model compiled per size."""
        return tuple(n for c in self.checks if not c.split for n in c.nodes)

    @property
    def split_nodes(self) -> int:
        """Nodes the backend ran in the split plans' compiled parts (0: it took none)."""
        return sum(n for c in self.checks if c.split for n in c.nodes)

    @property
    def compiles(self) -> int:
        return sum(c.compiles for c in self.checks)

    @property
    def hits(self) -> int:
        return sum(c.hits for c in self.checks)

    def __str__(self) -> str:
        skipped = (f"; not run (it claims none of their ops): {', '.join(self.skipped)}"
                   if self.skipped else "")
        return f"backend {self.backend!r}: " + "; ".join(map(str, self.checks)) + skipped


def check_symbolic_shapes(target: str, backend: str | None = None, *,
                          models: Sequence[SymbolicModel | onnx.ModelProto] = (),
                          rtol: float = 1e-4, atol: float = 1e-5) -> SymbolicShapesResult:
    """Compile models with their symbolic dimensions left open for ``target`` (``"mynpu"``,
    or ``"mynpu, llvm"``) and check ``backend`` (default: the target's first kind) in them.

    The models are the kit's whose ops the backend claims (:func:`kit_models`: an encoder
    and a convolution stack compiled per size, each run twice at three sizes against the
    reference, a compile on first use then a cache hit, the encoder also refusing inputs
    whose ``seq`` differ with a ``RunError``; an attention step and a convolution step
    compiled as one split plan with ``past`` open, run at three cache lengths), then
    ``models``: the backend's own, each a :class:`SymbolicModel` (sizes, split or not) or an
    ``onnx.ModelProto`` (run per size at three sizes).

    Raises ``AssertionError`` naming the model, size and output that differ, or when the
    backend ran none of the nodes of any model (nothing was checked; the message gives the
    reasons it declined them, :meth:`~tessera.plugin.Backend.declines`); a
    :class:`~tessera.errors.TesseraError` for a ``backend`` not in ``target`` or a model
    that is not one of those forms."""
    name = backend or Target.parse(target).kinds[0].name
    claimed = _claimed_ops(target, name)
    kit = kit_models()
    if not isinstance(models, Sequence):
        raise TesseraError(f"check_symbolic_shapes(models=...): expected a list of "
                           f"SymbolicModel or onnx.ModelProto, got {type(models).__name__}")
    own = [as_symbolic_model(m, f"check_symbolic_shapes(models=...)[{i}]")
           for i, m in enumerate(models)]
    picked = [m for m in kit if m.op_types & claimed] + own
    skipped = tuple(m.name for m in kit if not m.op_types & claimed)
    rng = np.random.default_rng(0)
    checks = tuple(_check(m, target, name, rng, rtol, atol) for m in picked)
    result = SymbolicShapesResult(name, checks, skipped)
    if not any(n for c in checks for n in c.nodes):
        raise AssertionError(_ran_none(result, picked, target))
    return result


def _claimed_ops(target: str, name: str) -> frozenset[str]:
    """Every op named by ``name``'s patterns under its kind of ``target``."""
    for backend, kind in resolve_target(target):
        if backend.name == name:
            patterns = contract.call(backend, "claims()", backend.claims, kind)
            return frozenset().union(*(p.ops() for p in patterns))
    kinds = ", ".join(k.name for k in Target.parse(target).kinds)
    raise TesseraError(f"check_symbolic_shapes: backend {name!r} is not in target {target!r}; "
                       f"expected one of its kinds ({kinds})")


def _check(model: SymbolicModel, target: str, name: str, rng: np.random.Generator,
           rtol: float, atol: float) -> SymbolicModelCheck:
    """Run ``model`` for ``target`` at each of its sizes against onnx's reference."""
    reference = ReferenceEvaluator(model.model)
    outputs = [o.name for o in model.model.graph.output]
    sizes = tuple(model.size_text(s) for s in model.sizes)
    if model.symbolic_dims:
        split = compile_model(model.model, target, symbolic_dims=list(model.symbolic_dims))
        for size, text in zip(model.sizes, sizes):
            feeds = model.inputs_at(size, rng)
            _compare(split.run(feeds), reference.run(None, feeds), outputs, rtol, atol,
                     f"{target}: {model.name}'s split plan, output {{}} at {text}")
        plans = split.split_plans()
        assert len(plans) == 1 and split.cache_info().split_fallbacks == 0, \
            f"{target}: {model.name}: expected one split plan for every size, got {len(plans)}"
        ran = sum(dict(s.backend_nodes).get(name, 0) for s in plans[0][1].segments())
        return SymbolicModelCheck(model.name, True, sizes, (ran,))
    mod: Module | DynamicModule | None = None
    refused = ""
    if _takes_symbolic_extents(target):  # one compile for every size, or a clear refusal
        try:
            mod = compile_model(model.model, target, shape_mode="symbolic")
        except CompileError as e:
            refused = str(e)
        assert mod is None or (isinstance(mod, Module) and mod.shape_vars is not None), \
            (f"{target}: {model.name}: the target's backends take symbolic extents, so one "
             f"module should serve every size; got {type(mod).__name__}")
    if mod is None:
        mod = compile_model(model.model, target, shape_mode="specialize")
        assert isinstance(mod, DynamicModule), \
            f"{model.name}: expected a dynamic module, got {type(mod).__name__}"
    for size, text in zip(model.sizes, sizes):
        feeds = model.inputs_at(size, rng)
        want = reference.run(None, feeds)
        for call in ("first", "second"):
            _compare(mod.run(feeds), want, outputs, rtol, atol,
                     f"{target}: {model.name}, output {{}} at {text} ({call} call)")
    if model.mismatched is not None:
        try:
            mod.run(dict(model.mismatched))
        except RunError:
            pass
        else:
            raise AssertionError(f"{target}: {model.name}: inputs whose sizes break the "
                                 f"model's relations ran without a RunError")
    if isinstance(mod, Module):
        ran = mod.partition_report().backend_counts().get(name, 0)
        return SymbolicModelCheck(model.name, False, sizes, (ran,) * len(model.sizes), 1, 0,
                                  symbolic=True)
    assert isinstance(mod, DynamicModule)
    modules = mod.specializations()
    nodes = tuple(next((m.partition_report().backend_counts().get(name, 0)
                        for s, m in modules if _at(s, size)), 0) for size in model.sizes)
    info = mod.cache_info()
    return SymbolicModelCheck(model.name, False, sizes, nodes, info.compiles, info.hits,
                              refused=refused)


def _takes_symbolic_extents(target: str) -> bool:
    """Whether every backend of ``target`` takes symbolic extents (the model then compiles
    once for every size)."""
    return all(backend.symbolic_extents for backend, _ in resolve_target(target))


def _at(specialised: Mapping[str, int], size: Mapping[str, int]) -> bool:
    return all(specialised.get(k) == v for k, v in size.items())


def _compare(got: Mapping[str, np.ndarray], want: Sequence[np.ndarray], names: Sequence[str],
             rtol: float, atol: float, message: str) -> None:
    for out, expected in zip(names, want):
        np.testing.assert_allclose(got[out], expected, rtol=rtol, atol=atol,
                                   err_msg=message.format(repr(out)))


def _ran_none(result: SymbolicShapesResult, models: Sequence[SymbolicModel],
              target: str) -> str:
    """Why nothing was checked: the models and their ops, and the backend's reasons."""
    name = result.backend
    skipped = (f"; the kit's models it claims none of the ops of: {', '.join(result.skipped)}"
               if result.skipped else "")
    if not models:
        return (f"backend {name!r} claims none of the ops of the kit's models under target "
                f"{target!r}{skipped}, and no models of its own were given "
                f"(check_symbolic_shapes(..., models=[...])): nothing was checked")
    ran = "; ".join(f"{m.name}: ops {', '.join(sorted(m.op_types))}" for m in models)
    reasons = _declined(models, target, name)
    said = (f"; it declined {reasons}" if reasons else
            "; it gave no reason for any of them (Backend.declines)")
    return (f"backend {name!r} ran none of the nodes of the models checked under target "
            f"{target!r} ({ran}){said}{skipped}: nothing was checked")


def _declined(models: Sequence[SymbolicModel], target: str, name: str) -> str:
    """The reasons ``name`` gave for the nodes of ``models`` it left to others (each model
    partitioned at its first size), as "Conv: only 2-D convolutions, ..."."""
    reasons: dict[tuple[str, str], None] = {}
    for model in models:
        try:
            report = partition_model(model.model, target,
                                     input_shapes=model.shapes_at(model.sizes[0])).report
        except TesseraError:
            continue
        reasons.update({(op, why): None for _, op, who, why, _ in report.declined
                        if who == name})
    return "; ".join(f"{op}: {why}" for op, why in reasons)
