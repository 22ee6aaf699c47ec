"""`GET /healthz` and `GET /metrics`: is the server up, and how it fares, for Prometheus.

Owns the in-process counters the claim and run routes feed (`claim_seen`, `run_seen`) and
rendering them, with what the store counts (`scrape.Scrape`, read through the store seam),
in the Prometheus text format 0.0.4; the families of records and devices are
`alertables`'. `/healthz` needs no token and answers 503 when the store fails; `/metrics`
wants an admin or device token. Neither is a `/v1` route. Must not change any table.
"""

from __future__ import annotations

import bisect
import math
import sqlite3
from collections import Counter
from collections.abc import Iterable
from datetime import datetime, timedelta

import asyncpg
import sqlite_utils
from aiohttp import web

from space import alertables, auth, storage
from space.appstate import CLOCK
from space.dbthread import DB_THREAD, STALL_S
from space.exposition import CONTENT_TYPE, family, labels, num
from space.http import Refusal, answer
from space.scrape import Scrape
from space.servertime import iso
from space.storage import STORAGE, Stalled
from space.store import STORE
from space.streams import STREAMS

HEALTH_SLACK_S = 0.5  # /healthz waits for its ping at most STALL_S + this
BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 300.0)


class Histogram:
    """Cumulative buckets (seconds), their sum and count, per label set."""

    def __init__(self) -> None:
        self.series: dict[tuple[tuple[str, str], ...], list[float]] = {}

    def observe(self, labels: dict[str, str], seconds: float) -> None:
        row = self.series.setdefault(tuple(sorted(labels.items())), [0.0] * (len(BUCKETS) + 2))
        row[bisect.bisect_left(BUCKETS, seconds)] += 1
        row[-1] += seconds

    def lines(self, name: str) -> Iterable[str]:
        for key, row in sorted(self.series.items()):
            counts, total, seen, pairs = row[: len(BUCKETS) + 1], row[-1], 0.0, dict(key)
            for bound, count in zip([*map(num, BUCKETS), "+Inf"], counts, strict=True):
                seen += count
                yield f"{name}_bucket{labels(pairs, le=bound)} {num(seen)}"
            yield f"{name}_sum{labels(pairs)} {num(total)}"
            yield f"{name}_count{labels(pairs)} {num(seen)}"


class Metrics:
    """What the routes observed since the server started."""

    def __init__(self) -> None:
        self.claims: Counter[tuple[str, str]] = Counter()  # (space, result)
        self.fire_latency = Histogram()  # claim accepted - the instant it was due
        self.lateness = Histogram()  # a run's lateMs, as its device recorded it
        self.runs_posted: Counter[tuple[str, str]] = Counter()  # (space, status)


METRICS = web.AppKey("metrics", Metrics)


async def claim_seen(
    app: web.Application, space: str, seen: list[tuple[str, str]], now: datetime
) -> None:
    """Fire claims were answered: `(key, result)` each, `result` `claimed` or the refusal's
    code. A message's acceptance is read in one unit of work; failing, latency is not seen."""
    metrics = app[METRICS]
    keys = [k for k, result in seen if result == "claimed" and not k[:1].isdigit()]
    try:
        accepted = await app[STORE].messages_accepted(keys) if keys else {}
    except (sqlite3.Error, asyncpg.PostgresError, OSError, Stalled):  # the claims committed
        accepted = {}
    for key, result in seen:
        metrics.claims[(space, result)] += 1
        due = _due(key if key[:1].isdigit() else accepted.get(key))
        if result == "claimed" and due is not None:
            metrics.fire_latency.observe({"space": space}, max(0.0, (now - due).total_seconds()))


def run_seen(app: web.Application, space: str, status: str, late_ms: float | None) -> None:
    metrics = app[METRICS]
    metrics.runs_posted[(space, status)] += 1
    if late_ms is not None and math.isfinite(late_ms):
        metrics.lateness.observe({"space": space, "status": status}, max(0.0, late_ms / 1000))


def _due(text: str | None) -> datetime | None:
    """When the fire was due: a slot's instant (cron, once), or the message's acceptance."""
    try:
        when = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return when if when is not None and when.tzinfo is not None else None


# ------------------------------------------------------------------ rendering


