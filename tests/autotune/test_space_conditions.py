"""Conditional knobs (``ConfigSpace.define(..., when=...)``, ``tessera.autotune.knobspace``):
canonical configs, their count without the full product, every tuner proposing each canonical
config at most once, the llvm convolution's direct and Winograd knobs, and ``tune`` measuring
no kernel twice."""

from __future__ import annotations

import itertools
import json
import math
import random
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from optional import needs
from tiers import SLOW

from tessera.autotune.knobspace import KnobSpace
from tessera.autotune.records import TuningRecord, append_records, load_records
from tessera.autotune.space import ConfigSpace, schedule_info
from tessera.autotune.tasks import tasks_of_module
from tessera.autotune.tuners import config_key, make_tuner


def hand_space() -> ConfigSpace:
    """Two templates; ``group`` only with template a and flat tiles; ``z`` only without flat
    tiles, so not with template b either (flat has no effect there)."""
    s = ConfigSpace("t", (1,))
    s.define("template", ["a", "b"], "a")
    s.define("x", [1, 2, 3], 1, when={"template": ["a"]})
    s.define("flat", [False, True], False, when={"template": ["a"]})
    s.define("group", [1, 2, 4, 8], 1, when={"template": ["a"], "flat": [True]})
    s.define("z", [0, 1], 0, when={"flat": [False]})
    s.define("y", [4, 8], 8, when={"template": ["b"]})
    s.define("u", [False, True], False)
    return s


def brute_force(space: KnobSpace) -> set[str]:
    """The distinct canonical configs, from the whole product."""
    return {config_key(space.canonical(dict(zip(space.knobs, values))))
            for values in itertools.product(*space.knobs.values())}


def test_canonical_sets_knobs_without_effect_to_their_defaults() -> None:
    s = hand_space()
    b = {"template": "b", "x": 3, "flat": True, "group": 8, "z": 1, "y": 4, "u": True}
    assert s.canonical(b) == {"template": "b", "x": 1, "flat": False, "group": 1, "z": 0,
                              "y": 4, "u": True}
    rows = {"template": "a", "x": 2, "flat": False, "group": 8, "z": 1, "y": 4, "u": False}
    assert s.canonical(rows) == {**rows, "group": 1, "y": 8}
    flat = {**rows, "flat": True}
    assert s.canonical(flat) == {**rows, "flat": True, "z": 0, "y": 8}
    # missing knobs take their defaults
    assert s.canonical({"template": "b"}) == {**s.default_config().values, "template": "b"}
    # a template's space reports the conditions with the knobs
    assert s.knobs["group"].when == {"template": ["a"], "flat": [True]}
    with pytest.raises(ValueError, match="'w'"):
        s.define("v", [1, 2], 1, when={"w": [1]})


def test_size_counts_canonical_configs() -> None:
    s = hand_space()
    # a: x (3) x [flat off: z (2); flat on: group (4)] x u (2) = 36; b: y (2) x u (2) = 4
    assert s.size() == 40
    space = s.search_space()
    assert math.prod(len(c) for c in space.knobs.values()) == 384
    assert len(brute_force(space)) == 40
    configs = [space.config_at(i) for i in range(space.size())]
    assert len({config_key(c) for c in configs}) == 40
    assert all(space.contains(c) for c in configs)
    with pytest.raises(IndexError):
        space.config_at(40)
    unconditional = ConfigSpace("t", (1,))
    unconditional.define("a", [1, 2, 3], 2)
    unconditional.define("b", [True, False], False)
    assert unconditional.size() == 6


def random_space(rng: random.Random) -> KnobSpace:
    """Up to 6 knobs of 1 to 4 candidates; a later knob depends on up to two earlier ones,
    listing some of their values (maybe none, maybe values that are not candidates)."""
    pool = [0, 1, 2, 3, "p", "q", True, False, 7.5]
    knobs: dict[str, list[Any]] = {}
    when: dict[str, dict[str, list[Any]]] = {}
    for i in range(rng.randint(1, 6)):
        name = f"k{i}"
        knobs[name] = rng.sample(pool, rng.randint(1, 4))
        earlier = list(knobs)[:-1]
        if earlier and rng.random() < 0.6:
            when[name] = {o: rng.sample(knobs[o] + [99], rng.randint(0, len(knobs[o])))
                          for o in rng.sample(earlier, min(len(earlier), rng.randint(1, 2)))}
    default = {n: rng.choice(c) for n, c in knobs.items()}
    return KnobSpace(knobs, when, default)


