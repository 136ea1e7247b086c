"""``Module.caller``'s calls, written out as Python for one order of inputs and outputs.

``Module.run`` and ``Module.caller`` spend a few microseconds per call in Python around the
kernels; for a small model (a text encoder at 7 tokens: 20 us of kernels) that is a third of
the call. A generated call has no loop or lookup by name: per input one test of type, dtype
and shape, then an execution state and its bound setters and getters.

* :func:`static_caller`: a module whose inputs have fixed shapes.
* :func:`sized_caller`: a module with symbolic inputs. The call binds the size variables
  from the arrays' shapes inline (each variable's bounds, and equal sizes where a variable
  occurs twice), and writes the sizes into the state and checks the model's relations only
  when the state last ran at other sizes; the inputs are copied into the views of the sizes.
  Anything the inline tests do not take (another dtype, a list, a size out of bounds, a
  relation the model breaks) goes to ``fallback``, the general path, which converts or says
  what is wrong.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from tessera.errors import RunError
from tessera.ir.symbolic import InputSpec
from tessera.runtime.states import StatePool

#: A generated call: the inputs in order, the outputs in order.
Caller = Callable[..., tuple[Any, ...]]


def _header(names: list[str]) -> tuple[list[str], dict[str, Any]]:
    count = len(names)
    scope: dict[str, Any] = {"ndarray": np.ndarray, "RunError": RunError,
                             "count_error": f"expected {count} inputs ({', '.join(names)}), got "}
    args = "".join(f"a{i}, " for i in range(count))
    lines = ["def call(*arrays):",
             f"    if len(arrays) != {count}:",
             "        raise RunError(f'{count_error}{len(arrays)}')",
             f"    ({args}) = arrays" if count else "    pass"]
    return lines, scope


def _made(lines: list[str], scope: dict[str, Any], label: str) -> Caller:
    exec(compile("\n".join(lines), f"<tessera {label}>", "exec"), scope)  # noqa: S102
    return scope["call"]  # type: ignore[no-any-return]


def static_caller(expected: list[tuple[str, np.dtype, tuple[int, ...]]],
                  key: tuple[tuple[str, ...], tuple[str, ...]],
                  check: Callable[[str, Any], np.ndarray], pool: StatePool[Any]) -> Caller:
    """The call of a module with fixed input shapes: ``expected`` per input (name, dtype,
    shape) in the caller's order; ``key`` the (input, output tensor) names whose bound setters
    and getters each state keeps (``Executor.bound_io``); ``check`` converts an input that is
    not an array of the right dtype and shape, or raises."""
    lines, scope = _header([name for name, _, _ in expected])
    scope.update(check=check, acquire=pool.acquire, release=pool.release, key=key)
    for i, (name, dtype, shape) in enumerate(expected):
        scope[f"d{i}"], scope[f"s{i}"] = dtype, shape
        lines += [f"    if type(a{i}) is not ndarray or a{i}.dtype != d{i} or a{i}.shape != s{i}:",
                  f"        a{i} = check({name!r}, a{i})  # converts, or raises"]
    lines += ["    executor = acquire()",
              "    try:",
              "        io = executor.bound_io(*key)",
              "        w = io.setters"]
    lines += [f"        w[{i}](a{i})" for i in range(len(expected))]
    lines += ["        executor.run()",
              "        r = io.getters",
              f"        return ({''.join(f'r[{j}](), ' for j in range(len(key[1])))})",
              "    finally:",
              "        release(executor)"]
    return _made(lines, scope, "module caller")


def sized_caller(specs: list[InputSpec], bounds: Mapping[str, tuple[int, int | None]],
                 outputs: list[str], pool: StatePool[Any],
                 size_check: Callable[[dict[str, int]], str | None] | None,
                 fallback: Callable[[tuple[Any, ...]], tuple[Any, ...]]) -> Caller:
    """The call of a module with symbolic inputs: ``specs`` per input (name, dims: ints and
    variable names, dtype) in the caller's order; ``bounds`` each variable's (lowest,
    highest or None); ``outputs`` the plan tensors returned, in order; ``size_check`` the
    model's relations between sizes (the text of the first broken one, or None);
    ``fallback`` the general path, called with the arrays for whatever the inline tests do
    not take."""
    lines, scope = _header([s.name for s in specs])
    scope.update(acquire=pool.acquire, release=pool.release, fallback=fallback,
                 size_check=size_check, copyto=np.copyto)
    var_index: dict[str, int] = {}
    for i, spec in enumerate(specs):
        scope[f"d{i}"] = np.dtype(spec.dtype.numpy)
        lines += [f"    if type(a{i}) is not ndarray or a{i}.dtype != d{i}:",
                  "        return fallback(arrays)",
                  f"    s = a{i}.shape",
                  f"    if len(s) != {len(spec.dims)}:",
                  "        return fallback(arrays)"]
        for axis, dim in enumerate(spec.dims):
            if isinstance(dim, int):
                lines += [f"    if s[{axis}] != {dim}:", "        return fallback(arrays)"]
            elif dim in var_index:
                lines += [f"    if s[{axis}] != x{var_index[dim]}:",
                          "        return fallback(arrays)"]
            else:
                k = var_index[dim] = len(var_index)
                lo, hi = bounds.get(dim, (0, None))
                test = f"{int(lo)} <= x{k}" + (f" <= {int(hi)}" if hi is not None else "")
                lines += [f"    x{k} = s[{axis}]", f"    if not {test}:",
                          "        return fallback(arrays)"]
    ordered = sorted(var_index)
    key = ", ".join(f"({v!r}, x{var_index[v]})" for v in ordered)
    sizes = ", ".join(f"{v!r}: x{var_index[v]}" for v in ordered)
    lines += [f"    key = ({key}{',' if len(ordered) == 1 else ''})",
              "    executor = acquire()",
              "    try:",
              "        if executor.sizes_key != key:",
              f"            sizes = {{{sizes}}}"]
    if size_check is not None:
        lines += ["            if size_check(sizes) is not None:",
                  "                return fallback(arrays)  # says which relation breaks"]
    lines += ["            executor.set_sizes(sizes)",
              "        view = executor.sized_view"]
    for i, spec in enumerate(specs):
        if all(isinstance(d, int) for d in spec.dims):
            lines.append(f"        executor.set_input({spec.name!r}, a{i})")
        else:
            lines.append(f"        copyto(view({spec.name!r}), a{i}, casting='no')")
    lines += ["        executor.run()",
              "        get = executor.get",
              f"        return ({''.join(f'get({t!r}), ' for t in outputs)})",
              "    finally:",
              "        release(executor)"]
    return _made(lines, scope, "sized caller")
