"""Every ``tessera ...`` example runs: those that end ``tessera --help`` and each subcommand's
``--help`` (``tessera.cli.examples``), and those in the shell blocks of README.md, docs/*.md and
the READMEs of the plugins and examples, so that an example cannot rot.

Each block's commands run in order, through ``main([...])`` as the shell would call it, in a
folder of their own holding the files the examples name: ``model.onnx`` (a small two-input
CNN, ``data`` [1,3,224,224] and ``mask`` [1,128]), ``mask.npy``, ``x.npz``, ``calib.npz``
and ``examples/`` (the repository's, for the demo model). A few examples are only parsed and
dry-run (their options checked, nothing compiled), each for a reason listed in ``NOT_RUN``;
the examples for a GPU (a cuda target without ``-arch=``) run where there is one.
"""

from __future__ import annotations

import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper
from tiers import SLOW

from tessera.cli.compile import compile_kwargs
from tessera.cli.examples import EXAMPLES
from tessera.cli.main import build_parser, main
from tessera.cli.shapes import parse_input_shapes
from tessera.plugin.manager import backend_unavailable, get_backend
from tessera.plugin.target import Target

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md")),
        *sorted(ROOT.glob("plugins/*/README.md")), *sorted(ROOT.glob("examples/*/README.md"))]

#: Examples that are parsed and dry-run instead of run: (text in the command, why).
NOT_RUN = [
    ("--ray ", "needs a Ray cluster"),
    ("resnet50", "needs resnet50.onnx from `python -m tessera.testing.light_models`, and "
                 "minutes to compile"),
    ("hetero.onnx", "needs hetero.onnx, written by examples/heterogeneous/run.py"),
]
#: Examples run with cheaper values: (text in the command, why, {flag: value}).
SHRUNK = [
    ("--trials 64", "64 trials of 6 tasks take minutes", {"--trials": "2", "--tasks": "0"}),
]


@dataclass
class Example:
    where: str  # "README.md:153" or "tessera compile --help"
    argv: list[str]  # after "tessera"
    env: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.where}: tessera {shlex.join(self.argv)}"


# -- finding the examples ----------------------------------------------------------------------

def _parse_line(line: str, where: str) -> Example | None:
    """An example from a shell line (``VAR=1 tessera ...  # comment``), None for other commands."""
    if not re.match(r"^\s*([A-Z_][A-Z0-9_]*=\S*\s+)*tessera\s", line):
        return None
    words = shlex.split(line, comments=True)
    env = {}
    while words and re.match(r"^[A-Z_][A-Z0-9_]*=", words[0]):
        key, _, value = words.pop(0).partition("=")
        env[key] = value
    if not words or words[0] != "tessera":
        return None
    return Example(where, words[1:], env)


def doc_blocks(path: Path) -> Iterator[tuple[str, list[Example]]]:
    """``(where, examples)`` for each fenced shell block of a Markdown file that has some."""
    lines = path.read_text().splitlines()
    rel = path.relative_to(ROOT)
    i = 0
    while i < len(lines):
        fence = re.match(r"^\s*```(\w*)\s*$", lines[i])
        i += 1
        if fence is None or fence.group(1) not in ("", "bash", "sh", "shell", "console"):
            if fence is not None:  # skip a block in another language
                while i < len(lines) and not lines[i].strip().startswith("```"):
                    i += 1
                i += 1
            continue
        start, examples = i, []
        while i < len(lines) and not lines[i].strip().startswith("```"):
            number, text = i + 1, lines[i]
            while text.rstrip().endswith("\\") and i + 1 < len(lines):
                i += 1
                text = text.rstrip()[:-1] + " " + lines[i]
            if (example := _parse_line(text, f"{rel}:{number}")) is not None:
                examples.append(example)
            i += 1
        i += 1
        if examples:
            yield f"{rel}:{start}", examples


