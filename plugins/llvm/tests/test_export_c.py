"""``tessera export --format c`` with the llvm backend: a C program linked against the
exported library gives bit-identical outputs to ``Module.run`` (1 and 2 threads), the library
has no text relocations and needs only libc, libm and pthreads, and what cannot be exported
says why. Skipped where there is no C compiler."""

from __future__ import annotations

import ctypes
import ctypes.util
import io
import subprocess
import tarfile
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import tessera
from tessera.deploy import export_c, find_cc
from tessera.deploy.elf import elf_machine, has_text_relocations, undefined_symbols
from tessera.errors import ExportError
from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder
from tessera.testing.size_models import positions_model

ROOT = Path(__file__).resolve().parents[3]
RUNNER = ROOT / "examples" / "deploy_c" / "run_model.c"
CC = find_cc()
needs_cc = pytest.mark.skipif(CC is None, reason="no C compiler (cc, $CC) on this machine")


def _runner(folder: Path, prefix: str) -> Path:
    exe = folder / "run_model"
    subprocess.run([CC, "-O2", f"-DPREFIX={prefix}", f'-DHEADER="{prefix}.h"', "-I", str(folder),
                    str(RUNNER), "-L", str(folder), f"-l{prefix}",
                    f"-Wl,-rpath,{folder}", "-o", str(exe)], check=True)
    return exe


def _run_c(exe: Path, folder: Path, mod: tessera.Module, feeds: dict[str, np.ndarray],
           threads: int) -> list[np.ndarray]:
    ins = []
    for i, name in enumerate(mod.input_names):
        path = folder / f"in{i}.bin"
        np.ascontiguousarray(feeds[name]).tofile(path)
        ins.append(str(path))
    outs = [str(folder / f"out{i}.bin") for i in range(len(mod.output_names))]
    subprocess.run([str(exe), str(threads), "1", *ins, "--", *outs], check=True)
    return [np.fromfile(p, dtype=np.uint8) for p in outs]


def _check_bit_identical(tmp_path: Path, model: onnx.ModelProto | str,
                         shapes: dict[str, list[int]], feeds: dict[str, np.ndarray],
                         prefix: str = "model") -> tessera.Module:
    mod = tessera.compile(model, "llvm", input_shapes=shapes, for_export=True)
    folder = tmp_path / prefix
    result = export_c(mod, folder, prefix=prefix)
    assert result.shared_library is not None, result.link_note
    library = result.shared_library.read_bytes()
    assert not has_text_relocations(library)
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    libm = ctypes.CDLL(ctypes.util.find_library("m"))
    for name in undefined_symbols(library, weak=False, dynamic=True):
        assert hasattr(libc, name) or hasattr(libm, name), name
    exe = _runner(folder, prefix)
    expected = mod.run(feeds)
    for threads in (1, 2):
        got = _run_c(exe, folder, mod, feeds, threads)
        for name, raw in zip(mod.output_names, got):
            want = np.ascontiguousarray(expected[name])
            assert raw.tobytes() == want.tobytes(), (name, threads)
    return mod


@needs_cc
def test_the_digits_cnn_runs_bit_identical_from_c(tmp_path: Path) -> None:
    x = np.random.default_rng(0).standard_normal((4, 1, 8, 8)).astype(np.float32)
    _check_bit_identical(tmp_path, str(ROOT / "examples/digits/digits_cnn.onnx"),
                         {"image": [4, 1, 8, 8]}, {"image": x}, prefix="digits")


@needs_cc
def test_a_bert_style_encoder_runs_bit_identical_from_c(tmp_path: Path) -> None:
    cfg = BertConfig(vocab=300, hidden=64, heads=4, intermediate=128, layers=2, seq_len=12,
                     batch=2)
    feeds = bert_inputs(cfg, seed=1)
    _check_bit_identical(tmp_path, make_bert_encoder(cfg, seed=1),
                         {k: list(v.shape) for k, v in feeds.items()}, feeds)


