"""A process that exits while its model compiles in another thread (run as a script by
tests/runtime/test_exit_while_compiling.py).

``background``: a module with ``background_compile=True`` is called from 2 threads at 10
sizes, and the main thread ends as soon as the compiler thread is inside LLVM's optimiser.
``daemon``: a daemon thread of the user's compiles the model, and the main thread ends the
same way. Either must exit with status 0, never by a signal.
"""

from __future__ import annotations

import sys
import threading
import time

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import tessera

#: The function a thread is in while LLVM optimises (tessera_llvm.machine.optimize).
IN_LLVM = "optimize"


def model(layers: int = 8, width: int = 64) -> onnx.ModelProto:
    """x[batch, seq, width] through ``layers`` of MatMul, Add and an activation: a model
    whose LLVM module holds several kernels, so that its optimisation takes a while."""
    rng = np.random.default_rng(0)
    nodes, inits, x = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(
                      (rng.standard_normal((width, width)) * 0.1).astype(np.float32), f"w{i}"),
                  numpy_helper.from_array(rng.standard_normal(width).astype(np.float32), f"b{i}")]
        act = ("Tanh", "Sigmoid", "Relu", "Softmax")[i % 4]
        nodes += [helper.make_node("MatMul", [x, f"w{i}"], [f"m{i}"]),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"]),
                  helper.make_node(act, [f"a{i}"], [f"h{i}"])]
        x = f"h{i}"
    dims = ["batch", "seq", width]
    graph = helper.make_graph(nodes, "layers",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, dims)],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, dims)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def wait_inside_llvm(thread: threading.Thread, timeout: float = 60.0) -> bool:
    """Wait until ``thread`` is inside LLVM's optimiser (True), or has ended or ``timeout``
    passed (False), by looking at its Python stack."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and thread.is_alive():
        frame = sys._current_frames().get(thread.ident or -1)
        while frame is not None:
            if frame.f_code.co_name == IN_LLVM:
                return True
            frame = frame.f_back
        time.sleep(0.0005)
    return False


def background() -> threading.Thread:
    mod = tessera.compile(model(), "llvm", background_compile=True)

    def calls(first: int) -> None:
        for i in range(5):
            mod.run(x=np.ones((1, first + 2 * i, 64), np.float32))

    callers = [threading.Thread(target=calls, args=(t,)) for t in (3, 4)]
    for t in callers:
        t.start()
    for t in callers:
        t.join()
    return next(t for t in threading.enumerate() if t.name == "tessera-compile")


def daemon() -> threading.Thread:
    thread = threading.Thread(target=tessera.compile, args=(model(), "llvm"),
                              kwargs={"input_shapes": {"x": [2, 7, 64]}}, daemon=True)
    thread.start()
    return thread


if __name__ == "__main__":
    compiler = {"background": background, "daemon": daemon}[sys.argv[1]]()
    print("inside LLVM" if wait_inside_llvm(compiler) else "not seen inside LLVM", flush=True)
