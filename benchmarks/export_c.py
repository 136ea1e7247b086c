"""Models exported as C libraries (``tessera export``) against ``Module.run`` in this process.

Per model: compile with ``for_export=True`` at a fixed size, export with ``export_c`` and link
``lib<prefix>.so``, build ``examples/deploy_c/run_model.c`` against it, check its outputs are
bit-identical to ``Module.run``'s, then time both with the same thread count: the C program's
mean per run over ``--number`` runs (best of ``--repeat`` processes) against the mean of
``Module.run`` over ``--number`` calls (best of ``--repeat``), same inputs. Also: the shared
library's size against the weights it embeds.

    python benchmarks/export_c.py
    python benchmarks/export_c.py --models digits,squeezenet --threads 1,2
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _common import cpu_name, fmt_bytes, geomean

ROOT = Path(__file__).resolve().parents[1]
RUNNER = ROOT / "examples" / "deploy_c" / "run_model.c"
MODELS = ("digits", "squeezenet", "resnet50", "bert")


def _model(name: str):  # noqa: ANN202 - (model, input feeds)
    import numpy as np

    from tessera.testing.bert import BertConfig, bert_inputs, make_bert_encoder
    from tessera.testing.light_models import load_light_model

    if name == "digits":
        x = np.random.default_rng(0).standard_normal((1, 1, 8, 8)).astype(np.float32)
        return str(ROOT / "examples/digits/digits_cnn.onnx"), {"image": x}
    if name in ("squeezenet", "resnet50"):
        light = load_light_model(f"light_{name}")
        return light.model, light.inputs
    if name == "bert":
        cfg = BertConfig(vocab=8192, hidden=256, heads=4, intermediate=1024, layers=4,
                         seq_len=64)
        return make_bert_encoder(cfg), bert_inputs(cfg)
    raise SystemExit(f"unknown model {name!r} (known: {', '.join(MODELS)})")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--number", type=int, default=0,
                    help="runs per measurement (default: about 0.3 s worth)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import numpy as np

    import tessera
    from tessera.deploy import export_c, find_cc
    from tessera_llvm.parallel import num_threads

    cc = find_cc()
    if cc is None:
        print("no C compiler (cc, $CC): nothing to measure")
        return 0
    print(f"machine: {cpu_name()}; C compiler {cc}")
    print(f"{'model':<11} {'thr':>3} {'C ms':>9} {'run ms':>9} {'C/run':>6}  {'library':>9} "
          f"{'weights':>9}  identical")
    ratios = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, feeds = _model(name)
            mod = tessera.compile(model, "llvm", for_export=True,
                                  input_shapes={k: list(v.shape) for k, v in feeds.items()})
            folder = Path(tmp) / name
            result = export_c(mod, folder, prefix="model")
            if result.shared_library is None:
                print(f"{name}: not linked ({result.link_note})")
                continue
            exe = folder / "run_model"
            subprocess.run([cc, "-O2", "-DPREFIX=model", '-DHEADER="model.h"', "-I", str(folder),
                            str(RUNNER), "-L", str(folder), "-lmodel",
                            f"-Wl,-rpath,{folder}", "-o", str(exe)], check=True)
            ins = []
            for i, n in enumerate(mod.input_names):
                path = folder / f"in{i}.bin"
                np.ascontiguousarray(feeds[n]).tofile(path)
                ins.append(str(path))
            outs = [str(folder / f"out{i}.bin") for i in range(len(mod.output_names))]
            expected = mod.run(feeds)
            for threads in (int(t) for t in args.threads.split(",")):
                with num_threads(threads):
                    mod.run(feeds)
                    start = time.perf_counter()
                    mod.run(feeds)
                    once = time.perf_counter() - start
                    number = args.number or max(3, int(0.3 / max(once, 1e-6)))
                    py = []
                    for _ in range(args.repeat):
                        start = time.perf_counter()
                        for _ in range(number):
                            mod.run(feeds)
                        py.append((time.perf_counter() - start) * 1e3 / number)
                c = []
                for _ in range(args.repeat):
                    proc = subprocess.run([str(exe), str(threads), str(number), *ins, "--",
                                           *outs], capture_output=True, text=True, check=True)
                    c.append(float(proc.stdout.split()[0]))
                same = all(np.fromfile(p, np.uint8).tobytes() ==
                           np.ascontiguousarray(expected[n]).tobytes()
                           for p, n in zip(outs, mod.output_names))
                ratio = min(c) / min(py)
                ratios.append(ratio)
                print(f"{name:<11} {threads:>3} {min(c):9.4f} {min(py):9.4f} {ratio:6.2f}  "
                      f"{fmt_bytes(result.shared_library.stat().st_size):>9} "
                      f"{fmt_bytes(result.weights_bytes):>9}  {'yes' if same else 'NO'}")
    if ratios:
        print(f"geomean C/Module.run {geomean(ratios):.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
