"""`/metrics` of a real space: the alertable families with bounded labels, a valid exposition,
and a sample rule file (docs/alerts.yml) that names only metrics the space serves."""

from __future__ import annotations

import json
import re
import shutil
import sqlite3
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest
from space_support import SPACE, Api, FakeClock, snapshot

from space import alertables
from space.store import STORE
from space.store.postgres import PostgresStore

ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "docs" / "alerts.yml"
S = f"/spaces/{SPACE}"
SAMPLE = re.compile(
    r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(?:[a-zA-Z_][a-zA-Z0-9_]*="(?:[^"\\\n]|\\.)*",?)*\})? '
    r"(-?[0-9.eE+-]+|\+Inf|NaN)$"
)
WATCH = {"responder": "builtin", "chatWatch": {"ready": True, "chats": [{"waiting": 3}]}}
SLOT = datetime(2026, 12, 1, 9, 5, tzinfo=UTC)  # a slot of the records' `*/5 * * * *`
OPEN = {"phase": "open", "failures": 3, "trips": 1, "openUntil": "2026-12-01T09:10:00Z"}
EARLIER = {  # the families `/metrics` served before the alertable ones
    "baton_runs_total",
    "baton_fires_total",
    "baton_claims_total",
    "baton_fire_latency_seconds",
    "baton_run_lateness_seconds",
    "baton_sse_subscribers",
    "baton_election_term",
    "baton_election_active",
    "baton_storage_up",
    "baton_storage_faults_total",
}
BOTH_STORES = True  # a scrape reads through the store seam: SQLite and PostgreSQL


async def scrape(api: Api) -> str:
    headers = {"Authorization": f"Bearer {api.token}"}
    async with api.client.get("/metrics", headers=headers) as resp:
        assert resp.status == 200
        return await resp.text()


def samples(text: str) -> dict[str, list[str]]:
    """Each sample's name → its lines; a line that is not strict text format 0.0.4 fails."""
    found: dict[str, list[str]] = {}
    typed: set[str] = set()
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            name = line.split()[2]
            assert name not in typed, f"{name} typed twice"
            typed.add(name)
        elif not line.startswith("# HELP "):
            match = SAMPLE.match(line)
            assert match, f"not a sample: {line!r}"
            found.setdefault(match.group(1), []).append(line)
    return found


def sample(name: str, value: float | int, **labels: str) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted({"space": SPACE, **labels}.items()))
    return f"{name}{{{inner}}} {value}"


async def lead(api: Api, term: int = 0) -> None:
    """`box` beats and takes the free lease at `term`, so it may claim fires."""
    assert (await api.put(f"{S}/devices/box", {"status": WATCH}))[0] == 200
    status, body = await api.post(f"{S}/election/claim", {"peer": "box", "term": term})
    assert status == 200, body


async def ran(
    api: Api, tid: str, status: str, late_ms: int, *, run_id: str = "", key: str = "", term: int = 1
) -> None:
    """A claimed fire of `tid` at SLOT and its run record, as device `box` posts them."""
    key = key or SLOT.isoformat().replace("+00:00", "Z")
    claim = {"triggerId": tid, "key": key, "term": term, "peer": "box"}
    assert (await api.post(f"{S}/fires", claim))[0] == 201
    run = {
        **claim,
        "runId": run_id or f"r-{tid}",
        "startedAt": key,
        "status": status,
        "lateMs": late_ms,
    }
    assert (await api.post(f"{S}/runs", run))[0] == 201


async def test_each_trigger_says_its_breaker_and_health(api: Api) -> None:
    stamps = {
        "flaky": {"lastStatus": "timeout"},
        "fine": {"lastStatus": "ok", "breaker": {"open": False}},  # garbled: closed
        "stuck": {"lastStatus": "owner_offline", "breaker": OPEN},
        "odd": {"lastStatus": "what-is-this"},
        "new": {},
    }
    for name, body in stamps.items():
        tid = (await api.create_trigger(name=name))["id"]
        assert (await api.post(f"{S}/triggers/{tid}/status", body))[0] == 200
    got = samples(await scrape(api))
    opened = "baton_trigger_breaker_open"
    assert sorted(got[opened]) == sorted(
        sample(opened, int(name == "stuck"), trigger=name) for name in stamps
    )
    phases = "baton_triggers_by_breaker"
    assert sorted(got[phases]) == sorted(
        sample(phases, n, phase=p) for p, n in [("closed", 4), ("open", 1), ("half_open", 0)]
    )
    health = "baton_triggers_by_health"
    assert sorted(got[health]) == sorted(
        sample(health, 1, status=s) for s in ("timeout", "ok", "owner_offline", "other", "none")
    )
    failures = "baton_trigger_failures_total"  # every trigger has its series, from 0
    assert sorted(got[failures]) == sorted(sample(failures, 0, trigger=n) for n in stamps)


