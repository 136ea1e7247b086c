"""The first contact with a GPU machine in one command: every check, one table.

    python scripts/gpu_check.py [--out DIR] [--only STEP,...] [--quick] [--sanitizer]
    bash scripts/gpu-check.sh --install          # on the lent GPU machine, as it is

Each step runs in a subprocess of its own with its own time limit (killed with its children
when it runs past it; the table then says "timeout after N s"), so one hang costs one row, and
the whole run stays within ``--budget`` seconds (a step gets at most the time left). Every
step's output goes to ``DIR/<step>.log``; the table goes to ``DIR/gpu-check.md`` (and
``DIR/gpu-check.json``) after every step, and is printed at the end.

Steps (group names for ``--only``; ``versions`` always runs, it finds the GPU):

- ``versions``: GPU, driver, CUDA driver API, NVRTC, cuDNN, cuBLASLt, PyTorch, onnxruntime;
- ``smoke``: a conv+batchnorm+add+relu block on ``cuda`` against ``ref``, and whether its
  regions ran as CUDA graphs (without a GPU: cross-compiled for ``cuda -arch=sm_90``);
- ``race``: constants uploaded with ``from_host`` and copied at once on the stream, 20 x 256 MiB;
- ``nan``: the arena filled with NaN before a run of a conv+relu net (``cuda -libs=cudnn,cublas``
  and ``cuda``): no NaN may reach the output;
- ``models``: light models and a BERT-style encoder on ``cuda`` and on the libraries against
  onnxruntime (else ``ref``); ``hetero``: examples/heterogeneous/run.py end to end;
- ``threads``: two threads running one module at once, and their overlap;
- ``bench``: benchmarks/gpu_vs_torch.py, ResNet-50 and BERT at batch 1 and 16, ``cuda`` and
  ``--libs``, against PyTorch eager;
- ``tests``: ``pytest -m gpu`` per file of plugins/cuda/tests and plugins/cudnn/tests that has
  gpu tests (last: the open-ended suites get what the budget has left after the bounded checks);
- ``sanitizer`` (with ``--sanitizer``): the smoke step under ``compute-sanitizer --tool memcheck``.

Without a GPU the GPU steps are "skip (no GPU)" and the exit status is 0 when the others pass;
with one, any FAIL or timeout (or a step the budget left no time for) exits with 1.
"""

from __future__ import annotations

import argparse
import datetime
import importlib.metadata
import importlib.util
import json
import os
import platform
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = Path(__file__).resolve()
TABLE_FILE = "gpu-check.md"
JSON_FILE = "gpu-check.json"
#: The whole run's time limit (s): under 8 minutes with the parent's own overhead.
DEFAULT_BUDGET_S = 450.0
STATUSES = ("pass", "FAIL", "skip", "timeout")
#: Seconds between SIGTERM and SIGKILL for a step past its time limit.
KILL_GRACE_S = 2.0

#: Per-step time limits (s); a pytest file not named here gets ``tests_default``.
TIMEOUTS: dict[str, float] = {
    "versions": 30, "smoke": 45, "race": 45, "nan": 45,
    "plugins/cuda/tests/test_gpu.py": 120, "plugins/cudnn/tests/test_models.py": 90,
    "tests_default": 30,
    "models-cuda": 60, "models-libs": 45, "hetero": 45, "threads": 45,
    "bench-cuda": 90, "bench-libs": 75, "sanitizer": 120,
}
GROUPS = ("versions", "smoke", "race", "nan", "tests", "models", "hetero", "threads", "bench",
          "sanitizer")
PYTEST_DIRS = ("plugins/cuda/tests", "plugins/cudnn/tests")
#: The steps run by a worker of gpu_check_steps.py (its WORKERS).
WORKER_NAMES = ("models-cuda", "models-libs", "nan", "race", "smoke", "threads", "versions")


