"""Measuring tuning candidates on a Ray cluster (``tessera tune --ray ADDRESS``).

Install with ``pip install "tessera[distributed]"``; Ray is imported only when a tuning run asks
for it (:func:`require_ray`). Every node of the cluster needs the same Tessera and backend
plugins installed as the machine that tunes: a node re-creates the backend from its class path
and builds candidates from the region the tuning process sends it.

How it works: :class:`RayPool` connects to the cluster (``ray.init(address=...)``; ``auto``
finds a cluster started on this machine with ``ray start``; a process already connected keeps
its connection) and starts one **actor per node** that has a CPU, pinned to it
(``NodeAffinitySchedulingStrategy``) and reserving **all of the node's CPUs**
(``num_cpus=`` the node's count). Each actor holds a local
:class:`~tessera.autotune.measure.Measurer` per region, whose worker processes stay warm
between candidates (Tessera imported once, the default schedule's reference outputs built
once): the actor builds its share of a batch in up to ``--parallel`` worker processes on its
node, then times the built candidates one after the other. Actors rather than plain Ray tasks,
because a task would start a worker process per candidate and rebuild the reference each time;
a node reserved whole rather than one CPU per measurement, because Ray would otherwise pack
several measurements (or other jobs' tasks) onto one machine's cores, and concurrent work
disturbs the timings: so every node measures one candidate at a time, the Ray equivalent of
"an otherwise idle machine". A node whose CPUs are taken by other work when tuning starts gets
no actor (after ``STARTUP_S`` seconds it is left out).

:meth:`RayMeasurer.measure_batch` spreads a batch of ``parallel`` x nodes candidates over the
actors (round robin) and yields each result as its actor answers, with the actor's host name
and CPU (written to the record's ``host`` and ``cpu``); the tuning process appends the records
as usual (:func:`tessera.autotune.tune.tune`), so Ctrl-C, ``--time-budget`` and resuming work
as they do locally. A candidate that crashes, hangs or computes a wrong result costs one trial
inside the actor's Measurer; an actor that dies (its node lost) or stops answering costs the
trials of the candidates it held and is started again on its node (or dropped, when the node is
gone). Closing the pool kills the actors, and their worker processes with them; a connection
the pool opened is shut down. Everything between the machines goes through Ray's own calls
(actor methods, the object store for the region); Tessera runs no server of its own.

A ``HOST:PORT`` where nothing accepts connections fails at once (Ray alone retries for
minutes). A cluster started with token authentication (``ray start`` turns it on when it
finds a token, or with ``RAY_AUTH_MODE=token``) needs ``RAY_AUTH_MODE=token`` and its token
(``RAY_AUTH_TOKEN``, ``RAY_AUTH_TOKEN_PATH`` or ``~/.ray/auth_token``) in the environment of
the process that tunes, as any Ray driver does.
"""

from __future__ import annotations

import logging
import socket
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any, TextIO

from tessera.autotune.measure import (
    STARTUP_S,
    BatchMeasurer,
    Measurer,
    MeasureResult,
    measurement_payload,
)
from tessera.autotune.records import cpu_name
from tessera.errors import TesseraError

__all__ = ["RayMeasurer", "RayPool", "require_ray"]


def require_ray() -> Any:
    """The ``ray`` module, or a TesseraError saying how to install it."""
    try:
        import ray
    except ImportError as err:
        raise TesseraError(f"--ray needs Ray, which is not installed ({err}): "
                           f"pip install 'tessera[distributed]'") from None
    return ray


def _probe(address: str, timeout: float = 10.0) -> None:
    """A TesseraError at once when nothing accepts connections at ``HOST:PORT`` (Ray itself
    retries an unreachable address for minutes before it gives up)."""
    hostport = address.split("://", 1)[-1]
    host, sep, port = hostport.rpartition(":")
    if not sep or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    host = host.strip("[]")
    try:
        socket.create_connection((host, int(port)), timeout=timeout).close()
    except OSError as err:
        raise TesseraError(f"--ray {address}: nothing answers at {host}:{port} ({err}); is "
                           f"the cluster's head node started there (ray start --head "
                           f"--port={port})?") from None


def _first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0][:300] if text else ''}"


