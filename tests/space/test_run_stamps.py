"""A run record with its trigger's stamps in one write, and a list of them in one request."""

from __future__ import annotations

from typing import Any

from space_support import SPACE, Api

S = f"/spaces/{SPACE}"

BOTH_STORES = True  # runs and their stamps answer from the store seam


def run(run_id: str, trigger: str, status: str = "skipped", **extra: Any) -> dict[str, Any]:
    return {
        "runId": run_id,
        "triggerId": trigger,
        "peer": "box",
        "key": f"k{run_id}",
        "startedAt": "2026-12-01T09:00:00Z",
        "status": status,
        "reason": "overlap",
        **extra,
    }


STAMPS = {
    "lastStatus": "skipped",
    "lastStatusDetail": "overlap",
    "lastRunAt": "2026-12-01T10:00:00+01:00",
    "nextFireAt": "2026-12-01T09:05:00Z",
}


async def test_a_list_of_runs_writes_each_run_and_its_stamps_in_one_request(api: Api) -> None:
    a, b = await api.create_trigger(), await api.create_trigger()
    assert (await api.post(f"{S}/runs", run("r0", a["id"])))[0] == 201
    body = [
        run("r1", a["id"], stamps=STAMPS),
        run("r2", b["id"], stamps={"lastStatus": "error", "lastStatusDetail": "x"}),
        run("r0", a["id"], status="rejected"),  # another run under a taken id
        run("r3", "trg_gone", stamps=STAMPS),  # its record is gone: the run stays
    ]
    status, answer = await api.post(f"{S}/runs", body)
    assert status == 200
    got = [
        (r["runId"], r["status"], r.get("error"), r.get("stamps"), r.get("stampsError"))
        for r in answer["runs"]
    ]
    assert got == [
        ("r1", 201, None, 200, None),
        ("r2", 201, None, 200, None),
        ("r0", 409, "run_exists", None, None),
        ("r3", 201, None, 404, "unknown_trigger"),
    ]
    _, stamped = await api.get(f"{S}/triggers/{a['id']}")
    assert (stamped["lastStatus"], stamped["lastStatusDetail"]) == ("skipped", "overlap")
    assert stamped["lastRunAt"] == "2026-12-01T09:00:00.000Z"  # in the one wire format
    assert stamped["nextFireAt"] == "2026-12-01T09:05:00.000Z"
    assert stamped["rev"] == a["rev"]  # stamps never bump the rev
    _, other = await api.get(f"{S}/triggers/{b['id']}")
    assert other["lastStatus"] == "error"
    _, listing = await api.get(f"{S}/runs")
    assert [r["runId"] for r in listing["runs"]] == ["r0", "r1", "r2", "r3"]
    assert all("stamps" not in r for r in listing["runs"])  # stamps are the record's, not the run's


async def test_stamps_with_a_run_are_fenced_as_the_status_route_is(api: Api) -> None:
    pinned = await api.create_trigger(owner="other")
    box = api.as_(await api.device_token("box"))
    status, answer = await box.post(f"{S}/runs", [run("r1", pinned["id"], stamps=STAMPS)])
    assert status == 200
    [result] = answer["runs"]
    assert (result["status"], result["stamps"], result["stampsError"]) == (201, 403, "forbidden")
    _, record = await api.get(f"{S}/triggers/{pinned['id']}")
    assert record.get("lastStatus", "") == ""


async def test_one_run_with_stamps_is_written_with_them_or_not_at_all(api: Api) -> None:
    a = await api.create_trigger()
    status, stored = await api.post(f"{S}/runs", run("r1", a["id"], stamps=STAMPS))
    assert status == 201 and "stamps" not in stored
    assert (await api.get(f"{S}/triggers/{a['id']}"))[1]["lastStatus"] == "skipped"
    status, body = await api.post(f"{S}/runs", run("r2", "trg_gone", stamps=STAMPS))
    assert (status, body["error"]) == (404, "unknown_trigger")
    _, listing = await api.get(f"{S}/runs")
    assert [r["runId"] for r in listing["runs"]] == ["r1"]  # rolled back with its stamps
    status, body = await api.post(f"{S}/runs", run("r3", a["id"], stamps={"name": "x"}))
    assert (status, body["error"]) == (400, "invalid_run")  # stamps are runtime stamps only
