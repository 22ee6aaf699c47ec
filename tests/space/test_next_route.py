"""`GET …/triggers/{id}/next` against a real space: the fires `triggers show` lists, DST noted."""

from __future__ import annotations

from datetime import UTC, datetime

from space_support import SPACE, Api, FakeClock

from runtime.cli.trigger_views import next_fires

S = f"/spaces/{SPACE}/triggers"


async def test_the_next_ten_fires_of_a_cron_from_the_servers_now(api: Api) -> None:
    tid = (await api.create_trigger(spec={"expr": "*/5 * * * *"}))["id"]
    status, got = await api.get(f"{S}/{tid}/next")
    assert status == 200, got
    assert (got["trigger"], got["zone"], got["notes"]) == (tid, "UTC", {})
    at = [f["at"] for f in got["fires"]]
    assert len(at) == 10 and at[0] == "2026-12-01T09:00:00.000Z"  # at or after now
    assert at[-1] == "2026-12-01T09:45:00.000Z"
    _, record = await api.get(f"{S}/{tid}")
    now = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)
    assert got["fires"] == next_fires(record, now)  # one computation: the CLI's `show` agrees


async def test_a_spring_gap_and_an_autumn_repeat_are_noted(
    api: Api, space_clock: FakeClock
) -> None:
    spec = {"expr": "30 2 * * *", "tz": "Europe/Berlin"}
    tid = (await api.create_trigger(spec=spec))["id"]
    space_clock.advance((datetime(2027, 3, 27, 12, tzinfo=UTC) - space_clock()).total_seconds())
    status, got = await api.get(f"{S}/{tid}/next?count=2")
    assert status == 200, got
    assert [(f["local"], f["dst"]) for f in got["fires"]] == [
        ("2027-03-28T03:00:00.000+02:00", "shifted"),  # 02:30 does not exist that night
        ("2027-03-29T02:30:00.000+02:00", None),
    ]
    assert got["zone"] == "Europe/Berlin" and set(got["notes"]) == {"shifted"}
    assert "spring gap" in got["notes"]["shifted"]
    space_clock.advance(7 * 30 * 86400)  # late October 2027: the repeated hour
    _, autumn = await api.get(f"{S}/{tid}/next?count=30")
    assert "merged" in {f["dst"] for f in autumn["fires"]} and "merged" in autumn["notes"]


async def test_a_paused_or_event_trigger_has_none_and_bad_input_is_refused(api: Api) -> None:
    paused = (await api.create_trigger(enabled=False))["id"]
    assert (await api.get(f"{S}/{paused}/next"))[1]["fires"] == []
    status, got = await api.get(f"{S}/{paused}/next?count=0")
    assert status == 400 and "count" in got["detail"]
    status, got = await api.get(f"{S}/{paused}/next?count=101")
    assert status == 400 and "count" in got["detail"]
    status, got = await api.get(f"{S}/trg_nope/next")
    assert status == 404, got
