"""The checks of scripts/gpu_check.py's steps, each run inside its step's subprocess
(``gpu_check.py --worker NAME``): versions, smoke, race, nan, models, threads. They import
Tessera and its GPU plugins; the harness in gpu_check.py imports only the standard library."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import re
import subprocess
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]


# -- the workers: each step's checks, run inside the step's subprocess --------------------------
class Recorder:
    """A worker step's result file: figures as they come, then the status."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.figures: list[str] = []
        self.extra: dict[str, Any] = {}
        self.failures = 0
        self.status = "running"

    def figure(self, text: str) -> None:
        print(text, flush=True)
        self.figures.append(text)
        self.save()

    def fail(self, text: str) -> None:
        self.failures += 1
        self.figure(f"FAIL {text}")

    def set(self, key: str, value: Any) -> None:
        self.extra[key] = value
        self.save()

    def save(self) -> None:
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text(json.dumps({"status": self.status, "figures": self.figures,
                                   **self.extra}))
        tmp.replace(self.path)

    def finish(self) -> None:
        self.status = "FAIL" if self.failures else "pass"
        self.save()


def _try(label: str, fn: Callable[[], Any]) -> str:
    """``label value``, or ``label n/a (why)`` when reading it fails."""
    try:
        return f"{label} {fn()}"
    except Exception as err:  # noqa: BLE001 - a version we cannot read is a figure too
        return f"{label} n/a ({_why(err)})"


def _why(err: BaseException, limit: int = 150) -> str:
    """``Type: first line of the message`` (shortened)."""
    text = str(err).splitlines()[0][:limit] if str(err) else ""
    return f"{type(err).__name__}: {text}" if text else type(err).__name__


def _driver_version() -> str:
    """The kernel driver's version (580.xx): /proc first, nvidia-smi second."""
    proc = Path("/proc/driver/nvidia/version")
    if proc.exists():
        m = re.search(r"Kernel Module\s+(?:for \S+\s+)?(\d+\.\d+(?:\.\d+)?)", proc.read_text())
        if m:
            return m[1]
    out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                         capture_output=True, text=True, timeout=15, check=True)
    return out.stdout.strip().splitlines()[0]


def _cu_value(result: tuple[Any, ...], what: str) -> Any:
    """The value of a cuda-bindings call's ``(status, value)``; RuntimeError on failure."""
    if int(result[0]) != 0:
        raise RuntimeError(f"{what}: {result[0]}")
    return result[1]


def _cuda_api_version() -> str:
    from cuda.bindings import driver as cu

    v = _cu_value(cu.cuDriverGetVersion(), "cuDriverGetVersion")
    return f"{v // 1000}.{v % 1000 // 10}"


def _gpu_name() -> str:
    from cuda.bindings import driver as cu

    from tessera_cuda.driver import CUDADevice

    dev = CUDADevice.get(0)
    dev.context()
    handle = _cu_value(cu.cuDeviceGet(0), "cuDeviceGet")
    name = _cu_value(cu.cuDeviceGetName(256, handle), "cuDeviceGetName")
    name = name.split(b"\0", 1)[0].decode() if isinstance(name, bytes) else str(name)
    total = _cu_value(cu.cuDeviceTotalMem(handle), "cuDeviceTotalMem")
    return f"{name} ({dev.arch()}, {int(total) / 2**30:.1f} GiB)"


def _nvrtc_version() -> str:
    from cuda.bindings import nvrtc

    err, major, minor = nvrtc.nvrtcVersion()
    if int(err) != 0:
        raise RuntimeError(f"nvrtcVersion: {err}")
    return f"{major}.{minor}"


def _library_version(name: str) -> str:
    from tessera_cudnn import libs

    return libs.load(name).version_text


