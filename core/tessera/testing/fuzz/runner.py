"""Run fuzz cases in a forked worker process and classify every outcome.

The worker imports Tessera once (it is forked from the parent), limits its address space
(``RLIMIT_AS``) so a huge allocation shows as a ``MemoryError`` instead of swapping the
machine, and compiles and runs one (case, target) pair at a time. A worker that dies (segfault,
abort) or does not answer within the timeout is replaced, and that pair is recorded as a
``crash`` or a ``timeout``.
"""

from __future__ import annotations

import faulthandler
import multiprocessing
import os
import random
import re
import resource
import time
import traceback
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import numpy as np
import onnx

import tessera
from tessera.errors import TesseraError
from tessera.ir.types import TensorType
from tessera.plugin.manager import resolve_target
from tessera.runtime.dynamic import DynamicModule
from tessera.testing.fuzz.mutators import Mutant, make_mutant, model_names
from tessera.testing.fuzz.seeds import load_seeds

#: Outcomes that are fine: the model ran, or Tessera refused it naming what is wrong.
GOOD = ("ok", "tessera_error")
#: Every outcome kind, good ones first.
OUTCOMES = GOOD + ("unnamed_error", "wrapped_exception", "other_exception", "memory", "crash",
                   "timeout")
#: Inputs bigger than this (elements) are not generated; the case counts as compiled.
MAX_INPUT_ELEMENTS = 1 << 22
#: Model-level errors that have no node to name, per mutation kind: the bytes could not be
#: parsed as a model at all, or the model's opset is out of range.
MODEL_LEVEL = {"bytes": ("cannot parse the ONNX model", "empty graph", "opset", "ir_version",
                         "has no name"),
               "opset": ("opset",)}


@dataclass
class Result:
    case: int
    target: str
    kind: str
    description: str
    outcome: str
    message: str = ""
    seed_model: str = ""


@dataclass
class Report:
    results: list[Result] = field(default_factory=list)
    seconds: float = 0.0

    def counts(self) -> Counter[str]:
        return Counter(r.outcome for r in self.results)

    def failures(self) -> list[Result]:
        return [r for r in self.results if r.outcome not in GOOD]

    def summary(self) -> str:
        counts = self.counts()
        cases = len({r.case for r in self.results})
        parts = ", ".join(f"{k}: {counts[k]}" for k in OUTCOMES if counts[k])
        by_kind = Counter(r.kind for r in self.results)
        kinds = ", ".join(f"{k}: {v}" for k, v in sorted(by_kind.items()))
        return (f"{cases} cases, {len(self.results)} runs in {self.seconds:.1f} s: {parts}\n"
                f"runs per mutation kind: {kinds}")


def generate_case(seed: int, index: int, seeds: dict[str, onnx.ModelProto]
                  ) -> tuple[str, Mutant]:
    """Case ``index`` of fuzz seed ``seed``: the same (seed model, mutant) on every machine."""
    rng = random.Random(f"tessera-fuzz:{seed}:{index}")
    name = rng.choice(sorted(seeds))
    return name, make_mutant(seeds[name], rng)


def names_something(message: str, names: set[str]) -> bool:
    """Whether ``message`` names one of ``names`` (single letters only when quoted)."""
    for name in names:
        if repr(name)[1:-1] in message and repr(name)[1:-1] != name:  # control characters
            return True
        if len(name) < 2:
            if f"'{name}'" in message or f'"{name}"' in message:
                return True
        elif re.search(rf"(?<![\w.]){re.escape(name)}(?![\w])", message):
            return True
    return False


def random_inputs(types: dict[str, Any], rng: np.random.Generator) -> dict[str, np.ndarray] | None:
    """Random data of each input's declared type; None when an input would be too big."""
    inputs = {}
    for name, t in types.items():
        shape = tuple(int(d) for d in t.shape)
        if int(np.prod(shape, dtype=object)) > MAX_INPUT_ELEMENTS:
            return None
        dtype = np.dtype(t.dtype.numpy)
        if dtype.kind == "f":
            data = rng.standard_normal(shape).astype(dtype)
        elif dtype.kind == "b":
            data = rng.random(shape) < 0.5
        elif dtype.kind in "iu":
            data = rng.integers(0 if dtype.kind == "u" else -2, 6, shape).astype(dtype)
        else:
            data = np.zeros(shape, dtype)
        inputs[name] = data
    return inputs


def run_one(mutant: Mutant, target: str, index: int) -> tuple[str, str]:
    """Compile and run one mutant in this process: (outcome, message)."""
    source: Any = mutant.model if mutant.model is not None else mutant.data
    try:
        compiled = tessera.compile(source, target=target)
        # a mutant with symbolic input dimensions runs at size 2 for each of them
        mod = compiled.specialize(**dict.fromkeys(compiled.variables, 2)) \
            if isinstance(compiled, DynamicModule) else compiled
        types = mod.input_types
        if getattr(mod, "shape_vars", None) is not None:  # one module for every size: at 2
            shapes = mod.shape_vars.shapes(dict.fromkeys(mod.variables, 2))
            types = {n: TensorType(tuple(shapes[n]), t.dtype) for n, t in types.items()}
        inputs = random_inputs(types, np.random.default_rng(index))
        if inputs is None:
            return "ok", "compiled; inputs too large to run"
        mod.run(**inputs)
        return "ok", ""
    except TesseraError as e:
        message = f"{type(e).__name__}: {e}"
        cause = _foreign_cause(e)
        if isinstance(cause, MemoryError):
            return "memory", message
        if cause is not None:
            return "wrapped_exception", message + "\n" + _short_trace(cause)
        if names_something(str(e), mutant.names):
            return "tessera_error", message
        if any(s in str(e) for s in MODEL_LEVEL.get(mutant.kind, ())):
            return "tessera_error", message
        return "unnamed_error", message
    except MemoryError as e:
        return "memory", f"MemoryError: {e}\n{_short_trace(e)}"
    except Exception as e:  # noqa: BLE001 - exactly what the fuzzer looks for
        return "other_exception", f"{type(e).__name__}: {e}\n{_short_trace(e)}"


