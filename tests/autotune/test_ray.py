"""``tessera tune --ray ADDRESS`` (``tessera.autotune.ray_measure``) against a one-node Ray
cluster the tests start on this machine (``ray start --head --block``, two CPUs, a 100 MiB
object store, token authentication with a token of the test's own), stopped at the end: the
records of a Ray run have the fields of a local run plus the measuring ``host``; a crashing,
hanging or wrong candidate on a Ray worker costs one trial; Ctrl-C keeps the records and lets
go of the cluster. Without Ray installed, ``--ray`` fails saying how to install it."""

from __future__ import annotations

import importlib.util
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from autotune.test_tune import _conv_model
from autotune.toy_tuning import MisbehavingBackend

from tessera.autotune.records import load_records
from tessera.autotune.tune import tune
from tessera.cli.main import main as cli_main
from tessera.errors import TesseraError

TESTS = Path(__file__).resolve().parents[1]
# one worker runs the whole file under pytest-xdist (--dist loadgroup): one Ray cluster at a time
# (the module's fixture), whose ports and processes would otherwise be started twice
pytestmark = pytest.mark.xdist_group("ray")


def test_ray_missing_says_how_to_install(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray raises ImportError
    model, _ = _conv_model(tmp_path)
    with pytest.raises(TesseraError, match=r"pip install 'tessera\[distributed\]'"):
        tune(str(model), target="llvm", output=tmp_path / "r.jsonl", ray_address="auto",
             progress=None)
    assert cli_main(["tune", str(model), "--target", "llvm", "--ray", "auto",
                     "-o", str(tmp_path / "r.jsonl")]) == 1
    assert "pip install 'tessera[distributed]'" in capsys.readouterr().err
    assert not (tmp_path / "r.jsonl").exists()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_address_where_nothing_answers_fails_at_once(tmp_path: Path) -> None:
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'tessera[distributed]' to test --ray")
    model, _ = _conv_model(tmp_path)
    port = _free_port()  # closed again: nothing listens there
    start = time.monotonic()
    with pytest.raises(TesseraError, match=f"nothing answers at 127.0.0.1:{port}"):
        tune(str(model), target="llvm", output=tmp_path / "r.jsonl", progress=None,
             ray_address=f"127.0.0.1:{port}")
    assert time.monotonic() - start < 30  # Ray alone would retry for minutes


def _reread_auth_settings() -> None:
    """Ray reads RAY_AUTH_MODE and the token once, when first used in a process: have it read
    them again, as Ray's own tests do (in case an earlier test imported Ray)."""
    try:
        from ray._private.authentication_test_utils import reset_auth_token_state
    except ImportError:
        return
    reset_auth_token_state()


@pytest.fixture(scope="module")
def ray_address(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A Ray head node of two CPUs, its workers able to import the tests' toy backends."""
    if importlib.util.find_spec("ray") is None:
        pytest.skip("Ray is not installed: pip install 'tessera[distributed]' to test --ray")
    ray_cli = shutil.which("ray", path=str(Path(sys.executable).parent)) or "ray"
    port = _free_port()
    token = secrets.token_hex(32)
    auth = {"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": token}
    env = {**os.environ, **auth, "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS),
                                                       os.environ.get("PYTHONPATH")]))}
    log = tmp_path_factory.mktemp("ray") / "ray-start.log"
    # Ray's session folder holds AF_UNIX sockets, whose paths may not pass 107 bytes: a short
    # folder of its own, not under the basetemp (longer under pytest-xdist: popen-gw0/...)
    ray_tmp = tempfile.mkdtemp(prefix="tessera-ray-")
    with open(log, "w") as out:
        head = subprocess.Popen(
            [ray_cli, "start", "--head", "--block", f"--port={port}", "--num-cpus=2",
             f"--object-store-memory={100 * 1024 ** 2}", "--include-dashboard=false",
             "--disable-usage-stats", f"--temp-dir={ray_tmp}"],
            env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    with pytest.MonkeyPatch.context() as mp:
        for k, v in auth.items():
            mp.setenv(k, v)
        import ray

        _reread_auth_settings()

        try:
            deadline = time.monotonic() + 60
            while "Ray runtime started" not in log.read_text():
                if head.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"ray start failed:\n{log.read_text()[-3000:]}")
                time.sleep(0.2)
            yield f"127.0.0.1:{port}"
        finally:
            if ray.is_initialized():
                ray.shutdown()
            mp.undo()
            _reread_auth_settings()
            head.send_signal(signal.SIGTERM)  # --block: stops every process it started
            try:
                head.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(head.pid, signal.SIGKILL)
                head.wait(10)
            shutil.rmtree(ray_tmp, ignore_errors=True)