# -- the parent: steps, subprocesses, the table ---------------------------------------------------
@dataclass
class Step:
    """One row of the table: a command run in a subprocess of its own.

    A worker step (``result`` set) writes its status and figures to that JSON file as it goes;
    a command step has ``parse(log_text, returncode) -> (status, figures)``."""

    name: str
    group: str
    timeout: float
    argv: list[str]
    needs_gpu: bool = True
    result: Path | None = None
    parse: Callable[[str, int], tuple[str, list[str]]] | None = None
    skip: str | None = None


@dataclass
class Row:
    """A step's outcome."""

    step: str
    status: str
    seconds: float
    figures: list[str] = field(default_factory=list)
    log: str = ""

    @property
    def ok(self) -> bool:
        return self.status in ("pass", "skip")


def slug(name: str) -> str:
    """A file name for a step's log."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-") or "step"


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    """End the step's process group (it and whatever it started): TERM, then KILL."""
    for sig, grace in ((signal.SIGTERM, KILL_GRACE_S), (signal.SIGKILL, 10.0)):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue


def _reap_group(pgid: int) -> None:
    """Kill what a finished step left running in its process group (none normally)."""
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def run_step(step: Step, out_dir: Path, timeout: float | None = None) -> Row:
    """Run ``step`` in a new process group with its output in ``out_dir/<step>.log``; past
    ``timeout`` (default: the step's own) it and its children are killed and the row says
    "timeout after N s", with the figures it reported until then."""
    limit = step.timeout if timeout is None else timeout
    log = out_dir / f"{slug(step.name)}.log"
    if step.result is not None:
        step.result.unlink(missing_ok=True)
    start = time.monotonic()
    with log.open("wb") as f:
        f.write(f"$ {shlex.join(step.argv)}\n".encode())
        f.flush()
        try:
            proc = subprocess.Popen(step.argv, cwd=ROOT, stdout=f, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True,
                                    env=_env())
        except OSError as err:
            return Row(step.name, "FAIL", time.monotonic() - start,
                       [f"cannot start: {err}"], log.name)
        timed_out = False
        try:
            proc.wait(timeout=limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc)
        _reap_group(proc.pid)
    seconds = time.monotonic() - start
    status, figures = _outcome(step, proc.returncode, log.read_text(errors="replace"))
    if timed_out:
        status, figures = "timeout", [f"timeout after {limit:g} s", *figures]
    return Row(step.name, status, seconds, figures, log.name)


def _outcome(step: Step, rc: int, text: str) -> tuple[str, list[str]]:
    if step.parse is not None:
        try:
            return step.parse(text, rc)
        except Exception as err:  # noqa: BLE001 - a parser bug is a FAIL row, not a crash
            return "FAIL", [f"cannot read the output ({type(err).__name__}: {err})"]
    data = read_result(step.result)
    status, figures = data.get("status", "FAIL"), list(data.get("figures", []))
    if status not in STATUSES:  # died while running: a crash
        status = "FAIL"
        figures.append(f"exit code {rc}" + (f" ({_signal_name(rc)})" if rc < 0 else "")
                       + f"; last line: {_last_line(text)}")
    elif rc != 0 and status != "FAIL":
        status = "FAIL"
        figures.append(f"exit code {rc} after reporting {data.get('status')}")
    return status, figures


def _signal_name(rc: int) -> str:
    try:
        return signal.Signals(-rc).name
    except ValueError:
        return f"signal {-rc}"


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:200] if lines else "(no output)"


