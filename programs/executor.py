"""The isolated executor: a pool of pre-started worker processes that run programs.

Owns the pool: how many workers, their filtered environment, handing an idle worker
to each fire (the one holding a warm run process for the job's `warm_key` if it is
idle, else the idle one used longest ago), retiring a worker whose state is suspect
(killed, stopped answering, too many runs) and starting its replacement in the
background so fires do not wait for a cold interpreter. Must not run program code in
this process, read records, or decide whether a fire may run (admission, breaker and
overlap live elsewhere).
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Coroutine, Mapping
from pathlib import Path
from types import TracebackType
from typing import Any

import msgspec

from core.aio import TaskSet
from core.vocab import RunStatus
from programs.channel import SPARES
from programs.confine import Containment
from programs.job import Job
from programs.outcome import Outcome
from programs.process import StartFailed, WorkerProcess

__all__ = ["Executor", "ExecutorClosed", "Job", "PoolStats", "worker_env"]

ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "HOME", "TMPDIR")
PACKAGE_ROOT = str(Path(__file__).resolve().parent.parent)


class ExecutorClosed(RuntimeError):
    """`run()` was called on a closed executor."""


class PoolStats(msgspec.Struct, frozen=True, kw_only=True):
    size: int
    alive: int  # started and not retired: idle or busy
    idle: int
    waiting: int  # runs waiting for a worker
    spawned: int  # workers started since the executor was made
    failed_starts: int


def worker_env(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment of a worker: an allowlist of ours, never the daemon's secrets."""
    env = {name: os.environ[name] for name in ENV_ALLOWLIST if name in os.environ}
    paths = [PACKAGE_ROOT, *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    env.update(extra or {})
    return env


def default_size() -> int:
    return max(2, os.cpu_count() or 1)


class Idle:
    """Idle workers, used longest ago first, and the runs waiting for one. A start that
    failed is handed out like a worker, so a waiting run learns of it."""

    def __init__(self) -> None:
        self._items: deque[WorkerProcess | StartFailed] = deque()
        self._waiters: deque[asyncio.Future[WorkerProcess | StartFailed]] = deque()

    def put(self, item: WorkerProcess | StartFailed) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(item)
                return
        self._items.append(item)

    def workers(self) -> list[WorkerProcess]:
        return [item for item in self._items if isinstance(item, WorkerProcess)]

    async def get(self, key: str) -> WorkerProcess | StartFailed:
        """The idle worker whose warm process serves `key`, else the first in line."""
        if key:
            for item in self._items:
                if isinstance(item, WorkerProcess) and item.warm_key == key:
                    self._items.remove(item)
                    return item
        if self._items:
            return self._items.popleft()
        waiter: asyncio.Future[WorkerProcess | StartFailed]
        waiter = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            return await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.put(waiter.result())
            raise


class Executor:
    """`async with Executor(size) as ex: outcome = await ex.run(job)`.

    `size` workers (default one per core, at least 2) are started by `start()`; each
    runs one job at a time (in a run process it forks, or keeps warm for the job's
    trigger and program) and is reused, a retired one is replaced in the background. A
    job goes to the idle worker holding a warm process for its `warm_key`, else to the
    idle worker used longest ago: its spare run process has had the most time to be
    ready. `env` adds variables to the workers' filtered environment. A worker is
    replaced after `max_runs` runs as a precaution (it never runs program code, so
    rarely: a new worker costs ≈ 0.1 s of CPU, and warm runs come by the thousand).
    `prepare(n)` before `n` runs come together: each worker readies up to `spares` spares.
    """

    def __init__(
        self,
        size: int | None = None,
        env: Mapping[str, str] | None = None,
        *,
        max_runs: int = 100_000,
        start_timeout: float = 10.0,
        spares: int = SPARES,
    ) -> None:
        if size is not None and size < 1:
            raise ValueError(f"size: must be at least 1, got {size}")
        if spares < 1:
            raise ValueError(f"spares: must be at least 1, got {spares}")
        self.size, self.spares = size or default_size(), spares
        self._env = worker_env(env)
        self._max_runs, self._start_timeout = max_runs, start_timeout
        self._idle = Idle()
        self._idle_workers = 0
        self._workers: set[WorkerProcess] = set()
        self._tasks = TaskSet("executor")  # workers starting and retiring
        self._spawning = self._spawned = self._failed_starts = self._waiting = 0
        self._last_start_error = ""
        self._closed = False

    async def __aenter__(self) -> Executor:
        try:
            await self.start()
        except BaseException:
            await self.close()
            raise
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Starts the pool and waits until every worker is ready to run."""
        self._top_up()
        stats = await self.settled()
        if stats.alive < self.size:
            raise StartFailed(self._last_start_error)

    async def settled(self) -> PoolStats:
        """Waits until no worker is starting or stopping; then the pool's figures."""
        await self._tasks.wait()
        return self.stats()

    @property
    def containment(self) -> Containment | None:
        """How contained runs are, as the workers report it (None before one started)."""
        return next((w.containment for w in self._workers if w.containment), None)

    def stats(self) -> PoolStats:
        return PoolStats(
            size=self.size,
            alive=len(self._workers),
            idle=self._idle_workers,
            waiting=self._waiting,
            spawned=self._spawned,
            failed_starts=self._failed_starts,
        )

    async def run(self, job: Job) -> Outcome:
        """Runs `job` on an idle worker (waiting for one if all are busy: `queue_ms`)."""
        fired_at = time.monotonic()
        if self._closed:
            raise ExecutorClosed("executor is closed")
        try:
            worker = await self._acquire(job.warm_key)
        except StartFailed as exc:
            elapsed = (time.monotonic() - fired_at) * 1000
            return Outcome(status=RunStatus.CRASHED, error=str(exc), duration_ms=elapsed)
        queue_ms = (time.monotonic() - fired_at) * 1000
        try:
            outcome = await worker.run(job, fired_at)
        finally:
            self._release(worker)
        return msgspec.structs.replace(outcome, queue_ms=queue_ms)

    def prepare(self, runs: int) -> None:
        """`runs` are due soon (a cron slot): each idle worker readies spares for its
        share, so the fires find them forked and confined. A worker busy now readies its
        next one after its run, as always; one or none per worker is nothing to do."""
        share = -(-runs // self.size)
        if share <= 1 or self._closed:
            return
        for worker in self._idle.workers():
            worker.prepare(share)

    async def close(self) -> None:
        """Kills every worker and waits until all are reaped. Idempotent."""
        self._closed = True
        for _ in range(self._waiting):
            self._idle.put(StartFailed("executor closed"))
        await self.settled()
        workers, self._workers = list(self._workers), set()
        await asyncio.gather(*(worker.close("executor closed") for worker in workers))
        self._idle = Idle()
        self._idle_workers = 0

    async def _acquire(self, key: str) -> WorkerProcess:
        while True:
            self._top_up()
            item = await self._take(key)
            if self._closed:
                raise ExecutorClosed("executor is closed")
            if isinstance(item, WorkerProcess):
                if item.usable:
                    return item
                self._discard(item)  # died while idle
            else:
                return await self._cold_start()

    async def _take(self, key: str) -> WorkerProcess | StartFailed:
        self._waiting += 1
        try:
            item = await self._idle.get(key)
        finally:
            self._waiting -= 1
        self._idle_workers -= isinstance(item, WorkerProcess)
        return item

    async def _cold_start(self) -> WorkerProcess:
        """A background start failed and nothing else is coming: one try on the fire path."""
        self._spawning += 1
        try:
            worker = await WorkerProcess.spawn(self._env, self._start_timeout, self.spares)
        finally:
            self._spawning -= 1
        self._spawned += 1
        self._workers.add(worker)
        return worker

    def _release(self, worker: WorkerProcess) -> None:
        if self._closed:
            return  # close() reaps every worker
        if worker.usable and worker.runs < self._max_runs and len(self._workers) <= self.size:
            self._idle_workers += 1
            self._idle.put(worker)
        else:
            self._discard(worker)

    def _discard(self, worker: WorkerProcess) -> None:
        self._workers.discard(worker)
        self._background(worker.close("retired"))
        self._top_up()

    def _top_up(self) -> None:
        if self._closed:
            return
        for _ in range(self.size - len(self._workers) - self._spawning):
            self._spawning += 1
            self._background(self._spawn())

    async def _spawn(self) -> None:
        try:
            worker = await WorkerProcess.spawn(self._env, self._start_timeout, self.spares)
        except Exception as exc:
            self._failed_starts += 1
            self._last_start_error = str(exc) if isinstance(exc, StartFailed) else repr(exc)
            self._idle.put(StartFailed(self._last_start_error))
            return
        finally:
            self._spawning -= 1
        self._spawned += 1
        if self._closed:
            await worker.close("executor closed")
            return
        self._workers.add(worker)
        self._idle_workers += 1
        self._idle.put(worker)

    def _background(self, coro: Coroutine[Any, Any, None]) -> None:
        self._tasks.spawn(coro)