@pytest.mark.parametrize("seed", range(40))
def test_size_and_numbering_match_brute_force(seed: int) -> None:
    space = random_space(random.Random(seed))
    want = brute_force(space)
    assert space.size() == len(want), (space.knobs, space.when)
    got = [config_key(space.config_at(i)) for i in range(space.size())]
    assert len(set(got)) == len(got) and set(got) == want


def test_pick_canonicalizes_records() -> None:
    s = hand_space()
    key = s.default_config().key()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an inactive knob's value is no bad record
        cfg = s.pick({key: {"template": "b", "x": 3, "group": 4, "y": 4}})
    assert cfg.values == {**s.default_config().values, "template": "b", "y": 4}
    assert cfg.tuned
    report = schedule_info("t", [cfg])
    assert report["config"] == cfg.values and report["configs"][0]["config"] == cfg.values
    assert report["configs"][0]["when"]["group"] == {"template": ["a"], "flat": [True]}
    assert "u" not in report["configs"][0]["when"]


# -- tuners ---------------------------------------------------------------------------------

#: Two templates over one shared knob: a's (12 x 10) or b's (8 x 6) knobs, times c: 336.
COND_KNOBS = {"template": ["a", "b"], "c": [True, False],
              "a1": [1, 2, 4, 8, 16, 32, 64, 3, 6, 12, 24, 48], "a2": list(range(10)),
              "b1": [1, 2, 3, 4, 5, 6, 7, 8], "b2": ["p", "q", "r", "s", "t", "u"]}
COND_WHEN = {"a1": {"template": ["a"]}, "a2": {"template": ["a"]},
             "b1": {"template": ["b"]}, "b2": {"template": ["b"]}}
COND_DEFAULT = {"template": "a", "c": True, "a1": 8, "a2": 0, "b1": 1, "b2": "p"}
COND_SIZE = (12 * 10 + 8 * 6) * 2
OPTIMUM = {"template": "b", "c": True, "a1": 8, "a2": 0, "b1": 6, "b2": "s"}


def cond_cost(cfg: dict[str, Any]) -> float:
    """One optimum, in template b: b1=6, b2='s', c=True; template a is slower everywhere."""
    c = 0.0 if cfg["c"] else 2.0
    if cfg["template"] == "a":
        return 6 + c + (math.log2(cfg["a1"]) - 2) ** 2 + 0.3 * (cfg["a2"] - 5) ** 2
    return 1 + c + 0.5 * (cfg["b1"] - 6) ** 2 + (COND_KNOBS["b2"].index(cfg["b2"]) - 3) ** 2


def cond_tuner(name: str, seed: int, **kw: Any) -> Any:
    return make_tuner(name, COND_KNOBS, seed, when=COND_WHEN, default=COND_DEFAULT, **kw)


@pytest.mark.parametrize("name", ["gridsearch", pytest.param("random", marks=SLOW),
                                  pytest.param("ga", marks=SLOW),
                                  pytest.param("xgb", marks=[SLOW, needs("xgboost")])])
def test_tuners_propose_each_canonical_config_once(name: str) -> None:
    tuner = cond_tuner(name, seed=3)
    space = KnobSpace(COND_KNOBS, COND_WHEN, COND_DEFAULT)
    assert tuner.size == space.size() == COND_SIZE
    # measured before under another name (a resumed run): the same kernel as this config
    measured = {**COND_DEFAULT, "template": "b", "b1": 2, "b2": "q", "a1": 64, "a2": 9}
    tuner.mark(measured)
    seen = {config_key(space.canonical(measured))}
    n = 0
    while (cfg := tuner.next()) is not None:
        assert space.contains(cfg), cfg
        key = config_key(cfg)
        assert key not in seen, cfg
        seen.add(key)
        tuner.update(cfg, cond_cost(cfg))
        n += 1
    assert n == COND_SIZE - 1 and not tuner.has_next()
    assert seen == brute_force(space)


def test_grid_and_random_exhaust_exactly_the_canonical_configs() -> None:
    space = hand_space().search_space()
    for name in ("gridsearch", "random"):
        tuner = make_tuner(name, space.knobs, 0, when=space.when, default=space.default)
        got = []
        while (cfg := tuner.next()) is not None:
            got.append(config_key(cfg))
        assert len(got) == len(set(got)) == 40 and set(got) == brute_force(space)


