import pytest

from core.vocab import Overlap
from programs.admission import (
    IDLE,
    Decision,
    Ruling,
    Slots,
    admit,
    as_policy,
    drop_queued,
    finished,
)

START, QUEUED, SKIPPED, REJECTED = Ruling.START, Ruling.QUEUED, Ruling.SKIPPED, Ruling.REJECTED
RESTART = Ruling.RESTART
WAITS_ALONE = Slots(running=1, queued=1)


@pytest.mark.parametrize(
    ("state", "policy", "max_queue", "pool", "verdict", "reason", "after"),
    [
        # skip
        (IDLE, "skip", 100, 4, START, "", Slots(running=1)),
        (Slots(running=1), "skip", 100, 4, SKIPPED, "overlap", Slots(running=1, skipped=1)),
        # queue
        (IDLE, "queue", 100, 4, START, "", Slots(running=1)),
        (Slots(running=1), "queue", 100, 4, QUEUED, "", Slots(running=1, queued=1)),
        (Slots(running=1, queued=99), "queue", 100, 4, QUEUED, "", Slots(running=1, queued=100)),
        (
            Slots(running=1, queued=100),
            "queue",
            100,
            4,
            REJECTED,
            "queue_full",
            Slots(running=1, queued=100, rejected=1),
        ),
        (Slots(running=1), "queue", 0, 4, REJECTED, "queue_full", Slots(running=1, rejected=1)),
        # a waiting fire is never overtaken
        (Slots(queued=1), "queue", 100, 4, QUEUED, "", Slots(queued=2)),
        # parallel: up to the pool, then the queue, then rejected
        (Slots(running=3), "parallel", 100, 4, START, "", Slots(running=4)),
        (Slots(running=4), "parallel", 100, 4, QUEUED, "", Slots(running=4, queued=1)),
        (
            Slots(running=4, queued=2),
            "parallel",
            2,
            4,
            REJECTED,
            "queue_full",
            Slots(running=4, queued=2, rejected=1),
        ),
        (Slots(running=1), "parallel", 0, 1, REJECTED, "queue_full", Slots(running=1, rejected=1)),
        (Slots(running=2, queued=1), "parallel", 10, 4, QUEUED, "", Slots(running=2, queued=2)),
        # restart: the running fire is superseded; the new one waits alone for its end
        (IDLE, "restart", 100, 4, START, "", Slots(running=1)),
        (Slots(running=1), "restart", 100, 4, RESTART, "superseded", Slots(running=1, queued=1)),
        (
            Slots(running=1, queued=1),
            "restart",
            0,
            4,
            RESTART,
            "superseded",
            Slots(running=1, queued=1),
        ),
    ],
)
def test_admit(
    state: Slots,
    policy: str,
    max_queue: int,
    pool: int,
    verdict: Ruling,
    reason: str,
    after: Slots,
) -> None:
    decision, got = admit(state, policy, max_queue, pool)
    assert decision == Decision(verdict=verdict, reason=reason)
    assert got == after


@pytest.mark.parametrize(
    ("state", "start_next", "after"),
    [
        (Slots(running=1), False, IDLE),
        (Slots(running=3), False, Slots(running=2)),
        (Slots(running=1, queued=2), True, Slots(running=1, queued=1)),
        (Slots(running=4, queued=1, rejected=7), True, Slots(running=4, rejected=7)),
    ],
)
def test_finished(state: Slots, start_next: bool, after: Slots) -> None:
    assert finished(state) == (start_next, after)


def test_finished_without_a_run_is_a_bug() -> None:
    with pytest.raises(ValueError, match="without a running fire"):
        finished(IDLE)


def test_drop_queued() -> None:
    assert drop_queued(Slots(running=1, queued=3)) == (3, Slots(running=1))
    assert drop_queued(IDLE) == (0, IDLE)


@pytest.mark.parametrize(
    ("policy", "max_queue", "pool", "fires", "started", "queued", "refused"),
    [
        ("skip", 100, 4, 5, 1, 0, 4),
        ("queue", 2, 4, 5, 1, 2, 2),
        ("parallel", 1, 3, 5, 3, 1, 1),
    ],
)
def test_burst_then_drain(
    policy: str, max_queue: int, pool: int, fires: int, started: int, queued: int, refused: int
) -> None:
    """A burst of fires while none finishes, then every run finishes: all admitted ones run."""
    state, verdicts = IDLE, []
    for _ in range(fires):
        decision, state = admit(state, policy, max_queue, pool)
        verdicts.append(decision.verdict)
    assert verdicts.count(START) == started
    assert verdicts.count(QUEUED) == queued
    assert len(verdicts) - started - queued == refused
    ran = started
    while state.running:
        start_next, state = finished(state)
        ran += start_next
    assert ran == started + queued
    assert state.queued == 0
    assert state.skipped + state.rejected == refused


def test_policy_accepts_enum_values() -> None:
    import enum

    class Other(enum.StrEnum):  # another enum with the same values
        QUEUE = "queue"

    assert as_policy(Other.QUEUE) is Overlap.QUEUE
    assert as_policy("parallel") is Overlap.PARALLEL


@pytest.mark.parametrize(
    ("policy", "max_queue", "pool", "says"),
    [
        ("sometimes", 1, 1, "overlap 'sometimes' is not one of skip, queue, parallel, restart"),
        ("queue", -1, 1, "maxQueue must be ≥ 0"),
        ("parallel", 1, 0, "pool_size must be ≥ 1"),
    ],
)
def test_bad_input(policy: str, max_queue: int, pool: int, says: str) -> None:
    with pytest.raises(ValueError) as exc:
        admit(IDLE, policy, max_queue, pool)
    assert says in str(exc.value)
