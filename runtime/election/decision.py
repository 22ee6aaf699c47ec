"""The election decision: what this device does next about the floating-trigger lease.

Owns the rules (SPEC "Who runs what"): only the space's clock decides a lapse
(`expiresInMs`, turned into a local monotonic deadline); the holder renews every `renew_s`,
and on a task of its own by `renew_at` when a slow space kept the loop from it, and fires
only until `sent + lease_s - margin_s`; a follower takes a free or lapsed lease and never
preempts a renewing holder; a higher priority device asks (`want`). Pure: the last lease
read and a monotonic `now` in, data out. Must not talk to the space or sleep
(runtime.election.loop does).
"""

from __future__ import annotations

import enum

import msgspec


class Config(msgspec.Struct, frozen=True, kw_only=True):
    lease_s: float = 15.0
    renew_s: float = 5.0
    margin_s: float = 5.0
    poll_s: float = 2.0
    settle_s: float = 10.0


DEFAULTS = Config()


def scaled(lease_s: float, like: Config | None = None) -> Config:
    """`like`'s timings (default: the defaults, 15 s → 5, 5, 2, 10) stretched to `lease_s`."""
    base = like or Config()
    k = lease_s / base.lease_s
    return Config(
        lease_s=lease_s,
        renew_s=base.renew_s * k,
        margin_s=base.margin_s * k,
        poll_s=base.poll_s * k,
        settle_s=base.settle_s * k,
    )


class LeaseView(msgspec.Struct, frozen=True, kw_only=True):
    """The lease as last read from the space, anchored to local monotonic time."""

    active: str | None
    term: int
    expires_at_mono: float  # read time + expiresInMs
    want: str | None = None


class State(msgspec.Struct, frozen=True, kw_only=True):
    """This device's standing: the lease it holds (if any) and until when it may act."""

    me: str
    priority: int = 0
    term: int = 0
    holding: bool = False
    acts_until: float = float("-inf")  # monotonic; floating fires only before this
    last_renew_sent: float = float("-inf")
    live_since: float = 0.0  # monotonic: when this device last became healthy


class Act(enum.StrEnum):
    WAIT = "wait"
    RENEW = "renew"
    ACQUIRE = "acquire"
    HANDOVER = "handover"
    WANT = "want"


class Step(msgspec.Struct, frozen=True, kw_only=True):
    act: Act
    term: int = 0
    to: str | None = None  # HANDOVER: the device that asked
    at: float = 0.0  # WAIT: monotonic time to look again


def may_fire(state: State, now: float) -> bool:
    """Whether floating triggers may fire now on this device."""
    return state.holding and now < state.acts_until


RENEW_SLACK_S = 0.5  # a renewal's answer comes this long before the acting deadline
RENEW_AGAIN_S = 1.0  # past that point, one more renewal this often


def renew_at(state: State, rtt: float, last_sent: float) -> float:
    """When the renewal task sends a renewal: the latest moment whose answer (a round trip
    `rtt` later, a quarter more for its jitter) still comes before the acting deadline,
    and past it one more every `RENEW_AGAIN_S` (over a slow link several are in flight)."""
    return max(state.acts_until - rtt * 1.25 - RENEW_SLACK_S, last_sent + RENEW_AGAIN_S)


def on_renewed(state: State, cfg: Config, term: int, sent: float) -> State:
    """An acquire or renewal sent at `sent` succeeded under `term` (two in flight: the later
    sent counts, whichever answered last)."""
    if state.holding and state.term == term:
        sent = max(sent, state.last_renew_sent)
    return msgspec.structs.replace(
        state,
        holding=True,
        term=term,
        acts_until=sent + cfg.lease_s - cfg.margin_s,
        last_renew_sent=sent,
    )


def on_lost(state: State) -> State:
    """A conflict, another holder seen, a release or a hand-over: stop acting at once."""
    return msgspec.structs.replace(state, holding=False, acts_until=float("-inf"))


def on_slept(state: State, now: float) -> State:
    """The machine slept: distrust the lease until a renewal succeeds; settle again."""
    return msgspec.structs.replace(state, acts_until=float("-inf"), live_since=now)


def observe(state: State, view: LeaseView) -> State:
    """Fold a fresh read of the lease in: seeing another holder or term ends our tenure."""
    if state.holding and (view.active != state.me or view.term != state.term):
        return on_lost(state)
    return state


def decide(
    state: State, view: LeaseView, cfg: Config, now: float, priorities: dict[str, int]
) -> Step:
    """What to do next, given the lease view and the live devices' priorities."""
    if state.holding:
        return _as_holder(state, view, cfg, now, priorities)
    return _as_follower(state, view, cfg, now, priorities)


def _as_holder(
    state: State, view: LeaseView, cfg: Config, now: float, priorities: dict[str, int]
) -> Step:
    due = state.last_renew_sent + cfg.renew_s
    if now < state.acts_until and now < due:
        return Step(act=Act.WAIT, at=min(due, state.acts_until))
    want = handover_to(state, view, priorities)
    if want is not None:
        return Step(act=Act.HANDOVER, term=state.term, to=want)
    return Step(act=Act.RENEW, term=state.term)


def handover_to(state: State, view: LeaseView | None, priorities: dict[str, int]) -> str | None:
    """The device the holder hands the lease to at its next renewal, instead of renewing."""
    want = view.want if view is not None else None
    if want and want != state.me and priorities.get(want, -1) > state.priority:
        return want
    return None


def _as_follower(
    state: State, view: LeaseView, cfg: Config, now: float, priorities: dict[str, int]
) -> Step:
    if view.active is None or now >= view.expires_at_mono:
        return Step(act=Act.ACQUIRE, term=view.term)
    if view.active == state.me:  # handed over to us (or ours from before a restart)
        return Step(act=Act.RENEW, term=view.term)
    holder_priority = priorities.get(view.active, 0)
    settled = now - state.live_since >= cfg.settle_s
    if state.priority > holder_priority and settled and view.want != state.me:
        return Step(act=Act.WANT, term=view.term)
    return Step(act=Act.WAIT, at=min(now + cfg.poll_s, view.expires_at_mono))