# long: one table of every metric family, in exposition order
def render(app: web.Application, read: Scrape) -> str:
    m, now, runs, fires, held = app[METRICS], read.now, read.runs, read.fires, read.held
    streams = Counter(_feed(s.request.path) for s in app[STREAMS].streams())
    out = [
        *family(
            "baton_runs_total",
            "counter",
            "Run records by status (never pruned).",
            (f"baton_runs_total{labels({'space': s, 'status': st})} {n}" for s, st, n in runs),
        ),
        *family(
            "baton_fires_total",
            "counter",
            "Fires claimed (exactly once each).",
            (f"baton_fires_total{labels({'space': s})} {n}" for s, n in fires),
        ),
        *family(
            "baton_claims_total",
            "counter",
            "Fire claims answered since start, by result (claimed or the refusal).",
            (
                f"baton_claims_total{labels({'space': s, 'result': r})} {n}"
                for (s, r), n in sorted(m.claims.items())
            ),
        ),
        *family(
            "baton_fire_latency_seconds",
            "histogram",
            "From the instant a fire was due (slot, message) to its accepted claim.",
            m.fire_latency.lines("baton_fire_latency_seconds"),
        ),
        *family(
            "baton_run_lateness_seconds",
            "histogram",
            "How late runs started (their lateMs), posted since start.",
            m.lateness.lines("baton_run_lateness_seconds"),
        ),
        *family(
            "baton_sse_subscribers",
            "gauge",
            "Open event streams, by feed.",
            (
                f"baton_sse_subscribers{labels({'feed': f})} {streams.get(f, 0)}"
                for f in ("chat", "changes")
            ),
        ),
        *family(
            "baton_election_term",
            "gauge",
            "The election term of each space.",
            (f"baton_election_term{labels({'space': s})} {lease.term}" for s, lease in held),
        ),
        *family(
            "baton_election_active",
            "gauge",
            "1 for the device holding a live lease.",
            (
                f"baton_election_active{labels({'space': s, 'peer': lease.active})} 1"
                for s, lease in held
                if lease.active and not lease.lapsed(now)
            ),
        ),
        *_storage_lines(app),
    ]
    return "\n".join(out) + "\n"


def _storage_lines(app: web.Application) -> list[str]:
    state, thread = app[STORAGE], app.get(DB_THREAD)  # no database thread on PostgreSQL
    stalled = thread is not None and thread.stalled_for()
    stalled_total = thread.stalled_total() if thread is not None else 0.0
    up = family(
        "baton_storage_up",
        "gauge",
        "1 while the store's writes commit, 0 since a storage fault (full, read-only, …).",
        [f"baton_storage_up {0 if state.fault or stalled else 1}"],
    )
    stalls = [
        *family(
            "baton_storage_stalls_total",
            "counter",
            f"Units of database work that ran over {STALL_S:g} s (a hung disk), since start.",
            [f"baton_storage_stalls_total {thread.stalls if thread else 0}"],
        ),
        *family(
            "baton_storage_stalled_seconds_total",
            "counter",
            f"Seconds units of database work ran past their first {STALL_S:g} s, since start.",
            [f"baton_storage_stalled_seconds_total {num(round(stalled_total, 3))}"],
        ),
    ]
    faults = family(
        "baton_storage_faults_total",
        "counter",
        "Requests answered 503 storage_unavailable since start, by fault (`stalled`: not begun "
        "in time behind a hung unit of database work).",
        (
            f"baton_storage_faults_total{labels({'fault': f})} {n}"
            for f, n in sorted(state.seen.items())
        ),
    )
    return [*up, *faults, *stalls]


def _feed(path: str) -> str:
    return "changes" if path.endswith("/changes/stream") or path.endswith("/changes") else "chat"


# ------------------------------------------------------------------ routes


async def get_healthz(request: web.Request) -> web.Response:
    """From the loop alone while the database thread is stalled; else one `SELECT 1` on it,
    waited for no longer than a unit in hand takes to become a stall."""
    app, retry = request.app, {"Retry-After": str(storage.RETRY_AFTER_S)}
    if stalled := app[DB_THREAD].stalled_for():
        return answer(_stall_view(stalled, app[CLOCK]()), 503, retry)
    try:
        await app[DB_THREAD].call_within(STALL_S + HEALTH_SLACK_S, _ping)
    except Stalled:
        return answer(_stall_view(app[DB_THREAD].stalled_for(), app[CLOCK]()), 503, retry)
    except sqlite3.Error as exc:
        return answer({"status": "down", "detail": f"the store does not answer: {exc}"}, 503)
    fault = app[STORAGE].view()
    if fault:
        return answer({"status": "storage_unavailable", **fault}, 503, retry)
    return answer({"status": "ok"})


def _ping(db: sqlite_utils.Database) -> None:
    db.execute("SELECT 1").fetchone()


def _stall_view(seconds: float, now: datetime) -> dict[str, object]:
    detail = f"a unit of database work has run {seconds:.1f} s (a hung disk?)"
    since = iso(now - timedelta(seconds=seconds))
    return {
        "status": "storage_unavailable",
        "storage": "stalled",
        "detail": detail,
        "since": since,
        "stalledFor": round(seconds, 3),
    }


async def get_metrics(request: web.Request) -> web.Response:
    who = await auth.identify(request)
    if who.role is auth.Role.RUN:
        raise Refusal(403, "forbidden", "a run token may not read /metrics")
    read = await request.app[STORE].scrape()
    more = await alertables.lines(request.app, read)
    body = (render(request.app, read) + "\n".join(more) + "\n").encode()
    return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE})


def setup(app: web.Application) -> None:
    app[METRICS] = Metrics()
    if DB_THREAD in app:  # on PostgreSQL, `opening` adds its own (`pghealth.healthz`)
        app.router.add_get("/healthz", get_healthz)
    app.router.add_get("/metrics", get_metrics)
