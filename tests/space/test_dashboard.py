"""The dashboard page: served without a token, self-contained, calling only routes that exist."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import os
import pty
import re
import signal
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest
from space_support import SPACE, Api

from space.dashboard import page_html

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"/\* API-ENDPOINTS-BEGIN(.*?)/\* API-ENDPOINTS-END \*/", re.DOTALL)
ENDPOINT = re.compile(r"(\w+): \"(GET|POST|PUT|PATCH|DELETE) (/v1/[^\"\s]*)\"")
SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)
DASHBOARD_LINE = re.compile(r"baton: dashboard on (http://127\.0\.0\.1:\d+/)#token=\S+$")
PIPED_LINE = re.compile(
    r"baton: dashboard on (http://127\.0\.0\.1:\d+/) \(sign in with the admin token in (\S+)\)$"
)


def endpoints(html: str) -> dict[str, tuple[str, str]]:
    """The page's marked list of API calls: name → (method, path template)."""
    blocks = BLOCK.findall(html)
    assert len(blocks) == 1, "the page must mark its endpoints exactly once"
    return {name: (method, path) for name, method, path in ENDPOINT.findall(blocks[0])}


def csp_hash(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


async def test_the_page_is_served_without_a_token_as_html(api: Api) -> None:
    async with api.client.get("/") as resp:
        assert resp.status == 200
        assert resp.content_type == "text/html" and resp.charset == "utf-8"
        text = await resp.text()
    assert text == page_html() and "<title>baton</title>" in text


async def test_the_api_still_needs_a_token(api: Api) -> None:
    async with api.client.get("/v1/spaces") as resp:
        assert resp.status == 401
        assert (await resp.json())["error"] == "unauthorized"


def test_the_page_loads_nothing_from_elsewhere() -> None:
    html = page_html()
    assert re.findall(r"https?:", html, re.IGNORECASE) == []
    assert re.findall(r"""\b(?:src|href|action)\s*=""", html, re.IGNORECASE) == []
    assert re.findall(r"url\(|@import|<link|<iframe|<img", html, re.IGNORECASE) == []


def test_the_script_inserts_data_as_text_only() -> None:
    (script,) = SCRIPT.findall(page_html())
    for sink in ("innerHTML", "outerHTML", "insertAdjacentHTML", "document.write", "eval("):
        assert sink not in script, sink
    assert "textContent" in script


def test_no_inline_handlers_or_styles_the_policy_would_block() -> None:
    html = SCRIPT.sub("", page_html())
    assert re.findall(r"\son[a-z]+\s*=|\sstyle\s*=", html, re.IGNORECASE) == []


async def test_the_policy_admits_exactly_the_pages_own_script_and_style(api: Api) -> None:
    async with api.client.get("/") as resp:
        policy = resp.headers["Content-Security-Policy"]
        assert resp.headers["Cache-Control"] == "no-store"
        html = await resp.text()
    (script,) = SCRIPT.findall(html)
    (style,) = re.findall(r"<style>(.*?)</style>", html, re.DOTALL)
    assert f"script-src {csp_hash(script)};" in policy
    assert f"style-src {csp_hash(style)};" in policy
    assert "default-src 'none'" in policy and "connect-src 'self'" in policy


async def test_every_endpoint_the_page_calls_is_in_the_route_table(api: Api) -> None:
    _, doc = await api.get("/openapi.json")
    served = {(m.upper(), p) for p, ops in doc["paths"].items() for m in ops}
    called = endpoints(page_html())
    assert {
        "spaces",
        "triggers",
        "patchTrigger",
        "runs",
        "sendMessage",
        "runTrigger",
    } <= called.keys()
    assert set(called.values()) - served == set()


def test_the_script_names_api_paths_only_in_its_endpoint_list() -> None:
    html = page_html()
    outside = BLOCK.sub("", html)
    assert "/v1" not in outside
    assert re.findall(r"\bfetch\(", html) == ["fetch("]  # the one `call` helper


async def test_the_pages_calls_work_as_the_page_makes_them(api: Api) -> None:
    """Each endpoint with the page's parameters, query and headers, against a real space."""
    _, space = await api.get(f"/spaces/{SPACE}")
    trigger = await api.create_trigger(name="watched")
    params = {"space": SPACE, "objectId": space["generalChat"], "id": trigger["id"]}
    called = endpoints(page_html())

    def path(name: str) -> str:
        return re.sub(r"\{(\w+)\}", lambda m: params[m.group(1)], called[name][1])[len("/v1") :]

    for name in ("spaces", "election", "devices", "triggers", "chats"):
        assert (await api.get(path(name)))[0] == 200, name
    assert (await api.get(path("runs") + "?limit=50"))[0] == 200
    query = f"?limit=50&trigger={trigger['id']}&status=error"
    assert (await api.get(path("runs") + query)) == (200, {"runs": []})
    sent = await api.post(path("sendMessage"), {"text": "from the dashboard"})
    assert sent[0] == 201, sent
    status, page = await api.get(path("messages") + "?latest=1&limit=50")
    assert status == 200 and [m["text"] for m in page["messages"]] == ["from the dashboard"]
    await _pause_and_repin(api, path("patchTrigger"), trigger)


async def _pause_and_repin(api: Api, path: str, trigger: dict[str, Any]) -> None:
    status, paused = await api.patch(path, {"enabled": False})
    assert status == 200 and paused["enabled"] is False
    status, pinned = await api.patch(path, {"owner": "box"})
    assert status == 200 and (pinned["owner"], pinned["enabled"]) == ("box", False)
    status, refused = await api.patch(path, {"enabled": "no"})
    assert status == 400 and refused["detail"]  # what the banner shows


@pytest.mark.e2e  # `baton up` as a process
async def test_baton_up_prints_where_the_dashboard_is_and_the_token_only_to_a_terminal(
    tmp_path: Path,
) -> None:
    """Piped (a log file, a CI job), `baton up` names the admin token file, never the token
    (before, the token was in every log of `baton up`); to a terminal, the URL logs in."""
    async with _up_line(tmp_path / "piped", tty=False) as piped:
        found = PIPED_LINE.match(piped)
        assert found is not None, piped
        async with aiohttp.ClientSession() as session, session.get(found.group(1)) as resp:
            assert resp.status == 200 and resp.content_type == "text/html"
    token_file = Path(found.group(2))
    assert token_file == tmp_path / "piped" / "admin.token"
    assert token_file.read_text().strip() not in piped
    async with _up_line(tmp_path / "tty", tty=True) as shown:
        pass
    assert DASHBOARD_LINE.match(shown), shown
    assert (tmp_path / "tty" / "admin.token").read_text().strip() in unquote(shown)


@contextlib.asynccontextmanager
async def _up_line(data: Path, *, tty: bool) -> AsyncIterator[str]:
    """Run `baton up` (its stdout a pipe, or a pseudo-terminal) to its dashboard line."""
    argv = ["-m", "runtime.cli", "up", "--data", str(data), "--port", "0", "--peer", "dash"]
    ours, theirs = pty.openpty() if tty else os.pipe()
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        *argv,
        cwd=ROOT,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=theirs,
        stderr=asyncio.subprocess.DEVNULL,
    )
    os.close(theirs)
    try:
        reader = asyncio.StreamReader()
        loop = asyncio.get_running_loop()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(ours, "rb", 0)
        )
        try:
            async with asyncio.timeout(20):
                while line := (await reader.readline()).decode():
                    if "dashboard on" in line:
                        break
                else:
                    raise AssertionError("baton up ended without printing the dashboard line")
            yield line.strip()
        finally:
            proc.send_signal(signal.SIGINT)  # its output still read: it says it stopped
            async with asyncio.timeout(20):
                await proc.wait()
            transport.close()
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