def _concat_model() -> onnx.ModelProto:
    """A DenseNet-style block: each layer's 1x1 convolution reads the concatenation of every
    earlier feature map (the inputs placed inside the concatenation: the copy never runs)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("Neg", ["x"], ["f0"])]
    weights = []
    for i in range(3):
        weights.append(numpy_helper.from_array(
            rng.standard_normal((16, 16 * (i + 1), 1, 1)).astype(np.float32) * 0.2, f"w{i}"))
        nodes += [helper.make_node("Conv", [f"f{i}", f"w{i}"], [f"c{i}"]),
                  helper.make_node("Relu", [f"c{i}"], [f"r{i}"]),
                  helper.make_node("Concat", [f"f{i}", f"r{i}"], [f"f{i + 1}"], axis=1)]
    nodes.append(helper.make_node("Tanh", ["f3"], ["y"]))
    graph = helper.make_graph(
        nodes, "dense_block",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 4, 4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64, 4, 4])], weights)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@needs_cc
def test_concatenations_placed_in_place_run_bit_identical_from_c(tmp_path: Path) -> None:
    x = np.random.default_rng(4).standard_normal((1, 16, 4, 4)).astype(np.float32)
    mod = _check_bit_identical(tmp_path, _concat_model(), {"x": [1, 16, 4, 4]}, {"x": x})
    assert mod.memory.elided, "the concatenation was meant to be placed in place"


@needs_cc
def test_a_shared_library_of_the_in_process_code_shows_its_text_relocations(
        tmp_path: Path) -> None:
    """The check above can fail: the code the process links (static relocations, the large
    code model) makes a shared library with text relocations."""
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                          input_shapes={"image": [1, 1, 8, 8]})
    (cr,) = mod.compiled.values()
    obj = tmp_path / "static.o"
    obj.write_bytes(cr.handle.object_code)
    lib = tmp_path / "libstatic.so"
    proc = subprocess.run([CC, "-shared", "-o", str(lib), str(obj), "-Wl,-z,notext"],
                          capture_output=True, text=True)
    if proc.returncode != 0:
        pytest.skip(f"the linker refuses it outright: {proc.stderr.strip()[:200]}")
    assert has_text_relocations(lib.read_bytes())


def test_the_objects_need_only_the_c_library_and_the_pool(tmp_path: Path) -> None:
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                          input_shapes={"image": [2, 1, 8, 8]}, for_export=True)
    result = export_c(mod, tmp_path / "out", shared=False)
    assert result.shared_library is None and "shared=False" in result.link_note
    region = (tmp_path / "out" / "region0_llvm.o").read_bytes()
    pool = (tmp_path / "out" / "tessera_pool.o").read_bytes()
    assert elf_machine(region) == "x86_64" or elf_machine(region) == "aarch64"
    assert set(undefined_symbols(region)) <= {"memset", "memcpy", "memmove",
                                               "tessera_parallel_for"}
    assert set(undefined_symbols(pool)) <= {"clock_gettime", "memset", "nanosleep",
                                             "pthread_create", "pthread_sigmask",
                                             "sigfillset", "syscall"}
    header = (tmp_path / "out" / "model.h").read_text()
    assert f"#define MODEL_ARENA_BYTES ((size_t){result.arena_bytes})" in header


def test_aarch64_objects_are_aarch64_and_need_the_same_short_list(tmp_path: Path) -> None:
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"),
                          "llvm -mtriple=aarch64-linux-gnu",
                          input_shapes={"image": [2, 1, 8, 8]}, for_export=True)
    result = export_c(mod, tmp_path / "arm", prefix="digits")
    assert result.shared_library is None and "aarch64" in result.link_note
    for name in ("region0_llvm.o", "tessera_pool.o"):
        data = (tmp_path / "arm" / name).read_bytes()
        assert elf_machine(data) == "aarch64"
        assert set(undefined_symbols(data)) <= {
            "memset", "memcpy", "memmove", "tessera_parallel_for", "clock_gettime",
            "nanosleep", "pthread_create", "pthread_sigmask", "sigfillset", "syscall"}


def test_an_aarch64_library_checks_the_features_its_cpu_implies(tmp_path: Path) -> None:
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"),
                          "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1 -mattr=+i8mm",
                          input_shapes={"image": [1, 1, 8, 8]}, for_export=True)
    export_c(mod, tmp_path / "arm", prefix="digits")
    source = (tmp_path / "arm" / "digits.c").read_text()
    check = source[source.index("int digits_check_cpu(void)"):]
    check = check[:check.index("\n}\n")]
    # neoverse-n1 implies dot products and half-precision arithmetic; -mattr adds i8mm
    assert "getauxval(AT_HWCAP)" in check and "getauxval(AT_HWCAP2)" in check
    assert "(1UL << 20))) return 3;  /* dotprod */" in check
    assert "(1UL << 13))) return 3;  /* i8mm */" in check
    assert "(1UL << 10))) return 3;  /* fullfp16 */" in check
    assert '"dotprod,fullfp16,i8mm,neon"' in source
    if CC is not None:  # the AArch64 branch is valid C with this machine's <sys/auxv.h>
        branch = check[check.index("#elif"):check.index("#endif")].split("\n", 1)[1]
        probe = tmp_path / "probe.c"
        probe.write_text(f"#include <sys/auxv.h>\nint probe(void) {{\n{branch}return 0;\n}}\n")
        subprocess.run([CC, "-fsyntax-only", "-Wall", "-Werror", str(probe)], check=True)


@needs_cc
def test_a_portable_x86_64_v3_library_checks_avx2_and_runs_here(tmp_path: Path) -> None:
    if not {"avx2", "fma", "bmi2"} <= _host_flags():
        pytest.skip("this CPU has no AVX2, FMA and BMI2 (x86-64-v3)")
    x = np.random.default_rng(1).standard_normal((3, 1, 8, 8)).astype(np.float32)
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm -mcpu=x86-64-v3",
                          input_shapes={"image": [3, 1, 8, 8]}, for_export=True)
    result = export_c(mod, tmp_path / "v3", prefix="digits")
    assert result.shared_library is not None, result.link_note
    source = (tmp_path / "v3" / "digits.c").read_text()
    for feature in ("avx2", "fma", "bmi2", "sse4.2"):
        assert f'__builtin_cpu_supports("{feature}")' in source
    assert "avx512" not in source
    exe = _runner(tmp_path / "v3", "digits")
    got = _run_c(exe, tmp_path / "v3", mod, {"image": x}, 2)
    assert got[0].tobytes() == np.ascontiguousarray(mod.run({"image": x})["logits"]).tobytes()


def _host_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    line = next((ln for ln in text.splitlines() if ln.startswith("flags")), "")
    return set(line.split(":", 1)[-1].split())


def test_what_cannot_be_exported_says_why(tmp_path: Path) -> None:
    digits = str(ROOT / "examples/digits/digits_cnn.onnx")
    plain = tessera.compile(digits, "llvm", input_shapes={"image": [1, 1, 8, 8]})
    with pytest.raises(ExportError, match="compiled without its LLVM IR"):
        export_c(plain, tmp_path / "b")
    ref = tessera.compile(digits, "ref", input_shapes={"image": [1, 1, 8, 8]},
                          for_export=True)
    with pytest.raises(ExportError, match=r"these regions hold the export back: region0_ref "
                                          r"\(ref\): backend 'ref' cannot"):
        export_c(ref, tmp_path / "c")
    good = tessera.compile(digits, "llvm", input_shapes={"image": [1, 1, 8, 8]},
                           for_export=True)
    with pytest.raises(ExportError, match="not a C identifier"):
        export_c(good, tmp_path / "d", prefix="my-model")
    with pytest.raises(ExportError, match="tessera_pool.o would overwrite region region0_llvm"):
        export_c(good, tmp_path / "e", prefix="tessera_pool")


@needs_cc
def test_the_c_example_classifies_the_digits_as_module_run_does(tmp_path: Path) -> None:
    example = ROOT / "examples" / "deploy_c"
    with np.load(ROOT / "examples/digits/digits_test.npz") as data:
        images, labels = data["images"], data["labels"]
    # the example's raw test set is the demo's split
    assert (example / "digits_test_images.f32").read_bytes() == \
        np.ascontiguousarray(images, np.float32).tobytes()
    assert (example / "digits_test_labels.u8").read_bytes() == labels.astype(np.uint8).tobytes()
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                          input_shapes={"image": [1, 1, 8, 8]}, for_export=True)
    folder = tmp_path / "digits_c"
    export_c(mod, folder, prefix="digits")
    exe = tmp_path / "classify_digits"
    subprocess.run([CC, "-O2", "-Wall", "-Werror", "-I", str(folder),
                    str(example / "classify_digits.c"), "-L", str(folder), "-ldigits",
                    f"-Wl,-rpath,{folder}", "-o", str(exe)], check=True)
    logits = mod.output_names[0]
    expected = [int(np.argmax(mod.run(image=images[i:i + 1])[logits]))
                for i in range(len(images))]
    for threads in ("1", "2"):
        proc = subprocess.run([str(exe), threads], cwd=example, capture_output=True, text=True,
                              check=True)
        first, second = proc.stdout.splitlines()[:2]
        assert [int(p) for p in first.split(":")[1].split()] == expected
        correct = sum(int(p == y) for p, y in zip(expected, labels))
        assert second.startswith(f"accuracy: {correct}/360")


@needs_cc
def test_a_serial_export_starts_no_threads_and_needs_no_pthreads(tmp_path: Path) -> None:
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                          input_shapes={"image": [4, 1, 8, 8]}, for_export=True)
    folder = tmp_path / "serial"
    result = export_c(mod, folder, prefix="digits", serial=True)
    assert (folder / "tessera_pool_serial.o").is_file()
    assert not (folder / "tessera_pool.o").exists()
    assert result.shared_library is not None and "pthread" not in result.libraries
    needed = undefined_symbols(result.shared_library.read_bytes(), weak=False, dynamic=True)
    assert not [n for n in needed if n.startswith("pthread")], needed
    exe = _runner(folder, "digits")
    x = np.random.default_rng(5).standard_normal((4, 1, 8, 8)).astype(np.float32)
    want = np.ascontiguousarray(next(iter(mod.run(image=x).values())))
    for threads in (1, 2):  # the count is ignored: one thread
        (got,) = _run_c(exe, folder, mod, {"image": x}, threads)
        assert got.tobytes() == want.tobytes()


@needs_cc
def test_an_artifact_compiled_for_export_exports_the_same_code(tmp_path: Path) -> None:
    """A module compiled for export keeps its IR in the artifact (hash-checked on load), and
    the library exported from the loaded artifact runs bit-identical."""
    digits = str(ROOT / "examples/digits/digits_cnn.onnx")
    mod = tessera.compile(digits, "llvm", input_shapes={"image": [3, 1, 8, 8]},
                          for_export=True)
    tar = tmp_path / "digits.tar"
    mod.export(str(tar))
    loaded = tessera.load(str(tar))
    folder = tmp_path / "from_tar"
    export_c(loaded, folder, prefix="digits")
    exe = _runner(folder, "digits")
    x = np.random.default_rng(6).standard_normal((3, 1, 8, 8)).astype(np.float32)
    (got,) = _run_c(exe, folder, loaded, {"image": x}, 2)
    assert got.tobytes() == np.ascontiguousarray(
        next(iter(mod.run(image=x).values()))).tobytes()
    direct = tmp_path / "direct"
    export_c(mod, direct, prefix="digits", shared=False)
    assert (direct / "region0_llvm.o").read_bytes() == (folder / "region0_llvm.o").read_bytes()


def test_a_changed_ir_in_the_artifact_is_refused(tmp_path: Path) -> None:
    mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                          input_shapes={"image": [1, 1, 8, 8]}, for_export=True)
    tar = tmp_path / "digits.tar"
    mod.export(str(tar))
    bad = tmp_path / "bad.tar"
    with tarfile.open(tar) as src, tarfile.open(bad, "w") as dst:
        names = [m.name for m in src.getmembers()]
        assert any(n.endswith("kernels.ll.z") for n in names), names
        for member in src.getmembers():
            data = src.extractfile(member).read() if member.isfile() else None
            if member.name.endswith("kernels.ll.z"):
                data = bytes([data[0] ^ 1]) + data[1:]
            if data is not None:
                member.size = len(data)
                dst.addfile(member, io.BytesIO(data))
            else:
                dst.addfile(member)
    with pytest.raises(tessera.errors.ArtifactError, match="kernels.ll.z|hash"):
        tessera.load(str(bad))


def _sized_runner(folder: Path, prefix: str) -> Path:
    exe = folder / "run_sized"
    subprocess.run([CC, "-O2", "-DSIZED", f"-DPREFIX={prefix}", f'-DHEADER="{prefix}.h"',
                    "-I", str(folder), str(RUNNER), "-L", str(folder), f"-l{prefix}",
                    f"-Wl,-rpath,{folder}", "-o", str(exe)], check=True)
    return exe


def _run_sized(exe: Path, folder: Path, mod: tessera.Module, feeds: dict[str, np.ndarray],
               threads: int) -> subprocess.CompletedProcess[str]:
    args = []
    for i, name in enumerate(mod.input_names):
        path = folder / f"in{i}.bin"
        np.ascontiguousarray(feeds[name]).tofile(path)
        args += ["x".join(str(d) for d in feeds[name].shape), str(path)]
    outs = [str(folder / f"out{i}.bin") for i in range(len(mod.output_names))]
    return subprocess.run([str(exe), str(threads), "1", *args, "--", *outs],
                          capture_output=True, text=True)


@needs_cc
@pytest.mark.parametrize("model", ["digits", "positions"])
def test_a_symbolic_model_runs_bit_identical_from_c_at_every_size(tmp_path: Path,
                                                                  model: str) -> None:
    """One library for every size: the C program gives the inputs' shapes, the library binds
    and checks the sizes (bounds, relations) and runs the symbolic kernels."""
    rng = np.random.default_rng(7)
    if model == "digits":
        mod = tessera.compile(str(ROOT / "examples/digits/digits_cnn.onnx"), "llvm",
                              for_export=True, dim_bounds={"N": (0, 8)})
        cases = [{"image": rng.standard_normal((n, 1, 8, 8)).astype(np.float32)}
                 for n in (1, 3, 8, 2)]
        too_big = {"image": rng.standard_normal((9, 1, 8, 8)).astype(np.float32)}
    else:
        mod = tessera.compile(positions_model(reshape=True), "llvm", for_export=True,
                              dim_bounds={"batch": (0, 4), "seq": (0, 64), "rows": (0, 8)})

        def case(b: int, n: int, rows: int) -> dict[str, np.ndarray]:
            return {"x": rng.standard_normal((b, n)).astype(np.float32),
                    "z": rng.standard_normal((rows, 3)).astype(np.float32)}
        cases = [case(1, 7, 2), case(2, 64, 4), case(1, 1, 0), case(3, 13, 8)]
        too_big = case(1, 5, 3)  # 9 elements cannot be 2 rows: the model's relation
    assert mod.shape_vars is not None
    folder = tmp_path / model
    export_c(mod, folder, prefix=model)
    assert f"{model.upper()}_NUM_SIZES" in (folder / f"{model}.h").read_text()
    exe = _sized_runner(folder, model)
    for k, feeds in enumerate(cases):
        proc = _run_sized(exe, folder, mod, feeds, 1 + k % 2)
        assert proc.returncode == 0, proc.stderr
        want = mod.run(feeds)
        for i, name in enumerate(mod.output_names):
            got = (folder / f"out{i}.bin").read_bytes()
            assert got == np.ascontiguousarray(want[name]).tobytes(), (name, k)
    proc = _run_sized(exe, folder, mod, too_big, 1)
    assert proc.returncode == 1 and "bind_sizes: the sizes are outside their bounds" in \
        proc.stderr, proc.stderr