async def test_a_record_this_build_cannot_decode_is_counted_as_undecodable(api: Api) -> None:
    newer = {"id": "trg_newer", "kind": "webhook", "spec": {"url": "x"}, "rev": 1}
    app = api.client.server.app
    assert app is not None
    store = app[STORE]
    if isinstance(store, PostgresStore):  # as a newer build's server wrote it
        await store.pool.execute(
            "INSERT INTO triggers (space, id, rev, body) VALUES ($1, $2, 1, $3)",
            SPACE,
            "trg_newer",
            json.dumps(newer),
        )
    else:
        conn = sqlite3.connect(api.db_path)
        try:
            conn.execute(
                "INSERT INTO triggers VALUES (?, ?, 1, ?)", [SPACE, "trg_newer", json.dumps(newer)]
            )
            conn.commit()
        finally:
            conn.close()
    got = samples(await scrape(api))
    assert got["baton_triggers_by_health"] == [
        sample("baton_triggers_by_health", 1, status="undecodable")
    ]
    assert got["baton_trigger_breaker_open"] == [  # unnamed: labelled by its id
        sample("baton_trigger_breaker_open", 0, trigger="trg_newer")
    ]


@pytest.mark.sqlite_only  # claims slots by the fake clock; runs are SQLite's yet
async def test_each_trigger_says_its_failures_and_how_late_its_last_run_was(
    api: Api, space_clock: FakeClock
) -> None:
    flaky = (await api.create_trigger(name="flaky"))["id"]
    fine = (await api.create_trigger(name="fine"))["id"]
    await api.create_trigger(name="never")
    space_clock.now = SLOT
    await lead(api)
    await ran(api, flaky, "timeout", 2500)
    await ran(api, fine, "ok", 0)
    got = samples(await scrape(api))
    failures = "baton_trigger_failures_total"
    assert sorted(got[failures]) == sorted(
        sample(failures, n, trigger=t) for t, n in [("flaky", 1), ("fine", 0), ("never", 0)]
    )
    late = "baton_trigger_lateness_seconds"  # `never` has not run: no lateness to say
    assert sorted(got[late]) == [
        sample(late, 0, trigger="fine"),
        sample(late, 2.5, trigger="flaky"),
    ]
    space_clock.now = SLOT.replace(minute=10)
    await lead(api, term=1)  # the lease lapsed meanwhile: term 2
    await ran(api, flaky, "error", 0, run_id="r-again", key="2026-12-01T09:10:00Z", term=2)
    got = samples(await scrape(api))
    assert sample(failures, 2, trigger="flaky") in got[failures]
    assert sample(late, 0, trigger="flaky") in got[late]  # the last run's, not the worst


@pytest.mark.sqlite_only  # moves the fake clock between creations, reads the SQLite file; runs
async def test_past_the_first_triggers_the_rest_share_one_series_and_stay_there(
    api: Api, space_clock: FakeClock
) -> None:
    made = []
    for i in range(alertables.TOP + 5):  # names that sort against the order they are made in
        made.append((await api.create_trigger(name=f"t{alertables.TOP + 5 - i:03}"))["id"])
        space_clock.advance(1)
    first, rest = made[: alertables.TOP], made[alertables.TOP :]
    space_clock.now = SLOT
    await lead(api)
    await ran(api, rest[0], "error", 4000)
    await ran(api, rest[1], "crashed", 9000)
    await ran(api, first[0], "error", 1000)
    before = samples(await scrape(api))
    failures = before["baton_trigger_failures_total"]
    assert len(failures) == alertables.TOP + 1
    assert sample("baton_trigger_failures_total", 2, trigger="(other)") in failures
    assert (
        sample("baton_trigger_failures_total", 1, trigger=f"t{alertables.TOP + 5:03}") in failures
    )
    assert (
        sample("baton_trigger_lateness_seconds", 9, trigger="(other)")
        in before["baton_trigger_lateness_seconds"]
    )
    assert not any('trigger="t005"' in line for line in failures)  # made 51st: in (other)
    await api.create_trigger(name="a-first-by-name")  # a new trigger displaces nobody
    db = snapshot(api.db_path)
    after = samples(await scrape(api))
    assert after["baton_trigger_failures_total"] == failures
    assert snapshot(api.db_path) == db  # a scrape writes nothing


