"""Fixtures of the space server tests: a settable server clock and an admin caller."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from space_support import SPACE, Api, FakeClock

from space.app import create_app, default_admin_token_file


@pytest.fixture
def space_clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
async def api(tmp_path: Path, space_clock: FakeClock, aiohttp_client: Any) -> Api:
    db_path = tmp_path / "space.db"
    app = create_app(db_path, clock=space_clock, lease_seconds=15, live_seconds=15)
    client = await aiohttp_client(app)
    token = default_admin_token_file(db_path).read_text().strip()
    admin = Api(client, token, db_path)
    status, body = await admin.post("/spaces", {"id": SPACE, "name": "Home"})
    assert status == 201, body
    return admin
