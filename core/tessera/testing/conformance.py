"""Run the ONNX node test cases that the ``onnx`` package generates through Tessera.

Each case is a one-node model (sometimes expanded into its function body) with input and
expected output arrays. Operands that fix shapes (Reshape's ``shape``, Reduce ``axes``, ...) are
bound as compile-time constants when the importer asks for them (:class:`NeedsConstantError`),
as a static-shape compiler must; everything else is a runtime input.

``python -m tessera.testing.conformance --target ref`` prints the pass count.
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tessera.errors import NeedsConstantError, TesseraError


@dataclass
class CaseResult:
    name: str
    ok: bool
    reason: str = ""


def all_tensor_cases(op_types: set[str] | None = None) -> list:
    """The generated node cases whose inputs and outputs are all tensors."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from onnx.backend.test.case.node import collect_testcases

        cases = collect_testcases(None)
    out = []
    for case in cases:
        g = case.model.graph
        if not all(v.type.HasField("tensor_type") for v in list(g.input) + list(g.output)):
            continue
        if op_types is not None and not ({n.op_type for n in g.node} & op_types):
            continue
        out.append(case)
    return out


Runner = Callable[..., dict[str, np.ndarray]]


def compile_and_run(model, inputs: dict[str, np.ndarray], target: str,
                    freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    import tessera

    shapes = {k: list(v.shape) for k, v in inputs.items() if k not in freeze}
    mod = tessera.compile(model, target=target, input_shapes=shapes, freeze_inputs=freeze)
    outs = mod.run(**{k: v for k, v in inputs.items() if k not in freeze})
    return [outs[name] for name in mod.output_names]


def interpret(model, inputs: dict[str, np.ndarray], target: str,
              freeze: dict[str, np.ndarray]) -> list[np.ndarray]:
    """Import and evaluate with the reference interpreter (no passes, no runtime)."""
    from tessera.backends.reference.interpreter import evaluate_function
    from tessera.frontend.onnx import import_onnx

    shapes = {k: list(v.shape) for k, v in inputs.items() if k not in freeze}
    fn = import_onnx(model, input_shapes=shapes, freeze_inputs=freeze)
    outs = evaluate_function(fn, {k: v for k, v in inputs.items() if k not in freeze})
    return [outs[v.name] for v in fn.outputs]


def _compare(name: str, got: np.ndarray, want: np.ndarray, rtol: float, atol: float) -> str:
    got = np.asarray(got)
    want = np.asarray(want)
    if got.dtype != want.dtype:
        return f"output {name}: dtype {got.dtype}, expected {want.dtype}"
    if got.shape != want.shape:
        return f"output {name}: shape {list(got.shape)}, expected {list(want.shape)}"
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
            feeds = {n: np.asarray(a) for n, a in zip(input_names, inputs)}
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
                problem = _compare(name, have, want, case.rtol, case.atol)
                if problem:
                    return CaseResult(case.name, False, problem)
        return CaseResult(case.name, True)
    except TesseraError as e:
        first = str(e).splitlines()[0]
        return CaseResult(case.name, False, f"{type(e).__name__}: {first}")
    except Exception as e:  # noqa: BLE001 - a crash is a failure of that case, reported
        return CaseResult(case.name, False, f"crash {type(e).__name__}: {e}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="ref")
    ap.add_argument("--ops", default="", help="comma-separated op types to restrict to")
    ap.add_argument("-k", default="", help="substring of case names to restrict to")
    ap.add_argument("--engine", choices=["compile", "interpret"], default="compile",
                    help="compile: tessera.compile + Module.run; interpret: importer + "
                    "reference interpreter only")
    ap.add_argument("--failures", action="store_true", help="list every failing case")
    args = ap.parse_args(argv)
    ops = set(args.ops.split(",")) if args.ops else None
    cases = [c for c in all_tensor_cases(ops) if args.k in c.name]
    start = time.time()
    results = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for case in cases:
            engine = compile_and_run if args.engine == "compile" else interpret
            results.append(run_case(case, args.target, engine))
    passed = sum(r.ok for r in results)
    if args.failures:
        for r in results:
            if not r.ok:
                print(f"FAIL {r.name}: {r.reason}")
    reasons = collections.Counter(r.reason.split(":")[0] for r in results if not r.ok)
    for reason, count in reasons.most_common(15):
        print(f"  {count:5d}  {reason}")
    print(f"{passed} passed, {len(results) - passed} failed of {len(results)} cases "
          f"(target {args.target}, {time.time() - start:.1f}s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