def _foreign_cause(e: BaseException) -> BaseException | None:
    """The first non-Tessera exception a TesseraError was raised from (a bug wrapped up)."""
    seen = 0
    cause = e.__cause__
    while cause is not None and seen < 10:
        if not isinstance(cause, TesseraError):
            return cause
        cause, seen = cause.__cause__, seen + 1
    return None


def _short_trace(e: BaseException) -> str:
    frames = traceback.extract_tb(e.__traceback__)[-3:]
    return " <- ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                       for f in reversed(frames))


Handler = Callable[[Mutant, str, int], tuple[str, str]]


def _worker(conn: Connection, memory_limit: int, quiet: bool, handler: Handler) -> None:
    os.environ["TESSERA_NUM_THREADS"] = "1"
    if quiet:
        faulthandler.disable()  # a crash is reported by the parent, without a stack dump
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, 1)
        os.dup2(devnull, 2)
    if memory_limit:
        # tensors over a quarter of the limit are refused at import, before any allocation
        os.environ["TESSERA_MAX_TENSOR_BYTES"] = str(memory_limit // 4)
        used = _virtual_memory()
        resource.setrlimit(resource.RLIMIT_AS, (used + memory_limit, used + memory_limit))
    while True:
        try:
            job = conn.recv()
        except EOFError:
            return
        if job is None:
            return
        mutant, target, index = job
        if mutant.serialized and mutant.data is not None:
            mutant.model = onnx.load_from_string(mutant.data)
        elif mutant.data is not None:  # corrupted bytes: names may be corrupted too
            mutant.names |= _names_if_parseable(mutant.data)
        conn.send(handler(mutant, target, index))


def _names_if_parseable(data: bytes) -> set[str]:
    try:
        return model_names(onnx.load_from_string(data))
    except Exception:  # noqa: BLE001 - not a model at all
        return set()


def _virtual_memory() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


class _Worker:
    """A forked process that answers (mutant, target, index) jobs with ``handler``."""

    def __init__(self, memory_limit: int, quiet: bool, handler: Handler = run_one):
        ctx = multiprocessing.get_context("fork")
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker, args=(child, memory_limit, quiet, handler),
                                daemon=True)
        self.proc.start()
        child.close()

    def ask(self, job: Any, timeout: float) -> tuple[str, str]:
        """The job's (outcome, message); a dead or silent worker is stopped (ask no more)."""
        try:
            self.conn.send(job)
            if self.conn.poll(timeout):
                return self.conn.recv()
            self.stop()
            return "timeout", f"no answer within {timeout:.0f} s"
        except (EOFError, OSError):  # the pipe closed: the worker died
            self.proc.join(5.0)
            self.stop()
            return "crash", f"worker died with exit code {self.proc.exitcode}"

    def stop(self) -> None:
        if self.proc.is_alive():
            self.proc.kill()
        self.proc.join()
        if not self.conn.closed:
            self.conn.close()


def _preload() -> None:
    """Load the plugins before forking (Tessera is imported with this module), so each
    worker starts warm."""
    resolve_target("ref")


def run_fuzz(cases: int, seed: int = 0, targets: Sequence[str] = ("ref", "llvm"),
             timeout: float = 30.0, memory_limit: int = 3 << 30, first: int = 0,
             quiet: bool = True, progress: Callable[[Result], None] | None = None) -> Report:
    """Run cases ``first .. first + cases - 1`` of fuzz seed ``seed`` on every target."""
    _preload()
    seeds = load_seeds()
    report = Report()
    start = time.perf_counter()
    worker = _Worker(memory_limit, quiet)
    try:
        for index in range(first, first + cases):
            seed_name, mutant = generate_case(seed, index, seeds)
            for target in targets:
                outcome, message = worker.ask((_portable(mutant), target, index), timeout)
                if outcome in ("crash", "timeout"):
                    worker = _Worker(memory_limit, quiet)
                result = Result(index, target, mutant.kind, mutant.description, outcome,
                                message, seed_name)
                report.results.append(result)
                if progress is not None:
                    progress(result)
    finally:
        if worker.proc.is_alive():
            worker.conn.send(None)
            worker.proc.join(5.0)
        worker.stop()
    report.seconds = time.perf_counter() - start
    return report


def _portable(mutant: Mutant) -> Mutant:
    """The mutant as sent to the worker: models travel serialized."""
    if mutant.model is None:
        return mutant
    return Mutant(mutant.kind, mutant.description, data=mutant.model.SerializeToString(),
                  names=mutant.names, serialized=True)
