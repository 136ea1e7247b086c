"""Cross-compilation with ``llvm -mtriple=``: object code for the other architecture (AArch64
on an x86 machine, x86_64 on an Arm one) that is exported but never linked into this process."""

from __future__ import annotations

import struct
import tarfile
from pathlib import Path

import numpy as np
import pytest
from backend_cases.support import conv_block_model

import tessera
from tessera import tir
from tessera.errors import ArtifactError, RunError, TargetError
from tessera_llvm.build import build_module
from tessera_llvm.cpu import cpu_info
from tessera_llvm.loader import undefined_symbols
from tessera_llvm.triple import check_triple, host_arch, is_foreign

#: The triple, a CPU of it and the ELF e_machine of the architecture this host is not.
if host_arch() == "aarch64":
    FOREIGN, FOREIGN_CPU, FOREIGN_ARCH, E_MACHINE = "x86_64-linux-gnu", "znver3", "x86_64", 62
else:
    FOREIGN, FOREIGN_CPU, FOREIGN_ARCH, E_MACHINE = ("aarch64-linux-gnu", "neoverse-n1",
                                                     "aarch64", 183)


def e_machine(obj: bytes) -> int:
    assert obj[:4] == b"\x7fELF"
    return struct.unpack_from("<H", obj, 0x12)[0]


def _axpy() -> tir.PrimFunc:
    n = 64
    A, B = tir.Buffer("A", [n], "float32"), tir.Buffer("B", [n], "float32")
    i = tir.Var("i")
    return tir.PrimFunc("axpy", [A, B], tir.For(i, 0, n, tir.ForKind.PARALLEL,
                                                tir.BufferStore(B, A[i] * 3.0 + B[i], [i])))


def test_check_triple_accepts_both_architectures_and_names_what_is_supported() -> None:
    assert check_triple("aarch64-linux-gnu") == "aarch64-linux-gnu"
    assert check_triple("x86_64-linux-gnu") == "x86_64-linux-gnu"
    assert is_foreign(FOREIGN) and not is_foreign(None)
    for bad, why in [("foo-bar-baz", "LLVM has no target"), ("riscv64-linux-gnu", "riscv64"),
                     ("arm64-apple-darwin", "MachO")]:
        with pytest.raises(TargetError, match=why) as err:
            check_triple(bad)
        assert "x86_64 and aarch64" in str(err.value) and "aarch64-linux-gnu" in str(err.value)


def test_cpu_info_follows_the_triple() -> None:
    generic = cpu_info(None, 2, FOREIGN)
    assert generic.arch == FOREIGN_ARCH and generic.name == "generic"
    assert generic.vector_lanes == 4
    assert generic.vector_registers == (32 if FOREIGN_ARCH == "aarch64" else 16)
    named = cpu_info(FOREIGN_CPU, 2, FOREIGN)
    assert named.arch == FOREIGN_ARCH and named.name == FOREIGN_CPU


def test_build_module_emits_foreign_object_code_and_refuses_to_load_it() -> None:
    built = build_module([_axpy()], "xaxpy", mcpu=FOREIGN_CPU, triple=FOREIGN)
    assert e_machine(built.object_code) == E_MACHINE
    assert built.triple == FOREIGN
    # the parallel loop calls the thread pool, which the loading process provides
    assert undefined_symbols(built.object_code) == ["tessera_parallel_for"]
    asm = built.asm
    assert ("fmla" in asm or "fmadd" in asm) if FOREIGN_ARCH == "aarch64" else "vfmadd" in asm
    with pytest.raises(RunError, match=f"compiled for {FOREIGN}"):
        built.load()


def test_compile_for_a_foreign_triple_exports_but_does_not_run(tmp_path: Path) -> None:
    model, inputs = conv_block_model(size=6)
    target = f"llvm -mtriple={FOREIGN} -mcpu={FOREIGN_CPU}"
    mod = tessera.compile(model, target=target)
    with pytest.raises(RunError, match=f"compiled for {FOREIGN}.*this host is"):
        mod.run(**inputs)
    path = tmp_path / "cross.tar"
    mod.export(str(path))
    with tarfile.open(path) as tar:
        objects = [m for m in tar.getmembers() if m.name.endswith("kernels.o")]
        assert objects
        for member in objects:
            assert e_machine(tar.extractfile(member).read()) == E_MACHINE  # type: ignore
    with pytest.raises(ArtifactError, match=f"compiled for {FOREIGN}"):
        tessera.load(str(path))


def test_the_host_triple_still_runs() -> None:
    model, inputs = conv_block_model(size=6)
    host = "aarch64-linux-gnu" if FOREIGN_ARCH == "x86_64" else "x86_64-linux-gnu"
    got = tessera.compile(model, target=f"llvm -mtriple={host}").run(**inputs)
    want = tessera.compile(model, target="ref").run(**inputs)
    np.testing.assert_allclose(got["y"], want["y"], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, message", [
    ("llvm -mtriple=riscv64-linux-gnu", "not supported"),
    (f"llvm -mtriple={FOREIGN} -mcpu=native", "the host CPU cannot run"),
    (f"llvm -mcpu={FOREIGN_CPU}", "-mtriple= for another architecture"),
    (f"llvm -mtriple={FOREIGN} -mcpu=no-such-cpu", f"does not know this CPU for {FOREIGN}"),
])
def test_bad_triple_and_cpu_combinations_are_target_errors(target: str, message: str) -> None:
    model, _ = conv_block_model(size=6)
    with pytest.raises(TargetError, match=message):
        tessera.compile(model, target=target)
