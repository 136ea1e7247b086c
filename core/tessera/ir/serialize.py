"""JSON round trip of functions.

Constant data is either inlined (base64 of the raw bytes) or left out and referenced by name so
an artifact can keep parameters apart (``with_data=False`` then ``from_json(..., params=...)``).
A constant a backend holds in its compiled form (``Value.held_by``) is written as
``{"type": ..., "held_by": backend}`` and read back held, without data. A sub-graph attribute
(an ``If`` branch, a ``Loop`` or ``Scan`` body) is a nested function with its constants inline.
A size expression (a symbolic dimension of a type, or in an attribute) is written in its
algebra's JSON form (``["Mul", "batch", 8]``), as ``{"dim": ...}`` in a shape and
``{"__dim__": ...}`` in an attribute.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np

from tessera.errors import IRError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.symbolic import dim_from_json, dim_to_json, is_dim_expr
from tessera.ir.types import DType, TensorType

FORMAT_VERSION = 1


def _encode_array(a: np.ndarray) -> dict[str, Any]:
    a = np.asarray(a, order="C")
    return {"dtype": a.dtype.name, "shape": list(a.shape),
            "data": base64.b64encode(a.tobytes()).decode("ascii")}


def _decode_array(d: dict[str, Any]) -> np.ndarray:
    raw = base64.b64decode(d["data"])
    return np.frombuffer(raw, dtype=np.dtype(d["dtype"])).reshape(d["shape"]).copy()


def _encode_attr(v: Any) -> Any:
    if is_dim_expr(v):  # a size expression (a graph with symbolic shapes)
        return {"__dim__": dim_to_json(v)["dim"]}
    if isinstance(v, dict):
        return {"__map__": {str(k): _encode_attr(x) for k, x in v.items()}}
    if isinstance(v, Function):  # a sub-graph keeps its constants inline: no backend holds them
        return {"__graph__": function_to_dict(v)}
    if isinstance(v, np.ndarray):
        return {"__ndarray__": _encode_array(v)}
    if isinstance(v, DType):
        return {"__dtype__": v.value}
    if isinstance(v, (list, tuple)):
        return [_encode_attr(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, np.bool_):
        return bool(v)
    if isinstance(v, np.floating):
        v = float(v)
    if isinstance(v, float) and not np.isfinite(v):
        return {"__float__": repr(v)}
    return v


def _decode_attr(v: Any, params: dict[str, np.ndarray] | None = None) -> Any:
    if isinstance(v, dict):
        if "__graph__" in v:
            return function_from_dict(v["__graph__"], params)
        if "__ndarray__" in v:
            return _decode_array(v["__ndarray__"])
        if "__dtype__" in v:
            return DType(v["__dtype__"])
        if "__float__" in v:
            return float(v["__float__"])
        if "__dim__" in v:
            return dim_from_json({"dim": v["__dim__"]})
        if "__map__" in v:
            return {k: _decode_attr(x, params) for k, x in v["__map__"].items()}
        raise IRError(f"unknown attribute encoding {sorted(v)}")
    if isinstance(v, list):
        return [_decode_attr(x) for x in v]
    return v


def _type_json(t: TensorType) -> dict[str, Any]:
    if t.is_static:
        return {"shape": list(t.shape), "dtype": t.dtype.value}
    return {"shape": [dim_to_json(d) for d in t.shape], "dtype": t.dtype.value}


def _type_from(d: dict[str, Any]) -> TensorType:
    return TensorType(tuple(dim_from_json(x) for x in d["shape"]), DType(d["dtype"]))


def function_to_dict(fn: Function, with_data: bool = True) -> dict[str, Any]:
    consts: dict[str, dict[str, Any]] = {}
    for v in fn.constants():
        entry: dict[str, Any] = {"type": _type_json(v.type)}
        if v.is_held:
            if with_data:
                raise IRError(f"constant {v.name!r} has no data to write: backend "
                              f"{v.held_by!r} holds it in its compiled form")
            entry["held_by"] = v.held_by
        elif with_data:
            assert v.data is not None
            entry["data"] = _encode_array(v.data)
        consts[v.name] = entry
    nodes = []
    for n in fn.nodes:
        nodes.append({
            "name": n.name, "op": n.op,
            "inputs": [v.name if v is not None else None for v in n.inputs],
            "outputs": [{"name": o.name, "type": _type_json(o.type)} for o in n.outputs],
            "attrs": {k: _encode_attr(v) for k, v in n.attrs.items()},
            **({"body": function_to_dict(n.body, with_data)} if n.body is not None else {}),
        })
    return {
        "name": fn.name,
        "attrs": {k: _encode_attr(v) for k, v in fn.attrs.items()},
        "inputs": [{"name": v.name, "type": _type_json(v.type)} for v in fn.inputs],
        "constants": consts,
        "nodes": nodes,
        "outputs": [v.name for v in fn.outputs],
    }


def function_from_dict(d: dict[str, Any], params: dict[str, np.ndarray] | None = None) -> Function:
    """Rebuild a function; constants without inline data are looked up in ``params``."""
    try:
        fn = Function(d["name"], {k: _decode_attr(v) for k, v in d.get("attrs", {}).items()})
        env: dict[str, Value] = {}
        for item in d["inputs"]:
            env[item["name"]] = fn.add_input(item["name"], _type_from(item["type"]))
        for name, item in d.get("constants", {}).items():
            t = _type_from(item["type"])
            if "held_by" in item:
                fn.reserve_name(name)
                env[name] = Value(name, t, held_by=str(item["held_by"]))
                continue
            if "data" in item:
                data = _decode_array(item["data"])
            elif params is not None and name in params:
                data = np.asarray(params[name])
            else:
                raise IRError(f"constant {name!r} has no data (missing parameter)")
            if TensorType.of(data) != t:
                raise IRError(f"constant {name!r}: data is {TensorType.of(data)}, expected {t}")
            fn.reserve_name(name)
            env[name] = Value(name, t, data=data)
        for item in d["nodes"]:
            inputs = []
            for name in item["inputs"]:
                if name is None:
                    inputs.append(None)
                elif name in env:
                    inputs.append(env[name])
                else:
                    raise IRError(f"node {item['name']} reads undefined value {name!r}")
            outs = [Value(o["name"], _type_from(o["type"])) for o in item["outputs"]]
            body = function_from_dict(item["body"], params) if "body" in item else None
            node = Node(item["op"], item["name"], inputs, outs,
                        {k: _decode_attr(v, params) for k, v in item["attrs"].items()}, body)
            fn.append(node)
            for o in outs:
                env[o.name] = o
        fn.outputs = []
        for name in d["outputs"]:
            if name not in env:
                raise IRError(f"function output {name!r} is not defined")
            fn.outputs.append(env[name])
        return fn
    except (KeyError, TypeError, ValueError) as e:
        raise IRError(f"malformed function JSON: {type(e).__name__}: {e}") from None


def to_json(fn: Function, with_data: bool = True, indent: int | None = None) -> str:
    return json.dumps({"format": FORMAT_VERSION, "function": function_to_dict(fn, with_data)},
                      indent=indent)


def from_json(text: str | bytes, params: dict[str, np.ndarray] | None = None) -> Function:
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as e:
        raise IRError(f"not JSON: {e}") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT_VERSION:
        raise IRError(f"unknown graph format {doc.get('format') if isinstance(doc, dict) else '?'}"
                      f"; expected {FORMAT_VERSION}")
    return function_from_dict(doc["function"], params)
