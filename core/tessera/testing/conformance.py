"""Run the ONNX node test cases that the ``onnx`` package generates through Tessera.

Each case is a one-node model (sometimes expanded into its function body) with input and
expected output arrays. Operands that fix shapes (Reshape's ``shape``, Reduce ``axes``, ...) are
bound as compile-time constants when the importer asks for them (:class:`NeedsConstantError`),
as a static-shape compiler must; everything else is a runtime input.

``python -m tessera.testing.conformance --target ref`` prints the pass count;
``--write-known-failures PATH`` rewrites the known-failures list (one ``test_name  # reason`` line
per failing case, grouped under ``## group`` headers) from the current failures, keeping the
reasons and groups already written there for cases that still fail. With ``--claimed-only``
the cases count for the target's first backend as the backend test kit counts them
(:class:`~tessera.testing.kit.NodeConformance`): a case it ran no node of is never its
failure; it is listed as *declined*, with the reason the backend gave, or, for an op it
claims, as *fallback failed* or *not claimed*.
"""

from __future__ import annotations

import argparse
import collections
import re
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

import tessera
from tessera.backends.reference.interpreter import evaluate_function
from tessera.errors import NeedsConstantError, TesseraError
from tessera.frontend.onnx import import_onnx
from tessera.ir.cast import widen
from tessera.plugin.target import Target


@dataclass
class CaseResult:
    name: str
    ok: bool
    reason: str = ""


def all_tensor_cases(op_types: set[str] | None = None) -> list:
    """The generated node cases whose inputs and outputs are all tensors."""
    return [c for c in all_node_cases(op_types) if is_tensor_case(c)]


def is_tensor_case(case: object) -> bool:
    """Whether every input and output of a case's graph is a tensor (not a sequence or an
    optional)."""
    g = case.model.graph  # type: ignore[attr-defined]
    return all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output))


def all_node_cases(op_types: set[str] | None = None) -> list:
    """Every generated node case (1,884 with onnx 1.23), sequence- and optional-typed ones
    included: their inputs and expected outputs are lists of arrays (or None)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    out = []
    for case in cases:
        g = case.model.graph
        if op_types is not None and not ({n.op_type for n in g.node} & op_types):
            continue
        out.append(case)
    return out


Runner = Callable[..., dict[str, np.ndarray]]


def _input_shapes(inputs: dict[str, Any], freeze: dict[str, Any]) -> dict[str, Any]:
    """The shapes of the inputs not frozen: a list of shapes for a sequence (a list of
    arrays); an empty optional (None) is left out, which makes it absent."""
    shapes: dict[str, Any] = {}
    for k, v in inputs.items():
        if k in freeze or v is None:
            continue
        shapes[k] = [list(np.shape(a)) for a in v] if isinstance(v, list) else list(v.shape)
    return shapes


def _empty_sequences(inputs: dict[str, Any]) -> dict[str, Any]:
    """The inputs that are empty sequences: frozen (they hold no data to give at run
    time)."""
    return {k: v for k, v in inputs.items() if isinstance(v, list) and not v}


def compile_and_run(model, inputs: dict[str, np.ndarray], target: str,
                    freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    freeze = {**freeze, **_empty_sequences(inputs)}
    shapes = _input_shapes(inputs, freeze)
    mod = tessera.compile(model, target=target, input_shapes=shapes, freeze_inputs=freeze)
    for name, value in inputs.items():
        if name not in freeze and value is not None:
            mod.set_input(name, value)
    mod.run()  # the step-by-step form also covers models without inputs
    return [mod.get_output(i) for i in range(len(mod.output_names))]


def interpret(model, inputs: dict[str, np.ndarray], target: str,
              freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Import and evaluate with the reference interpreter (no passes, no runtime)."""
    freeze = {**freeze, **_empty_sequences(inputs)}
    fn = import_onnx(model, input_shapes=_input_shapes(inputs, freeze), freeze_inputs=freeze)
    feeds: dict[str, Any] = {}
    for k, v in inputs.items():
        if k not in freeze and v is not None:
            feeds.update({f"{k}[{i}]": a for i, a in enumerate(v)} if isinstance(v, list)
                         else {k: v})
    outs = evaluate_function(fn, feeds)
    lengths = fn.attrs.get("sequence_outputs") or {}
    names = fn.attrs.get("model_outputs") or [v.name for v in fn.outputs]
    return [None if lengths.get(n) == -1 else
            [outs[f"{n}[{i}]"] for i in range(lengths[n])] if n in lengths else outs[n]
            for n in names]