def read_result(path: Path | None) -> dict[str, Any]:
    """What a worker step wrote (empty when it wrote nothing or garbage)."""
    if path is None or not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class Checker:
    """Runs a plan of steps within a time budget, writing the table after every step."""

    def __init__(self, out_dir: Path, budget: float, title: str = "GPU check") -> None:
        self.out_dir = out_dir
        self.budget = budget
        self.title = title
        self.rows: list[Row] = []
        self.gpu_missing: str | None = None
        self.gpu_known = False
        self.facts: list[str] = []
        self.started = time.monotonic()

    def remaining(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def run(self, steps: list[Step]) -> list[Row]:
        for i, step in enumerate(steps, 1):
            row = self._run_one(step)
            self.rows.append(row)
            if step.group == "versions":
                self._learn_gpu(step)
            print(f"[{i}/{len(steps)}] {row.step}: {row.status} ({row.seconds:.1f} s)"
                  + (f" {row.figures[0]}" if row.figures else ""), file=sys.stderr, flush=True)
            self.write()
        return self.rows

    def _run_one(self, step: Step) -> Row:
        if step.needs_gpu and self.gpu_missing is not None:
            return Row(step.name, "skip", 0.0, ["no GPU"])
        if step.skip:
            return Row(step.name, "skip", 0.0, [step.skip])
        left = self.remaining()
        if left < 5:
            return Row(step.name, "skip", 0.0,
                       [f"not run: the {self.budget:g} s budget was spent (--budget)"])
        return run_step(step, self.out_dir, min(step.timeout, left))

    def _learn_gpu(self, step: Step) -> None:
        data = read_result(step.result)
        if "gpu_missing" in data:
            self.gpu_known = True
            self.gpu_missing = data["gpu_missing"] or None
        self.facts = list(data.get("figures", []))

    def gpu_line(self) -> str:
        if not self.gpu_known:
            return "GPU: not known (no result from the versions step)"
        if self.gpu_missing:
            return f"no GPU: {self.gpu_missing}"
        return "GPU: " + next((f[4:] for f in self.facts if f.startswith("GPU ")), "present")

    def exit_code(self) -> int:
        """1 when a step failed, timed out or was not run for lack of time, else 0."""
        bad = [r for r in self.rows if not r.ok or any("budget was spent" in f
                                                        for f in r.figures)]
        return 1 if bad else 0

    def table(self) -> str:
        used = time.monotonic() - self.started
        head = [f"# {self.title}", "",
                f"{datetime.datetime.now().isoformat(timespec='seconds')} on "
                f"{socket.gethostname()}, Python {platform.python_version()}, "
                f"commit {_git_commit()}; {used:.0f} s of the {self.budget:g} s budget",
                "", self.gpu_line(), "",
                "| step | status | seconds | key figures |", "|---|---|---:|---|"]
        body = [f"| {_cell(r.step)} | {r.status} | {r.seconds:.1f} | "
                f"{_cell('; '.join(r.figures))} |" for r in self.rows]
        return "\n".join(head + body) + "\n\nLogs: " + str(self.out_dir) + "/<step>.log\n"

    def write(self) -> str:
        """Write the table and the JSON; the table, as written (printed the same: rendering
        it twice could straddle a second of its time stamp)."""
        table = self.table()
        (self.out_dir / TABLE_FILE).write_text(table)
        data = {"gpu_missing": self.gpu_missing, "gpu_known": self.gpu_known,
                "rows": [vars(r) for r in self.rows]}
        (self.out_dir / JSON_FILE).write_text(json.dumps(data, indent=1))
        return table


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _git_commit() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, timeout=5,
                             capture_output=True, text=True)
    except (OSError, subprocess.TimeoutExpired):
        return "unknown"
    return out.stdout.strip() or "unknown"


# -- the plan -------------------------------------------------------------------------------------
def worker_step(name: str, group: str, args: argparse.Namespace, out_dir: Path,
                needs_gpu: bool = True) -> Step:
    """A step that runs ``gpu_check.py --worker <name>`` in a subprocess."""
    result = out_dir / f"{slug(name)}.json"
    argv = [sys.executable, str(SCRIPT), "--worker", name, "--result", str(result),
            "--light-models", args.light_models]
    if args.quick:
        argv.append("--quick")
    return Step(name, group, TIMEOUTS[name], argv, needs_gpu=needs_gpu, result=result)