@needs("xgboost")
def test_inactive_knobs_are_missing_values_for_xgboost() -> None:
    tuner = cond_tuner("xgb", 0)
    b = tuner._features(OPTIMUM)
    a = tuner._features({**COND_DEFAULT, "a1": 64})
    # template (2 + one-hot 2), c (2 + 2), a1 (2), a2 (2), b1 (2), b2 (2)
    assert len(a) == len(b) == 16
    assert np.isnan(b[8:12]).all() and not np.isnan(b[12:]).any()
    assert np.isnan(a[12:]).all() and not np.isnan(a[:12]).any()
    # prior records of other workloads: only the knobs that matter must be candidates
    prior = {"other": [({**OPTIMUM, "a1": 5}, 1.0), ({**OPTIMUM, "b1": 99}, 2.0),
                       ({**COND_DEFAULT, "b1": 99}, 3.0)]}
    assert len(cond_tuner("xgb", 0, prior=prior).prior["other"]) == 2


def trials_to_optimum(name: str, seed: int) -> int:
    tuner = cond_tuner(name, seed)
    n = 0
    while (cfg := tuner.next()) is not None:
        n += 1
        tuner.update(cfg, cond_cost(cfg))
        if cfg == OPTIMUM:
            return n
    raise AssertionError(f"{name} exhausted the space without the optimum")


@pytest.mark.slow
@needs("xgboost")
def test_xgboost_finds_a_conditional_optimum_before_random() -> None:
    xgb = [trials_to_optimum("xgb", s) for s in range(4)]
    rnd = [trials_to_optimum("random", s) for s in range(4)]
    assert sum(xgb) < sum(rnd) / 2, (xgb, rnd)


# -- the llvm convolution's templates -------------------------------------------------------

