"""Small ONNX models with control flow, seeded random weights, built with ``onnx.helper``.

Each is the shape of what exporters write for real models:

- :func:`if_model`: an ``If`` on a run-time condition whose branches read outer values (a
  branch-per-mode head, as ``torch.cond`` exports);
- :func:`greedy_decoder`: a ``Loop``-based greedy decoder (a GRU-like cell, an embedding
  table, ``ArgMax``), stopping at an end token (``stop_early``) or emitting a fixed number of
  tokens as a scan output;
- :func:`scan_rnn`: an RNN over a sequence as a ``Scan`` (opset 9 form), forwards or backwards;
- :func:`nested_model`: a ``Loop`` whose body holds an ``If`` that reads a value two scopes out;
- :func:`loop_or_unrolled`: the same small body run ``iterations`` times in a ``Loop`` or
  unrolled by hand (the loop-overhead benchmark's pair).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64
BOOL = TensorProto.BOOL


def _const(name: str, array: np.ndarray) -> onnx.NodeProto:
    return helper.make_node("Constant", [], [name], value=numpy_helper.from_array(array, name))


def _model(graph: onnx.GraphProto) -> onnx.ModelProto:
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def _rand(rng: np.random.Generator, *shape: int, scale: float = 0.5) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def if_model(rows: int = 3, width: int = 8, out: int = 5, seed: int = 0) -> onnx.ModelProto:
    """``y = If(mode, then: relu(x @ W1 + b), else: tanh(x @ W2) * scale)``; ``x`` and
    ``scale`` are read from the outer scope."""
    rng = np.random.default_rng(seed)
    w1, b, w2 = _rand(rng, width, out), _rand(rng, out), _rand(rng, width, out)
    then_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W1"], ["t0"]),
         helper.make_node("Add", ["t0", "bias"], ["t1"]),
         helper.make_node("Relu", ["t1"], ["then_y"])],
        "then", [], [helper.make_tensor_value_info("then_y", FLOAT, [rows, out])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W2"], ["e0"]),
         helper.make_node("Tanh", ["e0"], ["e1"]),
         helper.make_node("Mul", ["e1", "scale"], ["else_y"])],
        "else", [], [helper.make_tensor_value_info("else_y", FLOAT, [rows, out])])
    graph = helper.make_graph(
        [helper.make_node("If", ["mode"], ["y"], then_branch=then_g, else_branch=else_g)],
        "if_model",
        [helper.make_tensor_value_info("x", FLOAT, [rows, width]),
         helper.make_tensor_value_info("mode", BOOL, []),
         helper.make_tensor_value_info("scale", FLOAT, [1])],
        [helper.make_tensor_value_info("y", FLOAT, [rows, out])],
        [numpy_helper.from_array(w1, "W1"), numpy_helper.from_array(b, "bias"),
         numpy_helper.from_array(w2, "W2")])
    return _model(graph)


def greedy_decoder(vocab: int = 16, hidden: int = 32, steps: int = 12, eos: int = 0,
                   stop_early: bool = True, seed: int = 0) -> onnx.ModelProto:
    """A greedy decoder as one ``Loop``: ``h = tanh(E[token] @ Wx + h @ Wh)``, ``token =
    argmax(h @ Wo)``. Inputs ``h0 [1, hidden]``, ``token0 [1]`` and, with ``stop_early``, the
    run-time trip count ``max_steps`` (the loop stops at token ``eos``; outputs the final
    state, token and step count). Without it the loop runs ``steps`` iterations and also
    outputs every token as a scan output ``tokens [steps, 1]``."""
    rng = np.random.default_rng(seed)
    emb, wx, wh, wo = (_rand(rng, vocab, hidden), _rand(rng, hidden, hidden),
                       _rand(rng, hidden, hidden), _rand(rng, hidden, vocab, scale=1.0))
    body_nodes = [
        helper.make_node("Gather", ["embed", "tok_in"], ["e"], axis=0),
        helper.make_node("MatMul", ["e", "Wx"], ["a"]),
        helper.make_node("MatMul", ["h_in", "Wh"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["ab"]),
        helper.make_node("Tanh", ["ab"], ["h_out"]),
        helper.make_node("MatMul", ["h_out", "Wo"], ["logits"]),
        helper.make_node("ArgMax", ["logits"], ["tok_out"], axis=1, keepdims=0),
        helper.make_node("Add", ["n_in", "one"], ["n_out"]),
    ]
    outputs = [helper.make_tensor_value_info("h_out", FLOAT, [1, hidden]),
               helper.make_tensor_value_info("tok_out", INT64, [1]),
               helper.make_tensor_value_info("n_out", INT64, [])]
    if stop_early:
        body_nodes += [_const("eos", np.array([eos], np.int64)),
                       helper.make_node("Equal", ["tok_out", "eos"], ["is_eos"]),
                       helper.make_node("Not", ["is_eos"], ["go1"]),
                       helper.make_node("Squeeze", ["go1"], ["cond_out"])]
    else:
        body_nodes += [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
                       helper.make_node("Identity", ["tok_out"], ["tok_scan"])]
        outputs.append(helper.make_tensor_value_info("tok_scan", INT64, [1]))
    body = helper.make_graph(
        body_nodes, "decode_step",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("h_in", FLOAT, [1, hidden]),
         helper.make_tensor_value_info("tok_in", INT64, [1]),
         helper.make_tensor_value_info("n_in", INT64, [])],
        [helper.make_tensor_value_info("cond_out", BOOL, []), *outputs])
    inits = [numpy_helper.from_array(a, n) for a, n in
             ((emb, "embed"), (wx, "Wx"), (wh, "Wh"), (wo, "Wo"),
              (np.array(1, np.int64), "one"), (np.array(0, np.int64), "zero"),
              (np.array(True), "true"))]
    graph_inputs = [helper.make_tensor_value_info("h0", FLOAT, [1, hidden]),
                    helper.make_tensor_value_info("token0", INT64, [1])]
    nodes = []
    if stop_early:
        graph_inputs.append(helper.make_tensor_value_info("max_steps", INT64, []))
        trip = "max_steps"
        outs = ["h_final", "token_final", "count"]
    else:
        nodes.append(_const("trip", np.array(steps, np.int64)))
        trip = "trip"
        outs = ["h_final", "token_final", "count", "tokens"]
    nodes.append(helper.make_node("Loop", [trip, "true", "h0", "token0", "zero"], outs,
                                  body=body))
    graph_outputs = [helper.make_tensor_value_info("h_final", FLOAT, [1, hidden]),
                     helper.make_tensor_value_info("token_final", INT64, [1]),
                     helper.make_tensor_value_info("count", INT64, [])]
    if not stop_early:
        graph_outputs.append(helper.make_tensor_value_info("tokens", INT64, [steps, 1]))
    return _model(helper.make_graph(nodes, "greedy_decoder", graph_inputs, graph_outputs,
                                    inits))


def scan_rnn(steps: int = 7, batch: int = 2, features: int = 6, hidden: int = 10,
             reverse: bool = False, seed: int = 0) -> onnx.ModelProto:
    """``h_t = tanh(x_t @ Wx + h_{t-1} @ Wh + b)`` over ``x [steps, batch, features]`` as a
    ``Scan``; outputs the last state and every state, stacked on axis 1
    (``[batch, steps, hidden]``)."""
    rng = np.random.default_rng(seed)
    wx, wh, b = _rand(rng, features, hidden), _rand(rng, hidden, hidden), _rand(rng, hidden)
    body = helper.make_graph(
        [helper.make_node("MatMul", ["x_t", "Wx"], ["a"]),
         helper.make_node("MatMul", ["h_prev", "Wh"], ["c"]),
         helper.make_node("Add", ["a", "c"], ["ac"]),
         helper.make_node("Add", ["ac", "bias"], ["acb"]),
         helper.make_node("Tanh", ["acb"], ["h_next"]),
         helper.make_node("Identity", ["h_next"], ["h_step"])],
        "rnn_step",
        [helper.make_tensor_value_info("h_prev", FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("x_t", FLOAT, [batch, features])],
        [helper.make_tensor_value_info("h_next", FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("h_step", FLOAT, [batch, hidden])])
    graph = helper.make_graph(
        [helper.make_node("Scan", ["h0", "x"], ["h_last", "h_all"], body=body,
                          num_scan_inputs=1, scan_input_directions=[1 if reverse else 0],
                          scan_output_axes=[1])],
        "scan_rnn",
        [helper.make_tensor_value_info("h0", FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("x", FLOAT, [steps, batch, features])],
        [helper.make_tensor_value_info("h_last", FLOAT, [batch, hidden]),
         helper.make_tensor_value_info("h_all", FLOAT, [batch, steps, hidden])],
        [numpy_helper.from_array(wx, "Wx"), numpy_helper.from_array(wh, "Wh"),
         numpy_helper.from_array(b, "bias")])
    return _model(graph)


def nested_model(width: int = 4, seed: int = 0) -> onnx.ModelProto:
    """A ``Loop`` of ``n`` iterations whose body holds an ``If`` on the iteration's parity;
    the branches read ``bias``, a graph input two scopes out, and ``acc`` from the body."""
    rng = np.random.default_rng(seed)
    w = _rand(rng, width, width)
    then_g = helper.make_graph(
        [helper.make_node("Add", ["acc_in", "bias"], ["then_out"])], "even", [],
        [helper.make_tensor_value_info("then_out", FLOAT, [1, width])])
    else_g = helper.make_graph(
        [helper.make_node("MatMul", ["acc_in", "weight"], ["m"]),
         helper.make_node("Sub", ["m", "bias"], ["else_out"])], "odd", [],
        [helper.make_tensor_value_info("else_out", FLOAT, [1, width])])
    body = helper.make_graph(
        [_const("two", np.array(2, np.int64)), _const("zero_i", np.array(0, np.int64)),
         helper.make_node("Mod", ["i", "two"], ["parity"]),
         helper.make_node("Equal", ["parity", "zero_i"], ["even"]),
         helper.make_node("If", ["even"], ["acc_out"], then_branch=then_g, else_branch=else_g),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])],
        "body",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("acc_in", FLOAT, [1, width])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("acc_out", FLOAT, [1, width])])
    graph = helper.make_graph(
        [helper.make_node("Loop", ["n", "", "acc0"], ["acc"], body=body)], "nested",
        [helper.make_tensor_value_info("n", INT64, []),
         helper.make_tensor_value_info("acc0", FLOAT, [1, width]),
         helper.make_tensor_value_info("bias", FLOAT, [1, width])],
        [helper.make_tensor_value_info("acc", FLOAT, [1, width])],
        [numpy_helper.from_array(w, "weight")])
    return _model(graph)


def _step_nodes(src: str, dst: str, tag: str) -> list[onnx.NodeProto]:
    return [helper.make_node("MatMul", [src, "weight"], [f"{tag}_m"]),
            helper.make_node("Add", [f"{tag}_m", "bias"], [f"{tag}_a"]),
            helper.make_node("Tanh", [f"{tag}_a"], [dst])]


def loop_or_unrolled(iterations: int = 100, width: int = 64, rows: int = 4, unrolled: bool = False,
                     seed: int = 0) -> onnx.ModelProto:
    """``x = tanh(x @ weight + bias)`` ``iterations`` times: as one ``Loop`` (trip count a graph
    input) or unrolled into ``iterations`` copies of the body."""
    rng = np.random.default_rng(seed)
    w, b = _rand(rng, width, width, scale=1.0 / np.sqrt(width)), _rand(rng, width)
    inits = [numpy_helper.from_array(w, "weight"), numpy_helper.from_array(b, "bias")]
    x_info = helper.make_tensor_value_info("x", FLOAT, [rows, width])
    y_info = helper.make_tensor_value_info("y", FLOAT, [rows, width])
    if unrolled:
        nodes = []
        src = "x"
        for k in range(iterations):
            dst = "y" if k == iterations - 1 else f"x{k + 1}"
            nodes += _step_nodes(src, dst, f"s{k}")
            src = dst
        return _model(helper.make_graph(nodes, "unrolled", [x_info], [y_info], inits))
    body = helper.make_graph(
        [*_step_nodes("x_in", "x_out", "s"),
         helper.make_node("Identity", ["cond_in"], ["cond_out"])], "step",
        [helper.make_tensor_value_info("i", INT64, []),
         helper.make_tensor_value_info("cond_in", BOOL, []),
         helper.make_tensor_value_info("x_in", FLOAT, [rows, width])],
        [helper.make_tensor_value_info("cond_out", BOOL, []),
         helper.make_tensor_value_info("x_out", FLOAT, [rows, width])])
    graph = helper.make_graph(
        [_const("trip", np.array(iterations, np.int64)),
         helper.make_node("Loop", ["trip", "", "x"], ["y"], body=body)],
        "looped", [x_info], [y_info], inits)
    return _model(graph)
