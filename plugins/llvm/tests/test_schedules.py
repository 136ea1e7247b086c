"""The CPU schedule templates' config spaces (tessera_llvm.schedules) and the knobs applied
through ``overrides``: every candidate of the main knobs must still compute the right numbers
once compiled to native code."""

from __future__ import annotations

import json
from functools import partial
from typing import Any

import numpy as np
import pytest
from backend_cases.support import conv_block_model, run_onnxruntime
from tiers import slow_except

import tessera
from tessera import te
from tessera.ir.graph import Function
from tessera.ir.types import TensorType
from tessera.ops.layout import pack_conv_weight, pack_nchwc
from tessera.ops.registry import get_schema
from tessera.tir.transform import lower_pipeline
from tessera.topi.from_graph import GroupTE, build_te
from tessera_llvm.build import build_module
from tessera_llvm.schedules import schedule_group
from tessera_llvm.schedules.common import CPUInfo, compute_ops, injective_space, reduce_space
from tessera_llvm.schedules.config import ConfigSpace, Knob, ScheduleConfig
from tessera_llvm.schedules.conv2d import conv_space, find_conv, tile_plan
from tessera_llvm.schedules.dense import dense_space, find_dense

CPU = CPUInfo(vector_lanes=16, num_threads=2)
RNG = np.random.default_rng(31)


def rand(*shape: int) -> np.ndarray:
    return RNG.uniform(-1, 1, shape).astype(np.float32)


# -- groups built from graph nodes ----------------------------------------------------------------

class Group:
    """A group of graph nodes with its TE, its random inputs and its reference outputs."""

    def __init__(self, fn: Function, feeds: dict[str, np.ndarray]) -> None:
        self.fn = fn
        self.feeds = feeds
        self.te: GroupTE = build_te(fn.nodes, list(fn.inputs), list(fn.outputs))
        env: dict[str, np.ndarray] = dict(feeds)
        for node in fn.nodes:
            args = [None if v is None else (v.data if v.is_constant else env[v.name])
                    for v in node.inputs]
            for v, r in zip(node.outputs, get_schema(node.op).evaluate(args, node.attrs)):
                env[v.name] = r
        self.want = [env[v.name] for v in fn.outputs]

    def anchor(self) -> te.ComputeOp:
        ops = compute_ops(list(self.te.outputs))
        op = find_conv(ops) or find_dense(ops)
        assert op is not None
        return op

    def run(self, overrides: dict[str, dict[str, Any]] | None, name: str,
            cpu: CPUInfo | None = None) -> tuple[list[np.ndarray], ScheduleConfig | None]:
        """Schedule with ``overrides`` for ``cpu`` (its knobs' candidates; default the host),
        lower, compile for the host, call; the outputs and the config."""
        sched = schedule_group(list(self.te.outputs), cpu or CPU, overrides)
        prim = te.lower(sched.schedule, list(self.te.placeholders) + list(self.te.outputs),
                        name)
        prim = lower_pipeline(prim)
        lib = build_module([prim], name).load()
        args = [np.ascontiguousarray(v.data) if v.is_constant else self.feeds[v.name]
                for v in self.te.inputs]
        outs = [np.empty(t.const_shape(), t.dtype) for t in self.te.outputs]
        lib.get(name)(args + outs)
        return outs, (sched.configs[0] if sched.configs else None)

    def check(self, overrides: dict[str, dict[str, Any]] | None, name: str,
              what: str, cpu: CPUInfo | None = None) -> ScheduleConfig | None:
        outs, cfg = self.run(overrides, name, cpu)
        for got, want in zip(outs, self.want):
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=what)
        return cfg


