"""The space API's error body: `{"error": "<code>", "detail": "<human text>"}`."""

from __future__ import annotations

from aiohttp import web


def error_response(status: int, code: str, detail: str, **extra: object) -> web.Response:
    """A refusal with the house error body; `extra` adds fields (e.g. the current `rev`)."""
    return web.json_response({"error": code, "detail": detail, **extra}, status=status)
