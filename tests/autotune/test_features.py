"""Loop-nest features for the tuners' cost models (``tessera.autotune.features``) and the
backends' ``tuning_features`` hook: exact values on hand-built TIR, real llvm (and cuda)
convolutions lowered with different configs, and configs that do not lower."""

from __future__ import annotations

import math
from typing import Any

import pytest
from optional import require

import tessera
from tessera.autotune import tasks_of_module
from tessera.autotune.features import FEATURE_NAMES, K_LOOPS, N_BUFFERS, loop_features
from tessera.plugin.target import Target
from tessera.tir import (
    Allocate,
    Broadcast,
    Buffer,
    BufferStore,
    FloatImm,
    For,
    ForKind,
    PrimFunc,
    Ramp,
    Var,
)


def _log(x: float) -> float:
    return math.log2(1 + x)


def _named(func: PrimFunc) -> dict[str, float]:
    values = loop_features(func)
    assert len(values) == len(FEATURE_NAMES)
    return dict(zip(FEATURE_NAMES, values))


def _matvec() -> PrimFunc:
    """``for i in range(64) parallel: for j in range(32): C[i] = C[i] + A[i, j] * B[j]``."""
    a = Buffer("A", [64, 32], "float32")
    b = Buffer("B", [32], "float32")
    c = Buffer("C", [64], "float32")
    i, j = Var("i"), Var("j")
    store = BufferStore(c, c[i] + a[i, j] * b[j], [i])
    body = For(i, 0, 64, ForKind.PARALLEL, For(j, 0, 32, ForKind.SERIAL, store))
    return PrimFunc("matvec", [a, b, c], body)


def test_hand_built_matvec_exact_features() -> None:
    f = _named(_matvec())
    # the innermost loop j, then i
    assert f["loop0_extent"] == _log(32) and f["loop0_serial"] == 1.0
    assert f["loop0_parallel"] == 0.0 and f["loop0_depth"] == _log(2)
    assert f["loop1_extent"] == _log(64) and f["loop1_parallel"] == 1.0
    assert f["loop1_depth"] == _log(1)
    assert all(f[f"loop{k}_{n}"] == 0.0 for k in range(2, K_LOOPS)
               for n in ("extent", "serial", "parallel", "depth"))
    assert (f["par_extent"], f["par_depth"], f["par_total"], f["par_loops"]) == \
        (_log(64), _log(1), _log(64), _log(1))
    # buffers: the stored C, then the loads by bytes and name: A, B
    # C[i]: invariant in j (reused), one element per i; one distinct access
    assert (f["buf0_step0"], f["buf0_step1"]) == (0.0, _log(4))
    assert (f["buf0_touch0"], f["buf0_touch1"]) == (_log(4), _log(4))
    assert (f["buf0_accesses"], f["buf0_width"], f["buf0_contiguous"], f["buf0_invariant"],
            f["buf0_stored"]) == (_log(1), _log(4), 0.0, 1.0, 1.0)
    # A[i, j]: one element per j, a row (32 x 4 bytes) per i
    assert (f["buf1_step0"], f["buf1_step1"]) == (_log(4), _log(128))
    assert (f["buf1_touch0"], f["buf1_touch1"]) == (_log(4), _log(128))
    assert (f["buf1_contiguous"], f["buf1_invariant"], f["buf1_stored"]) == (1.0, 0.0, 0.0)
    # B[j]: does not move with i, but one iteration of i touches all of it
    assert (f["buf2_step0"], f["buf2_step1"]) == (_log(4), 0.0)
    assert (f["buf2_touch0"], f["buf2_touch1"]) == (_log(4), _log(128))
    assert f["buf2_contiguous"] == 1.0
    # one multiply-add, three loads and one store per iteration
    assert (f["fma"], f["fadd"], f["fmul"], f["loads"], f["stores"]) == \
        (_log(1), 0.0, 0.0, _log(3), _log(1))
    assert (f["load_bytes"], f["store_bytes"], f["lanes"], f["branches"]) == \
        (_log(12), _log(4), _log(1), 0.0)
    assert f["trip"] == _log(64 * 32) and f["flops"] == _log(2 * 64 * 32)
    assert f["bytes"] == _log(16 * 64 * 32) and f["intensity"] == _log(2 / 16)
    assert (f["nests"], f["loops"], f["max_depth"], f["allocs"]) == \
        (_log(1), _log(2), _log(2), 0.0)


