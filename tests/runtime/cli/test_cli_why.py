"""`baton why`: a trigger by id or name, the chain with ✓/✗, the remedy, `--json`, bad input."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from clikit import SPACE, Cli, World
from waiting import eventually

from runtime.cli.why import parse_when


async def test_why_says_who_paused_it_with_the_note(cli: Cli, world: World) -> None:
    body = {"name": "tick", "kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "t@v1"}
    tid = (await world.admin.trigger_create(SPACE, body))["id"]
    code, out, _ = await cli("triggers", "pause", tid, "--note", "on holiday")
    assert code == 0 and "paused" in out
    paused = datetime.now(UTC)

    async def a_slot_passed_paused() -> bool:
        return (await world.admin.trigger_why(SPACE, tid))["reason"] == "paused"

    await eventually(a_slot_passed_paused, what="a slot passing while paused")
    code, out, _ = await cli("why", "tick")
    assert code == 0, out
    lines = out.splitlines()
    assert lines[0] == f"trigger  {tid} (tick)" and lines[2] == "verdict  not_fired: paused"
    assert any(line.startswith("  ✓ slot") for line in lines)
    assert any(line.startswith("  ✗ enabled") and '"on holiday"' in line for line in lines)
    assert (
        lines[-1] == f"remedy: `baton triggers resume {tid}` (what passed while paused never fires)"
    )
    got = await cli.json("why", tid, "--json")
    assert (got["verdict"], got["reason"]) == ("not_fired", "paused")
    listed = await cli("why", "tick", "--since", (paused - timedelta(seconds=1)).isoformat())
    assert listed[0] == 0 and listed[1].splitlines()[0].split() == [
        "SLOT",
        "VERDICT",
        "REASON",
        "DETAIL",
    ]


async def test_why_refuses_an_unknown_name_with_the_closest_and_a_bad_instant(
    cli: Cli, world: World
) -> None:
    made = ("--name", "report", "--cron", "0 9 * * *", "--program", "t@v1")
    code, _, _ = await cli("triggers", "add", *made, "--note", "for the weekly report")
    assert code == 0
    got = await cli.json("why", "report", "--json")
    assert (got["verdict"], got["reason"]) == ("not_due", "before_active")
    assert got["detail"].endswith('by admin (rev 1): "for the weekly report"')
    err = await cli.fails(1, "why", "reprot")
    assert "no trigger 'reprot'" in err and "did you mean 'report'" in err
    err = await cli.fails(2, "why", "report", "--at", "soon")
    assert err.startswith("baton: --at:")


def test_wall_times_are_read_in_the_triggers_zone() -> None:
    berlin = ZoneInfo("Europe/Berlin")
    now = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)
    assert parse_when("T", "09:00", berlin, now) == datetime(2026, 12, 3, 8, 0, tzinfo=UTC)
    assert parse_when("T", "yesterday 09:00", berlin, now) == datetime(2026, 12, 2, 8, tzinfo=UTC)
    assert parse_when("T", "1764748800", berlin, now) == datetime(2025, 12, 3, 8, tzinfo=UTC)
    assert parse_when("--since", "2h", berlin, now) == datetime(2026, 12, 3, 10, tzinfo=UTC)
