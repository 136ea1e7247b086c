"""A split plan's call as one generated Python function.

A decoder step under split execution (:mod:`tessera.runtime.split`) is a few compiled parts
and a few dozen small numpy operations between them, each costing about a microsecond. What
surrounds them used to cost as much again: a dict of values built and read per segment, the
compiled parts' ``run(feeds)`` with its name checks and dicts, a comparison per checked shape
value through ``np.array_equal``. :func:`build_program` writes the whole call instead, once
per plan, as straight-line code over local variables:

- the open variables' sizes read from the inputs' shapes, and the shape values computed from
  them, as Python lists where only shape operands read them (no array made);
- per compiled (static) segment: its checks (the shapes it was compiled for, the shape values
  it holds as constants; a :class:`SplitMismatch` when one fails, as before), then one call of
  its module's positional :meth:`~tessera.runtime.module.Module.caller`;
- per evaluated (dynamic) segment: its nodes' numpy forms (:mod:`tessera.runtime.onnx_fast_ops`,
  else ``onnx.reference``'s implementations, see :func:`emit_nodes`), an error in them a
  ``RunError`` naming the segment's ops.

The function keeps every value in its own locals, so concurrent calls share nothing but the
compiled modules, which are thread safe.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import onnx

from tessera.errors import RunError, TesseraError
from tessera.frontend.onnx.external_data import inline_external_data
from tessera.frontend.onnx.symbolic_eval import to_python
from tessera.runtime.onnx_fast_ops import (
    INLINE_SCOPE,
    Unwritten,
    fast_op,
    inline_op,
    list_operands,
)

__all__ = ["Names", "SplitMismatch", "build_program", "emit_nodes", "read_only"]


class SplitMismatch(TesseraError):
    """A call whose sizes break an assumption of the split plan (a static segment would see
    another shape or shape value than it was compiled for): run it specialised instead."""


class Names:
    """Python names for ONNX value names in generated code: ``v0``, ``v1``, ... on first use,
    or a name bound to a constant of the scope (:meth:`bind`). A shape value may also have a
    list form (:meth:`add_list`): its contents as a Python list, or int when it is 0-d, which
    the positions of :func:`~tessera.runtime.onnx_fast_ops.list_operands` read instead."""

    def __init__(self) -> None:
        self._names: dict[str, str] = {}
        self._fresh = itertools.count()
        self._lists: dict[str, str] = {}
        #: the values whose list form generated code reads
        self.lists_read: set[str] = set()

    def __contains__(self, name: str) -> bool:
        """Whether generated code reads ``name`` as an array (it has a name)."""
        return name in self._names

    def add_list(self, name: str, symbol: str) -> None:
        self._lists[name] = symbol

    def listed(self, name: str) -> str | None:
        """The list form of ``name``, marked as read; None when it has none."""
        symbol = self._lists.get(name)
        if symbol is not None:
            self.lists_read.add(name)
        return symbol

    def __call__(self, name: str) -> str:
        if not name:
            return "None"
        if name not in self._names:
            self._names[name] = f"v{next(self._fresh)}"
        return self._names[name]

    def bind(self, name: str, symbol: str) -> bool:
        """Name ``name`` ``symbol``, unless it has a name already (False then)."""
        if name in self._names:
            return False
        self._names[name] = symbol
        return True


def reference_call(node: Any, plain: bool) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """``onnx.reference``'s implementation of one node, outputs as arrays."""
    kwargs = {a: getattr(node, a) for a in node.attributes_names_} if plain else None

    def call(args: tuple[Any, ...]) -> tuple[Any, ...]:
        res = node._run(*args, **kwargs) if kwargs is not None else node.run(*args)
        return tuple(v if isinstance(v, np.ndarray) else np.asarray(v) for v in res)
    return call