def test_hand_built_vector_loop_with_a_workspace() -> None:
    """``for i in range(16) parallel: T[ramp(i*8, 1, 8)] = X[ramp(i*8, 1, 8)] * 2;
    for i in range(16): Y[ramp(i, 16, 8)] = T[ramp(i*8, 1, 8)]`` (a strided store)."""
    x, y = Buffer("X", [128], "float32"), Buffer("Y", [128], "float32")
    t = Buffer("T", [128], "float32", scope="global")
    i, k = Var("i"), Var("k")
    first = For(i, 0, 16, ForKind.PARALLEL, BufferStore(
        t, x[Ramp(i * 8, 1, 8)] * Broadcast(FloatImm(2.0), 8), [Ramp(i * 8, 1, 8)]))
    second = For(k, 0, 16, ForKind.SERIAL, BufferStore(y, t[Ramp(k * 8, 1, 8)],
                                                       [Ramp(k, 16, 8)]))
    from tessera.tir import seq

    f = _named(PrimFunc("scale", [x, y], Allocate(t, seq(first, second))))
    # the first nest does the float work: it is the main body
    assert f["loop0_extent"] == _log(16) and f["loop0_parallel"] == 1.0
    assert f["fmul"] == _log(8) and f["lanes"] == _log(8) and f["fma"] == 0.0
    assert f["buf0_stored"] == 1.0 and f["buf0_contiguous"] == 1.0
    assert f["buf0_step0"] == _log(32) and f["buf0_width"] == _log(32)
    assert f["global_alloc"] == _log(512) and f["allocs"] == _log(1)
    assert f["local_alloc"] == 0.0 and f["nests"] == _log(2) and f["loops"] == _log(2)
    # the whole function: 128 multiplies; 2 x 512 bytes moved in each nest
    assert f["flops"] == _log(128) and f["bytes"] == _log(4 * 512)
    # the strided store of the second nest, seen when it is the only one
    g = _named(PrimFunc("copy", [x, y], Allocate(t, second)))
    assert g["buf0_stored"] == 1.0 and g["buf0_contiguous"] == 0.0
    assert g["buf0_step0"] == _log(4) and g["buf1_contiguous"] == 1.0


def test_an_empty_function_has_features_of_the_same_length() -> None:
    from tessera.tir import Evaluate, IntImm

    values = loop_features(PrimFunc("nothing", [], Evaluate(IntImm(0))))
    assert len(values) == len(FEATURE_NAMES) == len(set(FEATURE_NAMES))
    # no loops, buffers or work: only the body's one execution and its scalar width
    named = dict(zip(FEATURE_NAMES, values))
    assert named.pop("trip") == named.pop("lanes") == _log(1)
    assert all(v == 0.0 for v in named.values())
    assert len(FEATURE_NAMES) > 4 * K_LOOPS + N_BUFFERS


def _llvm_conv_task() -> tuple[Any, Any, Any, Any]:
    from autotune.test_tasks import _two_identical_convs_and_a_matmul

    mod = tessera.compile(_two_identical_convs_and_a_matmul(), target="llvm",
                          keep_graph_weights=True)
    task = next(t for t in tasks_of_module(mod) if t.template == "conv2d_NCHWc")
    cr = next(cr for cr in mod.compiled.values()
              if task.kernels[0] in {k.name for k in cr.kernels})
    return mod, task, cr, mod.backends[cr.backend]


@pytest.mark.slow
def test_llvm_conv_features_follow_the_config() -> None:
    pytest.importorskip("tessera_llvm")
    mod, task, cr, backend = _llvm_conv_task()
    kind = Target.parse(task.target).kinds[0]
    wide = {**task.default, "reg_n": 8}
    narrow = {**task.default, "reg_n": 2, "unroll_kw": True}
    got = backend.tuning_features(cr.region, task.kernels[0], [wide, narrow, wide], task.key,
                                  kind, mod.compile_options)
    assert got is not None and len(got) == 3
    assert all(v is not None and len(v) == len(FEATURE_NAMES) for v in got)
    assert got[0] != got[1]          # different tiles, different loop nests
    assert got[0] == got[2]          # the same config, the same vector
    again = backend.tuning_features(cr.region, task.kernels[0], [narrow], task.key, kind,
                                    mod.compile_options)
    assert again == [got[1]]
    named = [dict(zip(FEATURE_NAMES, v)) for v in got[:2]]  # type: ignore[arg-type]
    # eight output columns per register block against two: an unrolled loop of 8 against
    # one of 2 around the vectorized output channels, and more accumulators
    def unrolled(f: dict[str, float]) -> list[float]:
        return [f[f"loop{k}_extent"] for k in range(K_LOOPS) if f[f"loop{k}_unrolled"]]

    assert named[0]["loop0_vectorized"] == named[1]["loop0_vectorized"] == 1.0
    assert math.log2(9) in unrolled(named[0]) and math.log2(3) in unrolled(named[1])
    assert named[0]["local_alloc"] > named[1]["local_alloc"]


