"""The kit's claimed-only conformance through its command (``python -m
tessera.testing.conformance --target convnpu --claimed-only``) for a Conv-only NPU
(tests/conv_npu.py): a case the backend ran no node of is never its failure. It is *declined*
(with the reason the backend gave, as the partition report has it) or, when the backends that
ran it failed, *fallback failed*; only the cases it ran nodes of count for or against it."""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from conv_npu import ConvNPU

from tessera.testing.conformance import KnownFailure, main, read_known_failures
from tessera.testing.kit import NodeConformance, register_backend

#: A case every CPU fallback gets wrong (tests/conformance/known_failures*.txt list it): its
#: op, MaxUnpool, is none of the NPU's.
FALLBACK_FAILS = "test_maxunpool_export_with_output_shape"
#: A case of a 1-D convolution (the NPU runs 2-D ones only).
ONE_D = "test_causal_conv_with_state_basic_expanded"
#: What the kit wrote before: the fallback's failure as the NPU's wrong result, and the 1-D
#: convolution without the reason the NPU gave for declining it.
OLD_BASELINE = f"""\
## wrong results
{FALLBACK_FAILS}  # output y: values differ (max abs err 8.0)

## not claimed (the backend's patterns or checks refuse these nodes)
{ONE_D}  # convnpu ran none of its nodes (ops Concat, Conv, Slice)
"""


@dataclass
class Run:
    entries: dict[str, KnownFailure]
    stdout: str


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Run]:
    """The command run once for the NPU's Conv cases and the MaxUnpool ones, rewriting a
    baseline that holds what the kit used to write."""
    baseline = tmp_path_factory.mktemp("convnpu") / "known_failures.txt"
    baseline.write_text(OLD_BASELINE)
    out = io.StringIO()
    with register_backend(ConvNPU()), contextlib.redirect_stdout(out), \
            warnings.catch_warnings():
        warnings.simplefilter("ignore")  # old-opset cases warn as they are upgraded
        code = main(["--target", "convnpu", "--claimed-only", "--ops", "Conv,MaxUnpool",
                     "--failures", "--write-known-failures", str(baseline)])
    assert code == 0
    yield Run(read_known_failures(baseline), out.getvalue())


def test_a_case_only_the_fallback_failed_is_not_the_backends_failure(run: Run) -> None:
    with register_backend(ConvNPU()):
        suite = NodeConformance("convnpu", ops={"MaxUnpool"})
        result = suite.run(next(c for c in suite.cases if c.name == FALLBACK_FAILS))
        verdict, _ = suite.outcome(result)
    assert result.status not in ("passed", "unclaimed"), (
        f"the CPU fallback no longer fails {FALLBACK_FAILS}: pick another case that "
        f"tests/conformance/known_failures*.txt list")
    assert result.status == "fallback failed"
    assert "convnpu" not in result.nodes and result.reason.startswith(
        "fallback failed: convnpu ran none of its nodes (ops MaxUnpool)")
    assert verdict == "skip"  # an op it does not claim: none of its business
    # the command does not list it (and drops what the kit used to file as its wrong result)
    assert FALLBACK_FAILS not in run.entries
    assert not [e for e in run.entries.values() if e.group == "wrong results"]
    assert f"now passes: {FALLBACK_FAILS}" in run.stdout
    assert "0 failed" in run.stdout


def test_a_case_the_backend_declined_is_listed_with_its_reason(run: Run) -> None:
    entry = run.entries[ONE_D]
    assert entry.group.startswith("declined")
    assert entry.reason == "convnpu declined Conv: only 2-D convolutions (this one is 1-D)"
    declined = sorted(n for n, e in run.entries.items() if e.group == entry.group)
    assert len(declined) == 13 and all("causal_conv" in n for n in declined)
    assert f"DECLINED {ONE_D}: declined: convnpu declined Conv" in run.stdout
    assert "13 declined (with its reason)" in run.stdout
    with register_backend(ConvNPU()):  # in pytest: skipped with that reason, not failed
        suite = NodeConformance("convnpu", ops={"Conv"})
        verdict, message = suite.outcome(suite.run(next(c for c in suite.cases
                                                        if c.name == ONE_D)))
    assert (verdict, message) == ("skip", f"declined: {entry.reason}")


def test_the_2d_convolutions_it_ran_pass_and_are_not_listed(run: Run) -> None:
    assert "claimed-only for 'convnpu': 6 cases passed, 0 failed" in run.stdout
    assert "nodes run in passing cases: convnpu 6" in run.stdout
    assert not [n for n in run.entries if "causal" not in n]
    assert run.entries.keys() == {n for n in run.entries if n.startswith("test_causal_conv")}


def test_a_new_baseline_names_the_backend(tmp_path: Path) -> None:
    baseline = tmp_path / "known.txt"
    with register_backend(ConvNPU()), contextlib.redirect_stdout(io.StringIO()):
        main(["--target", "convnpu", "--claimed-only", "-k", ONE_D,
              "--write-known-failures", str(baseline)])
    text = baseline.read_text()
    assert text.startswith("# Known failures of the convnpu backend")
    assert '--target "convnpu" --claimed-only' in text and "reference backend" not in text
    assert read_known_failures(baseline)[ONE_D].group.startswith("declined")