def emit_nodes(model: onnx.ModelProto, scope: dict[str, Any], var: Names, tag: str,
               indent: str = "    ", ranks: Mapping[str, int] | None = None) -> list[str]:
    """Lines computing ``model``'s nodes in order, each by its direct numpy form where there
    is one, else by ``onnx.reference``'s implementation called with its attributes bound
    once (the reference evaluator's own ``run`` checks and logs around every node, which
    costs more than the small operations themselves); operators that need a context, linked
    attributes or replace ``run`` itself go through their checked ``run``. The model's
    initializers become constants of ``scope`` (named with ``tag``, as the nodes' calls are)
    unless ``var`` names them already; its inputs are read from the variables ``var`` gives
    them (or their list forms, where a node's numpy form takes one). ``ranks`` are the
    values' expected ranks (:func:`~tessera.runtime.onnx_fast_ops.inline_op`)."""
    from onnx.reference import ReferenceEvaluator
    from onnx.reference.op_run import OpRun

    # onnx.reference reads the initializers' bytes itself: external ones (a weight left in
    # its file) are read in here
    evaluator = ReferenceEvaluator(inline_external_data(model))
    opset = next((int(o.version) for o in model.opset_import if o.domain in ("", "ai.onnx")),
                 17)
    scope.setdefault("Unwritten", Unwritten)
    for name, value in INLINE_SCOPE.items():
        scope.setdefault(name, value)
    for k, (name, value) in enumerate(evaluator.rt_inits_.items()):
        if var.bind(name, f"c{tag}_{k}"):  # else: a value read already (a default input)
            scope[f"c{tag}_{k}"] = read_only(value)
    lines: list[str] = []
    for k, (node, proto) in enumerate(zip(evaluator.rt_nodes_, model.graph.node, strict=True)):
        plain = type(node).run is OpRun.run and not (
            node.need_context() or node.has_linked_attribute or node.has_subgraph)
        slow, fast_name = f"S{tag}_{k}", f"F{tag}_{k}"
        scope[slow] = reference_call(node, plain)
        inline = inline_op(proto, opset, evaluator.rt_inits_, ranks)
        fast = fast_op(proto, opset, evaluator.rt_inits_) if inline is None else None
        if inline is not None:
            out = next(o for o in node.output if o)
            takes_list = list_operands(proto)
            operands = [(i in takes_list and var.listed(x)) or var(x)
                        for i, x in enumerate(node.input)]
            lines.append(f"{indent}{var(out)} = {inline(operands)}")
            continue
        args = "(" + "".join(f"{var(x)}, " for x in node.input) + ")"
        if fast is not None:
            scope[fast_name] = fast
            lines += [f"{indent}try:", f"{indent}    r = {fast_name}({args})",
                      f"{indent}except Unwritten:", f"{indent}    r = {slow}({args})"]
        else:
            lines.append(f"{indent}r = {slow}({args})")
        lines += [f"{indent}{var(o)} = r[{j}]" for j, o in enumerate(node.output) if o]
    return lines


def _shape_values(contents: Mapping[str, tuple[tuple[Any, ...], np.dtype, tuple[int, ...]]],
                  sizes: Sequence[tuple[str, str, int]], var: Names, scope: dict[str, Any]
                  ) -> list[str]:
    """Lines computing the shape values that the rest of the program reads: the sizes from
    the inputs' shapes, then list forms and arrays (see :class:`Names`)."""
    if not contents:
        return []
    reads = ", ".join(f"{v!r}: {var(name)}.shape[{axis}]" for v, name, axis in sizes)
    lines = [f"    s = {{{reads}}}"]
    for i, (name, (exprs, dtype, shape)) in enumerate(contents.items()):
        items = ", ".join(to_python(c) for c in exprs)
        listed = len(shape) <= 1
        if listed and (name in var.lists_read or name in var):
            lines.append(f"    l{i} = {items}" if len(shape) == 0 else f"    l{i} = [{items}]")
        if name in var:
            scope[f"d{i}"] = np.dtype(dtype)
            source = f"l{i}" if listed else f"[{items}]"
            lines.append(f"    {var(name)} = np.array({source}, d{i})" +
                         ("" if listed else f".reshape({tuple(shape)!r})"))
    return lines


def read_only(value: Any) -> Any:
    """A constant of generated code as a read-only array (a view of it that a node returns,
    a reshape, is then read-only too, and the caller gets a copy: see ``split.owned``)."""
    if not isinstance(value, np.ndarray):
        return value
    value = np.array(value, copy=True)
    value.flags.writeable = False
    return value


def _shape_mismatch(name: str, got: Any, want: tuple[int, ...]) -> SplitMismatch:
    return SplitMismatch(f"{name!r} has shape {list(np.shape(got))} at these sizes, "
                         f"{list(want)} where the plan was made")


def _value_mismatch(name: str, got: Any, want: list[Any]) -> SplitMismatch:
    return SplitMismatch(f"{name!r} is {np.asarray(got).tolist()} at these sizes, {want} where "
                         f"the plan was made")


def _segment_error(ops: str, error: Exception) -> RunError:
    return RunError(f"evaluating the size-dependent part ({ops}) failed: "
                    f"{type(error).__name__}: {error}")


def _same(value: Any, want: list[Any]) -> bool:
    return np.asarray(value).tolist() == want