def test_llvm_features_of_an_unknown_kernel_raise_and_a_template_has_them() -> None:
    pytest.importorskip("tessera_llvm")
    from tessera.errors import CompileError

    mod, task, cr, backend = _llvm_conv_task()
    kind = Target.parse(task.target).kinds[0]
    with pytest.raises(CompileError, match="no kernel"):
        backend.tuning_features(cr.region, "nope", [task.default], task.key, kind,
                                mod.compile_options)
    if "winograd" in task.knobs.get("template", []):
        wino = backend.tuning_features(cr.region, task.kernels[0],
                                       [{**task.default, "template": "winograd"}], task.key,
                                       kind, mod.compile_options)
        assert wino is not None and wino[0] is not None


def test_the_default_backend_has_no_features() -> None:
    from tessera.backends.reference.backend import ReferenceBackend

    assert ReferenceBackend().tuning_features(None, "k", [{}], "key", None, None) is None


def test_cuda_features_without_a_gpu_and_a_config_that_does_not_lower() -> None:
    pytest.importorskip("tessera_cuda")
    from tessera_cuda.nvrtc import nvrtc_missing

    if nvrtc_missing():
        pytest.skip(nvrtc_missing())  # compiling the module needs NVRTC; features do not
    from autotune.test_tasks import _two_identical_convs_and_a_matmul

    mod = tessera.compile(_two_identical_convs_and_a_matmul(), target="cuda -arch=sm_90",
                          keep_graph_weights=True)
    task = next(t for t in tasks_of_module(mod) if t.template == "cuda_conv2d_direct")
    cr = next(cr for cr in mod.compiled.values()
              if task.kernels[0] in {k.name for k in cr.kernels})
    # a thread block whose shared-memory copy cannot be bound to its threads: no TIR
    bad = {"toc": 8, "ty": 8, "bw": 1, "bh": 4, "bk": 16}
    assert all(bad[k] in task.knobs[k] for k in bad)
    other = {**task.default, "bk": next(v for v in task.knobs["bk"] if v != task.default["bk"])}
    got = mod.backends["cuda"].tuning_features(cr.region, task.kernels[0],
                                               [task.default, bad, other], task.key,
                                               Target.parse(task.target).kinds[0],
                                               mod.compile_options)
    assert got is not None and got[1] is None
    assert got[0] is not None and got[2] is not None and len(got[0]) == len(FEATURE_NAMES)
    assert got[0] != got[2]
    named = dict(zip(FEATURE_NAMES, got[0]))
    # thread-bound loops around the body, a tile in shared memory
    assert named["par_extent"] > 0 and named["par_loops"] > 0 and named["shared_alloc"] > 0


# ---- the xgb tuner with loop features --------------------------------------------------------

#: A space whose cost depends on a quantity the knob values hide: the remainder of the tile
#: product (as a loop nest's leftover iterations would), seen only in the "loop features".
TILES = {"a": list(range(1, 33)), "b": list(range(1, 33)), "c": [0, 1, 2, 3]}


def _leftover(config: dict[str, Any]) -> int:
    return (config["a"] * config["b"]) % 31


def _toy_cost(config: dict[str, Any]) -> float:
    return 1.0 + abs(_leftover(config) - 15) + 0.01 * config["c"]


def _toy_featurize(configs: list[dict[str, Any]]) -> list[list[float]]:
    return [[float(_leftover(c))] for c in configs]


def _trials_to_optimum(seed: int, featurize: Any, limit: int = 120) -> int:
    from tessera.autotune.tuners import make_tuner

    tuner = make_tuner("xgb", TILES, seed, featurize=featurize)
    best = 1.0
    for n in range(1, limit + 1):
        config = tuner.next()
        assert config is not None
        cost = _toy_cost(config)
        tuner.update(config, cost)
        if cost <= best:
            return n
    return limit + 1