def _torch_version() -> str:
    """PyTorch's version and CUDA, read without importing it (seconds, and a second cuDNN)."""
    spec = importlib.util.find_spec("torch")
    if spec is None or not spec.submodule_search_locations:
        return "not installed"
    text = (Path(list(spec.submodule_search_locations)[0]) / "version.py").read_text()
    version = re.search(r"^__version__(?:: \S+)? = '([^']*)'", text, re.M)
    cuda = re.search(r"^cuda(?:: \S+)? = '([^']*)'", text, re.M)
    return (f"{version[1] if version else importlib.metadata.version('torch')} "
            f"(CUDA {cuda[1] if cuda else '?'})")


def _module_version(name: str) -> str:
    if importlib.util.find_spec(name) is None:
        return "not installed"
    return str(getattr(__import__(name), "__version__", "?"))


def step_versions(rec: Recorder, opts: argparse.Namespace) -> None:
    """What this machine has, each read on its own; the GPU's absence is a figure, no FAIL."""
    try:
        from tessera_cuda.driver import driver_missing
    except ImportError as err:
        rec.set("gpu_missing", f"the cuda plugin cannot be imported ({err})")
        rec.fail(f"tessera-cuda is not installed ({err}): bash scripts/gpu-check.sh --install")
        return
    missing = driver_missing()
    rec.set("gpu_missing", missing or "")
    if missing:
        rec.figure(f"no GPU: {missing.split(' (')[0]}")
    else:
        rec.figure(_try("GPU", _gpu_name))
    for label, fn in (("driver", _driver_version), ("CUDA driver API", _cuda_api_version),
                      ("NVRTC", _nvrtc_version),
                      ("cuDNN", lambda: _library_version("cudnn")),
                      ("cuBLASLt", lambda: _library_version("cublasLt")),
                      ("torch", _torch_version),
                      ("onnxruntime", lambda: _module_version("onnxruntime")),
                      ("tessera", lambda: _module_version("tessera")),
                      ("backends", _backends)):
        if missing and label in ("driver", "CUDA driver API"):
            continue
        rec.figure(_try(label, fn))


def _backends() -> str:
    from tessera.plugin import get_backends

    return ",".join(sorted(get_backends()))


