"""A hung disk (fsfreeze) holds the whole server: the time it could not run expires no lease."""

from __future__ import annotations

from space_support import SPACE, Api, FakeClock, on_db

from core.clock import SystemClock
from space.dbthread import DB_THREAD

E = f"/spaces/{SPACE}/election"


class Ticks(SystemClock):
    """The database thread's monotonic clock, moved with the server's fake one."""

    def __init__(self, clock: FakeClock) -> None:
        self.clock, self.start = clock, clock()  # real time plus the fake time moved since

    def monotonic(self) -> float:
        return super().monotonic() + (self.clock() - self.start).total_seconds()


async def stall_next_commit(api: Api, clock: FakeClock, seconds: float) -> None:
    """The next COMMIT takes `seconds` of the server's clock and of the database thread's
    monotonic one (the disk hung meanwhile)."""
    app = api.client.server.app
    assert app is not None
    app[DB_THREAD].ticks = Ticks(clock)
    left = [seconds]

    def trace(sql: str) -> None:
        if sql == "COMMIT" and left:
            clock.advance(left.pop())

    await on_db(api, lambda db: db.conn.set_trace_callback(trace))


async def test_a_stall_of_the_store_does_not_expire_the_lease(
    api: Api, space_clock: FakeClock
) -> None:
    status, lease = await api.post(f"{E}/claim", {"peer": "laptop", "term": 0})
    assert status == 200 and lease["expiresAt"] == "2026-12-01T09:00:15.000Z"
    space_clock.advance(5)
    await stall_next_commit(api, space_clock, 28.0)  # 09:00:05 → 09:00:33, past the lease's end
    assert (await api.put(f"/spaces/{SPACE}/devices/phone", {"name": "Phone"}))[0] == 200
    status, lease = await api.get(E)
    assert lease["active"] == "laptop" and lease["expiresAt"] == "2026-12-01T09:00:43.000Z"
    status, body = await api.post(f"{E}/claim", {"peer": "phone", "term": 1})
    assert status == 409 and body["active"] == "laptop", body
    status, lease = await api.post(f"{E}/claim", {"peer": "laptop", "term": 1})
    assert status == 200 and lease["term"] == 1, lease  # renewed: the holder never lost it


async def test_a_lease_that_had_lapsed_before_the_stall_is_not_revived(
    api: Api, space_clock: FakeClock
) -> None:
    await api.post(f"{E}/claim", {"peer": "laptop", "term": 0})
    space_clock.advance(20)  # lapsed at 09:00:15
    await stall_next_commit(api, space_clock, 28.0)
    assert (await api.put(f"/spaces/{SPACE}/devices/phone", {"name": "Phone"}))[0] == 200
    status, lease = await api.get(E)
    assert lease["active"] is None, lease
    status, lease = await api.post(f"{E}/claim", {"peer": "phone", "term": 1})
    assert status == 200 and lease["active"] == "phone" and lease["term"] == 2


async def fail_writes(api: Api) -> None:
    """The store's writes fail as on a read-only disk, until `heal_writes`."""
    await on_db(api, lambda db: db.execute("PRAGMA query_only = ON"))


async def heal_writes(api: Api) -> None:
    await on_db(api, lambda db: db.execute("PRAGMA query_only = OFF"))


async def test_time_the_store_could_not_write_does_not_hand_the_lease_on(
    api: Api, space_clock: FakeClock
) -> None:
    await api.post(f"{E}/claim", {"peer": "laptop", "term": 0})  # until 09:00:15
    space_clock.advance(5)
    await fail_writes(api)
    status, body = await api.post(f"{E}/claim", {"peer": "laptop", "term": 1})
    assert status == 503 and body["error"] == "storage_unavailable", body  # the fault begins
    space_clock.advance(25)  # 09:00:30: lapsed by the clock, but its holder could not renew
    await heal_writes(api)  # the first write that could commit is another peer's claim
    status, body = await api.post(f"{E}/claim", {"peer": "phone", "term": 1})
    assert status == 409 and body["active"] == "laptop", body  # not handed on for the fault
    assert (await api.put(f"/spaces/{SPACE}/devices/phone", {"name": "Phone"}))[0] == 200
    status, lease = await api.get(E)  # credited with the 25 s the writes failed
    assert lease["active"] == "laptop" and lease["expiresAt"] == "2026-12-01T09:00:40.000Z"
    status, lease = await api.post(f"{E}/claim", {"peer": "laptop", "term": 1})
    assert status == 200 and lease["term"] == 1, lease  # the same term: the holder kept it