def _as_array(data: object) -> Any:
    """A case's input or expected output as an array (some cases store TensorProtos); a
    sequence stays a list of arrays, an empty optional None."""
    import onnx
    from onnx import numpy_helper

    if isinstance(data, onnx.TensorProto):
        return numpy_helper.to_array(data)
    if data is None:
        return None
    if isinstance(data, list):
        return [_as_array(d) for d in data]
    return np.asarray(data)


def _compare(name: str, got: Any, want: Any, rtol: float, atol: float) -> str:
    if isinstance(want, list) or want is None:  # a sequence, or an empty optional
        if want is None or got is None:
            return "" if want is None and got is None else f"output {name}: optional differs"
        if not isinstance(got, list) or len(got) != len(want):
            return f"output {name}: expected a sequence of {len(want)} tensors"
        for i, (g, w) in enumerate(zip(got, want)):
            if problem := _compare(f"{name}[{i}]", g, w, rtol, atol):
                return problem
        return ""
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype != want.dtype:
        return f"output {name}: dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"output {name}: shape {list(got.shape)}, expected {list(want.shape)}"
    got, want = widen(got), widen(want)  # low-precision types compare as float32/int8
    if want.dtype.kind in "fc":
        if not np.allclose(got, want, rtol=rtol, atol=atol, equal_nan=True):
            return f"output {name}: values differ (max abs err {np.nanmax(np.abs(got - want))})"
    elif not np.array_equal(got, want):
        return f"output {name}: values differ"
    return ""


def run_case(case, target: str = "ref", engine: Runner = compile_and_run) -> CaseResult:
    """Run one case (every data set); a failure's reason is one line."""
    g = case.model.graph
    input_names = [vi.name for vi in g.input
                   if vi.name not in {t.name for t in g.initializer}]
    output_names = [vi.name for vi in g.output]
    try:
        for inputs, outputs in case.data_sets:
            feeds = {n: _as_array(a) for n, a in zip(input_names, inputs)}
            freeze: dict[str, np.ndarray] = {}
            for _ in range(3):
                try:
                    got = engine(case.model, feeds, target, freeze)
                    break
                except NeedsConstantError as e:
                    new = [n for n in e.inputs if n in feeds and n not in freeze]
                    if not new:
                        raise
                    freeze.update({n: feeds[n] for n in new})
            else:
                return CaseResult(case.name, False, "needs-constant loop")
            for name, have, want in zip(output_names, got, outputs):
                problem = _compare(name, have, _as_array(want), case.rtol, case.atol)
                if problem:
                    return CaseResult(case.name, False, problem)
        return CaseResult(case.name, True)
    except TesseraError as e:
        first = str(e).splitlines()[0]
        return CaseResult(case.name, False, f"{type(e).__name__}: {first}")
    except Exception as e:  # noqa: BLE001 - a crash is a failure of that case, reported
        return CaseResult(case.name, False, f"crash {type(e).__name__}: {e}")


# -- the known-failures list -----------------------------------------------------------------------

@dataclass
class KnownFailure:
    """One line of the known-failures file: a case expected to fail, and why."""

    name: str
    reason: str
    group: str


#: Groups in the order the file lists them; a group not named here comes after these.
GROUP_ORDER = [
    "unsupported ops (no converter or op yet)",
    "unsupported element types (Tessera's dtypes exclude bfloat16, float8, int4, string, ...)",
    "opsets before 7 (Tessera imports opsets 7 and later)",
    "data-dependent output shapes (not expressible in the static-shape IR)",
    "wrong results",
    "errors while importing, compiling or running",
    "crashes (Python exceptions: bugs)",
    "not claimed (the backend's patterns or checks refuse these nodes)",
    "declined (the backend left these nodes to another backend, with its reason)",
    "fallback failed (the backend ran none of these nodes; the backends that ran them failed)",
]

KNOWN_FAILURES_HEADER = """\
# Known failures of the ONNX node conformance cases run through Tessera's reference backend
# (tests/conformance/test_onnx_node.py). One case per line: `test_name  # reason`, grouped under
# `## group` headers. A listed case is xfailed with its reason; a listed case that passes fails
# the test, so this list stays true. Regenerate it (existing reasons and groups are kept) with
#   python -m tessera.testing.conformance --target ref --write-known-failures {path}
"""


CLAIMED_ONLY_HEADER = """\
# Known failures of the {backend} backend in the ONNX node conformance cases, claimed-only: a
# case counts only if {backend} ran some of its nodes. One case per line: `test_name  # reason`,
# grouped under `## group` headers; a listed case is xfailed, and fails once it passes.
# Cases it declined are listed with its reason. Regenerate it (existing reasons are kept) with
#   python -m tessera.testing.conformance --target "{target}" --claimed-only \\
#       --write-known-failures {{path}}
"""