def conv_nchwc_group(c: int = 16, o: int = 32, size: tuple[int, int] = (9, 14),
                     block: int = 8, depthwise: bool = False, stride: int = 1,
                     kernel: int = 3, flat: bool = False) -> Group:
    """ConvNCHWc (3x3 with pad 1, or 1x1 without) + bias + Relu on blocked data: the
    conv2d_NCHWc template with a fused epilogue; ``flat``: its compute over flattened pixels
    (``flat_spatial``)."""
    h, w = size
    fn = Function("conv")
    x = pack_nchwc(rand(1, c, h, w), block)
    data = fn.add_input("x", TensorType.of(x))
    pad = kernel // 2
    if depthwise:
        weight = pack_conv_weight(rand(c, 1, kernel, kernel), 1, block)
        attrs = {"pads": [pad] * 4, "group": c, "strides": [stride, stride]}
        o = c
    else:
        weight = pack_conv_weight(rand(o, c, kernel, kernel), block, block)
        attrs = {"pads": [pad] * 4, "strides": [stride, stride]}
    if flat:
        attrs["flat_spatial"] = 1
    conv = fn.op("ConvNCHWc", data, fn.constant(weight, "w"),
                 fn.constant(rand(o // block, block), "b"), **attrs)
    fn.outputs = [fn.op("Relu", conv)]
    return Group(fn, {"x": x})


def dense_group(m: int = 12, k: int = 40, n: int = 48, batch: int | None = None) -> Group:
    """MatMul (constant B) + Add(bias) + Gelu: the dense template with a fused epilogue."""
    fn = Function("dense")
    a = rand(*((batch,) if batch else ()), m, k)
    x = fn.add_input("a", TensorType.of(a))
    mm = fn.op("MatMul", x, fn.constant(rand(k, n), "b"))
    fn.outputs = [fn.op("Gelu", fn.op("Add", mm, fn.constant(rand(n), "bias")))]
    return Group(fn, {"a": a})


def injective_group(shape: tuple[int, ...] = (6, 48)) -> Group:
    fn = Function("inj")
    a, b = rand(*shape), rand(shape[-1])
    x = fn.add_input("a", TensorType.of(a))
    y = fn.add_input("b", TensorType.of(b))
    fn.outputs = [fn.op("Sigmoid", fn.op("Mul", x, y))]
    return Group(fn, {"a": a, "b": b})


def key_of(space: ConfigSpace) -> str:
    return space.default_config().key()


# -- the spaces -----------------------------------------------------------------------------------

def test_knob_default_is_always_a_candidate() -> None:
    knob = Knob("k", [2, 4], 3)
    assert knob.candidates == [3, 2, 4] and knob.default == 3
    space = ConfigSpace("t", (1, 2))
    assert space.define("a", [1, 2, 3], 2) == 2
    space.define("b", [True, False], False)
    assert space.size() == 6
    cfg = space.default_config()
    assert cfg.values == {"a": 2, "b": False} and cfg["a"] == 2 and cfg.get("c", 7) == 7
    assert json.loads(cfg.key()) == ["t", [1, 2]]
    assert cfg.to_json() == {"template": "t", "workload": [1, 2], "config": cfg.values}


@pytest.mark.parametrize("make", [
    partial(conv_nchwc_group), partial(conv_nchwc_group, size=(7, 13)),
    partial(conv_nchwc_group, c=8, o=24, size=(5, 7), block=8, stride=2),
    partial(conv_nchwc_group, c=32, block=16, size=(6, 28)),
    partial(conv_nchwc_group, c=24, block=8, depthwise=True),
], ids=["3x3", "prime_width", "stride2", "block16", "depthwise"])
def test_conv_space_defaults_are_candidates(make: Any) -> None:
    group = make()
    space = conv_space(group.anchor(), CPU)
    assert space.template == "conv2d_NCHWc"
    assert "reg_n" in space.knobs
    for knob in space.knobs.values():
        assert knob.default in knob.candidates, knob
        assert len(set(map(repr, knob.candidates))) == len(knob.candidates), knob
    ow = group.anchor().output(0).shape[3].value
    reg_n = space.knobs["reg_n"]
    assert 1 <= reg_n.default <= max(ow, 16)
    assert all(c == reg_n.default or ow % c == 0 for c in reg_n.candidates)
    if ow == 13:  # an awkward width: two even tiles (7 + 6), not 8 + 5
        assert reg_n.default == 7
    # the schedule without overrides uses exactly the defaults
    sched = schedule_group(list(group.te.outputs), CPU)
    assert sched.configs[0].values == space.default_config().values
    assert sched.template == "conv2d_NCHWc"


@pytest.mark.parametrize("m,k,n,batch", [(12, 40, 48, None), (1, 512, 1000, None),
                                         (7, 33, 5, None), (16, 64, 64, 3)])
def test_dense_space_defaults_are_candidates(m: int, k: int, n: int, batch: int | None) -> None:
    group = dense_group(m, k, n, batch)
    space = dense_space(group.anchor(), CPU)
    assert {"mr", "nr", "vector_width"} <= set(space.knobs)
    for knob in space.knobs.values():
        assert knob.default in knob.candidates, knob
    assert m % space.knobs["mr"].default == 0 and n % space.knobs["nr"].default == 0
    vec = space.knobs["vector_width"].default
    assert vec in (1, 4, 8, 16) and (vec == 1 or space.knobs["nr"].default % vec == 0)
    assert schedule_group(list(group.te.outputs), CPU).template == "dense"


AVX2 = CPUInfo(vector_lanes=8, num_threads=2, vector_registers=16)


@pytest.mark.parametrize("occ,oh,ow,flat,reg_n", [
    (64, 7, 7, True, 5),  # ResNet's last stage: 4 + 4 columns computed 8 for 7
    (32, 14, 14, True, 5),  # 5 + 5 + 5 for 14
    (16, 13, 13, True, 5),  # SqueezeNet
    (16, 28, 28, False, 4),  # rows the tile divides stay row tiles
    (8, 56, 56, False, 4),
    (16, 1, 13, False, 5),  # one row: nothing to flatten
])
def test_tile_plan_flattens_rows_no_tile_divides(occ: int, oh: int, ow: int, flat: bool,
                                                 reg_n: int) -> None:
    plan = tile_plan(occ, oh, ow, 8, "float32", AVX2, depthwise=False)
    assert (plan.flat, plan.reg_n, plan.oc_tile) == (flat, reg_n, 2)
    # accumulators, weight vectors and the broadcast fit AVX2's 16 registers with room
    assert plan.reg_n * plan.oc_tile + plan.oc_tile + 1 < 16
    assert not tile_plan(occ, oh, ow, 8, "float32", AVX2, depthwise=True).flat


KIB = 1024


@pytest.mark.parametrize("occ,oh,ow,weight_kib,plan", [
    (16, 28, 28, 16, (4, 3, True)),  # 1x1, 512 input channels: 4 output blocks x 3 pixels
    (64, 7, 7, 144, (4, 3, True)),  # 3x3, 512 channels: 576 KiB > L2, cache-blocked
    (32, 14, 14, 72, (4, 3, True)),  # 3x3, 256 channels: 288 KiB
    (6, 28, 28, 16, (2, 4, False)),  # 6 blocks: no 4 x 3
    (16, 1, 13, 16, (2, 5, False)),  # one row
    (16, 28, 28, 0, (2, 4, False)),  # weights unknown
])
def test_avx2_prefers_four_blocks_by_three_pixels(occ: int, oh: int, ow: int, weight_kib: int,
                                                  plan: tuple[int, int, bool]) -> None:
    avx2 = CPUInfo(vector_lanes=8, num_threads=2, vector_registers=16, l2_bytes=512 * KIB)
    got = tile_plan(occ, oh, ow, 8, "float32", avx2, False, weight_kib * KIB)
    assert (got.oc_tile, got.reg_n, got.flat) == plan
    assert got.cache_blocked == (got.oc_tile * weight_kib * KIB > avx2.l2_bytes)
    # a compute over rows keeps a row tile that fits (2 x 4: 8 accumulators)
    assert got.row_oc_tile * got.row_n + got.row_oc_tile + 1 < 16
    # 32 registers (AVX-512, NEON) keep the tiles measured there; so do other dtypes
    avx512 = CPUInfo(vector_lanes=16, num_threads=2, vector_registers=32, l2_bytes=512 * KIB)
    assert tile_plan(occ, oh, ow, 16, "float32", avx512, False, weight_kib * KIB).oc_tile != 4
    assert tile_plan(occ, oh, ow, 8, "float64", avx2, False, weight_kib * KIB).oc_tile != 4


def test_weights_beyond_l2_get_cache_blocks_and_no_prefetch() -> None:
    """4 output blocks of 32 input channels x 3x3 are 36 KiB: beyond a 32 KiB L2, the tiles of
    a task share input-channel blocks of at most a quarter of L2 (one block: 9 KiB), a task
    takes a whole image unless that leaves fewer than 4 tasks per thread, and the next slice
    is not prefetched (it would evict the one in use)."""
    group = conv_nchwc_group(c=32, o=32, size=(7, 7), flat=True)
    small_l2 = CPUInfo(vector_lanes=8, num_threads=2, vector_registers=16, l2_bytes=32 * KIB)
    space = conv_space(group.anchor(), small_l2)
    cfg = space.default_config().values
    assert (cfg["oc_tile"], cfg["reg_n"], cfg["flat_tiles"]) == (4, 3, True)
    # 17 tiles of 3 pixels, one slice of 4 output blocks: 8 tasks of 3 tiles
    assert cfg["tile_group"] == 3 and cfg["ic_block"] == 1
    assert cfg["prefetch_weights"] is False
    assert space.knobs["tile_group"].candidates == [1, 2, 3, 4, 8, 17]
    checked = group.check({key_of(space): cfg}, "conv_cache_blocked", "cache-blocked defaults",
                          small_l2)
    assert checked is not None and checked.values == cfg
    roomy = CPUInfo(vector_lanes=8, num_threads=2, vector_registers=16, l2_bytes=512 * KIB)
    cfg = conv_space(group.anchor(), roomy).default_config().values
    assert (cfg["oc_tile"], cfg["tile_group"], cfg["ic_block"]) == (4, 1, 4)


def test_flat_compute_offers_both_tilings_and_a_row_compute_only_rows() -> None:
    flat = conv_space(conv_nchwc_group(size=(7, 7), flat=True).anchor(), AVX2)
    assert flat.knobs["flat_tiles"].candidates == [False, True]
    assert flat.default_config()["flat_tiles"] is True
    rows = conv_space(conv_nchwc_group(size=(7, 7)).anchor(), AVX2)
    assert rows.knobs["flat_tiles"].candidates == [False]
    assert rows.default_config()["reg_n"] == 4


def test_a_batch1_dense_gets_independent_accumulator_chains() -> None:
    """One row: several column vectors per tile (each its own FMA chain), a whole number of
    weight panels when the weight is packed."""
    space = dense_space(dense_group(1, 64, 80).anchor(), CPU)
    assert space.default_config()["mr"] == 1 and space.default_config()["nr"] == 80
    space = dense_space(dense_group(1, 64, 1000).anchor(), AVX2)
    assert space.default_config()["nr"] == 40
    group = dense_group(1, 64, 80)
    group.check(None, "gemv_default", "batch-1 dense, default schedule")


@pytest.mark.parametrize("shape", [(6, 48), (3, 37), (2, 5, 7), (1000,)])
def test_injective_space_defaults_are_candidates(shape: tuple[int, ...]) -> None:
    group = injective_group(shape)
    out = group.te.outputs[0].op
    space = injective_space(out, CPU)
    vec = space.knobs["vector_width"]
    assert vec.default in vec.candidates
    assert all(shape[-1] % c == 0 for c in vec.candidates)
    for knob in space.knobs.values():
        assert knob.default in knob.candidates
    lanes8 = injective_space(out, CPUInfo(vector_lanes=8, num_threads=4))
    assert lanes8.knobs["parallel_tasks"].default == 16  # four tasks per thread


# -- every candidate computes the same numbers ----------------------------------------------------

CONV_GROUPS = {
    "3x3": partial(conv_nchwc_group),
    "prime_width": partial(conv_nchwc_group, size=(5, 13)),
    "depthwise": partial(conv_nchwc_group, c=24, block=8, depthwise=True, size=(6, 10)),
    # flattened pixels: tiles that span rows, a last tile shifted back
    "flat": partial(conv_nchwc_group, size=(7, 7), flat=True),
    "flat_stride2": partial(conv_nchwc_group, size=(9, 13), stride=2, flat=True),
    "flat_1x1": partial(conv_nchwc_group, size=(5, 13), kernel=1, flat=True),
    # a strided 1x1 conv reads a gathered copy of its pixels (odd sizes: the last row and
    # column are read only when the stride lands on them)
    "strided_1x1": partial(conv_nchwc_group, size=(7, 9), kernel=1, stride=2),
    "strided_1x1_s3": partial(conv_nchwc_group, size=(8, 10), kernel=1, stride=3, flat=True),
    # four input-channel blocks: cache blocks of 1, 2 and 4 of them
    "ic_blocks": partial(conv_nchwc_group, c=32, o=32, size=(6, 12)),
    "ic_blocks_1x1": partial(conv_nchwc_group, c=32, o=16, size=(5, 10), kernel=1),
    # flat tiles in groups per task: 49 pixels are 17 tiles of 3; groups of 2, 4 and 8 tiles
    # (the last one shifted back), or all 17 (guards past the last pixel)
    "flat_groups": partial(conv_nchwc_group, c=32, o=32, size=(7, 7), flat=True),
}


# each compiles and runs every candidate (1 to 4 s); the fast tier keeps the cheapest
@pytest.mark.parametrize("case", slow_except(sorted(CONV_GROUPS), fast={"depthwise"}))
def test_every_conv_knob_candidate_is_correct(case: str) -> None:
    group = CONV_GROUPS[case]()
    space = conv_space(group.anchor(), CPU)
    key = key_of(space)
    tried = 0
    for knob in ("reg_n", "flat_tiles", "oc_tile", "tile_group", "ic_block", "unroll_kw",
                 "pad_parallel"):
        if knob not in space.knobs:
            continue
        # with the values of other knobs under which it has an effect (flat_tiles for
        # tile_group, the direct template where Winograd is eligible)
        enable = {other: values[0] for other, values in space.knobs[knob].when.items()}
        for value in space.knobs[knob].candidates:
            what = f"{case}: {knob}={value}"
            cfg = group.check({key: {**enable, knob: value}}, f"conv_{knob}_{tried}", what)
            assert cfg is not None and cfg[knob] == value, what
            tried += 1
    assert tried >= 4
    # several knobs at once, none of them defaults
    direct = {"template": "direct"} if "template" in space.knobs else {}
    reg = [c for c in space.knobs["reg_n"].candidates if c != space.knobs["reg_n"].default]
    combo = {**direct, "reg_n": reg[-1]}
    for knob, value in (("unroll_kw", True), ("pad_parallel", False)):
        if value in space.knobs[knob].candidates:  # not on a depthwise or unpadded conv
            combo[knob] = value
    if "ic_block" in space.knobs:
        combo["ic_block"] = space.knobs["ic_block"].candidates[0]
    cfg = group.check({key: combo}, "conv_combo", f"{case}: {combo}")
    assert cfg is not None and all(cfg[k] == v for k, v in combo.items())
    if space.knobs["flat_tiles"].candidates == [False, True] and \
            4 in space.knobs["oc_tile"].candidates:
        narrow = {**direct, "oc_tile": 4, "reg_n": 3, "flat_tiles": True}  # AVX2's tile
        cfg = group.check({key: narrow}, "conv_narrow", f"{case}: {narrow}")
        assert cfg is not None and all(cfg[k] == v for k, v in narrow.items())
        # AVX2's cache-blocked tile: groups of tiles, one input-channel block at a time
        for tiles in space.knobs["tile_group"].candidates[1:]:
            blocked = {**narrow, "tile_group": tiles,
                       "ic_block": space.knobs["ic_block"].candidates[0]}
            cfg = group.check({key: blocked}, f"conv_blocked_{tiles}", f"{case}: {blocked}")
            assert cfg is not None and all(cfg[k] == v for k, v in blocked.items())


def test_overrides_for_another_workload_are_ignored() -> None:
    group = conv_nchwc_group()
    default = conv_space(group.anchor(), CPU).default_config()
    other = json.dumps(["conv2d_NCHWc", [[9, 9, 9, 9, 9], [1], None]])
    cfg = group.check({other: {"reg_n": 1}}, "conv_other_key", "unrelated key")
    assert cfg is not None and cfg.values == default.values
    cfg = group.check({key_of(conv_space(group.anchor(), CPU)): {"no_such_knob": 3}},
                      "conv_unknown_knob", "unknown knob")
    assert cfg is not None and "no_such_knob" not in cfg.values


@pytest.mark.parametrize("batch", [None, 2])
@pytest.mark.slow
def test_every_dense_knob_candidate_is_correct(batch: int | None) -> None:
    group = dense_group(12, 40, 48, batch)
    space = dense_space(group.anchor(), CPU)
    key = key_of(space)
    n = 0
    for knob in ("mr", "nr", "vector_width"):
        for value in space.knobs[knob].candidates:
            cfg = group.check({key: {knob: value}}, f"dense_{knob}_{n}",
                              f"batch={batch}: {knob}={value}")
            assert cfg is not None and cfg[knob] == value
            n += 1
    for mr, nr, vec in [(3, 16, 8), (12, 48, 16), (1, 4, 4), (4, 8, 1), (6, 16, 4)]:
        combo = {"mr": mr, "nr": nr, "vector_width": vec, "parallel_min_flops": 1 << 16}
        group.check({key: combo}, f"dense_combo_{n}", f"batch={batch}: {combo}")
        n += 1


def test_every_injective_vector_width_is_correct() -> None:
    group = injective_group((6, 48))
    space = injective_space(group.te.outputs[0].op, CPU)
    key = key_of(space)
    for k, value in enumerate(space.knobs["vector_width"].candidates):
        for par in (4096, 65536):  # 288 elements: parallel only when the threshold is low
            group.check({key: {"vector_width": value, "parallel_min_elems": par,
                               "parallel_tasks": 2}}, f"inj_{k}_{par}",
                        f"vector_width={value} parallel_min_elems={par}")


def reduce_group(kind: str) -> Group:
    """A group whose anchor is a reduction keeping its last output axis (or pooling)."""
    fn = Function(kind)
    if kind == "lrn":  # the channel-window sum of LRN, then the elementwise part
        a = rand(1, 12, 5, 11) * 3
        x = fn.add_input("a", TensorType.of(a))
        fn.outputs = [fn.op("LRN", x, size=5, alpha=1e-2, beta=0.75, bias=1.0)]
    elif kind == "sum_channels":
        a = rand(2, 7, 3, 40)
        x = fn.add_input("a", TensorType.of(a))
        fn.outputs = [fn.op("ReduceSum", x, axes=[1], keepdims=1)]
    else:  # an NCHWc average pool with padding
        a = pack_nchwc(rand(1, 16, 9, 9), 8)
        x = fn.add_input("a", TensorType.of(a))
        fn.outputs = [fn.op("PoolNCHWc", x, mode="avg", kernel_shape=[3, 3], strides=[2, 2],
                            pads=[1, 1, 1, 1])]
    return Group(fn, {"a": a})


@pytest.mark.parametrize("kind", ["lrn", "sum_channels", "pool"])
def test_every_reduce_knob_candidate_is_correct(kind: str) -> None:
    group = reduce_group(kind)
    reductions = [op for op in compute_ops(list(group.te.outputs)) if op.reduce_axis]
    space = reduce_space(reductions[0], CPU)
    key = key_of(space)
    if kind != "pool":  # a last output axis of 11 or 40 columns: vectors by default
        assert space.knobs["row_vector"].default > 1
    for k, value in enumerate(space.knobs["row_vector"].candidates):
        for par in (64, 1 << 20):  # parallel or not
            group.check({key: {"row_vector": value, "parallel_min_elems": par}},
                        f"{kind}_{k}_{par}", f"{kind}: row_vector={value} parallel={par}")


def test_tuning_records_reach_the_compiled_model(tmp_path) -> None:  # noqa: ANN001
    """Tuning records end to end: a model compiled with non-default conv knobs (another
    candidate of ``reg_n`` and ``unroll_kw``, from a records file) still matches
    onnxruntime."""
    from tessera.autotune.records import TuningRecord, append_records

    model, inputs = conv_block_model(seed=9, channels=16, out_channels=32, size=14)
    want = run_onnxruntime(model, inputs)["y"]
    base = tessera.compile(model, target="llvm")
    (cr,) = base.compiled.values()
    conv = next(c for s in cr.info["schedules"].values() for c in s["configs"]
                if c["template"] == "conv2d_NCHWc")
    reg_n = next(v for v in conv["knobs"]["reg_n"] if v != conv["config"]["reg_n"])
    unroll = next(v for v in conv["knobs"]["unroll_kw"] if v != conv["config"]["unroll_kw"])
    chosen = {"reg_n": reg_n, "unroll_kw": unroll}
    path = tmp_path / "records.jsonl"
    append_records(path, [TuningRecord(key=conv["key"], template="conv2d_NCHWc", workload=[],
                                       config=chosen, backend="llvm", costs=[1e-3])])
    mod = tessera.compile(model, target="llvm", tuning_records=str(path))
    (cr,) = mod.compiled.values()
    config = next(c["config"] for s in cr.info["schedules"].values() for c in s["configs"]
                  if c["template"] == "conv2d_NCHWc")
    assert config["reg_n"] == reg_n and config["unroll_kw"] == unroll
    assert mod.tuning_summary()[0] == 1
    got = mod.run(**inputs)
    assert got is not None
    np.testing.assert_allclose(got["y"], want, rtol=1e-5, atol=1e-5)




def test_knobs_a_workload_never_reads_offer_one_value() -> None:
    """A depthwise convolution's kernel-column unrolling and weight prefetching, and an
    unpadded convolution's padding loop, are not searched: their one candidate is the
    default."""
    depthwise = conv_space(CONV_GROUPS["depthwise"]().anchor(), CPU)
    assert depthwise.knobs["unroll_kw"].candidates == [False]
    assert depthwise.knobs["prefetch_weights"].candidates == [False]
    plain = conv_space(conv_nchwc_group().anchor(), CPU)  # 3x3, pad 1
    assert plain.knobs["unroll_kw"].candidates == [False, True]
    assert plain.knobs["prefetch_weights"].candidates == [False, True]
    assert plain.knobs["pad_parallel"].candidates == [True, False]
    pointwise = conv_space(conv_nchwc_group(kernel=1).anchor(), CPU)  # 1x1, no padding
    assert pointwise.knobs["unroll_kw"].candidates == [False]
    assert pointwise.knobs["pad_parallel"].candidates == [True]
