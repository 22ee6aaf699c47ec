"""Typed state of the space app: settings, the server clock and the route catalogue.

Owns the `web.AppKey`s every area of the API reads (the database key lives in
`db.py`). Holds no behaviour; must not import the route modules.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
from aiohttp import web

from space.servertime import ServerClock


class RunRetention(msgspec.Struct, frozen=True, kw_only=True):
    """How long run records are kept; failures longer than successes. Rollups are never pruned."""

    ok_days: float = 7.0
    ok_per_trigger: int = 200
    failure_days: float = 30.0
    failure_per_trigger: int = 1000


class SpaceSettings(msgspec.Struct, frozen=True, kw_only=True):
    lease_seconds: float = 15.0
    max_body_bytes: int = 1024 * 1024
    live_seconds: float = 15.0
    max_program_bytes: int = 256 * 1024
    max_run_token_seconds: float = 24 * 3600.0
    run_token_margin_seconds: float = 30.0  # a device's run token: the run's timeout + this
    retention: RunRetention = RunRetention()
    history_days: float = 30.0  # how long `why` can look back (SPEC "History and `why`")
    prune_every_seconds: float = 600.0  # 0: never prune (tests prune by hand)


class RouteDoc(msgspec.Struct, frozen=True, kw_only=True):
    """One documented route, for `/v1/openapi.json`."""

    method: str
    path: str
    summary: str
    body: object = None  # a msgspec type, or None
    answer: object = None  # a msgspec type, or None


SETTINGS = web.AppKey("settings", SpaceSettings)
CLOCK: web.AppKey[ServerClock] = web.AppKey("clock")
ROUTE_DOCS = web.AppKey("route_docs", list[RouteDoc])
ADMIN_TOKEN_PATH = web.AppKey("admin_token_path", Path)
