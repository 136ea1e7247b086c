"""Progress within a region: the ``CompileOptions.progress`` contract and how it is shown.

A backend reports (phase, units done, total) while it compiles; ``tessera.compile(...,
progress=True)`` shows the reports as plain, throttled lines in a log and as one bar redrawn
in place on a terminal. A backend that never reports compiles as before.
"""

from __future__ import annotations

import io
import pickle
from collections.abc import Iterator
from typing import Any

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from toy_backends import ToyBackend

import tessera
import tessera.progress
from tessera.ir.graph import Function
from tessera.partition.patterns import Pattern
from tessera.plugin.backend import CompiledRegion, CompileOptions
from tessera.plugin.target import TargetKind
from tessera.progress import (
    Progress,
    ProgressEvent,
    ProgressPrinter,
    StatusLine,
    format_event,
)
from tessera.testing.kit.registration import register_backend


class Clock:
    """A clock the test moves by hand."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


class Reporting(ToyBackend):
    """Reports ``steps`` units of one phase, ``seconds`` apart on ``clock``, per region."""

    def __init__(self, clock: Clock, steps: int = 40, seconds: float = 0.125) -> None:
        super().__init__("toyprog", [Pattern("Relu"), Pattern("Neg")])
        self.clock, self.steps, self.seconds = clock, steps, seconds
        self.seen: list[Progress] = []

    def compile(self, region: Function, target: TargetKind,
                options: CompileOptions) -> CompiledRegion:
        self.seen.append(options.progress)
        for i in range(self.steps):
            self.clock.now += self.seconds
            options.progress.update("lowering", i + 1, self.steps, f"kernel{i}")
        return super().compile(region, target, options)


@pytest.fixture
def clock(monkeypatch: pytest.MonkeyPatch) -> Clock:
    fake = Clock()
    monkeypatch.setattr(tessera.progress, "_now", fake)
    return fake


@pytest.fixture
def reporting(clock: Clock) -> Iterator[Reporting]:
    backend = Reporting(clock)
    registered = register_backend(backend, "tessera-toyprog", "0.1")
    yield backend
    registered.remove()


def _model() -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                               helper.make_node("Neg", ["r"], ["y"], name="neg")],
                              "g", [x], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_compile_shows_throttled_plain_lines_in_a_log(reporting: Reporting,
                                                      capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    module = tessera.compile(_model(), target="toyprog, ref", progress=True)
    x = np.array([[-1, 2, -3], [4, -5, 6]], np.float32)
    np.testing.assert_array_equal(module.run(x=x)["y"], -np.maximum(x, 0))
    err = capsys.readouterr().err
    assert "\r" not in err and "\x1b" not in err
    lines = [line for line in err.splitlines() if "region0_toyprog: lowering" in line]
    # 40 reports over 5 s: one line a second, each with its count, percentage and ETA
    assert [line.split("lowering ")[1].split()[0] for line in lines] == \
        ["8/40", "16/40", "24/40", "32/40", "40/40"]
    assert "(20%), ETA 4.0 s: kernel7" in lines[0]
    assert lines[0].startswith("tessera: [")
    # the backend's reporter is live only while it compiles
    assert reporting.seen[0].enabled and not module.compile_options.progress.enabled


def test_compile_draws_one_bar_on_a_terminal(clock: Clock) -> None:
    out = Terminal()
    say = ProgressPrinter(stream=out)
    say("[1/1] compiling region0")
    region = say.region("region0")
    assert region is not None
    progress = region.progress()
    for i in range(10):
        clock.now += 0.0625
        progress.update("codegen", i + 1, 10)
    region.close()
    say("planning memory")
    text = out.getvalue()
    lines = text.split("\n")
    assert lines[0].endswith("compiling region0") and lines[1].endswith("planning memory")
    assert lines[1].count("\r") == 6  # 5 redraws (at most 10 a second), then erased
    assert "[############------------] 5/10, ETA 0.3 s" in lines[1]
    assert lines[1].split("\r")[-1].startswith("\x1b[Ktessera: [")


def test_a_backend_that_never_reports_compiles_silently(capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    module = tessera.compile(_model(), target="ref", progress=True)
    assert module.run(x=np.ones((2, 3), np.float32))["y"].shape == (2, 3)
    err = capsys.readouterr().err
    assert "compiling region0_ref" in err and ": lowering" not in err
    assert "\r" not in err


def test_no_progress_means_no_output(reporting: Reporting,
                                     capsys: pytest.CaptureFixture[str]) -> None:
    tessera.compile(_model(), target="toyprog, ref")
    assert capsys.readouterr().err == ""
    assert not reporting.seen[0].enabled  # reports cost one call, nobody listens


def test_progress_track_reports_each_item_and_the_end() -> None:
    events: list[ProgressEvent] = []
    items = list(Progress(events.append).track(["a", "b"], "lowering", str.upper))
    assert items == ["a", "b"]
    assert events == [ProgressEvent("lowering", 0, 2, "A"), ProgressEvent("lowering", 1, 2, "B"),
                      ProgressEvent("lowering", 2, 2)]
    assert list(Progress().track([1, 2], "x")) == [1, 2]  # no listener: nothing to do


def test_progress_pickles_to_a_silent_reporter() -> None:
    """Worker processes (tuning) receive CompileOptions pickled: their reports go nowhere."""
    events: list[Any] = []
    options = CompileOptions(progress=Progress(events.append))
    copy = pickle.loads(pickle.dumps(options))
    copy.progress.update("lowering", 1, 2)
    assert events == [] and not copy.progress.enabled


def test_a_closed_stream_stops_reporting_without_failing(clock: Clock) -> None:
    stream = io.StringIO()
    region = ProgressPrinter(stream=stream, tty=False).region("r")
    assert region is not None
    progress = region.progress()
    stream.close()
    clock.now += 2.0
    progress.update("lowering", 1, 2)  # ValueError: I/O operation on closed file
    progress.update("lowering", 2, 2)
    assert not progress.enabled


def test_status_line_throttles_plain_lines(clock: Clock) -> None:
    out = io.StringIO()
    line = StatusLine(out, log_interval=1.0)
    shown = []
    for i in range(1, 31):  # 30 updates over 7.5 s: one line a second
        clock.now += 0.25
        shown.append(line.show(f"step {i}"))
    assert out.getvalue().splitlines() == [f"step {i}" for i in range(4, 31, 4)]
    line.end("done")  # always shown
    assert out.getvalue().endswith("step 28\ndone\n")


def test_format_event_in_a_log_and_on_a_terminal() -> None:
    event = ProgressEvent("lowering fused groups", 15, 60, "fused_n3 (Conv+Relu)")
    assert format_event("region0_llvm", event, 3.0, tty=False) == \
        "region0_llvm: lowering fused groups 15/60 (25%), ETA 9.0 s: fused_n3 (Conv+Relu)"
    assert format_event("region0_llvm", event, 3.0, tty=True) == \
        ("  region0_llvm lowering fused groups [######------------------] 15/60, ETA 9.0 s: "
         "fused_n3 (Conv+Relu)")
    start = ProgressEvent("LLVM optimize + codegen", 0, 2, "optimizing")
    assert format_event("r", start, 0.5, tty=False) == "r: LLVM optimize + codegen 0/2 (0%): " \
        "optimizing"
    assert "ETA 1 min 30 s" in format_event("r", ProgressEvent("p", 1, 4), 30.0, tty=False)