class _MeasureActor:
    """A Ray actor on one node: a :class:`Measurer` per region (made from the payload the
    tuning process put in the object store), building and timing the candidates it is sent.
    Ray runs an actor's calls one at a time."""

    def __init__(self, parallel: int) -> None:
        self.parallel = parallel
        self.measurers: dict[str, Measurer] = {}

    def info(self) -> tuple[str, str]:
        """This node's host name and CPU."""
        return socket.gethostname(), cpu_name()

    def measure(self, region: str, payload: list[Any],
                params: tuple[float, int, int, float, bool],
                kernel: str, key: str, configs: list[dict[str, Any]]
                ) -> list[tuple[list[float], str | None]]:
        """(costs, error) of each config; ``payload`` is ``[ObjectRef]`` of the region's
        :func:`measurement_payload` (in a list, so that Ray fetches it only for a region this
        actor has not seen)."""
        m = self.measurers.get(region)
        if m is None:
            import ray

            timeout, number, repeat, min_repeat_ms, cache_flush = params
            m = self.measurers[region] = Measurer.from_payload(
                ray.get(payload[0]), timeout=timeout, number=number, repeat=repeat,
                min_repeat_ms=min_repeat_ms, parallel=self.parallel, cache_flush=cache_flush)
        out: list[tuple[list[float], str | None]] = [([], "error: not measured")] * len(configs)
        for i, result in m.measure_batch(kernel, key, configs):
            out[i] = (list(result.costs), result.error)
        return out

    def close(self) -> None:
        for m in self.measurers.values():
            m.close()
        self.measurers.clear()


class _Slot:
    """One node's actor, what it is, and a call it was left running (a stopped batch)."""

    def __init__(self, node_id: str, cpus: float, actor: Any) -> None:
        self.node_id, self.cpus, self.actor = node_id, cpus, actor
        self.host = self.cpu = ""
        self.abandoned: tuple[Any, float] | None = None


class RayPool:
    """A connection to a Ray cluster and one measuring actor per node (module doc).

    ``address``: what ``ray.init`` takes (``HOST:PORT``, ``ray://HOST:PORT``, ``auto``);
    ``parallel``: candidates each actor builds at once; ``progress``: where to say which nodes
    measure (None: nowhere)."""

    def __init__(self, address: str, parallel: int = 1, progress: TextIO | None = None,
                 startup_s: float = STARTUP_S) -> None:
        ray = self._ray = require_ray()
        if parallel < 1:
            raise TesseraError(f"--parallel must be at least 1, not {parallel}")
        self.parallel = parallel
        self.address = address
        self._owns = False
        if not ray.is_initialized():
            _probe(address)
            try:
                ray.init(address=address, log_to_driver=False, logging_level=logging.WARNING)
            except Exception as err:  # noqa: BLE001 - ray raises many kinds
                raise TesseraError(f"--ray {address}: cannot connect to a Ray cluster there "
                                   f"({_first_line(err)})") from None
            self._owns = True
        self._actor_class = ray.remote(_MeasureActor)
        self.slots: list[_Slot] = []
        try:
            self._start(startup_s)
        except BaseException:
            self.close()
            raise
        if progress is not None:
            nodes = ", ".join(f"{s.host} ({s.cpu}, {s.cpus:g} CPU)" for s in self.slots)
            progress.write(f"ray {address}: measuring on {len(self.slots)} node(s): {nodes}\n")

    def _new_actor(self, node_id: str, cpus: float) -> Any:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return self._actor_class.options(
            num_cpus=cpus, max_restarts=0, max_concurrency=1,
            scheduling_strategy=NodeAffinitySchedulingStrategy(node_id, soft=False),
        ).remote(self.parallel)

    def _alive_nodes(self) -> dict[str, float]:
        return {n["NodeID"]: float(n.get("Resources", {}).get("CPU", 0))
                for n in self._ray.nodes()
                if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) >= 1}

    def _start(self, startup_s: float) -> None:
        ray = self._ray
        nodes = self._alive_nodes()
        if not nodes:
            raise TesseraError(f"--ray {self.address}: the cluster has no node with a CPU")
        slots = [_Slot(node, cpus, self._new_actor(node, cpus)) for node, cpus in nodes.items()]
        calls = {s.actor.info.remote(): s for s in slots}
        ready, _ = ray.wait(list(calls), num_returns=len(calls), timeout=startup_s)
        reasons = []
        for ref, slot in calls.items():
            if ref in ready:
                try:
                    slot.host, slot.cpu = ray.get(ref)
                    self.slots.append(slot)
                    continue
                except Exception as err:  # noqa: BLE001 - the node cannot measure
                    reasons.append(_first_line(err))
            else:
                reasons.append(f"node {slot.node_id[:12]}: no actor started within "
                               f"{startup_s:g} s (its CPUs busy?)")
            ray.kill(slot.actor, no_restart=True)
        if not self.slots:
            raise TesseraError(f"--ray {self.address}: no node could start a measuring actor: "
                               + "; ".join(reasons))

    @property
    def batch_size(self) -> int:
        """Candidates measured per batch: ``parallel`` per node."""
        return self.parallel * max(len(self.slots), 1)

    def _restart(self, slot: _Slot) -> None:
        """A new actor for ``slot``'s node, or the slot dropped when the node is gone."""
        self._ray.kill(slot.actor, no_restart=True)
        slot.abandoned = None
        cpus = self._alive_nodes().get(slot.node_id)
        if cpus is None:
            self.slots.remove(slot)
            if not self.slots:
                raise TesseraError(f"--ray {self.address}: every measuring node was lost")
            return
        slot.actor = self._new_actor(slot.node_id, cpus)

    def measurer(self, backend: Any, region: Any, target: Any, options: Any,
                 timeout: float = 10.0, number: int = 1, repeat: int = 3,
                 min_repeat_ms: float = 0.0, cache_flush: bool = False) -> RayMeasurer:
        """A measurer of ``region``'s candidates on this pool's actors (what
        :class:`~tessera.autotune.measure.Measurer` is on this machine)."""
        return RayMeasurer(self, measurement_payload(backend, region, target, options),
                           timeout, number, repeat, min_repeat_ms, cache_flush)

    def close(self) -> None:
        """Stop the actors (an idle one closes its worker processes first) and disconnect
        when the pool connected."""
        ray = self._ray
        idle = [s.actor.close.remote() for s in self.slots if s.abandoned is None]
        if idle:
            ray.wait(idle, num_returns=len(idle), timeout=10)
        for s in self.slots:
            ray.kill(s.actor, no_restart=True)
        self.slots = []
        if self._owns and ray.is_initialized():
            ray.shutdown()
        self._owns = False


