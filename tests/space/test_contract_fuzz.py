"""A contract fuzz of the space API from its own `/v1/openapi.json` (schemathesis): no 5xx, ever.

The server runs for real (SpaceRunner on 127.0.0.1, a SQLite file) in a thread of its own;
every operation but the two SSE streams (test_hostile.py has theirs) is fed schema-valid and
schema-violating requests, `EXAMPLES` of each, with path parameters pointing at a real space,
record and chat half the time. Every answer must be < 500 and every refusal the JSON error
body; the counts are printed for docs/reliability.md. The operations are dealt into `GROUPS`
tests over one server per worker.
"""

from __future__ import annotations

import asyncio
import functools
import os
import threading
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import requests
import schemathesis
from aiohttp import web
from hypothesis import HealthCheck, Phase, given, settings
from schemathesis.generation import GenerationMode

from space.app import create_app, default_admin_token_file
from space.serving import SpaceRunner

EXAMPLES = int(os.environ.get("BATON_FUZZ_EXAMPLES", "12"))  # per operation and mode
SPACE = "home"
STREAMS = r".*/stream$"
GROUPS = 8  # operation i is fuzzed by the test of group i % GROUPS


class Served:
    """The space app served from a thread with its own event loop."""

    def __init__(self, db: Path) -> None:
        self.db, self.port = db, 0
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._serve()), daemon=True)

    async def _serve(self) -> None:
        self._loop, self._stop = asyncio.get_running_loop(), asyncio.Event()
        runner = SpaceRunner(create_app(self.db))
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        self.port = runner.addresses[0][1]
        self._ready.set()
        try:
            await self._stop.wait()
        finally:
            await runner.cleanup()

    def __enter__(self) -> Served:
        self._thread.start()
        assert self._ready.wait(30), "the space server did not start"
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._loop is not None and self._stop is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(30)


@pytest.fixture(scope="module")
def served(
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[str, dict[str, str], dict[str, str]]]:
    """The base URL, the admin's headers and the ids requests should sometimes hit."""
    db = tmp_path_factory.mktemp("fuzz") / "space.db"
    with Served(db) as server:
        url = f"http://127.0.0.1:{server.port}"
        token = default_admin_token_file(db).read_text().strip()
        headers = {"Authorization": f"Bearer {token}"}
        space = requests.post(f"{url}/v1/spaces", json={"id": SPACE}, headers=headers, timeout=10)
        trigger = requests.post(
            f"{url}/v1/spaces/{SPACE}/triggers",
            json={"kind": "cron", "program": "p@v1", "spec": {"expr": "* * * * *"}},
            headers=headers,
            timeout=10,
        )
        assert space.status_code == 201 and trigger.status_code == 201
        real = {
            "id": trigger.json()["id"],
            "triggerId": trigger.json()["id"],
            "objectId": space.json()["generalChat"],
            "ref": "p@v1",
            "db": str(db),
        }
        yield url, headers, real


@functools.cache
def _operations(url: str, authorization: str) -> tuple[Any, ...]:
    schema = schemathesis.openapi.from_url(
        f"{url}/v1/openapi.json", headers={"Authorization": authorization}
    )
    schema = schema.exclude(path_regex=STREAMS)
    return tuple(result.ok() for result in schema.get_all_operations())


def operations_of(url: str, headers: dict[str, str]) -> list[Any]:
    """The fuzzed operations of the served API, read from its document once per server."""
    return list(_operations(url, headers["Authorization"]))


def aim(case: Any, real: dict[str, str]) -> None:
    """Point the space at the real one, and half the other path parameters at real ids."""
    params = case.path_parameters or {}
    if "space" in params:
        params["space"] = SPACE
    for name, value in list(params.items()):
        if name in real and zlib.crc32(str(value).encode()) % 2:
            params[name] = real[name]


@pytest.mark.parametrize("group", range(GROUPS))
def test_no_request_gets_a_5xx(
    served: tuple[str, dict[str, str], dict[str, str]],
    capsys: pytest.CaptureFixture[str],
    group: int,
) -> None:
    url, headers, real = served
    admin_file = default_admin_token_file(Path(real["db"]))

    def admin() -> dict[str, str]:
        return {"Authorization": f"Bearer {admin_file.read_text().strip()}"}

    everything = operations_of(url, headers)
    session = requests.Session()
    sent, failures, refusals = 0, [], 0
    operations = everything[group::GROUPS]
    assert len(everything) > GROUPS  # every group has operations to fuzz
    for operation in operations:
        for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE):

            @settings(
                max_examples=EXAMPLES,
                deadline=None,
                database=None,
                derandomize=True,
                phases=[Phase.generate],
                suppress_health_check=list(HealthCheck),
            )
            @given(case=operation.as_strategy(generation_mode=mode))
            def probe(case: Any) -> None:
                nonlocal sent, refusals
                aim(case, real)
                headers = admin()  # the fuzz may rotate the admin token: the file has the current
                response = case.call(base_url=url, session=session, headers=headers, timeout=10)
                sent += 1
                if response.status_code >= 500:
                    failures.append((case.method, case.formatted_path, response.text[:300]))
                elif response.status_code >= 400:
                    refusals += 1
                    body = response.json()
                    assert set(body) >= {"error", "detail"}, body

            probe()
    with capsys.disabled():
        print(
            f"\ncontract fuzz group {group}: {len(operations)} of {len(everything)} "
            f"operations, {sent} requests, {refusals} refused (4xx), "
            f"{len(failures)} answers >= 500"
        )
    assert sent >= len(operations) * 2
    assert failures == []
