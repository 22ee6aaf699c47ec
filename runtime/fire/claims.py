"""Claims: the fires handed over together, claimed in one request.

Owns what a device asks of `POST …/fires` and how it reads the answer (SPEC "Who runs
what": fire claims). The fires due at one wake, or one message's fires, are claimed in
one request, the list form, retried when transient. Each claim has its own id, so a
retry of one that went through is answered as claimed while any other claim of its key
is `already_claimed`; a fire that runs a program names its run, so the answer carries
the run's token. Each answer is the fire as claimed (with its token) or the refusal, as
if claimed alone. Must not admit, run or record.
"""

from __future__ import annotations

import logging

import msgspec

from core.wire import FireIn, FireResult, RunAsk
from runtime.client.api import ApiError
from runtime.client.retry import retried, transient
from runtime.client.seat import Seat
from runtime.fire.dispatch import named
from runtime.fire.execute import TOKEN_MARGIN_S
from runtime.fire.lanes import ClaimedFire, Queued

log = logging.getLogger("baton.firing")
CLAIM_MAX = 200  # fires claimed in one request at most (the space mints a token for each)
PINNED_AWAY_S = 120.0  # a pinned fire is claimed again while the space is away this long


async def claim(seat: Seat, waiting: list[Queued]) -> list[Queued | ApiError]:
    """Each fire claimed (with its run's token), or its refusal; one request."""
    client, space, peer, clock = seat
    bodies = [body(queued, peer) for queued in waiting]
    try:
        answer = await retried(lambda: client.fires_claim_list(space, bodies), clock)
    except ApiError as exc:
        return [exc] * len(waiting)
    at = clock.monotonic()
    return [
        _claimed(queued, result, at) for queued, result in zip(waiting, answer.claims, strict=True)
    ]


async def claimed_when_back(seat: Seat, queued: Queued) -> Queued | ApiError | None:
    """A pinned fire whose claim found the space away, claimed again, the same claim, after
    1, 2, 4 … 10 s until the space answers (its answer) or `PINNED_AWAY_S` pass (None)."""
    clock = seat.clock
    deadline = clock.monotonic() + PINNED_AWAY_S
    delay = 1.0
    while clock.monotonic() + delay <= deadline:
        await clock.sleep(delay)
        delay = min(2 * delay, 10.0)
        [answer] = await claim(seat, [queued])
        if not (isinstance(answer, ApiError) and transient(answer)):
            return answer
    tid, key = named(queued.request.trigger), queued.request.key
    log.warning("fire %s@%s not claimed: the space stayed away", tid, key)
    return None


def body(queued: Queued, peer: str) -> FireIn:
    """One claim of the list; a fire that runs a program asks for its run's token."""
    request = queued.request
    run = None
    if not request.for_chat_watch:
        ttl = request.trigger.limits.timeout_seconds + TOKEN_MARGIN_S
        run = RunAsk(runId=queued.claimed.run_id, ttlSeconds=ttl)
    return FireIn(
        triggerId=request.trigger.id,
        key=request.key,
        term=queued.term,
        peer=peer,
        claimId="clm_" + queued.claimed.run_id.removeprefix("run_"),  # one per attempt
        run=run,
    )


def _claimed(queued: Queued, result: FireResult, at: float) -> Queued | ApiError:
    """One claim's answer in a list: the fire as claimed (with its token), or the refusal."""
    if result.status >= 400:
        return ApiError(result.status, result.error or "", result.detail or "")
    claimed = ClaimedFire(run_id=queued.claimed.run_id, token=result.token, at=at)
    return msgspec.structs.replace(queued, claimed=claimed)
