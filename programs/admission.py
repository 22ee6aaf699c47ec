"""Admission of a trigger's fires against its overlap policy, as pure functions.

Owns what happens to a fire while earlier fires of the same trigger still run (SPEC "Runs":
`limits.overlap`, `limits.maxQueue`): `skip`, `queue` (FIFO, `queue_full` beyond `maxQueue`),
`parallel` (up to the pool's size, then queued) and `restart` (the caller cancels the
running fire, `cancelled` `superseded`; this one waits alone for its end). Every `start` is
matched by one `finished`; a waiting fire is never overtaken. The caller keeps the queued
fires. Pure: no I/O, no clock, no pool.
"""

from __future__ import annotations

import enum

import msgspec
from msgspec.structs import replace

from core.vocab import Overlap, RunReason, RunStatus


class Ruling(enum.StrEnum):
    START = "start"  # run it now
    QUEUED = "queued"  # keep it; `finished` says when to start it
    RESTART = "restart"  # cancel the running fire; keep this one, alone, to start after it
    SKIPPED = RunStatus.SKIPPED.value  # a run record with status skipped
    REJECTED = RunStatus.REJECTED.value  # a run record with status rejected


class Decision(msgspec.Struct, frozen=True, kw_only=True):
    verdict: Ruling
    reason: str = ""  # `overlap` or `queue_full` for skipped/rejected


class Slots(msgspec.Struct, frozen=True, kw_only=True):
    running: int = 0
    queued: int = 0
    skipped: int = 0  # fires skipped for overlap, all time
    rejected: int = 0  # fires rejected for a full queue, all time


IDLE = Slots()
START = Decision(verdict=Ruling.START)
QUEUED = Decision(verdict=Ruling.QUEUED)


def admit(
    state: Slots, policy: Overlap | str, max_queue: int, pool_size: int
) -> tuple[Decision, Slots]:
    """What to do with a new fire, and the state after it."""
    policy = as_policy(policy)
    _check(max_queue, pool_size)
    capacity = pool_size if policy is Overlap.PARALLEL else 1
    if state.running < capacity and state.queued == 0:
        return START, replace(state, running=state.running + 1)
    if policy is Overlap.RESTART:
        return Decision(verdict=Ruling.RESTART, reason=RunReason.SUPERSEDED), replace(
            state, queued=1
        )
    if policy is Overlap.SKIP:
        return Decision(verdict=Ruling.SKIPPED, reason=RunReason.OVERLAP), replace(
            state, skipped=state.skipped + 1
        )
    if state.queued < max_queue:
        return QUEUED, replace(state, queued=state.queued + 1)
    return Decision(verdict=Ruling.REJECTED, reason=RunReason.QUEUE_FULL), replace(
        state, rejected=state.rejected + 1
    )


def finished(state: Slots) -> tuple[bool, Slots]:
    """A running fire ended: whether to start the oldest queued one, and the state after."""
    if state.running <= 0:
        raise ValueError("finished() without a running fire")
    if state.queued > 0:
        return True, replace(state, queued=state.queued - 1)  # one ends, one starts
    return False, replace(state, running=state.running - 1)


def drop_queued(state: Slots) -> tuple[int, Slots]:
    """Forget every waiting fire (paused, removed, moved away): how many, and the state."""
    return state.queued, replace(state, queued=0)


def as_policy(policy: Overlap | str) -> Overlap:
    value = getattr(policy, "value", policy)
    try:
        return Overlap(value)
    except ValueError:
        choices = ", ".join(p.value for p in Overlap)
        raise ValueError(f"overlap {value!r} is not one of {choices}") from None


def _check(max_queue: int, pool_size: int) -> None:
    if max_queue < 0:
        raise ValueError(f"maxQueue must be ≥ 0, got {max_queue}")
    if pool_size < 1:
        raise ValueError(f"pool_size must be ≥ 1, got {pool_size}")
