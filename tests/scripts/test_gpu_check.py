"""scripts/gpu_check.py (bash scripts/gpu-check.sh): without a GPU it says so, runs what needs
none, marks the GPU steps skipped and exits 0; a step past its time limit is killed with its
children and the next one still runs; the output parsers read the real tools' formats."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "scripts" / "gpu_check.py"
GPU_ROWS = ["race", "nan", "models-cuda", "models-libs", "hetero", "threads", "bench-cuda",
            "bench-libs", "sanitizer"]


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, SCRIPT.parent / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


gc = _load("gpu_check")
steps = _load("gpu_check_steps")


def test_the_worker_names_are_the_steps_workers() -> None:
    assert sorted(gc.WORKER_NAMES) == sorted(steps.WORKERS)


def _gpu_missing() -> str | None:
    try:
        from tessera_cuda.driver import driver_missing
    except ImportError as err:
        return str(err)
    return driver_missing()


def table_rows(text: str) -> dict[str, tuple[str, str]]:
    """step -> (status, figures) from the markdown table."""
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split(" | ")]
        if line.startswith("| ") and len(cells) == 4 and cells[0] != "step":
            rows[cells[0]] = (cells[1], cells[3])
    return rows


def _alive(pid: int) -> bool:
    """The process exists and is not a zombie waiting to be reaped."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


# -- the whole script without a GPU --------------------------------------------------------------
@pytest.mark.skipif(_gpu_missing() is None, reason="this machine has a GPU: the full check "
                                                   "takes minutes (run scripts/gpu-check.sh)")
@pytest.mark.slow
def test_without_a_gpu_it_says_so_skips_the_gpu_steps_and_exits_0(tmp_path: Path) -> None:
    out = tmp_path / "out"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "no GPU: " in proc.stdout
    table = (out / gc.TABLE_FILE).read_text()
    assert table in proc.stdout
    rows = table_rows(table)
    assert rows["versions"][0] == "pass" and "NVRTC" in rows["versions"][1]
    assert rows["smoke"][0] == "pass" and "cuda -arch=sm_90" in rows["smoke"][1]
    assert "cubin" in rows["smoke"][1]
    tests = [name for name in rows if name.endswith(".py")]  # the pytest steps
    assert {"plugins/cuda/tests/test_gpu.py", "plugins/cudnn/tests/test_models.py"} <= set(tests)
    for name in GPU_ROWS + tests:
        assert rows[name] == ("skip", "no GPU"), (name, rows.get(name))
    assert (out / "versions.log").exists() and (out / "smoke.log").exists()
    data = json.loads((out / gc.JSON_FILE).read_text())
    assert data["gpu_known"] and data["gpu_missing"]


def test_only_keeps_the_versions_step_and_refuses_unknown_names(tmp_path: Path) -> None:
    args = gc.parse_args(["--only", "race,bench", "--out", str(tmp_path)])
    names = [s.name for s in gc.build_plan(args, tmp_path)]
    assert names == ["versions", "race", "bench-cuda", "bench-libs"]
    args = gc.parse_args(["--only", "plugins/cuda/tests/test_gpu.py"])
    assert [s.name for s in gc.build_plan(args, tmp_path)] == ["versions",
                                                               "plugins/cuda/tests/test_gpu.py"]
    with pytest.raises(SystemExit, match="unknown step"):
        gc.build_plan(gc.parse_args(["--only", "smoke,nope"]), tmp_path)


