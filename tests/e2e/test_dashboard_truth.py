"""The dashboard tells the truth and fits the screen: headless Chromium on `baton up --demo`.

An offline device is never shown ready nor its runs contained, whatever it said of itself
last. At 1400 px and at 390 px wide no column of the tables is clipped and the page
never scrolls sideways. The browser and `baton up` come from test_dashboard_browser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_dashboard_browser import CHROMIUM, WAIT_MS, baton_up, page, playwright, shoot

from runtime.client.api import SpaceClient

__all__ = ["baton_up", "page"]  # the fixtures, shared
pytestmark = [
    pytest.mark.e2e,
    pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium"),
]

REPORT = {  # what a device says of itself in its heartbeat while it runs
    "responder": "builtin",
    "chatWatch": {"ready": True, "reason": "", "chats": []},
    "containment": {"level": "full", "weaker": [], "privileges": "dropped"},
}


def api_of(dashboard: str) -> SpaceClient:
    """The space API behind the dashboard URL, with the token its fragment carries."""
    base, token = dashboard.split("/#token=")
    return SpaceClient(base, token)


async def test_an_offline_device_is_not_shown_ready(baton_up: str, page, tmp_path: Path):
    async with api_of(baton_up) as api:
        await api.device_put("default", "box", {"name": "Box", "status": REPORT})
        await api.device_put("default", "box", {"stopped": True})
    await page.goto(baton_up)
    box = page.locator(".device", has_text="box")
    await playwright.expect(box.locator(".pill", has_text="offline")).to_be_visible(timeout=WAIT_MS)
    await playwright.expect(box).to_contain_text("offline since")
    await shoot(page, tmp_path, "offline.png")
    text = await box.inner_text()
    assert "ready" not in text and "runs contained" not in text, text


CLIPPED = """() => {
  const out = [];
  for (const node of document.querySelectorAll("main *")) {  // what hides its overflow
    const style = getComputedStyle(node);
    if (style.display === "none" || !node.offsetParent || style.overflowX === "visible") continue;
    if (node.scrollWidth > node.clientWidth + 1)
      out.push(`${node.tagName}.${node.className}: ${node.scrollWidth} px in ${node.clientWidth}`);
  }
  const page = document.documentElement;
  if (page.scrollWidth > window.innerWidth + 1)
    out.push(`the page scrolls sideways: ${page.scrollWidth} px in ${window.innerWidth}`);
  return out;
}"""


@pytest.mark.parametrize(("width", "height"), [(1400, 900), (390, 844)])
async def test_nothing_is_clipped_and_nothing_scrolls_sideways(
    baton_up: str, page, tmp_path: Path, width: int, height: int
):
    async with api_of(baton_up) as api:  # long stamps and names, as a real space has them
        for name, spec, program in (
            ("a trigger with a rather long name for a column", {"expr": "*/5 * * * *"}, "x@v1"),
            ("missed", {"at": "2026-01-01T00:00:00+02:00"}, "demo-heartbeat@v1"),
        ):
            kind = "cron" if "expr" in spec else "once"
            body = {"name": name, "kind": kind, "spec": spec, "program": program, "owner": "box"}
            await api.trigger_create("default", body)
    await page.set_viewport_size({"width": width, "height": height})
    await page.goto(baton_up)
    heartbeat = page.locator("#triggers tr", has_text="demo heartbeat")
    await playwright.expect(heartbeat).to_be_visible(timeout=WAIT_MS)
    await page.locator("#send-text").fill("help")
    await page.locator("#send-form button").click()
    reply = page.locator("#messages li.msg.agent", has_text="chat-watch")
    await playwright.expect(reply).to_be_visible(timeout=WAIT_MS)
    await playwright.expect(
        page.locator("#runs tr", has_text="demo heartbeat").first
    ).to_be_visible(timeout=WAIT_MS)
    await shoot(page, tmp_path, f"dashboard-{width}.png")
    assert await page.evaluate(CLIPPED) == []