def read_known_failures(path: str | Path) -> dict[str, KnownFailure]:
    """Parse a known-failures file; a missing file is an empty list."""
    path = Path(path)
    known: dict[str, KnownFailure] = {}
    if not path.exists():
        return known
    group = "known failures"
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line:
            continue
        if line.startswith("##"):
            group = line.lstrip("#").strip()
            continue
        if line.startswith("#"):
            continue
        name, _, reason = line.partition("#")
        known[name.strip()] = KnownFailure(name.strip(), reason.strip(), group)
    return known


def classify_failure(reason: str) -> tuple[str, str]:
    """(group, short reason) for a failure message from :func:`run_case` (or, claimed-only,
    from :class:`~tessera.testing.kit.NodeConformance`: a ``declined:`` or ``fallback
    failed:`` case is never the backend's wrong result, whatever the others got wrong)."""
    for prefix, group in (("declined: ", GROUP_ORDER[8]), ("fallback failed: ", GROUP_ORDER[9])):
        if reason.startswith(prefix):
            return group, _shorten(reason[len(prefix):])
    unsupported = re.search(r"with unsupported ops \(([^)]*)\)", reason)
    if unsupported:
        ops = unsupported.group(1)
        return GROUP_ORDER[0], f"no converter for {ops}"
    element = re.search(r"element type (\w+) is not supported", reason)
    if element:
        return GROUP_ORDER[1], f"element type {element.group(1)}"
    opset = re.search(r"default-domain opset (\d+)", reason)
    if opset:
        return GROUP_ORDER[2], f"opset {opset.group(1)} model"
    if "depends on input values" in reason:
        return GROUP_ORDER[3], "output shape depends on input values"
    if reason.startswith("output "):
        return GROUP_ORDER[4], _shorten(reason)
    if reason.startswith("unclaimed: "):
        return GROUP_ORDER[7], _shorten(reason[len("unclaimed: "):])
    if reason.startswith("crash "):
        return GROUP_ORDER[6], _shorten(reason[len("crash "):])
    return GROUP_ORDER[5], _shorten(reason)