def gpu_test_files() -> list[str]:
    """The test files of plugins/cuda/tests and plugins/cudnn/tests that have gpu-marked tests."""
    files = []
    for folder in PYTEST_DIRS:
        for path in sorted((ROOT / folder).glob("test_*.py")):
            if re.search(r"mark\.gpu\b", path.read_text(errors="replace")):
                files.append(path.relative_to(ROOT).as_posix())
    return files


def pytest_step(path: str) -> Step:
    argv = [sys.executable, "-m", "pytest", "-m", "gpu", "-v", "-p", "no:cacheprovider",
            "-rfE", "--durations=5", path]
    return Step(path, "tests", TIMEOUTS.get(path, TIMEOUTS["tests_default"]), argv,
                parse=parse_pytest)


def bench_step(name: str, args: argparse.Namespace) -> Step:
    models, batches = ("resnet50", "1") if args.quick else ("resnet50,bert", "1,16")
    argv = [sys.executable, "benchmarks/gpu_vs_torch.py", "--models", models, "--batches",
            batches, "--no-compile", "--repeat", "3", "--min-ms", "100", "--warmup", "2"]
    if name == "bench-libs":
        argv.append("--libs")
    skip = None if importlib.util.find_spec("torch") else "PyTorch is not installed"
    return Step(name, "bench", TIMEOUTS[name], argv, parse=parse_bench, skip=skip)


def hetero_step() -> Step:
    argv = [sys.executable, "examples/heterogeneous/run.py"]
    if importlib.util.find_spec("tessera_vta") is None:  # the example without VTA
        argv += ["--target", "cuda -libs=cudnn,cublas, llvm"]
    return Step("hetero", "hetero", TIMEOUTS["hetero"], argv, parse=parse_hetero)


def sanitizer_step(args: argparse.Namespace, out_dir: Path) -> Step:
    tool = shutil.which("compute-sanitizer")
    result = out_dir / "sanitizer-smoke.json"
    argv = [tool or "compute-sanitizer", "--tool", "memcheck", "--error-exitcode", "3",
            sys.executable, str(SCRIPT), "--worker", "smoke", "--result", str(result)]
    skip = None
    if not args.sanitizer:
        skip = "not asked for (--sanitizer)"
    elif tool is None:
        skip = "compute-sanitizer is not on PATH"
    return Step("sanitizer", "sanitizer", TIMEOUTS["sanitizer"], argv, parse=parse_sanitizer,
                skip=skip)


def build_plan(args: argparse.Namespace, out_dir: Path) -> list[Step]:
    """Every step in order, filtered by ``--only`` (versions always stays)."""
    steps = [worker_step("versions", "versions", args, out_dir, needs_gpu=False),
             worker_step("smoke", "smoke", args, out_dir, needs_gpu=False),
             worker_step("race", "race", args, out_dir),
             worker_step("nan", "nan", args, out_dir),
             worker_step("models-cuda", "models", args, out_dir),
             worker_step("models-libs", "models", args, out_dir),
             hetero_step(),
             worker_step("threads", "threads", args, out_dir),
             bench_step("bench-cuda", args), bench_step("bench-libs", args),
             # the open-ended suites last, so that a slow one leaves the bounded checks their time
             *[pytest_step(f) for f in gpu_test_files()],
             sanitizer_step(args, out_dir)]
    if args.only:
        wanted = {w.strip() for w in args.only.split(",") if w.strip()}
        unknown = wanted - set(GROUPS) - {s.name for s in steps}
        if unknown:
            raise SystemExit(f"--only: unknown step(s) {', '.join(sorted(unknown))}; known: "
                             f"{', '.join(GROUPS)} or a step's name")
        steps = [s for s in steps if s.group == "versions" or s.group in wanted
                 or s.name in wanted]
    return steps


