"""The object code's relocations reach anywhere in the address space (x86-64: static
relocations, large code model; ``tessera_llvm.build.code_model``).

MCJIT maps a module's code, constants and stubs separately; in a process that has mapped large
libraries (cuDNN/cuBLAS, PyTorch, Ray) they can land more than 2 GiB apart, and a 32-bit
relative or absolute relocation between them then aborts the process inside LLVM (it did, in
the full suite, once tessera-cudnn's tests had loaded the NVIDIA libraries). Where they land
is up to the system, so the test checks the property that makes it harmless: no relocation of
the object code is 32 bits wide."""

from __future__ import annotations

import platform
import struct

import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera_llvm.build import code_model

#: x86-64 relocation types of 32 bits: PC32, PLT32, 32, 32S, GOTPCREL, GOTPCRELX, REX_GOTPCRELX
NARROW = {2: "R_X86_64_PC32", 4: "R_X86_64_PLT32", 10: "R_X86_64_32", 11: "R_X86_64_32S",
          9: "R_X86_64_GOTPCREL", 41: "R_X86_64_GOTPCRELX", 42: "R_X86_64_REX_GOTPCRELX"}


def relocation_types(obj: bytes) -> dict[int, int]:
    """Relocation type -> count over the RELA sections of a 64-bit little-endian ELF object."""
    shoff = struct.unpack_from("<Q", obj, 0x28)[0]
    shentsize, shnum = struct.unpack_from("<HH", obj, 0x3A)
    counts: dict[int, int] = {}
    for i in range(shnum):
        sh = shoff + i * shentsize
        sh_type = struct.unpack_from("<I", obj, sh + 4)[0]
        if sh_type != 4:  # SHT_RELA
            continue
        offset, size, _, _, _, entsize = struct.unpack_from("<QQIIQQ", obj, sh + 0x18)
        for k in range(size // entsize):
            info = struct.unpack_from("<Q", obj, offset + k * entsize + 8)[0]
            counts[info & 0xFFFFFFFF] = counts.get(info & 0xFFFFFFFF, 0) + 1
    return counts


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"),
                    reason="the x86-64 relocation check")
def test_no_relocation_of_the_object_code_is_32_bits_wide() -> None:
    rng = np.random.default_rng(0)
    nodes = [helper.make_node("Exp", ["x"], ["e"]),  # a libm-style call, vector constants
             helper.make_node("Conv", ["e", "w"], ["c"], pads=[1, 1, 1, 1]),  # parallel_for
             helper.make_node("Sigmoid", ["c"], ["y"])]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 20, 20])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 20, 20])],
        [numpy_helper.from_array(rng.standard_normal((16, 16, 3, 3)).astype(np.float32), "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    mod = tessera.compile(model, target="llvm")
    (compiled,) = mod.compiled.values()
    types = relocation_types(compiled.handle.object_code)
    assert types, "the object code has relocations (constants, calls)"
    narrow = {NARROW[t]: n for t, n in types.items() if t in NARROW}
    assert not narrow, f"32-bit relocations in the object code: {narrow}"
    assert code_model(None) == ("static", "large")
    x = rng.standard_normal((1, 16, 20, 20)).astype(np.float32)
    want = tessera.compile(model, target="ref").run(x=x)["y"]
    np.testing.assert_allclose(mod.run(x=x)["y"], want, rtol=1e-4, atol=1e-5)


def test_other_architectures_keep_pic() -> None:
    assert code_model("aarch64-unknown-linux-gnu") == ("pic", "default")
