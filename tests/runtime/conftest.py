"""Fixtures of the CLI tests: a real space on 127.0.0.1 (`world`) and a CLI driver (`cli`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from clikit import Cli, World, start_space


@pytest.fixture
async def world(tmp_path: Path, aiohttp_server: Any) -> AsyncIterator[World]:
    world, admin = await start_space(tmp_path, aiohttp_server)
    async with admin:
        yield world


@pytest.fixture
def cli(world: World, capsys: pytest.CaptureFixture[str]) -> Cli:
    return Cli(world, capsys)
