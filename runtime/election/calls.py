"""The space's election routes for one device: read, acquire (or renew), hand over, want, release.

Owns the bodies these calls send, what a refusal means here (a 409 acquire is a
conflict, a 409 hand-over a refusal that is logged, a failed release is logged), and
reading a lease answer as a `lease.LeaseView` anchored to local monotonic time: the
space answers `expiresInMs`, never an instant, so no wall clock is compared with
another device's. Must not decide anything (that is `runtime.election.decision`) nor keep state
(that is `runtime.election.loop`).
"""

from __future__ import annotations

import logging

from core.peerwire import HandoverIn, LeaseIn, LeaseOut, WantIn
from runtime.client.api import ApiError
from runtime.client.seat import Seat
from runtime.election import decision as lease

log = logging.getLogger("runtime.election.loop")


class LeaseCalls:
    """One device's calls to the election routes of one space."""

    def __init__(self, seat: Seat) -> None:
        self._client, self._space, self._peer, _ = seat

    async def read(self) -> LeaseOut:
        return await self._client.election(self._space)

    async def acquire(self, term: int) -> LeaseOut | None:
        """Acquire or renew at `term` (the SPEC's `…/election/claim`); None when the space
        refuses it (a conflict)."""
        try:
            return await self._client.election_claim(
                self._space, LeaseIn(peer=self._peer, term=term)
            )
        except ApiError as exc:
            if exc.status == 409:
                return None
            raise

    async def handover(self, term: int, to: str) -> None:
        body = HandoverIn(peer=self._peer, term=term, to=to)
        try:
            await self._client.election_handover(self._space, body)
            log.info("election: handed the lease over to %s at term %d", to, term + 1)
        except ApiError as exc:
            if exc.status != 409:
                raise
            log.warning("election: hand-over to %s refused: %s", to, exc)

    async def want(self, priority: int) -> None:
        await self._client.election_want(self._space, WantIn(peer=self._peer, want=True))
        log.info("election: asked for the lease (priority %d)", priority)

    async def release(self, term: int) -> None:
        """Free the lease held at `term`; never raises."""
        try:
            await self._client.election_release(self._space, LeaseIn(peer=self._peer, term=term))
            log.info("election: released the lease at term %d", term)
        except Exception as exc:
            log.warning("election: could not release the lease at term %d: %s", term, exc)


def view_of(answer: LeaseOut, now: float) -> lease.LeaseView:
    """A lease answer as a view anchored to the local monotonic `now` it was read at."""
    expires_in = answer.expiresInMs
    expires = float("-inf") if expires_in is None else expires_in / 1000.0
    return lease.LeaseView(
        active=answer.active, term=answer.term, expires_at_mono=now + expires, want=answer.want
    )
