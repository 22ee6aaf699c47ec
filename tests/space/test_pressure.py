"""The space's own bounds (space.pressure): its file limit, and a flood's log lines."""

from __future__ import annotations

import logging
import subprocess
import sys

import pytest

from space.pressure import OncePerMinute, connection_room

RAISE = """
import resource
from space.pressure import raise_file_limit
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))
print(raise_file_limit(), resource.getrlimit(resource.RLIMIT_NOFILE)[0], hard)
"""


def test_the_space_raises_its_soft_file_limit_to_the_hard_one() -> None:
    """Before, a space under the common 1,024 soft limit ran out of descriptors at 1,100
    connections of one program while the hard limit allowed far more."""
    out = subprocess.run(
        [sys.executable, "-c", RAISE], capture_output=True, text=True, check=True
    ).stdout.split()
    returned, soft, hard = map(int, out)
    assert returned == soft == hard and hard > 256
    assert connection_room() >= 16


def test_a_repeated_log_line_is_written_once_a_minute_with_its_count(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Before, one flood wrote 465,510 `accept()` tracebacks (94 MB) in 40 s."""
    now = [0.0]
    logger = logging.getLogger("baton.test.flood")
    once = OncePerMinute(clock=lambda: now[0])
    logger.addFilter(once)
    try:
        with caplog.at_level(logging.ERROR, logger=logger.name):
            for i in range(1000):
                now[0] = i * 0.03  # 30 s of errors
                logger.error("socket.accept() out of system resource: %s", "EMFILE")
            logger.error("another error")
            now[0] = 61.0
            logger.error("socket.accept() out of system resource: %s", "EMFILE")
    finally:
        logger.removeFilter(once)
    lines = [r.getMessage() for r in caplog.records]
    assert lines == [
        "socket.accept() out of system resource: EMFILE",
        "another error",
        "socket.accept() out of system resource: EMFILE (and 999 more like it in the last minute)",
    ]
