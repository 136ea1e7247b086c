"""From a region to lowered loop nests: layout, fusion, computes, schedules, TIR passes.

:func:`lower_region` runs the lowering chain of :mod:`tessera.kernel.lowering` with the CPU's
steps: the graph rewrites the CPU backend wants (grouped 1x1 convolutions as matrix products,
blocked NCHWc convolutions, packed weights, conv tilings; :func:`prepare_region`), then
FuseOps, each fused group's tensor expression from the topi computes (a Winograd convolution
where its config says so), the group's schedule from the CPU's table
(:data:`~tessera_llvm.schedules.dispatch.LLVM_SCHEDULES`), ``te.lower`` and the TIR pass
pipeline (with weight prefetching). The result lists one :class:`LoweredKernel` per group, in
execution order. Structurally identical groups (a transformer's layers;
:mod:`tessera.kernel.group_key`) are lowered once: the kernels of the others name the first
one's function (``alias_of``), which the build exports under their names too.
"""

from __future__ import annotations

import copy
import dataclasses
import math
import warnings
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tessera.errors import TesseraError
from tessera.ir.graph import Function, Node, Value
from tessera.ir.mapped import release_resident
from tessera.ir.symbolic import dim_bounds_scope
from tessera.ir.types import TensorType
from tessera.kernel.alter_layout import alter_conv_layout
from tessera.kernel.conv1d import conv1d_as_conv2d
from tessera.kernel.flops import group_flops
from tessera.kernel.grouped_pointwise import grouped_pointwise_to_matmul
from tessera.kernel.lowering import (
    LOWER_PHASE,  # noqa: F401 - re-exported
    Made,
    SizeBounds,
    group_facts,
    group_te,
    group_text,
    loop_nest,
    lower_groups,
    lowering_errors,
    region_sizes,
    with_region_sizes,
)
from tessera.kernel.lowering import prepare_region as prepare_graph
from tessera.kernel.pad_matmul import matmul_sizes, pad_matmul
from tessera.ops.layout import pack_matmul_weight
from tessera.ops.quant import pack_integer_matmul_weight
from tessera.progress import Progress
from tessera.tir import expr as E
from tessera.tir.heavy import heavy_work
from tessera.tir.stmt import PrimFunc
from tessera.tir.transform import lower_pipeline
from tessera.topi.from_graph import build_te
from tessera.topi.nn.softmax import row_softmax_computes
from tessera.topi.nn.winograd import conv_nchwc_winograd, winograd_weight_transform

from .build import size_spec
from .loader import SizeSpec
from .prefetch import prefetch_next_slice
from .schedules import schedule_group, winograd
from .schedules.common import CPUInfo, compute_ops
from .schedules.config import largest_divisor
from .schedules.conv2d import conv_space, find_conv, specialize_width_tails, tile_plan
from .schedules.dense import specialize_tails
from .size_buckets import bucketed, buckets_of


@dataclass
class LoweredKernel:
    """One fused group lowered to a TIR function. ``inputs``/``outputs`` are graph value names
    (inputs include constants), in the order of the function's parameters."""

    name: str
    func: PrimFunc
    inputs: list[str]
    outputs: list[str]
    op: str
    flops: int = 0
    template: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    #: The workload key tuning records and ``overrides`` name the config by ("" when none).
    key: str = ""
    #: Every config the group's schedule read (their spaces, keys and whether records chose
    #: them).
    configs: list[Any] = field(default_factory=list)
    #: The run-time sizes of a kernel of a symbolic region (its region's size variables, in
    #: order, and its parameters' shapes over them); None for a static kernel.
    size_spec: SizeSpec | None = None
    #: The kernel whose code this one runs (its group is structurally identical: see
    #: :func:`share_kernel`), None for a kernel with code of its own; ``func`` is then that
    #: kernel's function, and this kernel's symbol an alias of it.
    alias_of: str | None = None
    #: Versions of ``func`` for smaller sizes, each with the condition over the size
    #: variables that selects it (the first that holds; ``func`` when none does): one per
    #: size bucket of the tuning records (:mod:`.size_buckets`).
    variants: list[tuple[E.PrimExpr, PrimFunc]] = field(default_factory=list)
    #: The sizes of the tuning records it was compiled for, smallest first (its run-time
    #: extents' texts -> size), one per version; [] when it has one version.
    size_buckets: list[dict[str, int]] = field(default_factory=list)


