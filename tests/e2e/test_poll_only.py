"""The space suite's PostgreSQL half with the servers polling, never LISTENing.

Behind PgBouncer in transaction mode a server cannot LISTEN (SPEC "Beyond one machine"), so
it reads every cursor once a `poll_every` instead. This runs every space test on the
PostgreSQL store (`store_kind` postgres) in a pytest of its own with
`BATON_TEST_PG_POLL_ONLY` set (`space_support.serve`: `PgOptions(listen=False)`).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.e2e  # a whole pytest of its own, about a minute
def test_the_space_suite_passes_on_postgresql_polling_only(tmp_path: Path) -> None:
    env = {**os.environ, "BATON_TEST_PG_POLL_ONLY": "1", "BATON_REQUIRE_POSTGRES": "1"}
    argv = [sys.executable, "-m", "pytest", "tests/space", "-k", "postgres", "-q", "-n", "2"]
    argv += ["-p", "no:cacheprovider", "--basetemp", str(tmp_path / "t")]
    done = subprocess.run(argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    tail = "\n".join(done.stdout.splitlines()[-15:])
    assert done.returncode == 0, tail
    assert "[100%]" in tail, tail  # tests ran (none selected is exit 5)
