"""The trigger drawer in headless Chromium on `baton up --demo`: see, edit, add, delete.

Clicking a trigger opens its drawer: the record, its next 10 fires (from `GET …/next`),
limits, breaker, rollup, last runs and the why strip; Run now has the owning device run
it. An edit of its args, an added trigger and a deleted one are seen through the API, not
only on screen. At 1400 px and 390 px wide neither the trigger table nor the drawer
scrolls sideways, and no text is cut by hidden overflow.
The browser and `baton up` come from test_dashboard_browser.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from test_dashboard_browser import CHROMIUM, WAIT_MS, baton_up, page, playwright, shoot
from test_dashboard_truth import CLIPPED, api_of

__all__ = ["baton_up", "page"]  # the fixtures, shared
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium"),
]

WIDE = """() => {
  const out = [];
  for (const id of ["trigger-table", "drawer", "next-table", "drawer-run-table"]) {
    const node = document.getElementById(id);
    if (node && node.offsetParent !== null && node.scrollWidth > node.clientWidth + 1)
      out.push(`#${id}: ${node.scrollWidth} px in ${node.clientWidth}`);
  }
  for (const node of document.querySelectorAll("#drawer *")) {
    const style = getComputedStyle(node);
    if (style.display === "none" || !node.offsetParent || style.overflowX === "visible") continue;
    if (node.scrollWidth > node.clientWidth + 1)
      out.push(`${node.tagName}#${node.id}: ${node.scrollWidth} px in ${node.clientWidth}`);
  }
  return out;
}"""


async def until(probe: Callable[[], Awaitable[Any]], what: str, seconds: float = 20) -> Any:
    """`probe()`'s first truthy answer, polled under a deadline."""
    async with asyncio.timeout(seconds):
        while not (got := await probe()):
            await asyncio.sleep(0.1)
        return got
    raise AssertionError(what)  # pragma: no cover - the timeout raises first


async def record_named(dashboard: str, name: str) -> dict[str, Any] | None:
    async with api_of(dashboard) as api:
        listed = await api.call("triggers", space="default")
    return next((t for t in listed["triggers"] if t.get("name") == name), None)


async def test_the_drawer_shows_a_trigger_and_edits_adds_and_deletes(baton_up: str, page, tmp_path):
    expect, errors = playwright.expect, []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    await page.set_viewport_size({"width": 1400, "height": 900})
    await page.goto(baton_up)
    heartbeat = page.locator("#triggers tr", has_text="demo heartbeat")
    await heartbeat.get_by_role("button", name="open demo heartbeat").click()
    drawer = page.locator("#drawer")
    await expect(drawer).to_be_visible(timeout=WAIT_MS)
    await expect(drawer.locator("#next-fires tr")).to_have_count(10, timeout=WAIT_MS)
    await expect(drawer.locator("#next-fires")).to_contain_text("here · in ")
    await expect(drawer.locator("#drawer-limits")).to_contain_text("timeoutSeconds")
    await expect(drawer.locator("#drawer-breaker")).to_contain_text("closed")
    await expect(drawer.locator("#drawer-rollup")).to_contain_text("ok ", timeout=WAIT_MS)
    await expect(drawer.locator("#drawer-runs .pill", has_text="ok").first).to_be_visible()
    await expect(drawer.locator("#slots-note")).to_contain_text("slots since", timeout=WAIT_MS)
    await shoot(page, tmp_path, "drawer.png")

    await drawer.get_by_role("button", name="Run now").click()  # the owning device runs it
    await expect(drawer.locator("#drawer-note")).to_contain_text("asked to run now (key manual:")
    run = await until(lambda: _manual_run(baton_up), "the run asked never ran")
    assert run["status"] == "ok" and run["peer"] == "laptop", run

    await drawer.get_by_role("button", name="Edit").click()
    await page.locator("#f-args").fill('{"note": "edited in the drawer"}')
    await page.locator("#form-save").click()
    edited = await until(
        lambda: _args_are(baton_up, {"note": "edited in the drawer"}), "the edit never landed"
    )
    assert edited["program"] == "demo-heartbeat@v1" and edited["enabled"] is True
    await expect(drawer.locator("#drawer-record")).to_contain_text("edited in the drawer")

    await drawer.get_by_role("button", name="Close").first.click()
    await expect(drawer).to_be_hidden()
    await page.get_by_role("button", name="Add trigger").click()
    await page.locator("#f-args").fill("{not json")
    await page.locator("#f-name").fill("added in the drawer")
    await page.locator("#f-program").fill("demo-heartbeat@v1")
    await page.locator("#form-save").click()
    await expect(page.locator("#form-error")).to_contain_text("args: not JSON")
    assert await record_named(baton_up, "added in the drawer") is None  # nothing was sent
    await page.locator("#f-args").fill('{"note": "new"}')
    await page.locator("#form-save").click()
    added = await until(lambda: record_named(baton_up, "added in the drawer"), "never added")
    assert added["spec"]["expr"] == "*/5 * * * *" and added["args"] == {"note": "new"}
    await expect(page.locator("#drawer-title")).to_contain_text(added["id"], timeout=WAIT_MS)

    await drawer.get_by_role("button", name="Delete", exact=True).click()
    await drawer.get_by_role("button", name="Delete it").click()
    await until(lambda: _gone(baton_up, "added in the drawer"), "never deleted")
    await expect(drawer).to_be_hidden(timeout=WAIT_MS)
    await expect(page.locator("#triggers tr", has_text="added in the drawer")).to_have_count(0)
    assert errors == []


