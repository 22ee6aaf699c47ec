"""A claimed fire: the one value a fire is from its claim to its record.

Owns `Fire` (SPEC "Runs"): the `FireRequest` as decided, the run id, term and peer it is
claimed under, the claim's answer (the run's token, when it came, or the owner's ledger),
the steps of its way (for `phases` and `lateMs`), when it started and how it ended. The
firing (runtime.fire.firing) moves it on, one task per fire; runtime.fire.bodies turns it
into the run record and stamps. Plain data: no I/O, no clock (instants are passed in).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

import msgspec

from core.wire import Phases
from programs.outcome import Outcome
from runtime.fire.dispatch import FireRequest
from runtime.fire.secrets import Args
from triggers.records import Limits, TriggerId

WAKE, CLAIM, QUEUE, SPAWN = "wakeMs", "claimMs", "queueMs", "spawnMs"
Step = tuple[str, datetime]
"""A phase of a fire (a field of `Phases`) and the instant, on the device's clock, it ended."""


class Fire(msgspec.Struct, kw_only=True):
    """One claimed fire of one trigger, and what it gathers on its way to its record."""

    request: FireRequest
    run_id: str
    term: int
    peer: str
    retaken: bool = False  # claimed again at its slot after an `ahead_of_clock` refusal
    token: str | None = None  # the run's token the claim answered (None: none asked)
    claimed_at: float = 0.0  # when the claim's answer came (monotonic)
    local: bool = False  # claimed in this device's ledger (the space away): no token
    steps: list[Step] = msgspec.field(default_factory=list)  # its way so far
    started_at: datetime | None = None  # main() entered; a fire that did not run: decided
    phases: Phases | None = None  # where `started_at − due_at` went
    outcome: Outcome | None = None  # how it ended (None: not yet)
    reason: str = ""  # why (the run record's `reason`)
    admitted: bool = False  # it passed admission: the breaker judges its ending

    @property
    def trigger_id(self) -> TriggerId:
        return self.request.trigger.id

    @property
    def program(self) -> str:
        return self.request.trigger.program

    @property
    def key(self) -> str:
        return self.request.key

    @property
    def due_at(self) -> datetime:
        return self.request.due_at

    @property
    def args(self) -> Args:
        """main()'s args: the record's, and the event of an event fire."""
        record, event = self.request.trigger, self.request.event
        return dict(record.args) if event is None else {**record.args, "event": event}

    @property
    def limits(self) -> Limits:
        return self.request.trigger.limits

    def token_for(self, now: float, fresh_s: float) -> str | None:
        """The claim's token for a run starting at `now` (monotonic), if fresh enough to
        outlive the run; "" if claimed in the ledger (none to be had); None: mint one."""
        if self.local:
            return ""
        return self.token if now - self.claimed_at <= fresh_s else None

    def decided(self, now: datetime) -> None:
        """As decided at `now`: when a non-run's record says it started, and a run's until
        its program is handed over (`entered` finishes it)."""
        self.started_at, self.phases = now, phases(self.due_at, (*self.steps, (QUEUE, now)))

    def entered(self, outcome: Outcome) -> None:
        """Its run started when its `main()` was entered, read in the run process, after
        waiting for a worker (queue) and the process until main() (spawn); a run whose
        main() never was keeps the hand-over's instant."""
        self.outcome = outcome
        if (at := entered_at(self.due_at, self.steps, outcome)) is not None:
            self.started_at, self.phases = at


def phases(due_at: datetime | None, steps: Sequence[Step]) -> Phases | None:
    """How the lateness of a fire splits: each step counts the part of its span after
    `due_at` (a step spans from the end of the one before, the first from `due_at`), so
    the phases sum to the last step's end − `due_at`. None when nothing was due."""
    if due_at is None:
        return None
    spent = dict.fromkeys((WAKE, CLAIM, QUEUE, SPAWN), 0.0)
    reached = due_at
    for phase, end in steps:
        if end > reached:
            spent[phase] += (end - reached).total_seconds() * 1000
            reached = end
    return Phases(**{phase: round(ms, 1) for phase, ms in spent.items()})


def entered_at(
    due_at: datetime | None, steps: Sequence[Step], outcome: Outcome
) -> tuple[datetime, Phases | None] | None:
    """When a run started (main() entered) and its phases; None if main() never was."""
    if outcome.entered_at is None or outcome.handed_at is None:
        return None
    taken = (*steps, (QUEUE, outcome.handed_at), (SPAWN, outcome.entered_at))
    return outcome.entered_at, phases(due_at, taken)