def _shorten(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _existing_header(path: Path) -> str:
    """The leading comment lines of an existing list (kept when it is rewritten)."""
    if not path.exists():
        return ""
    header = []
    for line in path.read_text().splitlines():
        if not line.startswith("#") or line.startswith("##"):
            break
        header.append(line)
    return "\n".join(header)


def write_known_failures(path: str | Path, results: list[CaseResult],
                         previous: dict[str, KnownFailure] | None = None,
                         case_order: list[str] | None = None,
                         header: str | None = None) -> dict[str, KnownFailure]:
    """Write the failures among ``results`` to ``path``.

    Cases that still fail keep their reason and group from ``previous`` (unless they are now
    declined or fallback failures listed in another group: those groups come from what the
    backends did, not from a message); cases that now pass are dropped; entries of
    ``previous`` for cases not in ``results`` (a filtered run) are kept. A new file starts
    with ``header`` (default: :data:`KNOWN_FAILURES_HEADER`).
    """
    previous = dict(previous or {})
    ran = {r.name for r in results}
    entries = {k: v for k, v in previous.items() if k not in ran}
    for r in results:
        if r.ok:
            continue
        group, reason = classify_failure(r.reason)
        known = previous.get(r.name)
        if known is not None and (known.group == group or group not in GROUP_ORDER[8:]):
            entries[r.name] = known
        else:
            entries[r.name] = KnownFailure(r.name, reason, group)
    order = {name: i for i, name in enumerate(case_order or [r.name for r in results])}
    groups: dict[str, list[KnownFailure]] = collections.defaultdict(list)
    for entry in entries.values():
        groups[entry.group].append(entry)
    ranked = sorted(groups, key=lambda g: (GROUP_ORDER.index(g) if g in GROUP_ORDER
                                           else len(GROUP_ORDER), g))
    header = _existing_header(Path(path)) or (header or KNOWN_FAILURES_HEADER).format(path=path)
    lines = [header.rstrip("\n")]
    for group in ranked:
        members = sorted(groups[group], key=lambda e: (order.get(e.name, len(order)), e.name))
        lines.append("")
        lines.append(f"## {group}")
        width = max(len(e.name) for e in members)
        for e in members:
            lines.append(f"{e.name:<{width}}  # {e.reason}" if e.reason else e.name)
    Path(path).write_text("\n".join(lines) + "\n")
    return entries


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ref")
    ap.add_argument("--ops", default="", help="comma-separated op types to restrict to")
    ap.add_argument("-k", default="", help="substring of case names to restrict to")
    ap.add_argument("--engine", choices=["compile", "interpret"], default="compile",
                    help="compile: tessera.compile + Module.run; interpret: importer + "
                    "reference interpreter only")
    ap.add_argument("--claimed-only", action="store_true",
                    help="count only what the target's first backend runs itself: a case it "
                    "runs no node of is 'declined' (with the reason it gave), 'fallback "
                    "failed' or 'unclaimed', never its failure; prints the nodes each backend "
                    "ran (the backend test kit's mode)")
    ap.add_argument("--failures", action="store_true", help="list every failing case")
    ap.add_argument("--write-known-failures", metavar="PATH", default=None,
                    help="rewrite the known-failures file at PATH from the current failures "
                    "(keeps existing reasons; a filtered run only updates the cases it ran)")
    args = ap.parse_args(argv)
    ops = set(args.ops.split(",")) if args.ops else None
    cases = [c for c in all_tensor_cases(ops) if args.k in c.name]
    start = time.time()
    header, backend = None, ""
    if args.claimed_only:
        backend = Target.parse(args.target).kinds[0].name
        results = _run_claimed_only(cases, args.target)
        header = CLAIMED_ONLY_HEADER.format(backend=backend, target=args.target)
    else:
        results = _run_all(cases, args.target,
                           compile_and_run if args.engine == "compile" else interpret)
    passed = sum(r.ok for r in results)
    if args.failures:
        for r in results:
            if not r.ok:
                print(f"{'DECLINED' if r.reason.startswith('declined: ') else 'FAIL'} "
                      f"{r.name}: {r.reason}")
    reasons = collections.Counter(r.reason.split(":")[0] for r in results if not r.ok)
    for reason, count in reasons.most_common(15):
        print(f"  {count:5d}  {reason}")
    if args.claimed_only:
        print(f"{len(results) - passed} of {len(results)} cases are {backend}'s failures or "
              f"declined (target {args.target}, {time.time() - start:.1f}s)")
    else:
        print(f"{passed} passed, {len(results) - passed} failed of {len(results)} cases "
              f"(target {args.target}, {time.time() - start:.1f}s)")
    if args.write_known_failures:
        path = Path(args.write_known_failures)
        previous = read_known_failures(path)
        order = [c.name for c in all_tensor_cases()] if (ops or args.k) else None
        entries = write_known_failures(path, results, previous, order, header)
        fixed = sorted(set(previous) - set(entries))
        added = sorted(set(entries) - set(previous))
        print(f"wrote {len(entries)} known failures to {path} ({len(fixed)} now pass and were "
              f"removed, {len(added)} new)")
        for name in fixed:
            print(f"  now passes: {name}")
        for name in added:
            print(f"  new failure: {name}  # {entries[name].reason}")
    return 0


def _run_all(cases: list, target: str, engine: Runner) -> list[CaseResult]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return [run_case(case, target, engine) for case in cases]


def _run_claimed_only(cases: list, target: str) -> list[CaseResult]:
    """Run ``cases`` claimed-only for the target's first backend and print what happened to
    them. Returns every case: a failure for a case the backend failed, or that it declined
    (listed with its reason), or whose op it claims but whose nodes it did not take; a pass
    for the rest (it passed, or the case is none of its business: an op it does not claim, a
    case the other backends failed), so that rewriting its baseline drops them."""
    # local import: node_conformance imports this module (it builds on run_case), a cycle
    from tessera.testing.kit.node_conformance import NodeConformance

    backend = Target.parse(target).kinds[0].name
    suite = NodeConformance(backend, target)
    suite.cases = cases
    nodes: dict[str, int] = collections.Counter()
    statuses: dict[str, int] = collections.Counter()
    results = []
    for case in cases:
        result = suite.run(case)
        verdict, _ = suite.outcome(result)
        listed = verdict == "fail" or result.status == "declined"
        status = ("skipped" if verdict == "skip" and result.status != "declined"
                  else result.status)
        statuses[status] += 1
        if result.status == "passed":
            nodes.update(result.nodes)
        results.append(CaseResult(result.name, not listed, result.reason if listed else ""))
    ran = ", ".join(f"{b} {n}" for b, n in nodes.most_common())
    print(f"claimed-only for {backend!r}: {statuses['passed']} cases passed, "
          f"{statuses['failed']} failed, {statuses['declined']} declined (with its reason), "
          f"{statuses['unclaimed']} of ops it claims not taken, {statuses['fallback failed']} "
          f"of ops it claims not taken and failed by the others, {statuses['skipped']} skipped "
          f"(ops it does not claim, or nothing of it to check); nodes run in passing cases: "
          f"{ran or 'none'}")
    return results


if __name__ == "__main__":
    sys.exit(main())