def help_examples() -> list[Example]:
    """The examples of ``tessera --help`` and of every subcommand's, in the parser's order,
    as the help prints them."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "compile" in a.choices)
    texts = [("tessera --help", parser.epilog or "")]
    texts += [(f"tessera {name} --help", sub.epilog or "")
              for name, sub in subparsers.choices.items()]
    examples = []
    for where, text in texts:
        for line in text.splitlines():
            if (example := _parse_line(line.strip(), where)) is not None:
                examples.append(example)
    return examples


DOC_BLOCKS = [block for path in DOCS for block in doc_blocks(path)]


# -- the folder the examples run in ------------------------------------------------------------

def _small_model() -> onnx.ModelProto:
    """``logits = Gemm(GAP(Relu(Conv(Relu(Conv(data)))))) + ReduceMean(mask)``."""
    rng = np.random.default_rng(0)

    def weight(name: str, *shape: int) -> onnx.TensorProto:
        return numpy_helper.from_array((rng.standard_normal(shape) * 0.1).astype(np.float32),
                                       name)

    make = helper.make_node
    nodes = [make("Conv", ["data", "w1", "b1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
             make("Relu", ["c1"], ["r1"], name="relu1"),
             make("Conv", ["r1", "w2", "b2"], ["c2"], name="conv2", pads=[1, 1, 1, 1],
                  strides=[2, 2]),
             make("Relu", ["c2"], ["r2"], name="relu2"),
             make("GlobalAveragePool", ["r2"], ["gap"], name="gap"),
             make("Flatten", ["gap"], ["flat"], name="flatten"),
             make("Gemm", ["flat", "w3", "b3"], ["fc"], name="fc", transB=1),
             make("ReduceMean", ["mask"], ["m"], name="mask_mean", axes=[1], keepdims=1),
             make("Add", ["fc", "m"], ["logits"], name="add_mask")]
    graph = helper.make_graph(
        nodes, "model",
        [helper.make_tensor_value_info("data", TensorProto.FLOAT, [1, 3, 224, 224]),
         helper.make_tensor_value_info("mask", TensorProto.FLOAT, [1, 128])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])],
        initializer=[weight("w1", 4, 3, 3, 3), weight("b1", 4), weight("w2", 8, 4, 3, 3),
                     weight("b2", 8), weight("w3", 10, 8), weight("b3", 10)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _sandbox(folder: Path, examples: list[Example]) -> None:
    """The files the examples name, in ``folder``."""
    rng = np.random.default_rng(1)
    onnx.save(_small_model(), str(folder / "model.onnx"))
    np.save(folder / "mask.npy", np.ones((1, 128), np.float32))
    np.savez(folder / "x.npz", data=rng.random((1, 3, 224, 224), dtype=np.float32))
    np.savez(folder / "image.npz", image=rng.random((1, 1, 8, 8), dtype=np.float32))
    digits = any("--calibration" in e.argv and any(a.endswith("digits_cnn.onnx") for a in e.argv)
                 for e in examples)
    calibration = ({"image": rng.random((16, 1, 8, 8), dtype=np.float32)} if digits else
                   {"data": rng.random((4, 3, 224, 224), dtype=np.float32),
                    "mask": rng.random((4, 128), dtype=np.float32)})
    np.savez(folder / "calib.npz", **calibration)
    (folder / "examples").symlink_to(ROOT / "examples", target_is_directory=True)


# -- running them ------------------------------------------------------------------------------

def _gpu() -> bool:
    try:
        return backend_unavailable(get_backend("cuda")) is None
    except Exception:  # noqa: BLE001 - not installed
        return False


def _needs_gpu(argv: list[str]) -> bool:
    """A cuda target (cudnn, cublas too) without ``-arch=``: compiling needs the GPU."""
    target = argv[argv.index("--target") + 1] if "--target" in argv else ""
    return bool(re.search(r"\b(cuda|cudnn|cublas)\b", target)) and "-arch=" not in target


def _not_run(example: Example) -> str | None:
    """Why ``example`` is only dry-run here, or None."""
    text = shlex.join(example.argv)
    for fragment, why in NOT_RUN:
        if fragment in text:
            return why
    if _needs_gpu(example.argv) and not _gpu():
        return "needs an NVIDIA GPU (a cuda target without -arch=)"
    if "-sim=tsim" in text and shutil.which("verilator") is None:
        return "needs verilator"
    return None


def _shrunk(argv: list[str]) -> list[str]:
    text = shlex.join(argv)
    for fragment, _, values in SHRUNK:
        if fragment in text:
            argv = list(argv)
            for flag, value in values.items():
                argv[argv.index(flag) + 1] = value
    return argv


def dry_run(argv: list[str]) -> None:
    """Parse ``argv`` and check what can be checked without compiling: the target's backends
    are installed, shapes and pass switches parse."""
    args = build_parser().parse_args(argv)
    if getattr(args, "target", None):
        for kind in Target.parse(args.target).kinds:
            get_backend(kind.name)
    if getattr(args, "input_shapes", None):
        parse_input_shapes(args.input_shapes)
    if hasattr(args, "pass_config") and not args.tuning_records and not args.freeze_input:
        compile_kwargs(args)


def run_examples(examples: list[Example], folder: Path, monkeypatch: pytest.MonkeyPatch,
                 capsys: pytest.CaptureFixture[str]) -> None:
    _sandbox(folder, examples)
    monkeypatch.chdir(folder)
    for example in examples:
        why = _not_run(example)
        if why is not None:
            dry_run(example.argv)
            print(f"dry run ({why}): {example}")
            continue
        with monkeypatch.context() as env:
            for key, value in example.env.items():
                env.setenv(key, value)
            code = main(_shrunk(example.argv))
        captured = capsys.readouterr()
        assert code == 0, f"{example}\n{captured.err}"


def test_examples_are_found() -> None:
    helps = help_examples()
    assert {e.argv[0] for e in helps} >= {"compile", "run", "inspect", "tune", "plugins",
                                          "quantize", "new-plugin"}
    assert len(helps) == sum(len(lines) for lines in EXAMPLES.values())
    readme = [e for where, block in DOC_BLOCKS if where.startswith("README.md")
              for e in block]
    assert any(e.argv[:2] == ["compile", "model.onnx"] for e in readme)
    # continuation lines are joined
    assert any("--freeze-input" in e.argv and "-o" in e.argv for e in readme)


@pytest.mark.slow
def test_help_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                           capsys: pytest.CaptureFixture[str]) -> None:
    run_examples(help_examples(), tmp_path, monkeypatch, capsys)
    assert (tmp_path / "out" / "model.tar").is_file() and (tmp_path / "tuning.jsonl").is_file()


def _doc_block_params() -> list:
    """The blocks as test parameters: those that compile or tune more than once (one to three
    seconds each) are slow, the others run in the fast tier."""
    heavy = ("compile", "tune", "quantize")
    return [pytest.param(where, examples, id=where,
                         marks=SLOW if sum(bool(e.argv) and e.argv[0] in heavy
                                           for e in examples) > 1 else ())
            for where, examples in DOC_BLOCKS]


@pytest.mark.parametrize("where, examples", _doc_block_params())
def test_doc_examples_run(where: str, examples: list[Example], tmp_path: Path,
                          monkeypatch: pytest.MonkeyPatch,
                          capsys: pytest.CaptureFixture[str]) -> None:
    run_examples(examples, tmp_path, monkeypatch, capsys)


def _option_examples() -> list[tuple[str, str, str]]:
    """``(subcommand, flag, value)`` for every quoted ``e.g. "..."`` value in the help of an
    option of the subcommands that take a model."""
    parser = build_parser()
    subparsers = next(a for a in parser._actions if a.choices and "compile" in a.choices)
    found = []
    for name in ("compile", "run", "inspect", "tune"):
        for action in subparsers.choices[name]._actions:
            help_text = action.help or ""
            if "e.g." not in help_text or not action.option_strings:
                continue
            quoted = re.match(r'\s*((?:"[^"]+"(?:,\s*|\s+or\s+)?)+)',
                              help_text.split("e.g.", 1)[1])
            for value in re.findall(r'"([^"]+)"', quoted.group(1) if quoted else ""):
                found.append((name, action.option_strings[-1], value))
    return found


def test_option_help_examples_parse() -> None:
    examples = _option_examples()
    assert ("compile", "--pass-config", "FoldConstants=off") in examples
    for name, flag, value in examples:
        dry_run([name, "model.onnx", flag, value])