# the models the workers compile ---------------------------------------------------------------
def _onnx_model(nodes: list[Any], inputs: dict[str, tuple[int, ...]], output: str,
                out_shape: tuple[int, ...], weights: dict[str, Any]) -> Any:
    import numpy as np
    import onnx
    from onnx import helper, numpy_helper

    f32 = onnx.TensorProto.FLOAT
    graph = helper.make_graph(
        nodes, "gpu_check", [helper.make_tensor_value_info(k, f32, list(s))
                             for k, s in inputs.items()],
        [helper.make_tensor_value_info(output, f32, list(out_shape))],
        [numpy_helper.from_array(np.asarray(v, np.float32), k) for k, v in weights.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def residual_block(seed: int = 0, c: int = 16, o: int = 32,
                   size: int = 16) -> tuple[Any, dict[str, Any]]:
    """``Relu(BatchNorm(Conv(x)) + skip)`` and random inputs for it."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(seed)
    weights = {"w": rng.standard_normal((o, c, 3, 3)) * 0.2, "b": rng.standard_normal(o),
               "scale": rng.uniform(0.5, 1.5, o), "shift": rng.standard_normal(o),
               "mean": rng.standard_normal(o) * 0.1, "var": rng.uniform(0.5, 2.0, o)}
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"],
                              ["n"]),
             helper.make_node("Add", ["n", "skip"], ["a"]),
             helper.make_node("Relu", ["a"], ["y"])]
    shape, out = (1, c, size, size), (1, o, size, size)
    model = _onnx_model(nodes, {"x": shape, "skip": out}, "y", out, weights)
    inputs = {"x": rng.standard_normal(shape).astype(np.float32),
              "skip": rng.standard_normal(out).astype(np.float32)}
    return model, inputs


def conv_relu_net(seed: int = 0, c: int = 16, size: int = 32) -> tuple[Any, dict[str, Any]]:
    """Two ``Relu(Conv(x) + b)`` layers (no residual) and a random input."""
    import numpy as np
    from onnx import helper

    rng = np.random.default_rng(seed)
    weights = {"w1": rng.standard_normal((2 * c, c, 3, 3)) * 0.15,
               "b1": rng.standard_normal(2 * c) * 0.1,
               "w2": rng.standard_normal((2 * c, 2 * c, 3, 3)) * 0.1,
               "b2": rng.standard_normal(2 * c) * 0.1}
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c2"], ["y"])]
    shape = (1, c, size, size)
    model = _onnx_model(nodes, {"x": shape}, "y", (1, 2 * c, size, size), weights)
    return model, {"x": rng.standard_normal(shape).astype(np.float32)}


def max_diff(got: Any, want: Any) -> float:
    import numpy as np

    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    return float(np.max(np.abs(a - b))) if a.size else 0.0


def matches(got: Any, want: Any, rtol: float, atol: float) -> bool:
    """Same shape, no NaN where the reference has none, within the tolerances."""
    import numpy as np

    got, want = np.asarray(got), np.asarray(want)
    return got.shape == want.shape and bool(np.allclose(got, want, rtol=rtol, atol=atol))


def reference_outputs(model: Any, inputs: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """The model's outputs from onnxruntime (CPU) where installed, else Tessera's ``ref``."""
    names = [o.name for o in model.graph.output]
    if importlib.util.find_spec("onnxruntime") is not None:
        import onnxruntime as ort

        session = ort.InferenceSession(model.SerializeToString(),
                                       providers=["CPUExecutionProvider"])
        return dict(zip(names, session.run(None, inputs))), "onnxruntime"
    import tessera

    return tessera.compile(model, target="ref").run(**inputs), "ref"


def _graph_summary(mod: Any) -> str:
    """Whether each cuda region ran as a CUDA graph (``info["cuda_graph"]``)."""
    regions = {name: cr.info.get("cuda_graph", "unknown") for name, cr in mod.compiled.items()
               if cr.backend == "cuda"}
    if not regions:
        return "cuda graph: no cuda region"
    yes = [n for n, v in regions.items() if v is True]
    if len(yes) == len(regions):
        return f"cuda graph: yes ({len(yes)}/{len(regions)} regions)"
    if all(v == "unknown" for v in regions.values()):
        return "cuda graph: unknown (no info['cuda_graph'])"
    why = "; ".join(f"{n}: {v}" for n, v in regions.items() if v is not True)
    return f"cuda graph: {len(yes)}/{len(regions)} regions ({why})"


def _cross_compile(rec: Recorder, why: str) -> None:
    import tessera

    rec.figure(f"no GPU: {why.split(' (')[0]}; cross-compiled for sm_90 instead")
    for label, (model, _) in (("residual block", residual_block()),
                              ("conv-relu net", conv_relu_net())):
        for target in ("cuda -arch=sm_90", "cuda -arch=sm_90 -libs=cudnn,cublas"):
            start = time.perf_counter()
            mod = tessera.compile(model, target=target)
            counts = dict(mod.partition_report().backend_counts())
            cubin = sum(int(c.info.get("cubin_bytes", 0)) for c in mod.compiled.values())
            rec.figure(f"{label} '{target}': {counts}, cubin {cubin} B "
                       f"({time.perf_counter() - start:.1f} s)")


def step_smoke(rec: Recorder, opts: argparse.Namespace) -> None:
    """A residual block on ``cuda`` against ``ref``, three runs; cross-compiled without GPU."""
    import numpy as np

    import tessera
    from tessera_cuda.driver import driver_missing

    missing = driver_missing()
    if missing:
        _cross_compile(rec, missing)
        return
    model, inputs = residual_block()
    want = tessera.compile(model, target="ref").run(**inputs)["y"]
    start = time.perf_counter()
    mod = tessera.compile(model, target="cuda")
    rec.figure(f"compiled in {time.perf_counter() - start:.1f} s")
    runs = [mod.run(**inputs)["y"] for _ in range(3)]
    diff = max_diff(runs[0], want)
    (rec.figure if matches(runs[0], want, 1e-4, 1e-4) else rec.fail)(
        f"max |cuda - ref| {diff:.1e}")
    if not all(np.array_equal(r, runs[0]) for r in runs[1:]):
        rec.fail("three runs differ")
    rec.figure(_graph_summary(mod))


def step_race(rec: Recorder, opts: argparse.Namespace) -> None:
    """Upload, copy on the stream at once, read back: stale elements mean an upload race."""
    import numpy as np

    from tessera.ir.types import TensorType
    from tessera_cuda.driver import CUDADevice

    dev = CUDADevice.get(0)
    n = (256 << 20) // 4
    rounds = 5 if opts.quick else 20
    rng = np.random.default_rng(0)
    a = np.empty(n, np.float32)
    out = np.empty(n, np.float32)
    ttype = TensorType.of(a)
    arena = dev.allocate(a.nbytes)
    stale = 0
    start = time.perf_counter()
    try:
        dst = dev.view(arena, 0, ttype)
        for _ in range(rounds):
            rng.random(out=a, dtype=np.float32)
            src = dev.from_host(a)
            dev.copy(dst, src, ttype)
            dev.copy_to_host(dst, out)
            dev.synchronize()
            stale += int(np.count_nonzero(out != a))
            del src
    finally:
        dev.free(arena)
    text = (f"{stale} stale of {n} x {rounds} elements (256 MiB per round, "
            f"{time.perf_counter() - start:.1f} s)")
    (rec.fail if stale else rec.figure)(text)


def _nan_run(mod: Any, inputs: dict[str, Any]) -> Any:
    """One step-by-step run after filling the thread's device arena with NaN."""
    from cuda.bindings import driver as cu

    from tessera_cuda.driver import CUDADevice

    for name, value in inputs.items():
        mod.set_input(name, value)
    ex = mod.executor
    dev = CUDADevice.get(0)
    dev.context()
    arenas = {k: a for k, a in ex.arenas.items() if k.startswith("cuda")}
    if not arenas:
        raise RuntimeError(f"no cuda arena in the execution state ({sorted(ex.arenas)})")
    for arena in arenas.values():
        (err,) = cu.cuMemsetD32(arena.ptr, 0x7FC00000, arena.nbytes // 4)
        if int(err) != 0:
            raise RuntimeError(f"cuMemsetD32: {err}")
    (err,) = cu.cuCtxSynchronize()  # the memset is on the legacy stream
    if int(err) != 0:
        raise RuntimeError(f"cuCtxSynchronize: {err}")
    for name, value in inputs.items():  # the memset wiped them
        mod.set_input(name, value)
    mod.run()
    return mod.get_output(0)


def step_nan(rec: Recorder, opts: argparse.Namespace) -> None:
    """A conv+relu net run on an arena full of NaN: the output must have none."""
    import numpy as np

    import tessera

    model, inputs = conv_relu_net()
    want = tessera.compile(model, target="ref").run(**inputs)["y"]
    for target, tol in (("cuda -libs=cudnn,cublas", 1e-3), ("cuda", 1e-4)):
        mod = tessera.compile(model, target=target)
        counts = dict(mod.partition_report().backend_counts())
        for i in range(2):
            got = _nan_run(mod, inputs)
            nans = int(np.isnan(got).sum())
            diff = max_diff(got, want)
            text = f"{target} {counts} run {i + 1}: {nans} NaN, max |diff| {diff:.1e}"
            if nans or not matches(got, want, tol, tol):
                rec.fail(text)
                break
        else:
            rec.figure(text)


_LIBS_TARGET = "cuda -libs=cudnn,cublas"


def _check_model(rec: Recorder, label: str, model: Any, inputs: dict[str, Any], target: str,
                 shapes: dict[str, list[int]] | None = None) -> None:
    import tessera

    want, oracle = reference_outputs(model, inputs)
    start = time.perf_counter()
    mod = tessera.compile(model, target=target, input_shapes=shapes)
    compile_s = time.perf_counter() - start
    got = mod.run(**inputs)
    tol = (1e-3, 1e-3) if "-libs" in target else (1e-3, 1e-4)
    diffs = [max_diff(got[k], want[k]) for k in want]
    ok = all(matches(got[k], want[k], *tol) for k in want)
    text = f"{label} {max(diffs):.1e} vs {oracle} (compile {compile_s:.1f} s)"
    (rec.figure if ok else rec.fail)(text)


def _models(rec: Recorder, opts: argparse.Namespace, target: str) -> None:
    from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder
    from tessera.testing.light_models import load_light_model

    names = [n.strip() for n in opts.light_models.split(",") if n.strip()]
    if opts.quick:
        names = names[:1]
    for name in names:
        try:
            light = load_light_model(name)
            _check_model(rec, name, light.model, light.inputs, target, light.input_shapes)
        except Exception as err:  # noqa: BLE001 - one model's failure, the next still runs
            traceback.print_exc()
            rec.fail(f"{name}: {_why(err)}")
    config = BertConfig(layers=1 if opts.quick else 2)
    try:
        _check_model(rec, f"bert {config.layers}x{config.hidden}",
                     make_bert_encoder(config, seed=1), bert_inputs(config, seed=2), target)
    except Exception as err:  # noqa: BLE001
        traceback.print_exc()
        rec.fail(f"bert: {_why(err)}")


def step_models_cuda(rec: Recorder, opts: argparse.Namespace) -> None:
    _models(rec, opts, "cuda")


def step_models_libs(rec: Recorder, opts: argparse.Namespace) -> None:
    _models(rec, opts, _LIBS_TARGET)


def _timed_runs(mod: Any, inputs: dict[str, Any], want: Any, n: int, errors: list[str]) -> None:
    import numpy as np

    for _ in range(n):
        got = mod.run(**inputs)
        if not all(np.array_equal(got[k], want[k]) for k in want):
            errors.append("differs")


def step_threads(rec: Recorder, opts: argparse.Namespace) -> None:
    """Two threads on one module: equal answers; overlap = one thread's 2N runs over two
    threads' N runs each at once (2: full overlap, 1: taking turns)."""
    import threading

    import numpy as np

    import tessera
    from tessera.testing.light_models import load_light_model

    light = load_light_model("squeezenet")
    mod = tessera.compile(light.model, target="cuda", input_shapes=light.input_shapes)
    rng = np.random.default_rng(5)
    feeds = [light.inputs, {k: rng.standard_normal(v.shape).astype(v.dtype)
                            for k, v in light.inputs.items()}]
    wants = [mod.run(**f) for f in feeds]
    for _ in range(3):
        mod.run(**feeds[0])
    start = time.perf_counter()
    mod.run(**feeds[0])
    one = time.perf_counter() - start
    n = max(5, min(200, int(0.5 / max(one, 1e-4))))
    errors: list[str] = []
    start = time.perf_counter()
    _timed_runs(mod, feeds[0], wants[0], 2 * n, errors)
    serial = time.perf_counter() - start
    threads = [threading.Thread(target=_timed_runs, args=(mod, feeds[i], wants[i], n, errors))
               for i in range(2)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    both = time.perf_counter() - start
    (rec.fail if errors else rec.figure)(
        f"squeezenet 2 threads x {n} runs: {len(errors)} wrong of {4 * n}")
    rec.figure(f"overlap {serial / both:.2f}x (1 thread {1000 * serial / (2 * n):.2f} ms/run, "
               f"2 threads {1000 * both / (2 * n):.2f} ms/run)")


WORKERS: dict[str, Callable[[Recorder, argparse.Namespace], None]] = {
    "versions": step_versions, "smoke": step_smoke, "race": step_race, "nan": step_nan,
    "models-cuda": step_models_cuda, "models-libs": step_models_libs,
    "threads": step_threads,
}


