"""The embedded `any@v1` space server: `create_app` wires every area of the API onto one store.

Owns the application factory: the store (a SQLite file or PostgreSQL, opened by
`opening.open_store`), the admin token file's place, the typed app state
(settings, server clock, stamped on every answer), the middlewares (refusals, storage
faults, authentication, then `Idempotency-Key` replays) and calling each area's
`setup(app)`. Must not hold route logic.
"""

from __future__ import annotations

from pathlib import Path

from aiohttp import web

from core.routes import SERVER_TIME_HEADER
from space import (
    auth,
    backfills,
    changes,
    chats,
    dashboard,
    devices,
    fires,
    forget,
    idempotency,
    leases,
    metrics,
    openapi,
    pghealth,
    pressure,
    programs,
    run_asks,
    runs,
    spaces,
    state,
    storage,
    tokens,
    triggers,
    turns,
    upcoming,
    why,
)
from space.appstate import (
    CLOCK,
    ROUTE_DOCS,
    SETTINGS,
    RunRetention,
    SpaceSettings,
)
from space.http import refusals
from space.opening import PgOptions, is_dsn, open_store
from space.servertime import ServerClock, iso, system_clock

ADMIN_TOKEN_FILE = "admin.token"
_AREAS = (
    spaces,
    tokens,
    triggers,
    backfills,
    run_asks,
    changes,
    leases,
    fires,
    programs,
    devices,
    runs,
    turns,
    state,
)


def default_admin_token_file(db_path: str | Path) -> Path:
    if is_dsn(db_path):
        raise ValueError("a server on PostgreSQL is told its admin token file")
    return Path(db_path).with_name(ADMIN_TOKEN_FILE)


_MIDDLEWARES = [  # in this order: a refusal's body, storage faults, who asks, floods, replays
    refusals,
    storage.guard,
    pghealth.guard,
    auth.authenticate,
    pressure.per_token,
    idempotency.replay,
]


def create_app(
    db_path: str | Path,
    *,
    pg: PgOptions | None = None,
    admin_token_file: str | Path | None = None,
    clock: ServerClock = system_clock,
    lease_seconds: float = 15.0,
    live_seconds: float = 15.0,
    retention: RunRetention | None = None,
    history_days: float = 30.0,
    prune_every_seconds: float = 600.0,
    max_body_bytes: int = 1024 * 1024,
    max_program_bytes: int = 256 * 1024,
) -> web.Application:
    """The space server on the SQLite file `db_path` (created if missing), or on the
    PostgreSQL database a `postgresql://` DSN names (`pg`: its pool and listener; opened
    at the app's startup, schema migrated; `admin_token_file` then must be given).

    The admin token is read from `admin_token_file` (default `admin.token` beside
    the database), which is created with mode 0600 at first start and must stay
    owner-only (`token_store.LooseFile` otherwise); the database is created 0600
    and a missing directory 0700.
    """
    settings = SpaceSettings(
        lease_seconds=lease_seconds,
        live_seconds=live_seconds,
        retention=retention or RunRetention(),
        history_days=history_days,
        prune_every_seconds=prune_every_seconds,
        max_body_bytes=max_body_bytes,
        max_program_bytes=max_program_bytes,
    )
    app = web.Application(client_max_size=max_body_bytes, middlewares=_MIDDLEWARES)
    app[SETTINGS] = settings
    app[pressure.COUNTS] = {}
    app[CLOCK] = clock
    app.on_response_prepare.append(_server_time)
    app[ROUTE_DOCS] = []
    storage.setup(app)
    token_file = Path(admin_token_file or default_admin_token_file(db_path))
    open_store(app, db_path, token_file, pg)  # every table, before any area's routes
    metrics.setup(app)  # before the areas: the claim and run routes feed it
    idempotency.setup(app)
    for area in _AREAS:
        area.setup(app)
    forget.setup(app)
    why.setup(app)
    upcoming.setup(app)
    chats.setup(app)
    openapi.setup(app)
    dashboard.setup(app)
    return app


async def _server_time(request: web.Request, response: web.StreamResponse) -> None:
    """Every answer carries the space's clock: devices fire by it (SPEC "Sleep and clocks")."""
    response.headers[SERVER_TIME_HEADER] = iso(request.app[CLOCK]())