def conv_op(c: int, o: int, size: tuple[int, int], kernel: int = 3, flat: bool = False) -> Any:
    """The blocked convolution compute (16-channel blocks) of a ``kernel x kernel``, stride 1
    convolution + relu."""
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType
    from tessera.ops.layout import pack_conv_weight, pack_nchwc
    from tessera.topi.from_graph import build_te
    from tessera_llvm.schedules.common import compute_ops
    from tessera_llvm.schedules.conv2d import find_conv

    fn = Function("conv")
    x = pack_nchwc(np.zeros((1, c, *size), np.float32), 16)
    w = pack_conv_weight(np.zeros((o, c, kernel, kernel), np.float32), 16, 16)
    attrs: dict[str, Any] = {"pads": [kernel // 2] * 4, "strides": [1, 1]}
    if flat:
        attrs["flat_spatial"] = 1
    y = fn.op("ConvNCHWc", fn.add_input("x", TensorType.of(x)), fn.constant(w, "w"), **attrs)
    fn.outputs = [fn.op("Relu", y)]
    gte = build_te(fn.nodes, list(fn.inputs), list(fn.outputs))
    return find_conv(compute_ops(list(gte.outputs)))


DIRECT = ["reg_n", "flat_tiles", "oc_tile", "tile_group", "ic_block", "unroll_kw",
          "prefetch_weights", "pad_parallel"]
WINOGRAD = ["winograd_tile", "winograd_oc_tile", "winograd_reg_n"]


def test_llvm_conv_template_knobs_are_conditional() -> None:
    """ResNet-50's 3x3 64-channel convolution (56 x 56): the direct knobs count only with
    ``template=direct``, the Winograd ones only with ``template=winograd``."""
    from tessera_llvm.schedules.common import CPUInfo
    from tessera_llvm.schedules.conv2d import conv_space

    cpu = CPUInfo(vector_lanes=16, num_threads=2)
    space = conv_space(conv_op(64, 64, (56, 56)), cpu)
    assert list(space.knobs)[0] == "template"
    report = schedule_info(space.template, [space.pick()])["configs"][0]
    for name in DIRECT:
        if name in space.knobs:
            assert report["when"][name]["template"] == ["direct"], name
    assert all(report["when"][name] == {"template": ["winograd"]} for name in WINOGRAD)
    knobs = space.search_space()
    product = math.prod(len(c) for c in knobs.knobs.values())
    size = len(brute_force(knobs))
    assert (product, size) == (48384, 552)
    assert space.size() == size
    direct = math.prod(len(space.knobs[n].candidates) for n in DIRECT if n in space.knobs)
    wino = math.prod(len(space.knobs[n].candidates) for n in WINOGRAD)
    assert size == direct + wino
    # flat tiles: tile_group counts only with flat_tiles (and the direct template)
    flat = conv_space(conv_op(64, 64, (7, 7), flat=True), cpu)
    assert flat.knobs["tile_group"].when == {"template": ["direct"], "flat_tiles": [True]}
    cands = {n: len(k.candidates) for n, k in flat.knobs.items()}
    rest = math.prod(cands[n] for n in DIRECT if n not in ("flat_tiles", "tile_group"))
    assert flat.size() == rest * (1 + cands["tile_group"]) + math.prod(
        cands[n] for n in WINOGRAD)
    # a 1x1 convolution has one template: no conditions
    one = conv_space(conv_op(64, 64, (56, 56), kernel=1), cpu)
    assert "template" not in one.knobs and not one.conditions()
    assert one.size() == math.prod(len(k.candidates) for k in one.knobs.values())


def test_llvm_injective_parallel_tasks_only_where_parallel() -> None:
    """``parallel_tasks`` is read only where the output has at least ``parallel_min_elems``
    elements: for 6 x 48 = 288 of them, only the threshold 64."""
    from tessera.ir.graph import Function
    from tessera.ir.types import TensorType
    from tessera.topi.from_graph import build_te
    from tessera_llvm.schedules.common import PARALLEL_MIN_ELEMS, CPUInfo, injective_space

    fn = Function("inj")
    fn.outputs = [fn.op("Sigmoid", fn.add_input("a", TensorType.of(np.zeros((6, 48),
                                                                             np.float32))))]
    op = build_te(fn.nodes, list(fn.inputs), list(fn.outputs)).outputs[0].op
    space = injective_space(op, CPUInfo(vector_lanes=16, num_threads=2))
    assert space.conditions() == {"parallel_tasks": {"parallel_min_elems": [64]}}
    widths = len(space.knobs["vector_width"].candidates)
    tasks = len(space.knobs["parallel_tasks"].candidates)
    assert space.size() == widths * (tasks + len(PARALLEL_MIN_ELEMS) - 1)
    assert space.size() == len(brute_force(space.search_space()))


# -- tasks and tune -------------------------------------------------------------------------

def test_reports_without_conditions_still_load() -> None:
    """A report written before conditions existed (no "when"): no conditions, the product."""
    config = {"template": "t", "key": '["t", [1]]', "config": {"a": 1, "b": "x"},
              "tuned": False, "knobs": {"a": [1, 2, 3], "b": ["x", "y"]}}
    cr = SimpleNamespace(region=SimpleNamespace(attrs={}), backend="toy",
                         kernels=[SimpleNamespace(name="k", flops=10)],
                         info={"schedules": {"k": {"template": "t", "configs": [config]}}})
    (task,) = tasks_of_module(SimpleNamespace(compiled={"r": cr}))
    assert task.when == {} and task.space_size == 6
    tuner = make_tuner("random", task.knobs, 0, when=task.when, default=task.default)
    assert tuner.size == 6
    with_when = {**config, "when": {"b": {"a": [2]}}}
    cr.info = {"schedules": {"k": {"template": "t", "configs": [with_when]}}}
    (task,) = tasks_of_module(SimpleNamespace(compiled={"r": cr}))
    assert task.when == {"b": {"a": [2]}} and task.space_size == 4


@pytest.mark.slow
def test_tune_measures_no_kernel_twice(tmp_path: Path) -> None:
    """A Winograd-eligible convolution: its records are canonical and distinct, and a config
    the file holds under another name (an inactive knob changed) is not measured again."""
    from autotune.test_tune import _conv_model

    import tessera
    from tessera.autotune.tune import tune

    model, _ = _conv_model(tmp_path)
    mod = tessera.compile(str(model), target="llvm")
    task = next(t for t in tasks_of_module(mod) if t.template == "conv2d_NCHWc")
    assert task.when["winograd_tile"] == {"template": ["winograd"]}
    space = task.space
    assert space.size() == task.space_size < math.prod(len(c) for c in task.knobs.values())
    # grid order: the first config measured after the default; on file already, with a
    # Winograd knob changed that has no effect under the direct template
    first = next(space.config_at(i) for i in range(space.size())
                 if space.config_at(i) != task.default)
    assert first["template"] == "direct"
    renamed = {**first, "winograd_tile": 6 - first["winograd_tile"]}
    out = tmp_path / "cond.jsonl"
    append_records(out, [TuningRecord(key=task.key, template=task.template,
                                      workload=json.loads(task.key)[1], config=renamed,
                                      backend="llvm", target="llvm", costs=[1.0])])
    tune(str(model), target="llvm", output=out, trials=4, tasks=[0], repeat=1, timeout=30,
         progress=None, tuner="gridsearch", model_check=False)
    recs = list(load_records(out))[1:]
    assert len(recs) == 4 and all(r.ok for r in recs)
    assert all(space.contains(r.config) for r in recs)
    keys = [config_key(r.config) for r in recs]
    assert len(set(keys)) == 4 and config_key(first) not in keys
    assert recs[0].config == task.default