@dataclass
class LoweredRegion:
    func: Function
    kernels: list[LoweredKernel]
    constants: dict[str, Value]


def block_choice(cpu: CPUInfo):  # noqa: ANN201 - a callable for alter_conv_layout
    """The (ic_bn, oc_bn) of each float convolution: the vector width when it divides the
    channels (per group), 8 or 4 otherwise, the whole input when it has few channels (the
    first convolution). An ungrouped convolution with at least four vectors of output channels
    that the vector width does not divide (a 1000-class head) gets full-width output blocks,
    padded with zero channels: at most a quarter more work against half-width (or narrower)
    vectors throughout. The padding goes on to an even number of blocks when that adds at
    most 1/16 more work, so that the register tile can hold two blocks (``oc_tile``)."""
    lanes = cpu.vector_lanes

    def block(n: int) -> int | None:
        """The channel block for ``n`` channels: the vector width (or a multiple/half of it)
        when it divides, else a smaller power of two. Blocks that are not powers of two
        would leave the accumulator tile misaligned with the vector registers (LLVM then
        keeps it in memory), so they are never used."""
        for b in (lanes, 2 * lanes, lanes // 2, 4, 2):
            if b >= 2 and n % b == 0:
                return b
        return None

    def choose(node: Node) -> tuple[int, ...] | None:
        if node.inputs[0].type.dtype != "float32" or node.inputs[0].type.ndim != 4:
            return None
        group = int(node.attrs.get("group", 1) or 1)
        c_in = node.inputs[0].type.shape[1]
        c_out = node.outputs[0].type.shape[1]
        icg, ocg = c_in // group, c_out // group
        if group > 1 and icg == 1 and ocg == 1:  # depthwise: block the channels
            b = block(c_in)
            return (1, b) if b else None
        oc_bn = block(ocg)
        padded = ocg
        if group == 1 and ocg % lanes and ocg >= 4 * lanes:
            oc_bn = lanes  # alter_conv_layout pads the output channels to ``padded``
            padded = -(-ocg // lanes) * lanes
            if (padded // lanes) % 2 and 16 * lanes <= padded:
                padded += lanes
        if oc_bn is None:
            return None
        ic_bn = block(icg) or (icg if icg <= 8 else None)
        if ic_bn is None:
            return None
        return (ic_bn, oc_bn) if padded == ocg else (ic_bn, oc_bn, padded)

    return choose


def pointwise_as_matmul(cpu: CPUInfo):  # noqa: ANN201 - a callable for the pass
    """Which grouped 1x1 convolutions become batched matrix products, and over how many pixel
    columns: those whose channels per group the vector width does not divide (channel blocks
    would be narrow), computing the pixels rounded up to whole vectors when that adds at most
    1/8 more work (196 -> 208 with 16 lanes; 49 -> 64 would add 31%)."""
    lanes = cpu.vector_lanes

    def select(node: Node) -> int | None:
        group = int(node.attrs.get("group", 1) or 1)
        icg = node.inputs[0].type.shape[1] // group
        ocg = node.outputs[0].type.shape[1] // group
        if icg % lanes == 0 and ocg % lanes == 0:
            return None
        pixels = math.prod(node.outputs[0].type.shape[2:])
        cols = -(-pixels // lanes) * lanes
        return cols if 8 * (cols - pixels) <= pixels else None

    return select


def matmul_padding(cpu: CPUInfo):  # noqa: ANN201 - a callable for the pass
    """Which matrix products are computed over padded sizes (:mod:`tessera.kernel.pad_matmul`),
    and over how many rows and columns: rows with no divisor near the register tile's height
    (197, a prime, allows one row per tile) are rounded up to the multiple of a height from
    the tile's down to half of it that adds the fewest (197 -> 198 = 11 x 18); columns that no
    vector of at least 8 lanes (the CPU's lanes, when fewer) divides are rounded up to whole
    vectors (197 -> 208 with 16 lanes). Rows only where the product has more than half a tile
    of them (never a batch-1 layer; 17 tokens -> 18 = 2 x 9); columns where the weight is a
    constant (padded once, at compile time) or there are two tiles' rows to reuse the padded
    copy; and only where padding adds at most 1/4 more work (scalar columns and one-row tiles
    cost several times that).

    A run-time size (a symbolic graph type) is not padded: rows of run-time count are left to
    the kernel (its last tile a micro-kernel of exactly the remaining rows; see
    :mod:`tessera.kernel.pad_matmul`), and the static columns of such a product are padded
    only where the weight is a constant."""

    def select(node: Node) -> tuple[Any, Any] | None:
        sizes = matmul_sizes(node)
        if sizes is None:
            return None
        m, n, _ = sizes
        if not isinstance(n, int):
            return None  # run-time columns: the kernel shifts its last tile back
        if not isinstance(m, int):
            return _symbolic_rows(node, m, n)
        lanes = cpu.lanes_for(node.outputs[0].type.dtype.value)
        tile = max(4, min(12, min(24, cpu.max_accumulators(3)) // 2))
        rows, cols = m, n
        if m > tile // 2 and largest_divisor(m, tile) < tile // 2:
            rows = min((-(-m // r) * r, -r) for r in range(tile, tile // 2 - 1, -1))[0]
        narrowest = min(8, lanes)
        b = node.inputs[1]
        if n >= 2 * lanes and not any(n % v == 0 for v in (lanes, lanes // 2)
                                      if v >= narrowest) \
                and (b is not None and b.is_constant or m >= 2 * tile):
            cols = -(-n // lanes) * lanes
        if (rows, cols) == (m, n) or 4 * (rows * cols - m * n) > m * n:
            return None
        return rows, cols

    def _symbolic_rows(node: Node, m: Any, n: int) -> tuple[Any, int] | None:
        lanes = cpu.lanes_for(node.outputs[0].type.dtype.value)
        narrowest = min(8, lanes)
        b = node.inputs[1]
        if n >= 2 * lanes and not any(n % v == 0 for v in (lanes, lanes // 2)
                                      if v >= narrowest) and b is not None and b.is_constant:
            cols = -(-n // lanes) * lanes
            if 4 * (cols - n) <= n:
                return m, cols
        return None

    return select


#: The operations of a group (:func:`tessera.kernel.flops.group_flops`).
_flops = group_flops


def pretranspose_weights(func: Function) -> None:
    """Gemm with a constant ``B`` and ``transB=1`` (a fully-connected layer as exported by
    most frameworks) reads ``B`` across rows; store ``B`` transposed once instead, so the
    product's inner loop loads contiguous vectors of ``B``."""
    import numpy as np

    for node in func.nodes:
        if node.op != "Gemm" or not node.attrs.get("transB"):
            continue
        b = node.inputs[1]
        if b is None or not b.is_constant or b.type.ndim != 2:
            continue
        node.inputs[1] = func.constant(np.ascontiguousarray(np.asarray(b.data).T),
                                       f"{b.name}_T")
        release_resident(b.data)  # a weight mapped from its file: the copy is what stays
        node.attrs["transB"] = 0


def pack_matmul_weights(func: Function, cpu: CPUInfo) -> None:
    """MatMul with a constant float ``B (K, N)`` becomes MatMulPacked with ``B`` stored as
    column panels of the GEMM micro-kernel's width (the dense schedule's default ``nr``): each
    tile then streams its panel contiguously instead of striding across rows of ``B`` (a
    new page every row for wide matrices). So does a Gemm whose ``B`` is such a constant
    (after :func:`pretranspose_weights`) with ``alpha = beta = 1`` and no ``transA``: its
    ``C`` becomes an Add that fuses into the product. Measured on Zen 1 (ResNet-50's 2048 x
    1000 fully-connected layer, batch 1, weights cold): 0.85 ms strided, 0.66 ms packed."""
    lanes = cpu.vector_lanes
    nodes: list[Node] = []
    for node in func.nodes:
        nodes.append(node)
        if node.op == "MatMulInteger":
            _pack_integer_matmul(func, node, lanes, integer_word(cpu))
            continue
        gemm = node.op == "Gemm"
        if not gemm and (node.op != "MatMul" or len(node.inputs) != 2):
            continue
        a, b = node.inputs[:2]
        if (a is None or b is None or not b.is_constant or b.type.ndim != 2 or a.type.ndim < 2
                or a.type.dtype != "float32" or b.type.dtype != "float32"):
            continue
        c = node.inputs[2] if gemm and len(node.inputs) > 2 else None
        if gemm and (node.attrs.get("transA") or node.attrs.get("transB")
                     or node.attrs.get("alpha", 1.0) != 1.0
                     or (c is not None and node.attrs.get("beta", 1.0) != 1.0)):
            continue
        packed = _panels(func, b, lanes)
        if packed is None:
            continue
        node.op, node.attrs, node.inputs = "MatMulPacked", {}, [a, packed]
        if c is not None:
            y = node.outputs[0]
            product = Value(func.fresh_name(f"{node.name}_product"), y.type, producer=node)
            node.outputs = [product]
            nodes.append(Node("Add", func.fresh_node_name(f"{node.name}_bias"), [product, c],
                              [y], {}))
    func.nodes[:] = nodes


def _panel_width(n: int, lanes: int) -> int | None:
    """Columns per panel of a packed ``B`` with ``n`` columns: two vectors' width, else one,
    else None (``n`` not a whole number of vectors)."""
    if n % lanes:
        return None
    return 2 * lanes if n % (2 * lanes) == 0 else lanes


def _panels(func: Function, b: Value, lanes: int) -> Value | None:
    """The constant ``B (K, N)`` as column panels of one or two vectors' width (a new
    constant of ``func``), or None when ``N`` is not a whole number of vectors."""
    nb = _panel_width(int(b.type.shape[1]), lanes)
    if nb is None:
        return None
    return func.constant(pack_matmul_weight(np.asarray(b.data), nb), f"{b.name}_panels{nb}")


def integer_word(cpu: CPUInfo) -> int:
    """The values per int32 word of packed 8-bit weights for ``cpu``: 4 bytes where it has a
    four-byte dot product instruction (AVX-512 VNNI or AVX-VNNI: ``vpdpbusd``, four products
    per lane), else int16 pairs (``pmaddwd``, two per lane; ``vpdpwssd`` with VNNI)."""
    return 4 if cpu.has("avx512vnni") or cpu.has("avxvnni") else 2


def _pack_integer_matmul(func: Function, node: Node, lanes: int, word: int = 2) -> None:
    """MatMulInteger with a constant 8-bit ``B (K, N)`` (any K: the last word padded with
    zeros) and a constant B zero point or none becomes MatMulIntegerPacked: ``B`` (less its
    zero point: int16 values then, in pairs) in column panels of words along K
    (:func:`~tessera.ops.quant.pack_integer_matmul_weight`): int16 pairs, so that each int32
    lane of the inner loop multiplies two in one ``pmaddwd`` (``vpdpwssd`` with VNNI), or,
    with ``word`` 4 (:func:`integer_word`) and an int8 ``B``, four bytes
    that one ``vpdpbusd`` lane multiplies by four unsigned bytes of A (int8 A offset by 128:
    then B's column sums always come along); reading panels where a row of ``N`` bytes apart
    per step of K was read before; and the A zero point subtracted once per output as
    ``a_zp * colsum(B)`` (B's column sums, a constant) instead of once per product."""
    a, b = node.inputs[0], node.inputs[1]
    a_zp = node.inputs[2] if len(node.inputs) > 2 else None
    b_zp = node.inputs[3] if len(node.inputs) > 3 else None
    if a is None or b is None or not b.is_constant or b.type.ndim != 2 or a.type.ndim < 2:
        return
    if a_zp is not None and a_zp.type.size != 1:
        return
    n = int(b.type.shape[1])
    # panels of whole vectors: of the CPU's width, else of a half or a quarter of it (at least
    # 4 lanes: 20 columns in vectors of 4), which the dense schedule vectorizes as well
    widths = [_panel_width(n, size) for size in (lanes, lanes // 2, lanes // 4) if size >= 4]
    nb = next((w for w in widths if w is not None), None)
    if nb is None:
        return
    weight = np.asarray(b.data)
    if b_zp is not None:
        if not b_zp.is_constant:
            return
        zero = np.asarray(b_zp.data).reshape(-1)
        if zero.size not in (1, n):
            return
        if zero.any():  # B - zb: -255 .. 255, exact in int16 pairs
            weight = weight.astype(np.int16) - zero.astype(np.int16)
    if word == 4 and weight.dtype != np.int8:
        word = 2
    packed = func.constant(pack_integer_matmul_weight(weight, nb, word),
                           f"{b.name}_{'quads' if word == 4 else 'pairs'}{nb}")
    node.op, node.attrs, node.inputs = "MatMulIntegerPacked", {"word": word}, [a, packed]
    if a_zp is None and word == 4 and a.type.dtype == "int8":
        a_zp = func.constant(np.zeros((), np.int8), f"{node.name}_a_zero")
    if a_zp is not None:  # the zero point as a_zp * (B's column sums), once per output
        colsum = func.constant(weight.astype(np.int64).sum(axis=0).astype(np.int32),
                               f"{b.name}_colsum")
        node.inputs += [a_zp, colsum]


def choose_conv_tiling(func: Function, cpu: CPUInfo) -> None:
    """Mark the blocked convolutions whose default register tiles span output rows
    (:func:`~tessera_llvm.schedules.conv2d.tile_plan`): their compute is then written over
    flattened pixels (the ConvNCHWc attribute ``flat_spatial``)."""
    for node in func.nodes:
        if node.op != "ConvNCHWc" or not all(isinstance(d, int)
                                             for d in node.outputs[0].type.shape):
            continue  # run-time sizes: row tiles (a flat tile would divide by the width)
        _, occ, oh, ow, ob = (int(d) for d in node.outputs[0].type.shape)
        w = node.inputs[1].type.shape
        depthwise = int(node.attrs.get("group", 1) or 1) > 1 and int(w[1]) * int(w[4]) == 1
        plan = tile_plan(occ, oh, ow, ob, node.outputs[0].type.dtype.value, cpu, depthwise,
                         math.prod(int(d) for d in w[1:]) * node.inputs[1].type.dtype.itemsize)
        node.attrs["flat_spatial"] = int(plan.flat)


def prepare_region(region: Function, cpu: CPUInfo, opt_level: int = 3
                   ) -> tuple[Function, list[Any]]:
    """The region after the CPU's graph rewrites (layouts, packed weights, conv tilings) and
    its fused groups, ready for :func:`lower_group`."""

    def rewrite(region: Function) -> Function:
        func = region
        if opt_level >= 2:
            func = conv1d_as_conv2d(func)
            func = pad_matmul(func, matmul_padding(cpu))
            func = grouped_pointwise_to_matmul(func, pointwise_as_matmul(cpu))
            func = alter_conv_layout(func, block_choice(cpu))
        else:
            func = region.copy()
        pretranspose_weights(func)
        if opt_level >= 2:
            pack_matmul_weights(func, cpu)
            choose_conv_tiling(func, cpu)
        return func

    return prepare_graph(region, opt_level, rewrite)

#: The last Winograd-transformed weights: (id of the weight value, m) -> (weight value,
#: transformed), so that the tuner, which lowers one group again and again with different
#: knobs, transforms its weights once. A few entries only: they hold their arrays (tens of MB
#: for 512 x 512 channels) after the compile that made them.
_TRANSFORMED: dict[tuple[int, int], tuple[Value, Value]] = {}
_TRANSFORMED_KEPT = 4


def _transformed_weight(w: Value, m: int) -> Value:
    key = (id(w), m)
    hit = _TRANSFORMED.get(key)
    if hit is None or hit[0] is not w:
        assert w.data is not None
        u = winograd_weight_transform(np.asarray(w.data), m)
        while len(_TRANSFORMED) >= _TRANSFORMED_KEPT:
            _TRANSFORMED.pop(next(iter(_TRANSFORMED)))
        hit = _TRANSFORMED[key] = (w, Value(f"{w.name}_winograd{m}", TensorType.of(u), data=u))
    return hit[1]


def winograd_nodes(nodes: list[Node], gte: Any, cpu: CPUInfo,
                   overrides: dict[str, dict[str, Any]] | None) -> list[Node] | None:
    """The group's nodes with its convolution computed by Winograd, when its config (default
    or from ``overrides``) says ``template=winograd``: the ConvNCHWc node reads its weights
    transformed at compile time (``G g G^T``, a new constant) and carries the tile size;
    None when the group keeps the direct convolution. ``gte`` is the group's direct TE (whose
    convolution gives the config space)."""
    conv = find_conv(compute_ops(list(gte.outputs)))
    if conv is None or not winograd.eligible(conv):
        return None
    with warnings.catch_warnings():  # schedule_group warns about bad records once
        warnings.simplefilter("ignore")
        cfg = conv_space(conv, cpu).pick(overrides)
    if cfg.get("template") != "winograd":
        return None
    m = int(cfg["winograd_tile"])
    out: list[Node] = []
    for node in nodes:
        w = node.inputs[1] if node.op == "ConvNCHWc" and len(node.inputs) > 1 else None
        if w is not None and w.is_constant:
            node = copy.copy(node)  # the group's node (and its outputs' producer) unchanged
            node.inputs = [node.inputs[0], _transformed_weight(w, m), *node.inputs[2:]]
            node.attrs = {**node.attrs, "winograd_tile": m,
                          "winograd_multiple": int(cfg["winograd_reg_n"])}
        out.append(node)
    return out


def _group_te(group: Any, cpu: CPUInfo, overrides: dict[str, dict[str, Any]] | None) -> Any:
    """The group's tensor expression: the topi computes with the CPU's row softmax, its
    convolution by Winograd where its config says so."""
    computes = row_softmax_computes(cpu.vector_lanes, 2 * cpu.vector_lanes)
    gte = group_te(group, computes)
    wino = winograd_nodes(group.nodes, gte, cpu, overrides)
    if wino is not None:
        inputs = [v for v in group.inputs if not v.is_constant]
        gte = build_te(wino, inputs, group.outputs,
                       computes={**computes, "ConvNCHWc": conv_nchwc_winograd})
    return gte


def _scheduled(group: Any, name: str, cpu: CPUInfo,
               overrides: dict[str, dict[str, Any]] | None,
               size_bounds: SizeBounds | None = None) -> tuple[Any, Any, PrimFunc]:
    """The group's tensor expression, its schedule and the loop nest ``te.lower`` makes of
    it (before the TIR pipeline); ``size_bounds`` for a group with run-time sizes."""
    gte = _group_te(group, cpu, overrides)
    sched = schedule_group(list(gte.outputs), cpu, overrides, size_bounds=size_bounds)
    return gte, sched, loop_nest(sched.schedule, gte, name, size_bounds)


def scheduled_loop_nest(group: Any, name: str, cpu: CPUInfo,
                        overrides: dict[str, dict[str, Any]] | None = None) -> PrimFunc:
    """The loop nest the group's schedule makes with ``overrides``, before the TIR pipeline
    (its loops still parallel, vectorized or unrolled by kind, its buffers not flattened):
    what the tuner featurises, several times cheaper than :func:`lower_group`."""
    with lowering_errors("llvm", group, keep=(TesseraError,)):
        return _scheduled(group, name, cpu, overrides)[2]
    raise AssertionError("unreachable")  # pragma: no cover - for type checkers


#: The TIR pipeline's options for this backend: the last, partial vector of a loop with a
#: run-time extent runs as masked vector loads and stores (AVX-512 and AVX2 have them; LLVM
#: lowers them to branches elsewhere) instead of one guarded scalar statement per lane.
PIPELINE_OPTIONS = {"predicate_tails": True}


@heavy_work
def lower_group(group: Any, name: str, cpu: CPUInfo,
                overrides: dict[str, dict[str, Any]] | None = None,
                size_order: list[E.Var] | None = None,
                size_bounds: SizeBounds | None = None) -> tuple[LoweredKernel, list[Value]]:
    """One fused group scheduled (with ``overrides``) and lowered to a TIR function named
    ``name``; the kernel and the group's constant inputs. A group of a symbolic region takes
    the region's size variables (``size_order``, with their ``size_bounds``) at run time;
    where ``overrides`` holds records tuned at some of its sizes, it is lowered once per size
    bucket (:mod:`.size_buckets`)."""

    def lower(chosen: dict[str, dict[str, Any]] | None
              ) -> tuple[PrimFunc, tuple[Any, Any, SizeSpec | None]]:
        spec = None
        gte, sched, prim = _scheduled(group, name, cpu, chosen, size_bounds)
        if size_order:
            prim = with_region_sizes(prim, size_order, size_bounds or {}, "llvm")
            spec = size_spec(prim)  # of the nest: the pipeline flattens the buffers
        # the tails of matrix products and convolutions with run-time extents (no-ops for
        # other kernels)
        prim = lower_pipeline(specialize_width_tails(specialize_tails(prim)),
                              PIPELINE_OPTIONS)
        plan = sched.prefetch
        if plan is not None:
            prim = prefetch_next_slice(prim, *plan)
        return prim, (gte, sched, spec)

    with lowering_errors("llvm", group, keep=(TesseraError,)):
        prim, (gte, sched, spec) = lower(overrides)
        variants: list[tuple[E.PrimExpr, PrimFunc]] = []
        buckets = buckets_of(overrides, sched.configs[0]) if size_order and sched.configs \
            else []
        made = bucketed(sched.configs[0], buckets, lower, overrides) if buckets else None
        if made is not None:
            prim, (gte, sched, spec), variants = made.func, made.rest, made.variants
    kernel = LoweredKernel(name=name, func=prim, size_spec=spec, variants=variants,
                           size_buckets=[dict(b.sizes) for b in made.buckets] if made else [],
                           **group_facts(group, gte, sched))
    return kernel, [v for v in gte.inputs if v.is_constant]


def share_kernel(first: LoweredKernel, group: Any, name: str, cpu: CPUInfo,
                 overrides: dict[str, dict[str, Any]] | None = None
                 ) -> tuple[LoweredKernel, list[Value]] | None:
    """The kernel ``name`` of ``group``, structurally identical to the group ``first`` was
    lowered from (:func:`tessera.kernel.group_key.group_key`), running ``first``'s code: its
    parameters are this group's values in the order ``lower_group`` gives them (the group's
    tensor expression is built again, cheaply, for that order and for the constants it reads:
    a Winograd convolution reads its own transformed weights), its symbol an alias of
    ``first``'s function. None (lower the group itself) when the parameters disagree."""
    with lowering_errors("llvm", group, keep=(TesseraError,)):
        gte = _group_te(group, cpu, overrides)
    params = [*gte.inputs, *group.outputs]
    if len(params) != len(first.func.params) or any(
            v.type.dtype.value != p.dtype for v, p in zip(params, first.func.params)):
        return None
    target = first.alias_of or first.name
    kernel = dataclasses.replace(first, name=name, inputs=[v.name for v in gte.inputs],
                                 outputs=[v.name for v in group.outputs], alias_of=target)
    return kernel, [v for v in gte.inputs if v.is_constant]


#: A group under way, for progress reports (:func:`tessera.kernel.lowering.group_text`).
_group_text = group_text


def group_constants(region: Function, groups: list[Any], cpu: CPUInfo,
                    overrides: dict[str, dict[str, Any]] | None = None) -> dict[str, Value]:
    """The constants the kernels of ``groups`` (of ``region``, prepared) read, by name, as
    :func:`lower_region` gives them (transformed Winograd weights included), without lowering
    anything: for a region whose code comes from the kernel cache."""
    constants: dict[str, Value] = {}
    with dim_bounds_scope(region.attrs.get("dim_bounds")):
        for group in groups:
            with lowering_errors("llvm", group, keep=(TesseraError,)):
                gte = _group_te(group, cpu, overrides)
            constants.update((v.name, v) for v in gte.inputs if v.is_constant)
    return constants


def lower_region(region: Function, cpu: CPUInfo, opt_level: int = 3,
                 overrides: dict[str, dict[str, Any]] | None = None,
                 prefix: str = "", progress: Progress | None = None,
                 share_groups: bool = True,
                 prepared: tuple[Function, list[Any]] | None = None,
                 made: Made[LoweredKernel] | None = None) -> LoweredRegion:
    """Lower every node of ``region`` (all of which have topi computes), reporting each fused
    group to ``progress`` (phase :data:`LOWER_PHASE`). The kernels of a symbolic region take
    its size variables at run time (:func:`region_sizes`, ``LoweredKernel.size_spec``).
    Structurally identical groups are lowered once (unless ``share_groups`` is false): the
    kernels of the others run the first one's code (:func:`share_kernel`,
    ``LoweredKernel.alias_of``). ``prepared``: what :func:`prepare_region` gave for
    ``region`` already; ``made`` hears of each kernel as it is made
    (:func:`~tessera.kernel.lowering.lower_groups`)."""
    order, bounds = region_sizes(region)
    func, groups = prepared or prepare_region(region, cpu, opt_level)

    def lower(group: Any, name: str) -> tuple[LoweredKernel, list[Value]]:
        with dim_bounds_scope(region.attrs.get("dim_bounds")):
            return lower_group(group, name, cpu, overrides, order or None, bounds or None)

    def share(first: LoweredKernel, group: Any, name: str
              ) -> tuple[LoweredKernel, list[Value]] | None:
        with dim_bounds_scope(region.attrs.get("dim_bounds")):
            return share_kernel(first, group, name, cpu, overrides)

    kernels, constants = lower_groups(groups, lower, prefix, progress,
                                      share=share if share_groups else None, made=made)
    return LoweredRegion(func, kernels, constants)