class RayMeasurer(BatchMeasurer):
    """One region's candidates measured on a :class:`RayPool`'s actors."""

    def __init__(self, pool: RayPool, payload: bytes, timeout: float, number: int,
                 repeat: int, min_repeat_ms: float, cache_flush: bool = False) -> None:
        self.pool = pool
        self.region = uuid.uuid4().hex
        self._payload = [pool._ray.put(payload)]
        self.timeout = timeout
        self.params = (timeout, number, repeat, min_repeat_ms, cache_flush)

    @property
    def batch_size(self) -> int:
        return self.pool.batch_size

    def _deadline(self, n: int) -> float:
        """When an actor holding ``n`` candidates is given up on: its Measurer times out each
        phase itself; this covers a new actor and worker starting, and a wedged node."""
        return time.monotonic() + 2 * STARTUP_S + self.timeout * (n + 2) + 30.0

    def _settle(self, slot: _Slot) -> None:
        """Wait for the call ``slot``'s actor was left running (its results are dropped)."""
        if slot.abandoned is None:
            return
        ref, deadline = slot.abandoned
        ready, _ = self.pool._ray.wait([ref], timeout=max(deadline - time.monotonic(), 0.0))
        if ready:
            slot.abandoned = None
        else:
            self.pool._restart(slot)

    def measure_batch(self, kernel: str, key: str, configs: Sequence[dict[str, Any]]
                      ) -> Iterator[tuple[int, MeasureResult]]:
        """Build and time each of ``configs`` on the actors, ``parallel`` per actor; yields
        (index in ``configs``, result) as results come back, in any order. Stopping early
        leaves the actors' calls running; their results are dropped."""
        ray = self.pool._ray
        inflight: dict[Any, tuple[_Slot, list[int], float]] = {}
        try:
            slots = list(self.pool.slots)
            for slot in slots:
                self._settle(slot)
            slots = [s for s in slots if s in self.pool.slots]
            share: dict[int, list[int]] = {}
            for i in range(len(configs)):
                share.setdefault(i % len(slots), []).append(i)
            for j, indices in share.items():
                slot = slots[j]
                ref = slot.actor.measure.remote(self.region, self._payload, self.params,
                                                kernel, key,
                                                [dict(configs[i]) for i in indices])
                inflight[ref] = (slot, indices, self._deadline(len(indices)))
            while inflight:
                # short waits, so that Ctrl-C is seen at once
                ready, _ = ray.wait(list(inflight), num_returns=1, timeout=1.0)
                for ref in ready:
                    slot, indices, _ = inflight.pop(ref)
                    try:
                        rows = ray.get(ref)
                    except ray.exceptions.RayTaskError as err:
                        # the actor's code failed, not a candidate: a broken node set-up
                        raise TesseraError(f"ray: measuring on {slot.host}: "
                                           f"{_first_line(err.cause or err)}") from None
                    except ray.exceptions.RayError as err:
                        error = f"crash: the Ray worker on {slot.host} died " \
                                f"({_first_line(err)})"
                        self.pool._restart(slot)
                        rows = [([], error)] * len(indices)
                    for i, (costs, error) in zip(indices, rows):
                        yield i, MeasureResult(list(costs), error, host=slot.host,
                                               cpu=slot.cpu)
                now = time.monotonic()
                for ref, (slot, indices, deadline) in list(inflight.items()):
                    if deadline <= now:
                        del inflight[ref]
                        self.pool._restart(slot)
                        for i in indices:
                            yield i, MeasureResult(
                                error=f"timeout: the Ray worker on {slot.host} did not answer",
                                host=slot.host, cpu=slot.cpu)
        finally:
            for ref, (slot, _, deadline) in inflight.items():
                slot.abandoned = (ref, deadline)

    def close(self) -> None:
        """Nothing to close: the pool owns the actors."""
