"""The SQL statements the space runs per posted run on SQLite: `POST …/runs` as one run and
as lists of 3 runs of 3 triggers (each with its trigger's stamps), by a device token.

Run: .venv/bin/python bench/run_sql.py

An in-process app on a temporary file, the statements counted by SQLite's trace callback on
the database thread's connection while each POST is answered (its claims counted apart).
Prints statements and savepoints per run. Figures in docs/performance.md, "Recording runs".
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import sqlite_utils
from aiohttp.test_utils import TestClient, TestServer

_HERE = Path(__file__).resolve().parent  # bench/space.py is not the package `space`
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from space.app import create_app, default_admin_token_file  # noqa: E402
from space.dbthread import DB_THREAD  # noqa: E402

SPACE, PEER = "bench", "bench-dev"


def run(tid: str, n: int, now: str) -> dict[str, Any]:
    return {
        "runId": f"run_{n}",
        "triggerId": tid,
        "program": "p@v1",
        "peer": PEER,
        "term": 0,
        "key": f"k{n}",
        "startedAt": now,
        "finishedAt": now,
        "durationMs": 1.0,
        "status": "ok",
        "result": {"ok": True},
        "stamps": {"lastStatus": "ok", "lastRunAt": now, "rollup": {"runs": n, "ok": n}},
    }


async def count(tmp: Path) -> None:
    db_path = tmp / "space.db"
    app = create_app(db_path)
    seen: list[str] = []

    def trace(db: sqlite_utils.Database) -> None:
        db.conn.set_trace_callback(seen.append)

    app[DB_THREAD].blocking(trace)
    async with TestClient(TestServer(app)) as client:
        admin = {"Authorization": "Bearer " + default_admin_token_file(db_path).read_text().strip()}

        async def post(path: str, body: Any, h: dict[str, str]) -> Any:
            async with client.post(f"/v1{path}", json=body, headers=h) as resp:
                assert resp.status < 300, await resp.text()
                return await resp.json()

        await post("/spaces", {"id": SPACE}, admin)
        token = (await post("/tokens/device", {"peer": PEER, "space": SPACE}, admin))["token"]
        device = {"Authorization": f"Bearer {token}"}
        tids = []
        for i in range(3):
            body = {"name": f"b{i}", "kind": "cron", "spec": {"expr": "0 0 1 1 *"}}
            made = await post(
                f"/spaces/{SPACE}/triggers", {**body, "program": "p@v1", "owner": PEER}, admin
            )
            tids.append(made["id"])
        n = 0
        for shape, per_list in (("one run", 1), ("3 runs of 3 triggers", 3)):
            totals = [0, 0]
            for _ in range(20):
                now = datetime.now(UTC).isoformat().replace("+00:00", "Z")
                runs = [run(tids[i], n + i, now) for i in range(per_list)]
                n += per_list
                claims = [{"triggerId": r["triggerId"], "key": r["key"], "term": 0} for r in runs]
                await post(f"/spaces/{SPACE}/fires", [{**c, "peer": PEER} for c in claims], device)
                seen.clear()
                await post(f"/spaces/{SPACE}/runs", runs if per_list > 1 else runs[0], device)
                totals[0] += len(seen)
                totals[1] += sum(s.lstrip().upper().startswith("SAVEPOINT") for s in seen)
            per = 20 * per_list
            print(
                f"{shape} per POST: {totals[0] / 20:.1f} statements ({totals[0] / per:.1f} "
                f"per run), {totals[1] / 20:.1f} savepoints"
            )
            if "-v" in sys.argv:
                print("\n".join(f"  {s.split()[0]} {' '.join(s.split()[1:6])}" for s in seen))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        asyncio.run(count(Path(tmp)))


if __name__ == "__main__":
    main()