def _positional(runner: Any, inputs: Sequence[str], outputs: Sequence[str]
                ) -> Callable[..., tuple[Any, ...]]:
    """``runner``'s positional call: a module's :meth:`~tessera.runtime.module.Module.caller`;
    for other runners (a staged module, a module with sequences) their ``run``."""
    if hasattr(runner, "caller") and getattr(runner, "sequences", None) is None:
        return runner.caller(list(inputs), list(outputs))  # type: ignore[no-any-return]

    def by_run(*arrays: Any) -> tuple[Any, ...]:
        result = runner.run(dict(zip(inputs, arrays, strict=True)), output_names=list(outputs))
        return tuple(result[o] for o in outputs)
    return by_run


def build_program(segments: Sequence[Any], input_names: Sequence[str],
                  output_names: Sequence[str], frozen: Mapping[str, np.ndarray],
                  sizes: Sequence[tuple[str, str, int]],
                  contents: Mapping[str, tuple[tuple[Any, ...], np.dtype, tuple[int, ...]]],
                  models: Mapping[int, onnx.ModelProto], ranks: Mapping[str, int] | None = None
                  ) -> Callable[[Mapping[str, np.ndarray]], tuple[tuple[Any, ...], frozenset[int]]]:
    """The plan's call as one function of the inputs (a mapping with every input): it returns
    the outputs in ``output_names`` order. ``segments`` are the plan's (static ones with a
    compiled module as ``runner``, none for those whose outputs are in ``frozen``;
    dynamic ones are written out from their models, ``models[k]`` the ONNX model of dynamic
    segment ``k``, ``ranks`` their values' ranks at the sizes the plan was made for).
    ``contents`` are the shape values computed from the open variables' sizes (read where
    ``sizes`` says): name -> integer expressions of its contents, dtype, shape. Those with at
    most one dimension are held as Python lists (or ints) where only shape operands read
    them; an array is made only of those that something else reads. Also returned: the
    positions of the outputs that a static segment returns (new arrays the caller may keep
    as they are)."""
    var = Names()
    scope: dict[str, Any] = {"SplitMismatch": SplitMismatch, "_shape_mismatch": _shape_mismatch,
                             "_value_mismatch": _value_mismatch, "_segment_error": _segment_error,
                             "_same": _same, "np": np}
    lines = ["def run(arrays):"]
    for name in input_names:
        lines.append(f"    {var(name)} = arrays[{name!r}]")
    for i, (name, value) in enumerate(frozen.items()):
        if name not in input_names:
            scope[f"k{i}"] = read_only(value)
            var.bind(name, f"k{i}")
    for i, (name, (_, _, shape)) in enumerate(contents.items()):
        if len(shape) <= 1:
            var.add_list(name, f"l{i}")
    head, lines = lines, []
    fresh: set[str] = set()
    for k, seg in enumerate(segments):
        if seg.static and seg.runner is None:  # constants only: in ``frozen``
            continue
        if seg.static:
            for j, (x, shape) in enumerate(seg.shapes.items()):
                scope[f"T{k}_{j}"] = tuple(shape)
                lines += [f"    if {var(x)}.shape != T{k}_{j}:",
                          f"        raise _shape_mismatch({x!r}, {var(x)}, T{k}_{j})"]
            for j, (x, value) in enumerate(seg.baked.items()):
                scope[f"B{k}_{j}"] = np.asarray(value).tolist()
                got = var.listed(x) if np.ndim(value) <= 1 else None
                test = f"{got} != B{k}_{j}" if got else f"not _same({var(x)}, B{k}_{j})"
                lines += [f"    if {test}:",
                          f"        raise _value_mismatch({x!r}, {got or var(x)}, B{k}_{j})"]
            scope[f"M{k}"] = _positional(seg.runner, seg.inputs, seg.outputs)
            args = "".join(f"{var(x)}, " for x in seg.inputs)
            outs = "".join(f"{var(o)}, " for o in seg.outputs)
            lines.append(f"    {outs or '_'} = M{k}({args})")
            fresh.update(seg.outputs)
            continue
        scope[f"O{k}"] = seg.info().ops
        lines.append("    try:")
        lines += emit_nodes(models[k], scope, var, str(k), indent="        ", ranks=ranks)
        fresh.difference_update(o for n in seg.nodes for o in n.output)
        lines += ["    except Exception as e:  # noqa: BLE001 - numpy's and onnx's own errors",
                  f"        raise _segment_error(O{k}, e) from e"]
    lines.append(f"    return ({''.join(f'{var(o)}, ' for o in output_names)})")
    lines = head + _shape_values(contents, sizes, var, scope) + lines
    try:
        exec(compile("\n".join(lines), "<tessera split plan>", "exec"), scope)  # noqa: S102
    except SyntaxError as e:  # a name the generator did not expect: say so, not half-run
        raise TesseraError(f"generating the split plan's code failed: {e}") from e
    run = scope["run"]
    kept = frozenset(i for i, o in enumerate(output_names) if o in fresh)
    return lambda arrays: (run(arrays), kept)