@pytest.mark.slow
def test_cli_tune_on_ray_writes_the_records_of_a_local_run(
        ray_address: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    import ray

    model, _ = _conv_model(tmp_path)
    local, remote = tmp_path / "local.jsonl", tmp_path / "ray.jsonl"
    flags = ["--target", "llvm", "--tasks", "0", "--tuner", "gridsearch", "--repeat", "1",
             "--timeout", "30"]
    assert cli_main(["tune", str(model), *flags, "--trials", "1", "-o", str(local)]) == 0
    rc = cli_main(["tune", str(model), *flags, "--trials", "3", "--parallel", "2",
                   "--ray", ray_address, "-o", str(remote)])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    assert f"ray {ray_address}: measuring on 1 node(s): {socket.gethostname()}" \
        in captured.err
    assert not ray.is_initialized()  # the run let go of the cluster
    recs = list(load_records(remote))
    assert len(recs) == 3 and all(r.ok for r in recs)
    assert recs[0].config == next(load_records(local)).config  # the default first, as here
    assert {r.host for r in recs} == {socket.gethostname()}

    def fields(path: Path) -> set[str]:  # of the records (not the model check's line)
        return {k for line in path.read_text().splitlines() for k in json.loads(line)
                if "kind" not in json.loads(line)}

    assert fields(remote) == fields(local) | {"host"}
    # resume on the cluster: nothing measured twice
    assert cli_main(["tune", str(model), *flags, "--trials", "2", "--ray", ray_address,
                     "-o", str(remote)]) == 0
    configs = [json.dumps(r.config, sort_keys=True) for r in load_records(remote)]
    assert len(configs) == 5 == len(set(configs))


@pytest.mark.slow
def test_bad_candidates_on_a_ray_worker_cost_one_trial_each(ray_address: str) -> None:
    import ray

    from tessera.autotune.ray_measure import RayPool

    pool = RayPool(ray_address, parallel=2)
    try:
        assert pool.batch_size == 2 and len(pool.slots) == 1
        m = pool.measurer(MisbehavingBackend(), {"scale": 2.0}, None, None, timeout=3.0,
                          repeat=2)
        modes = ["ok", "crash", "wrong", "hang", "raise", "ok"]
        got = dict(m.measure_batch("k", "key", [{"mode": x} for x in modes]))
        assert sorted(got) == list(range(len(modes)))
        assert got[0].error is None and len(got[0].costs) == 2
        assert got[0].host == socket.gethostname() and got[0].cpu
        assert got[1].error == "crash: the worker exited with code 3" and not got[1].costs
        assert got[2].error.startswith("wrong result: output 0: max abs diff 1")
        assert got[3].error == "timeout after 3 s"
        assert got[4].error == "error: ValueError: this candidate does not build"
        assert got[5].error is None
        assert m.measure("k", "key", {"mode": "slow"}).error is None  # the actor lives on
        # an actor that dies (its node lost, killed) costs the trials it held and is started
        # again on its node
        actor = pool.slots[0].actor
        ray.kill(actor)
        # ray.kill returns before the actor is gone: on a busy machine the next call could still
        # reach it (this test failed so once under the whole suite), so wait for its death
        for _ in range(200):
            try:
                ray.get(actor.__ray_ready__.remote(), timeout=10)
            except ray.exceptions.RayActorError:
                break
            time.sleep(0.05)
        lost = m.measure("k", "key", {"mode": "ok"})
        assert lost.error.startswith(f"crash: the Ray worker on {socket.gethostname()} died")
        assert m.measure("k", "key", {"mode": "ok"}).error is None and len(pool.slots) == 1
    finally:
        pool.close()


@pytest.mark.slow
def test_interrupted_ray_run_keeps_its_records(ray_address: str, tmp_path: Path) -> None:
    import onnx
    import ray
    from autotune.test_tasks import _two_identical_convs_and_a_matmul

    path = tmp_path / "m.onnx"
    onnx.save(_two_identical_convs_and_a_matmul(), path)
    out = tmp_path / "r.jsonl"
    seen: list[str] = []

    def interrupt(task: object) -> None:
        seen.append(task.template)  # type: ignore[attr-defined]
        if len(seen) > 1:
            raise KeyboardInterrupt

    result = tune(str(path), target="llvm", output=out, trials=2, repeat=1, timeout=30,
                  progress=None, on_task=interrupt, ray_address=ray_address)
    assert result.interrupted and len(seen) == 2 and result.trials == 2
    assert len(list(load_records(out))) == result.trials
    assert not ray.is_initialized()
