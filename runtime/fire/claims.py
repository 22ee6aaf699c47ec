"""Claims: the fires handed over together, claimed in one request.

Owns what a device asks of `POST …/fires` and how it reads the answer (SPEC "Who runs
what": fire claims). The fires due at one wake, or one message's fires, are claimed in
one request, the list form, retried when transient. Each claim has its own id, so a
retry of one that went through is answered as claimed while any other claim of its key
is `already_claimed`; a fire that runs a program names its run, so the answer carries
the run's token. Each answer sets the token on the fire, or is the refusal, as if claimed
alone. Must not admit, run or record.
"""

from __future__ import annotations

import logging

from core.wire import FireIn, FireResult, RunAsk
from runtime.client.api import ApiError
from runtime.client.retry import retried, transient
from runtime.client.seat import Seat
from runtime.fire.claimed import Fire
from runtime.fire.dispatch import named
from runtime.fire.execute import TOKEN_MARGIN_S

log = logging.getLogger("baton.firing")
CLAIM_MAX = 200  # fires claimed in one request at most (the space mints a token for each)
PINNED_AWAY_S = 120.0  # a pinned fire is claimed again while the space is away this long


async def claim(seat: Seat, fires: list[Fire]) -> list[ApiError | None]:
    """Each fire claimed (its run's token and the answer's instant set on it: None), or its
    refusal; one request."""
    client, space, peer, clock = seat
    bodies = [body(fire, peer) for fire in fires]
    try:
        answer = await retried(lambda: client.fires_claim_list(space, bodies), clock)
    except ApiError as exc:
        return [exc] * len(fires)
    at = clock.monotonic()
    return [_claimed(fire, result, at) for fire, result in zip(fires, answer.claims, strict=True)]


async def claimed_when_back(seat: Seat, fire: Fire) -> ApiError | bool:
    """A pinned fire whose claim found the space away, claimed again, the same claim, after
    1, 2, 4 … 10 s until the space answers (True: claimed, or its refusal) or
    `PINNED_AWAY_S` pass (False)."""
    clock = seat.clock
    deadline = clock.monotonic() + PINNED_AWAY_S
    delay = 1.0
    while clock.monotonic() + delay <= deadline:
        await clock.sleep(delay)
        delay = min(2 * delay, 10.0)
        [answer] = await claim(seat, [fire])
        if answer is None:
            return True
        if not transient(answer):
            return answer
    log.warning(
        "fire %s@%s not claimed: the space stayed away", named(fire.request.trigger), fire.key
    )
    return False


def body(fire: Fire, peer: str) -> FireIn:
    """One claim of the list; a fire that runs a program asks for its run's token."""
    request = fire.request
    run = None
    if not request.for_chat_watch:
        ttl = request.trigger.limits.timeout_seconds + TOKEN_MARGIN_S
        run = RunAsk(runId=fire.run_id, ttlSeconds=ttl)
    return FireIn(
        triggerId=request.trigger.id,
        key=request.key,
        term=fire.term,
        peer=peer,
        claimId="clm_" + fire.run_id.removeprefix("run_"),  # one per attempt
        run=run,
    )


def _claimed(fire: Fire, result: FireResult, at: float) -> ApiError | None:
    """One claim's answer in a list: the refusal, or None (the token set on the fire)."""
    if result.status >= 400:
        return ApiError(result.status, result.error or "", result.detail or "")
    fire.token, fire.claimed_at = result.token, at
    return None
