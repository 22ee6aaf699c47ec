"""Running one program for one fire: under the run's token, with its `RunContext`.

Owns the steps between "this fire may run" and "this is how it ended", for the firing and
for a run by hand (runtime.fire.manual): load the program, the run's token (the claim's or
minted), the `Job` (warm only for a trigger that repeats), the executor. An ending is
`(Outcome, reason)`, never an exception. Must not claim, admit or record (the caller
records the ending through runtime.fire.recorder).
"""

from __future__ import annotations

import secrets
from collections.abc import Awaitable, Callable

from core.clock import Clock
from core.vocab import RunReason, RunStatus
from core.wire import RunTokenIn
from programs import warm
from programs.context import RunContext
from programs.executor import Executor, ExecutorClosed
from programs.job import Job
from programs.loader import LoadedProgram, ProgramCache, UnknownProgram, UntrustedProgram
from programs.outcome import Outcome, dated
from programs.refs import InvalidRef, ProgramRef
from programs.source import InvalidProgram
from runtime.client.api import ApiError, SpaceClient
from runtime.client.retry import retried
from runtime.client.seat import Seat
from runtime.fire import bodies
from runtime.fire.bodies import Identity
from runtime.fire.secrets import Args, SecretMissing, Secrets
from triggers.records import Limits

TOKEN_MARGIN_S = 30.0  # a run token outlives the run's timeout by this much at most
TOKEN_FRESH_S = TOKEN_MARGIN_S / 2  # a claim's token is used by a run starting this soon

Ending = tuple[Outcome, str]  # how a fire ended, and why (the run record's `reason`)


def new_run_id() -> str:
    return "run_" + secrets.token_hex(8)


def program_fetch(
    client: SpaceClient, space: str, runs_from: str | None = None
) -> Callable[[ProgramRef], Awaitable[str | None]]:
    """The `ProgramCache` fetch of a space's programs: a program's source, None if unpublished.
    `runs_from`, a device's peer: a program another device published is `UntrustedProgram`
    (a device runs only the admin's programs and its own, SPEC "Containment")."""

    async def fetch(ref: ProgramRef) -> str | None:
        try:
            found = await client.program_get(space, str(ref))
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise
        if runs_from is not None and found.publisher not in ("admin", f"device:{runs_from}"):
            raise UntrustedProgram(
                f"program {ref} was published by {found.publisher}; this device runs programs "
                "of the admin and its own (`--programs-from any` runs every device's)"
            )
        return found.source

    return fetch


class Execute:
    """`load` a fire's program, then `run` it; both answer with an ending, never raise."""

    def __init__(
        self,
        seat: Seat,
        url: str,
        *,
        executor: Executor,
        programs: ProgramCache,
        secrets: Secrets | None = None,
    ) -> None:
        self._client, self._space, _, self._clock = seat
        self._url, self._executor, self._programs = url, executor, programs
        self._secrets = secrets or Secrets(None)
        self._recent: dict[str, float] = {}  # trigger → its last run's start, oldest first

    @property
    def size(self) -> int:
        """How many runs the executor takes at once."""
        return self._executor.size

    async def load(self, ref: str) -> LoadedProgram | Ending:
        """The program published under `ref`, or the `error` ending of why it is not."""
        try:
            return await self._programs.get(ref)
        except (UnknownProgram, InvalidRef) as exc:
            return bodies.failed_before_run(str(exc)), RunReason.UNKNOWN_PROGRAM
        except InvalidProgram as exc:
            return bodies.failed_before_run(str(exc)), RunReason.INVALID_PROGRAM
        except UntrustedProgram as exc:
            return bodies.failed_before_run(str(exc)), RunReason.UNTRUSTED_PROGRAM
        except ApiError as exc:
            return bodies.failed_before_run(f"program {ref}: {exc}"), exc.code

    async def run(
        self,
        fire: Identity,
        program: LoadedProgram | Ending,
        args: Args,
        limits: Limits,
        token: str | None,
    ) -> Ending:
        """Run `program` for `fire` with main()'s `args` within `limits`, under `token`
        (None: mint one now); how it ended."""
        if not isinstance(program, LoadedProgram):
            return program
        try:
            args = self._secrets.resolve(args)  # on this device, just before the run
        except SecretMissing as exc:
            return bodies.failed_before_run(str(exc)), RunReason.SECRET
        if token is None:  # waited too long since the claim, or nothing was claimed
            minted = await self.run_token(fire, limits.timeout_seconds)
            if isinstance(minted, Outcome):
                return minted, RunReason.RUN_TOKEN
            token = minted
        job = Job(
            source=program.source,
            ref=fire.program,
            args=args,
            context=self.context(fire, token),
            timeout_seconds=limits.timeout_seconds,
            memory_mb=limits.memory_mb,
            network=limits.network.value,
            disk_mb=limits.disk_mb,
            keep_warm=self._repeats(fire.trigger_id),
        )
        return await run_job(self._executor, job, self._clock)

    def _repeats(self, tid: str) -> bool:
        """Whether `tid` ran within a warm process's idle time (`warm.IDLE_SECONDS`): only
        then is its run process kept for the next run. A trigger that fires less often
        would find it gone, and the checks a kept process needs cost every run
        (docs/performance.md)."""
        now = self._clock.monotonic()
        last = self._recent.pop(tid, None)
        self._recent[tid] = now
        while (oldest := next(iter(self._recent.items())))[1] < now - warm.IDLE_SECONDS:
            del self._recent[oldest[0]]
        return last is not None and now - last < warm.IDLE_SECONDS

    def context(self, fire: Identity, token: str) -> RunContext:
        return RunContext(
            run_id=fire.run_id,
            trigger_id=fire.trigger_id,
            program=fire.program,
            peer=fire.peer,
            space=self._space,
            url=self._url,
            token=token,
            term=fire.term,
            key=fire.key,
        )

    async def run_token(self, fire: Identity, timeout_s: float) -> str | Outcome:
        """A token for this run, living as long as it may; transient refusals are retried.
        What cannot be had is an ending (`error`, no run token), never an exception."""
        ttl = timeout_s + TOKEN_MARGIN_S
        body = RunTokenIn(
            triggerId=fire.trigger_id, runId=fire.run_id, key=fire.key, ttlSeconds=ttl
        )
        try:
            answer = await retried(lambda: self._client.token_run(self._space, body), self._clock)
        except ApiError as exc:
            return bodies.failed_before_run(f"no run token: {exc}")
        return answer.token


async def run_job(executor: Executor, job: Job, clock: Clock) -> Ending:
    """Run `job`; what the executor refuses is an ending too, never an exception. The
    outcome's instants are on `clock`, from the call (`programs.outcome.dated`)."""
    called = clock.wall()  # Executor.run reads its own clock before it first awaits
    try:
        return dated(await executor.run(job), called, clock.wall()), ""
    except ExecutorClosed:
        return bodies.not_run(RunStatus.REJECTED, RunReason.SHUTDOWN), RunReason.SHUTDOWN
    except ValueError as exc:  # args that cannot be sent to a worker
        return bodies.failed_before_run(str(exc)), "invalid_args"