async def _args_are(dashboard: str, args: dict[str, Any]) -> dict[str, Any] | None:
    found = await record_named(dashboard, "demo heartbeat")
    return found if found is not None and found["args"] == args else None


async def _manual_run(dashboard: str) -> dict[str, Any] | None:
    found = await record_named(dashboard, "demo heartbeat")
    assert found is not None
    async with api_of(dashboard) as api:
        runs = (await api.call("runs", space="default", trigger=found["id"]))["runs"]
    return next((r for r in runs if r["key"].startswith("manual:")), None)


async def _gone(dashboard: str, name: str) -> bool:
    return await record_named(dashboard, name) is None


@pytest.mark.parametrize(("width", "height"), [(1400, 900), (390, 844)])
async def test_the_table_and_the_drawer_fit_the_screen(
    baton_up: str, page, tmp_path: Path, width: int, height: int
):
    async with api_of(baton_up) as api:  # a long name, a zone with DST, a long program ref
        body = {
            "name": "a trigger with a rather long name for a drawer's column",
            "kind": "cron",
            "spec": {"expr": "30 2 * * *", "tz": "America/Argentina/ComodRivadavia"},
            "program": "a-program-with-a-long-reference-name@v12",
            "args": {"a-long-argument-name": "and a value that goes on and on " * 3},
        }
        await api.trigger_create("default", body)
    await page.set_viewport_size({"width": width, "height": height})
    await page.goto(baton_up)
    long = page.locator("#triggers tr", has_text="rather long name")
    await playwright.expect(long).to_be_visible(timeout=WAIT_MS)
    await playwright.expect(
        page.locator("#triggers tr", has_text="demo heartbeat").locator(".rel").first
    ).to_contain_text(" here · ", timeout=WAIT_MS)
    await shoot(page, tmp_path, f"triggers-{width}.png")
    assert await page.evaluate(CLIPPED) == []
    assert await page.evaluate(WIDE) == []
    await long.get_by_role("button", name="open a trigger with a rather long name").click()
    drawer = page.locator("#drawer")
    await playwright.expect(drawer.locator("#next-fires tr")).to_have_count(10, timeout=WAIT_MS)
    await shoot(page, tmp_path, f"drawer-{width}.png")
    assert await page.evaluate(WIDE) == []