async def test_devices_say_live_stopped_and_ready_by_the_store_s_clock(api: Api) -> None:
    """On either store: live and stopped as the store's clock judges the last beats."""
    assert (await api.put(f"{S}/devices/box", {"status": WATCH}))[0] == 200
    assert (await api.put(f"{S}/devices/old", {"stopped": True}))[0] == 200
    busy = {"chatWatch": {"ready": False, "chats": [{"waiting": 2}, {"waiting": 1}]}}
    assert (await api.put(f"{S}/devices/busy", {"status": busy}))[0] == 200
    got = samples(await scrape(api))
    assert sorted(got["baton_device_live"]) == sorted(
        sample("baton_device_live", n, peer=p) for p, n in [("box", 1), ("busy", 1), ("old", 0)]
    )
    assert sample("baton_device_stopped", 1, peer="old") in got["baton_device_stopped"]
    assert sorted(got["baton_responder_ready"]) == sorted(
        sample("baton_responder_ready", n, peer=p) for p, n in [("box", 1), ("busy", 0)]
    )
    assert sorted(got["baton_responder_waiting_messages"]) == sorted(
        sample("baton_responder_waiting_messages", n, peer=p) for p, n in [("box", 3), ("busy", 3)]
    )
    assert "baton_election_term" not in got  # no lease yet
    assert (await api.post(f"{S}/election/claim", {"peer": "box", "term": 0}))[0] == 200
    got = samples(await scrape(api))
    assert got["baton_election_term"] == [sample("baton_election_term", 1)]
    assert got["baton_election_active"] == [sample("baton_election_active", 1, peer="box")]


@pytest.mark.sqlite_only  # moves the fake clock past the live window
async def test_devices_say_live_stopped_responder_ready_and_waiting(
    api: Api, space_clock: FakeClock
) -> None:
    assert (await api.put(f"{S}/devices/gone", {"status": WATCH}))[0] == 200
    space_clock.advance(60)  # past the 15 s live window
    assert (await api.put(f"{S}/devices/box", {"status": WATCH}))[0] == 200
    assert (await api.put(f"{S}/devices/old", {"stopped": True}))[0] == 200
    busy = {"chatWatch": {"ready": False, "reason": "endpoint down", "chats": [{"waiting": 2}]}}
    assert (await api.put(f"{S}/devices/busy", {"status": busy}))[0] == 200
    got = samples(await scrape(api))
    assert sorted(got["baton_device_live"]) == sorted(
        sample("baton_device_live", n, peer=p)
        for p, n in [("box", 1), ("busy", 1), ("gone", 0), ("old", 0)]
    )
    assert sample("baton_device_stopped", 1, peer="old") in got["baton_device_stopped"]
    assert sample("baton_device_stopped", 0, peer="gone") in got["baton_device_stopped"]
    assert sorted(got["baton_responder_ready"]) == sorted(  # `old` reports no responder
        sample("baton_responder_ready", n, peer=p)
        for p, n in [("box", 1), ("busy", 0), ("gone", 0)]
    )
    assert sorted(got["baton_responder_waiting_messages"]) == sorted(  # `gone`'s count is stale
        sample("baton_responder_waiting_messages", n, peer=p) for p, n in [("box", 3), ("busy", 2)]
    )
    assert got["baton_build_info"][0].startswith('baton_build_info{python="')


@pytest.mark.sqlite_only  # claims a slot by the fake clock; runs are SQLite's yet
async def test_the_exposition_and_the_rules_pass_promtool_when_it_is_there(
    api: Api, space_clock: FakeClock
) -> None:
    tid = (await api.create_trigger(name='a "quoted"\\name'))["id"]
    space_clock.now = SLOT
    await lead(api)
    await ran(api, tid, "error", 2000)
    text = await scrape(api)
    samples(text)  # the strict check of our own, always
    if shutil.which("promtool") is None:
        pytest.skip("promtool is not installed (Debian's package prometheus has it)")
    done = subprocess.run(
        ["promtool", "check", "metrics"], input=text, capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 0, done.stdout + done.stderr
    rules = subprocess.run(
        ["promtool", "check", "rules", str(RULES)], capture_output=True, text=True, timeout=30
    )
    assert rules.returncode == 0, rules.stdout + rules.stderr


@pytest.mark.sqlite_only  # claims a slot by the fake clock; runs are SQLite's yet
async def test_every_metric_the_rules_name_is_served(api: Api, space_clock: FakeClock) -> None:
    tid = (await api.create_trigger(name="flaky"))["id"]
    space_clock.now = SLOT
    await lead(api)
    await ran(api, tid, "error", 2000)
    text = await scrape(api)
    served = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    exprs = [line for line in RULES.read_text().splitlines() if line.strip().startswith("expr:")]
    named = {n for e in exprs for n in re.findall(r"\bbaton_[a-z_]+\b", e)}
    assert len(exprs) >= 10 and len(named) >= 10
    assert named - served == set()
    words = {w for e in exprs for m in re.findall(r'status=~"([^"]+)"', e) for w in m.split("|")}
    assert words and words <= {*alertables.HEALTH, "undecodable"}  # each a status we write
    alertable = served - EARLIER
    assert alertable - named <= {"baton_triggers_by_breaker"}  # each new family has a rule