@pytest.mark.slow
def test_loop_features_find_the_optimum_in_fewer_trials() -> None:
    require("xgboost")
    seeds = range(6)
    knobs_only = [_trials_to_optimum(s, None) for s in seeds]
    with_loops = [_trials_to_optimum(s, _toy_featurize) for s in seeds]
    assert sum(with_loops) < 0.7 * sum(knobs_only), (with_loops, knobs_only)


def test_a_featurize_that_raises_leaves_the_knob_model() -> None:
    require("xgboost")
    from tessera.autotune.tuners import XGBTuner, config_key

    calls = []

    def broken(configs: list[dict[str, Any]]) -> list[list[float]]:
        calls.append(len(configs))
        raise RuntimeError("lowering exploded")

    tuner = XGBTuner(TILES, 0, featurize=broken, epsilon=0.0)
    seen = set()
    with pytest.warns(UserWarning, match="knob features alone.*lowering exploded"):
        for _ in range(14):
            config = tuner.next()
            assert config is not None and config_key(config) not in seen
            seen.add(config_key(config))
            tuner.update(config, _toy_cost(config))
    assert tuner.ranker is not None and "lowering exploded" in (tuner.ranker.disabled or "")
    assert len(calls) == 1  # off for the rest of the run


@pytest.mark.slow
def test_configs_without_features_are_ranked_by_their_knobs() -> None:
    """A featurize that has no vector for some configs (they do not lower) and a wrong-length
    one for others: those get missing loop features; the search goes on with the rest."""
    require("xgboost")
    from tessera.autotune.tuners import XGBTuner

    def partial(configs: list[dict[str, Any]]) -> list[list[float] | None]:
        out: list[list[float] | None] = []
        for c in configs:
            if c["c"] == 3:
                out.append(None)
            elif c["c"] == 2:
                out.append([1.0, 2.0])
            else:
                out.append([float(_leftover(c))])
        return out

    tuner = XGBTuner(TILES, 1, featurize=partial, epsilon=0.0)
    for _ in range(16):
        config = tuner.next()
        assert config is not None
        tuner.update(config, _toy_cost(config))
    ranker = tuner.ranker
    assert ranker is not None and ranker.disabled is None and ranker.width == 1
    assert ranker.featurized > 0
    cached = {k: v for k, v in ranker.cache.items()}
    assert any(v is None for v in cached.values()) and any(v is not None for v in cached.values())


@pytest.mark.slow
def test_tune_builds_the_featurizer_from_the_backend_hook() -> None:
    """The callback ``tune`` builds for a task lowers its configs through the llvm backend's
    ``tuning_features``; an xgb search with it on synthetic costs featurises a few dozen
    configs, not its whole pool."""
    pytest.importorskip("tessera_llvm")
    require("xgboost")
    from autotune.test_tasks import _two_identical_convs_and_a_matmul

    from tessera.autotune.tune import _featurizer
    from tessera.autotune.tuners import make_tuner

    mod = tessera.compile(_two_identical_convs_and_a_matmul(), target="llvm",
                          keep_graph_weights=True)
    task = next(t for t in tasks_of_module(mod) if t.template == "conv2d_NCHWc")
    featurize = _featurizer(mod, task)
    assert featurize is not None
    vectors = featurize([task.default])
    assert vectors is not None and len(vectors) == 1 and len(vectors[0]) == len(FEATURE_NAMES)
    tuner = make_tuner("xgb", task.knobs, 0, when=task.when, default=task.default,
                       featurize=featurize, rerank=8)
    ranker = tuner.ranker  # type: ignore[attr-defined]
    for n in range(12):
        config = tuner.next()
        if config is None:
            break
        # a made-up landscape: larger register tiles are faster
        tuner.update(config, 1.0 / (1 + n % 3) + 1.0 / config.get("reg_n", 1))
    assert ranker.disabled is None and 0 < ranker.featurized <= 8 * 12 + 12


def test_loops_of_extent_one_are_no_loops() -> None:
    func = _matvec()
    wrapped = func.with_body(For(Var("z"), 0, 1, ForKind.SERIAL, func.body))
    assert loop_features(wrapped) == loop_features(func)
