"""The space's clock: on every answer, and the judge of how early a slot may be claimed."""

from __future__ import annotations

import pytest
from space_support import SPACE, Api, FakeClock

S = f"/spaces/{SPACE}"
HEADER = "Baton-Server-Time"


async def test_every_answer_carries_the_spaces_clock(api: Api, space_clock: FakeClock) -> None:
    space_clock.advance(1.25)
    headers = {"Authorization": f"Bearer {api.token}"}
    for method, path in [
        ("GET", f"/v1{S}/triggers"),
        ("GET", f"/v1{S}/triggers/trg_none"),  # a 404
        ("POST", f"/v1{S}/fires"),  # a 400
        ("GET", "/healthz"),
        ("GET", "/v1/nowhere"),
    ]:
        async with api.client.request(method, path, headers=headers) as resp:
            assert resp.headers.get(HEADER) == "2026-12-01T09:00:01.250Z", (method, path)


async def _pinned(api: Api, **fields: object) -> str:
    record = await api.create_trigger(owner="laptop", **fields)
    return str(record["id"])


@pytest.mark.parametrize(
    ("kind", "key", "ahead"),
    [
        ("cron", "2026-12-01T09:05:00Z", False),  # the past (the clock reads 09:10)
        ("cron", "2026-12-01T09:10:05Z", False),  # 5 s ahead: a claim's lead, a loop's lag
        ("cron", "2026-12-01T09:10:06Z", True),
        ("cron", "2026-12-01T09:12:00.000Z", True),  # a device 2 min fast
        ("once", "2026-12-01T09:12:00.000Z", True),
        ("cron", "manual:2026-12-01T09:12:00.000Z", False),  # not a slot
        ("cron", "2026-12-01T09:12:00Z#2", False),  # a retry: after its run, never ahead
    ],
)
async def test_a_slot_more_than_a_few_seconds_ahead_of_the_spaces_clock_is_refused(
    api: Api, space_clock: FakeClock, kind: str, key: str, ahead: bool
) -> None:
    fields = {"kind": kind, "spec": {"at": "2026-12-01T09:12:00Z"}} if kind == "once" else {}
    tid = await _pinned(api, **fields)
    space_clock.advance(600)  # 09:10:00
    fire = {"triggerId": tid, "key": key, "term": 0, "peer": "laptop"}
    status, body = await api.post(f"{S}/fires", fire)
    if ahead:
        assert status == 409 and body["error"] == "ahead_of_clock", body
        assert body["serverTime"] == "2026-12-01T09:10:00.000Z" and key[:19] in body["detail"]
        space_clock.advance(125)  # the slot came: claimed like any other
        assert (await api.post(f"{S}/fires", fire))[0] == 201
    else:
        assert status == 201, body
