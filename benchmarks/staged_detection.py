"""What staged execution costs: a detection head ending in NonMaxSuppression on run-time images,
Tessera against onnxruntime.

The head: image ``[1, C, S, S]`` -> Conv 3x3 -> Relu -> Conv 1x1 to 4 box + ``classes`` score
channels -> Sigmoid -> boxes ``[1, S*S, 4]`` and scores ``[1, classes, S*S]`` ->
NonMaxSuppression -> the selected boxes Gathered and their scores. Tessera compiles it in
stages (:mod:`tessera.runtime.staged`): the convolutions once, NMS on the host, the Gathers
per number of selected boxes. ``--images`` random images are run round-robin after one warm
pass (every count of selected boxes they give compiled); the table gives the median ms per
call of each engine in the same process with the same threads, and Tessera's split: stage 1,
the host NMS and the rest (mean per call)::

    python benchmarks/staged_detection.py --target llvm --threads 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Any

from _common import cpu_name, limit_threads, ort_session


def detection_head(channels: int, size: int, classes: int, threshold: float,
                   seed: int = 0) -> Any:
    import numpy as np
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    cells = size * size
    out = 4 + classes
    inits = [
        numpy_helper.from_array((rng.standard_normal((32, channels, 3, 3)) * 0.1
                                 ).astype(np.float32), "w1"),
        numpy_helper.from_array(rng.standard_normal(32).astype(np.float32) * 0.1, "b1"),
        numpy_helper.from_array((rng.standard_normal((out, 32, 1, 1)) * 0.4
                                 ).astype(np.float32), "w2"),
        numpy_helper.from_array(np.array([0], np.int64), "zero1"),
        numpy_helper.from_array(np.array([4], np.int64), "four"),
        numpy_helper.from_array(np.array([out], np.int64), "all"),
        numpy_helper.from_array(np.array([1], np.int64), "axis1"),
        numpy_helper.from_array(np.array([1, 4, cells], np.int64), "box_shape"),
        numpy_helper.from_array(np.array([1, classes, cells], np.int64), "cls_shape"),
        numpy_helper.from_array(np.array([float(size)], np.float32), "scale"),
        numpy_helper.from_array(np.array([100], np.int64), "max_out"),
        numpy_helper.from_array(np.array([0.4], np.float32), "iou"),
        numpy_helper.from_array(np.array([threshold], np.float32), "thr"),
        numpy_helper.from_array(np.array(2, np.int64), "col2"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
    ]
    node = helper.make_node
    nodes = [
        node("Conv", ["image", "w1", "b1"], ["t"], pads=[1, 1, 1, 1]),
        node("Relu", ["t"], ["feat"]),
        node("Conv", ["feat", "w2"], ["maps"]),
        node("Sigmoid", ["maps"], ["act"]),
        node("Slice", ["act", "zero1", "four", "axis1"], ["box_map"]),
        node("Slice", ["act", "four", "all", "axis1"], ["cls_map"]),
        node("Reshape", ["box_map", "box_shape"], ["box_flat"]),
        node("Transpose", ["box_flat"], ["box_unit"], perm=[0, 2, 1]),
        node("Mul", ["box_unit", "scale"], ["boxes"]),
        node("Reshape", ["cls_map", "cls_shape"], ["scores"]),
        node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "thr"], ["selected"]),
        node("Gather", ["selected", "col2"], ["box_index"], axis=1),
        node("Gather", ["boxes", "zero"], ["boxes0"], axis=0),
        node("Gather", ["boxes0", "box_index"], ["picked"], axis=0),
        node("GatherND", ["scores", "selected"], ["picked_scores"]),
    ]
    graph = helper.make_graph(
        nodes, "head", [helper.make_tensor_value_info("image", TensorProto.FLOAT,
                                                      [1, channels, size, size])],
        [helper.make_tensor_value_info("picked", TensorProto.FLOAT, [None, 4]),
         helper.make_tensor_value_info("picked_scores", TensorProto.FLOAT, [None])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def median_ms(fn: Any, runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--target", default="llvm")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--sizes", default="8x20,16x40",
                    help="comma-separated heads channels x side (default 8x20,16x40)")
    ap.add_argument("--classes", type=int, default=3)
    ap.add_argument("--threshold", type=float, default=0.8, help="NMS score threshold")
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--runs", type=int, default=40)
    args = ap.parse_args(argv)
    limit_threads(args.threads)

    import numpy as np

    import tessera

    print(f"machine: {cpu_name()}; {args.threads} threads; target {args.target}; "
          f"{args.classes} classes; {args.images} images round-robin")
    print(f"{'head':>7} {'boxes':>9} {'compile s':>9} {'T ms':>7} {'ort ms':>7} {'T/ort':>6} "
          f"{'stage1':>7} {'host':>7} {'rest':>7}")
    for size in args.sizes.split(","):
        channels, side = (int(v) for v in size.split("x"))
        model = detection_head(channels, side, args.classes, args.threshold)
        start = time.perf_counter()
        mod = tessera.compile(model, target=args.target)
        compile_s = time.perf_counter() - start
        session = ort_session(model, args.threads)
        rng = np.random.default_rng(1)
        images = [rng.standard_normal((1, channels, side, side)).astype(np.float32)
                  for _ in range(args.images)]
        counts = []
        for im in images:  # warm: every count of selected boxes compiled, results checked
            got = mod.run(image=im)
            want = session.run(None, {"image": im})
            for g, w in zip(got.values(), want):
                np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-5)
            counts.append(len(want[1]))
        turn = iter(range(10**9))

        def tessera_call(mod: Any = mod, images: list[Any] = images, turn: Any = turn) -> object:
            return mod.run(image=images[next(turn) % len(images)])

        def ort_call(session: Any = session, images: list[Any] = images,
                     turn: Any = turn) -> object:
            return session.run(None, {"image": images[next(turn) % len(images)]})

        for fn in (tessera_call, ort_call):
            for _ in range(len(images)):
                fn()
        before = mod.cache_info()
        t_ms = median_ms(tessera_call, args.runs)
        after = mod.cache_info()
        time.sleep(0.2)  # onnxruntime's workers spin after its runs: let them stop
        o_ms = median_ms(ort_call, args.runs)
        host_ms = (after.host_seconds - before.host_seconds) * 1000 / max(
            after.calls - before.calls, 1)
        s1_feeds = {"image": images[0]}
        s1_ms = median_ms(lambda f=s1_feeds, m=mod: m.stage1.run(f), args.runs)
        rest_ms = max(t_ms - s1_ms - host_ms, 0.0)
        print(f"{size:>7} {min(counts):>4}-{max(counts):<4} {compile_s:9.2f} {t_ms:7.3f} "
              f"{o_ms:7.3f} {t_ms / o_ms:6.2f} {s1_ms:7.3f} {host_ms:7.3f} {rest_ms:7.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
