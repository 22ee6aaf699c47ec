"""The dashboard: `GET /` serves one static page that watches and operates a space in a browser.

Owns serving `dashboard.html` (package data beside this module) with headers that
keep it self-contained: a Content-Security-Policy that admits only this page's own
inline script and style (by hash) and calls to this server, no caching, no referrer.
The page itself needs no token; every data call it makes goes to the `/v1` API with
the bearer token the person gives it. Must not add API routes or read the store.
"""

from __future__ import annotations

import base64
import hashlib
import re
from importlib import resources

from aiohttp import web

PAGE_FILE = "dashboard.html"
_BLOCK = {tag: re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL) for tag in ("script", "style")}


def page_html() -> str:
    """The page's text, read from the package."""
    return (resources.files("space") / PAGE_FILE).read_text(encoding="utf-8")


def inline_hash(html: str, tag: str) -> str:
    """The CSP source (`'sha256-…'`) of the page's one inline `<script>` or `<style>` block."""
    blocks = _BLOCK[tag].findall(html)
    if len(blocks) != 1:
        raise ValueError(f"{PAGE_FILE}: expected one <{tag}> block, found {len(blocks)}")
    digest = hashlib.sha256(blocks[0].encode("utf-8")).digest()
    return "'sha256-" + base64.b64encode(digest).decode("ascii") + "'"


def headers_for(html: str) -> dict[str, str]:
    policy = "; ".join(
        [
            "default-src 'none'",
            f"script-src {inline_hash(html, 'script')}",
            f"style-src {inline_hash(html, 'style')}",
            "connect-src 'self'",
            "img-src 'self' data:",
            "base-uri 'none'",
            "form-action 'none'",
            "frame-ancestors 'none'",
        ]
    )
    return {
        "Content-Security-Policy": policy,
        "Cache-Control": "no-store",
        "Referrer-Policy": "no-referrer",
        "X-Content-Type-Options": "nosniff",
    }


def setup(app: web.Application) -> None:
    """Serve the page at `/` (and HEAD). Not an API route, so not in `/v1/openapi.json`."""
    html = page_html()
    headers = headers_for(html)

    async def get_page(request: web.Request) -> web.Response:
        return web.Response(text=html, content_type="text/html", charset="utf-8", headers=headers)

    app.router.add_get("/", get_page)