def test_the_output_folder_inside_the_repository_ignores_itself(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    monkeypatch.setattr(gc, "ROOT", repo)
    assert not (gc.prepare_out(tmp_path / "elsewhere") / ".gitignore").exists()
    assert (gc.prepare_out(repo / "out") / ".gitignore").read_text().strip().endswith("*")
    assert not (gc.prepare_out(repo) / ".gitignore").exists()


# -- time limits ---------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_step_past_its_limit_is_killed_with_its_children(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"
    code = textwrap.dedent(f"""
        import subprocess, sys, time
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        open({str(pidfile)!r}, "w").write(str(child.pid))
        print("started", flush=True)
        time.sleep(60)
    """)
    step = gc.Step("sleeper", "self-test", 2.0, [sys.executable, "-c", code], needs_gpu=False)
    start = time.monotonic()
    row = gc.run_step(step, tmp_path)
    assert time.monotonic() - start < 15
    assert row.status == "timeout" and row.figures[0] == "timeout after 2 s"
    assert "started" in (tmp_path / row.log).read_text()
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(pid), "the step's child outlived the time-out"


@pytest.mark.slow
def test_after_a_timeout_the_next_step_runs_and_the_exit_status_is_1(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, str(SCRIPT), "--self-test-timeout", "--out",
                           str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    rows = table_rows((tmp_path / gc.TABLE_FILE).read_text())
    assert rows["self-test-sleep"] == ("timeout", "timeout after 1 s")
    assert rows["self-test-after"] == ("pass", "ran")


def test_a_spent_budget_skips_the_rest_and_fails_the_run(tmp_path: Path) -> None:
    checker = gc.Checker(tmp_path, budget=3.0)
    rows = checker.run(gc.self_test_plan(tmp_path)[1:])
    assert rows[0].status == "skip" and "budget was spent" in rows[0].figures[0]
    assert checker.exit_code() == 1


def test_a_gpu_step_is_skipped_where_there_is_no_gpu(tmp_path: Path) -> None:
    checker = gc.Checker(tmp_path, budget=60.0)
    checker.gpu_missing = "no driver"
    step = gc.Step("needs", "self-test", 5.0, [sys.executable, "-c", "raise SystemExit(1)"])
    assert [(r.status, r.figures) for r in checker.run([step])] == [("skip", ["no GPU"])]
    assert checker.exit_code() == 0


# -- worker steps -------------------------------------------------------------------------------
def test_a_worker_that_raises_is_a_fail_row_with_the_error(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(rec: object, opts: object) -> None:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setitem(steps.WORKERS, "smoke", broken)
    result = tmp_path / "smoke.json"
    assert gc.run_worker(gc.parse_args(["--worker", "smoke", "--result", str(result)])) == 1
    data = gc.read_result(result)
    assert data["status"] == "FAIL" and "ZeroDivisionError: division by zero" in data["figures"][0]


def test_a_worker_that_dies_keeps_its_figures_and_fails(tmp_path: Path) -> None:
    result = tmp_path / "w.json"
    code = (f"import json, os; open({str(result)!r}, 'w').write(json.dumps("
            "{'status': 'running', 'figures': ['half done']})); os._exit(3)")
    step = gc.Step("w", "self-test", 20.0, [sys.executable, "-c", code], result=result)
    row = gc.run_step(step, tmp_path)
    assert row.status == "FAIL" and row.figures[0] == "half done"
    assert "exit code 3" in row.figures[1]


def test_a_worker_that_passes_but_exits_nonzero_fails(tmp_path: Path) -> None:
    result = tmp_path / "w.json"
    code = (f"import json, os; open({str(result)!r}, 'w').write(json.dumps("
            "{'status': 'pass', 'figures': ['fine']})); os._exit(7)")
    row = gc.run_step(gc.Step("w", "t", 20.0, [sys.executable, "-c", code], result=result),
                      tmp_path)
    assert row.status == "FAIL" and row.figures == ["fine", "exit code 7 after reporting pass"]


def test_models_compare_with_the_tolerances() -> None:
    import numpy as np

    want = np.ones((2, 3), np.float32)
    assert steps.matches(want + 1e-5, want, 1e-4, 1e-4)
    assert not steps.matches(want + 1e-2, want, 1e-4, 1e-4)
    nan = want.copy()
    nan[0, 0] = np.nan
    assert not steps.matches(nan, want, 1e-1, 1e-1)
    assert steps.max_diff(want + 0.5, want) == pytest.approx(0.5)


def test_the_cuda_graph_summary_reads_each_cuda_region() -> None:
    from types import SimpleNamespace as NS

    def module(*infos: dict) -> NS:
        return NS(compiled={f"r{i}": NS(backend="cuda", info=info) for i, info in
                            enumerate(infos)} | {"lib": NS(backend="cudnn", info={})})

    assert steps._graph_summary(module({"cuda_graph": True})) == "cuda graph: yes (1/1 regions)"
    assert steps._graph_summary(module({})) == "cuda graph: unknown (no info['cuda_graph'])"
    text = steps._graph_summary(module({"cuda_graph": True}, {"cuda_graph": "capture failed"}))
    assert text == "cuda graph: 1/2 regions (r1: capture failed)"


# -- the command steps' parsers, on the real tools' output ----------------------------------------
def test_pytest_counts_come_from_a_real_run(tmp_path: Path) -> None:
    test_file = tmp_path / "test_sample.py"
    test_file.write_text(textwrap.dedent("""
        import pytest

        @pytest.mark.gpu
        def test_ok(): pass

        @pytest.mark.gpu
        def test_bad(): assert 1 == 2

        @pytest.mark.gpu
        def test_skipped(): pytest.skip("no GPU")

        def test_not_gpu(): pass
    """))
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    gpu: needs a GPU\n")
    step = gc.pytest_step(str(test_file))
    row = gc.run_step(step, tmp_path)
    assert row.status == "FAIL", (tmp_path / row.log).read_text()
    assert row.figures == ["1 failed, 1 passed, 1 skipped", "failed: test_bad"]


def test_pytest_counts_of_a_killed_run() -> None:
    text = ("plugins/cuda/tests/test_gpu.py::test_a PASSED [ 10%]\n"
            "plugins/cuda/tests/test_gpu.py::test_b[x] FAILED [ 20%]\n"
            "plugins/cuda/tests/test_gpu.py::test_c SKIPPED (no) [ 30%]\n")
    assert gc.parse_pytest(text, -15) == (
        "FAIL", ["1 passed, 1 failed, 1 skipped reported so far"])
    assert gc.parse_pytest("collected 3 items / 3 deselected", 5)[0] == "skip"


def test_benchmark_figures_come_from_its_own_table() -> None:
    code = textwrap.dedent("""
        import sys
        sys.path.insert(0, "benchmarks")
        import gpu_vs_torch as b

        ok = b.Result("resnet50", "ResNet-50", 1, ms={"tessera": [2.0], "eager": [4.0]},
                      max_abs_diff={"tessera": 3e-6})
        ok16 = b.Result("bert", "BERT 4x768 s128", 16, ms={"tessera": [9.0], "eager": [6.0]},
                        max_abs_diff={"tessera": 1e-5})
        bad = b.Result("bert", "BERT 4x768 s128", 1, error="tessera: CompileError: boom")
        b.print_table([ok, ok16, bad])
        b.print_library_goals([ok, ok16])
    """)
    text = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                          text=True, timeout=60, check=True).stdout
    status, figures = gc.parse_bench(text, 0)
    assert status == "pass"
    assert figures[:3] == ["ResNet-50 b1 2.000 ms = 0.50x eager (diff 3.0e-06)",
                           "BERT b16 9.000 ms = 1.50x eager (diff 1.0e-05)", "BERT b1 FAILED"]
    assert figures[3] == "geomean 0.87x eager"
    assert figures[4].startswith("goal: ResNet-50 batch 1 at most 0.6x PyTorch eager: 0.50x, met")
    assert gc.parse_bench("Traceback ...\nRuntimeError: x\n", 1) == (
        "FAIL", ["no table; last line: RuntimeError: x"])


def test_heterogeneous_and_sanitizer_figures() -> None:
    text = "logits: max |tessera - reference| = 2.40e-04\nlatency: median 1.234 ms\n"
    assert gc.parse_hetero(text, 0) == ("pass", ["max |tessera - reference| = 2.40e-04",
                                                 "latency: median 1.234 ms"])
    assert gc.parse_hetero("not run: cuda:0: no driver\n", 0)[0] == "FAIL"
    assert gc.parse_sanitizer("========= ERROR SUMMARY: 0 errors\n", 0) == (
        "pass", ["memcheck: 0 error(s)"])
    assert gc.parse_sanitizer("========= ERROR SUMMARY: 2 errors\n", 3) == (
        "FAIL", ["memcheck: 2 error(s)"])
