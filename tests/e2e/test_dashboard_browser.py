"""The dashboard in a real browser: headless Chromium (Debian's) driven by Playwright.

A real `baton up --demo` runs as a subprocess; the test opens the URL it prints (the
token in the fragment logs in), sees the active device, pauses a trigger, sends a
chat message and sees the agent's reply, and opens a run's detail. Screenshots go to
`tmp_path`, and to `docs/` when `BATON_SCREENSHOTS=1`. Chromium is `/usr/bin/chromium`
(`.ci/run` installs it); Playwright never downloads a browser. Every wait is on a
condition in the page, under a deadline.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from urllib.parse import quote

import pytest

playwright = pytest.importorskip("playwright.async_api")

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = Path("/usr/bin/chromium")
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
DASHBOARD_LINE = re.compile(
    r"baton: dashboard on (http://127\.0\.0\.1:\d+/) \(sign in with the admin token in (\S+)\)$"
)  # piped, `baton up` names the token file: the test logs in with the token it holds
WAIT_MS = 20_000

pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium")


@pytest.fixture
async def baton_up(tmp_path: Path) -> AsyncIterator[str]:
    """`baton up --demo` on a free port; the dashboard URL it prints."""
    argv = [
        "-m",
        "runtime.cli",
        "up",
        "--demo",
        "--data",
        str(tmp_path / "data"),
        "--port",
        "0",
        "--peer",
        "laptop",
        "--lease-seconds",
        "3",
    ]
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        yield await _printed_url(proc)
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)
        async with asyncio.timeout(20):
            await proc.communicate()


async def _printed_url(proc: asyncio.subprocess.Process) -> str:
    assert proc.stdout is not None
    async with asyncio.timeout(30):
        while line := (await proc.stdout.readline()).decode():
            if found := DASHBOARD_LINE.match(line.strip()):
                token = Path(found.group(2)).read_text().strip()
                return f"{found.group(1)}#token={quote(token, safe='')}"
    raise AssertionError("baton up ended without printing the dashboard URL")


@pytest.fixture
async def page(tmp_path: Path) -> AsyncIterator[object]:
    async with playwright.async_playwright() as pw:
        browser = await pw.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 900})
            yield await context.new_page()
        finally:
            await browser.close()


async def shoot(page: object, tmp_path: Path, name: str) -> None:
    await page.screenshot(path=str(tmp_path / name), full_page=True)
    if os.environ.get("BATON_SCREENSHOTS") == "1":
        await page.screenshot(path=str(ROOT / "docs" / name), full_page=True)


async def test_log_in_from_the_printed_url_pause_chat_and_open_a_run(
    baton_up: str, page, tmp_path: Path
):
    expect = playwright.expect
    await page.goto(baton_up)
    assert "#token=" not in page.url  # the token leaves the address bar at once

    device = page.locator(".device", has_text="laptop")
    await expect(device.locator(".pill", has_text="active")).to_be_visible(timeout=WAIT_MS)
    await expect(page.locator("#agent")).to_contain_text("laptop", timeout=WAIT_MS)

    heartbeat = page.locator("#triggers tr", has_text="demo heartbeat")
    await heartbeat.get_by_role("button", name="Pause").click()
    await expect(heartbeat.get_by_role("button", name="Resume")).to_be_visible(timeout=WAIT_MS)
    await expect(heartbeat.locator(".pill", has_text="paused")).to_be_visible()

    await heartbeat.get_by_role("button", name="why of demo heartbeat").click()
    slots = page.locator("#slots")  # the last hour of its slots, each with its why
    await expect(slots.locator("#slots-note")).to_contain_text("slots since", timeout=WAIT_MS)
    marks = slots.locator("#slots-strip rect.slot")
    await expect(marks.first).to_be_attached(timeout=WAIT_MS)  # the strip renews each poll
    await marks.last.click()
    await expect(slots.locator("#slots-why .pill")).to_be_visible()
    assert await slots.locator("#slots-why ul.checks li").count() >= 1
    await page.locator("#drawer-close").click()  # the why strip is in the trigger's drawer
    await expect(page.locator("#drawer")).to_be_hidden()

    await page.locator("#send-text").fill("help")
    await page.locator("#send-form button").click()
    reply = page.locator("#messages li.msg.agent", has_text="agent · chat-watch")
    await expect(reply).to_contain_text("I answer 'help'", timeout=WAIT_MS)
    await shoot(page, tmp_path, "dashboard.png")

    await page.locator("#run-trigger").select_option(label="demo tally")
    tally_run = page.locator("#runs tr", has_text="demo tally").first
    await expect(tally_run).to_be_visible(timeout=WAIT_MS)
    await tally_run.get_by_role("button", name=re.compile("details of run")).click()
    detail = page.locator("#run-detail")
    await expect(detail).to_be_visible()
    await expect(detail.locator("#run-facts")).to_contain_text("demo-tally@v1")
    await expect(detail.locator("#run-facts")).to_contain_text("startedAt")
    why = detail.locator("#run-why")  # the space's `why` of the run's fire key
    await expect(why.locator(".pill", has_text="fired")).to_be_visible(timeout=WAIT_MS)
    await expect(why.locator("li.ok", has_text="claim: claimed by laptop")).to_be_visible()
    assert "null" not in await why.inner_text()  # no remedy for a fire: nothing shown
    await detail.scroll_into_view_if_needed()
    await shoot(page, tmp_path, "run-detail.png")