def self_test_plan(out_dir: Path) -> list[Step]:
    """A step that sleeps past its 1 s limit, then one that runs: the time-out mechanism."""
    sleeper = Step("self-test-sleep", "self-test", 1.0,
                   [sys.executable, "-c", "import time; print('sleeping', flush=True); "
                                          "time.sleep(60)"], needs_gpu=False)
    after = Step("self-test-after", "self-test", 30.0,
                 [sys.executable, "-c", "print('ran')"], needs_gpu=False,
                 parse=lambda text, rc: ("pass" if rc == 0 and "ran" in text else "FAIL",
                                         ["ran" if "ran" in text else "did not run"]))
    return [sleeper, after]


# -- parsing the command steps' output -------------------------------------------------------------
_PYTEST_SUMMARY = re.compile(r"^=+ (.*\d+ (?:passed|failed|skipped|error|errors|deselected|"
                             r"xfailed|xpassed|warnings?).*?) in [\d.]+s", re.M)
_PYTEST_TEST = re.compile(r"::\S+ (PASSED|FAILED|SKIPPED|ERROR|XFAIL|XPASS)\b")


def _pytest_counts(text: str) -> str:
    """``3 passed, 1 skipped`` from pytest's summary line, else from the tests reported so far
    (a run that was killed)."""
    summary = _PYTEST_SUMMARY.findall(text)
    if summary:
        parts = [p.strip() for p in summary[-1].split(",")]
        kept = [p for p in parts if re.search(r"passed|failed|skipped|error|xfail|xpass", p)]
        return ", ".join(kept) or summary[-1]
    found = _PYTEST_TEST.findall(text)
    counts = ", ".join(f"{found.count(k)} {k.lower()}" for k in
                       ("PASSED", "FAILED", "SKIPPED", "ERROR") if found.count(k))
    return f"{counts or 'no test'} reported so far"


def parse_pytest(text: str, rc: int) -> tuple[str, list[str]]:
    """pytest's counts and the first failing tests."""
    if rc == 5:  # no test collected
        return "skip", ["no gpu test collected"]
    figures = [_pytest_counts(text)]
    failed = [m.split(" - ")[0].split("::", 1)[-1]
              for m in re.findall(r"^(?:FAILED|ERROR) (\S+.*)$", text, re.M)]
    if failed:
        figures.append(f"failed: {', '.join(failed[:4])}" + (" ..." if len(failed) > 4 else ""))
    return ("pass" if rc == 0 else "FAIL"), figures


_BENCH_ROW = re.compile(r"^(?P<label>\S.*?)\s+(?P<batch>\d+)\s+(?P<ms>[\d.]+|-)\s+"
                        r"(?P<eager>[\d.]+|-)\s+(?P<compiled>[\d.]+|-)\s+(?P<ratio>[\d.]+|-)\s+"
                        r"(?P<cratio>[\d.]+|-)\s+(?P<diff>\S+)\s*$", re.M)


def parse_bench(text: str, rc: int) -> tuple[str, list[str]]:
    """gpu_vs_torch.py's table and goal lines, shortened."""
    figures = [f"{m['label'].split()[0]} b{m['batch']} {m['ms']} ms = {m['ratio']}x eager "
               f"(diff {m['diff']})" for m in _BENCH_ROW.finditer(text)]
    for line in text.splitlines():
        if "  FAILED " in line:
            words = line.split("  FAILED ")[0].split()
            figures.append(f"{words[0]} b{words[-1]} FAILED")
    geo = re.search(r"^geomean\s+([\d.]+|-)", text, re.M)
    if geo:
        figures.append(f"geomean {geo[1]}x eager")
    figures += [line.strip() for line in text.splitlines() if line.startswith("goal:")]
    if not figures:
        figures = [f"no table; last line: {_last_line(text)}"]
    return ("pass" if rc == 0 else "FAIL"), figures


