# ruff: noqa: F811  (pytest fixtures imported from device_support are parameters here)
"""`/healthz` and `/metrics` of a real space while a real device fires.

A cron trigger fires every second and a chat message is answered; the scrape then
shows the fires, the runs by status, claims by result, the lateness and fire-latency
histograms, the open event streams and the election term and holder.
"""

from __future__ import annotations

import re

import aiohttp
from device_support import (  # noqa: F401  (the fixtures are used by name)
    SPACE,
    MakeDevice,
    Space,
    eventually,
    make_device,
    space,
    spaces,
)

from space.app import default_admin_token_file

EVERY_SECOND = {"kind": "cron", "spec": {"expr": "* * * * * *"}, "program": "echo@v1"}


async def scrape(space: Space, token: str | None) -> tuple[int, str, str]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        aiohttp.ClientSession() as http,
        http.get(f"{space.url}/metrics", headers=headers) as resp,
    ):
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


def value(text: str, sample: str) -> float:
    found = re.search(rf"^{re.escape(sample)} (\S+)$", text, re.MULTILINE)
    assert found, f"{sample} not in:\n{text}"
    return float(found.group(1))


async def test_healthz_needs_no_token(space: Space):
    async with aiohttp.ClientSession() as http, http.get(f"{space.url}/healthz") as resp:
        assert resp.status == 200 and (await resp.json()) == {"status": "ok"}


async def test_metrics_want_a_token_of_an_admin_or_a_device(space: Space):
    assert (await scrape(space, None))[0] == 401
    assert (await scrape(space, "bta_wrong"))[0] == 401
    status, kind, _ = await scrape(space, await space.device_token("scraper"))
    assert status == 200 and kind.startswith("text/plain; version=0.0.4")


async def test_metrics_after_some_fires(space: Space, make_device: MakeDevice):
    await space.publish("echo@v1")
    dev = await make_device()
    await dev.active()
    trigger = await space.trigger(name="every second", **EVERY_SECOND)
    await space.until_runs(trigger["id"], 2)
    await dev.live(space.general)
    token = default_admin_token_file(space.db).read_text().strip()
    _, _, text = await scrape(space, token)

    home = f'space="{SPACE}"'
    assert value(text, f"baton_fires_total{{{home}}}") >= 2
    assert value(text, f'baton_runs_total{{{home},status="ok"}}') >= 2
    assert value(text, f'baton_claims_total{{result="claimed",{home}}}') >= 2
    assert value(text, f'baton_run_lateness_seconds_count{{{home},status="ok"}}') >= 2
    assert value(text, f'baton_run_lateness_seconds_bucket{{le="+Inf",{home},status="ok"}}') >= 2
    assert value(text, f"baton_fire_latency_seconds_count{{{home}}}") >= 2
    assert value(text, 'baton_sse_subscribers{feed="chat"}') >= 1
    assert value(text, 'baton_sse_subscribers{feed="changes"}') >= 1
    assert value(text, f"baton_election_term{{{home}}}") == dev.device.elector.term
    assert value(text, f'baton_election_active{{peer="{dev.peer}",{home}}}') == 1
    for family in ("baton_runs_total counter", "baton_fire_latency_seconds histogram"):
        assert f"# TYPE {family}" in text
