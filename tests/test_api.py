"""tessera.compile: errors that come from building the module."""

from __future__ import annotations

import pytest
from onnx import TensorProto, helper

import tessera
import tessera.api
from tessera.errors import CompileError


def test_a_memory_plan_that_cannot_be_allocated_is_a_compile_error(monkeypatch):
    def no_memory(*args, **kwargs):
        raise MemoryError("Unable to allocate 16.0 GiB")

    monkeypatch.setattr(tessera.api, "Module", no_memory)
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"], name="relu")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match=r"cannot allocate the model's memory \(Unable to "
                                           r"allocate 16.0 GiB\); its largest tensors: 'y' "
                                           r"float32\[4, 8\] \(Relu 'relu', 128 bytes\)"):
        tessera.compile(model, target="ref")