def parse_hetero(text: str, rc: int) -> tuple[str, list[str]]:
    """examples/heterogeneous/run.py: its error against ``ref`` and its latency."""
    figures = [m.group(0) for m in re.finditer(r"max \|tessera - reference\| = \S+", text)]
    figures += [m.group(0) for m in re.finditer(r"latency: median \S+ ms", text)]
    if "not run:" in text:
        figures.append("not run (no device)")
    if rc != 0:
        figures.append(f"exit code {rc}; last line: {_last_line(text)}")
    return ("pass" if rc == 0 and "not run:" not in text else "FAIL"), figures


def parse_sanitizer(text: str, rc: int) -> tuple[str, list[str]]:
    """compute-sanitizer's error summary."""
    summary = re.findall(r"ERROR SUMMARY: (\d+) errors?", text)
    errors = int(summary[-1]) if summary else None
    figure = (f"memcheck: {errors} error(s)" if errors is not None
              else f"no error summary; last line: {_last_line(text)}")
    return ("pass" if rc == 0 and errors == 0 else "FAIL"), [figure]


def run_worker(args: argparse.Namespace) -> int:
    """Inside a step's subprocess: run its checks and record the outcome."""
    from gpu_check_steps import WORKERS, Recorder, _why

    rec = Recorder(Path(args.result))
    rec.save()
    try:
        WORKERS[args.worker](rec, args)
    except Exception as err:  # noqa: BLE001 - the step's failure, with its traceback in the log
        traceback.print_exc()
        rec.fail(_why(err, 200))
    rec.finish()
    return 0 if rec.status != "FAIL" else 1


# -- the command line ------------------------------------------------------------------------------
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=os.environ.get("OUT") or "gpu-check-out",
                    help="folder for the table and the logs (default: $OUT, else "
                         "gpu-check-out)")
    ap.add_argument("--only", default="",
                    help=f"comma-separated steps or groups: {', '.join(GROUPS)}")
    ap.add_argument("--quick", action="store_true",
                    help="fewer rounds, one light model, a 1-layer BERT, benchmark ResNet-50 "
                         "batch 1 only")
    ap.add_argument("--sanitizer", action="store_true",
                    help="also run the smoke step under compute-sanitizer memcheck")
    ap.add_argument("--budget", type=float, default=DEFAULT_BUDGET_S,
                    help=f"seconds for the whole run (default {DEFAULT_BUDGET_S:g})")
    ap.add_argument("--timeout-scale", type=float, default=1.0,
                    help="multiply every step's time limit (a slower machine: 2)")
    ap.add_argument("--light-models", default="squeezenet,resnet50",
                    help="light models of the models step (tessera.testing.light_models)")
    ap.add_argument("--worker", choices=WORKER_NAMES, help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--self-test-timeout", action="store_true", help=argparse.SUPPRESS)
    return ap.parse_args(argv)


def prepare_out(path: Path) -> Path:
    """The output folder, made; inside the repository it ignores itself in git."""
    out_dir = path.resolve()
    out_dir.mkdir(parents=True, exist_ok=True)
    if out_dir != ROOT and out_dir.is_relative_to(ROOT) and not (out_dir / ".gitignore").exists():
        (out_dir / ".gitignore").write_text("# written by scripts/gpu_check.py\n*\n")
    return out_dir


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        return run_worker(args)
    out_dir = prepare_out(Path(args.out))
    if args.self_test_timeout:
        checker = Checker(out_dir, args.budget, "GPU check: self-test of the time-outs")
        steps = self_test_plan(out_dir)
    else:
        checker = Checker(out_dir, args.budget)
        steps = build_plan(args, out_dir)
        for step in steps:
            step.timeout *= args.timeout_scale
    checker.run(steps)
    print(checker.write())
    print(f"table and logs in {out_dir}")
    return checker.exit_code()


if __name__ == "__main__":
    raise SystemExit(main())
