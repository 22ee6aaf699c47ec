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
