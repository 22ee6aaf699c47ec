"""The soak's faults that are not kills: a full disk, a slow link, a skewed clock.

`python bench/soak.py --faults` adds, between the kills and freezes, a window each of: the
space's disk full (its database on a small tmpfs, filled by a file until ENOSPC), 2 s of
one-way latency on the holder's link (each device reaches the space through its own
`tests/faultproxy.py`), and the holder's clock 60 s fast, then 60 s slow (libfaketime from
Debian's `faketime`, reading an offset file each second; the monotonic clock untouched).
A fault that this machine cannot make (no mount, no libfaketime) is reported, not faked.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from faultproxy import FaultProxy  # noqa: E402

LIBFAKETIME = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")
LATENCY = 2.0  # seconds, one way
SKEW = 60.0  # seconds, each way


@dataclass
class Fault:
    """One injected fault: what, and the harness's instants it began and ended."""

    what: str
    began: float
    ended: float = float("inf")
    peer: str | None = None  # the device it was made on, if any


class Disk:
    """The space's data directory on a tmpfs of its own, so that it can be filled."""

    def __init__(self, where: Path, size_mb: int = 64) -> None:
        self.path = where
        where.mkdir(parents=True, exist_ok=True)
        mount = ["mount", "-t", "tmpfs", "-o", f"size={size_mb}m", "tmpfs", str(where)]
        done = subprocess.run(mount, capture_output=True, text=True, check=False)
        self.refused = done.stderr.strip() if done.returncode else None
        self._filler = where / "filler"

    def fill(self) -> None:
        """Write until the disk says ENOSPC: the next page the database needs has no room."""
        block = b"\0" * (1 << 20)
        with self._filler.open("wb", buffering=0) as out:
            with contextlib.suppress(OSError):
                while True:
                    out.write(block)
            with contextlib.suppress(OSError):  # the last few KiB too
                while True:
                    out.write(block[:4096])

    def free(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._filler.unlink()

    def close(self, keep: Path) -> None:
        """Copy the database beside the other data (for `--keep`), then unmount."""
        if self.refused is None:
            self.free()
            for file in self.path.glob("space.db*"):
                shutil.copy2(file, keep / file.name)
            subprocess.run(["umount", "-l", str(self.path)], capture_output=True, check=False)


class Clocks:
    """Each device's wall clock offset, read by libfaketime from a file once a second."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.refused = None if LIBFAKETIME.exists() else f"{LIBFAKETIME} missing (faketime)"

    def env(self, peer: str) -> dict[str, str]:
        if self.refused is not None:
            return {}
        offset = self._file(peer)
        if not offset.exists():
            offset.write_text("+0\n")
        return {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME_TIMESTAMP_FILE": str(offset),
            "FAKETIME_CACHE_DURATION": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
        }

    def skew(self, peer: str, seconds: float) -> None:
        self._file(peer).write_text(f"{seconds:+.0f}\n")

    def _file(self, peer: str) -> Path:
        return self.tmp / f"{peer}.faketime"


class Links:
    """A loopback proxy per device between it and the space: latency on one device's link."""

    def __init__(self, space_port: int) -> None:
        self.space_port = space_port
        self.proxies: dict[str, FaultProxy] = {}

    async def url(self, peer: str) -> str:
        if peer not in self.proxies:
            self.proxies[peer] = FaultProxy(self.space_port)
            await self.proxies[peer].start()
        return self.proxies[peer].url

    def slow(self, peer: str, seconds: float) -> None:
        self.proxies[peer].latency = seconds

    async def close(self) -> None:
        for proxy in self.proxies.values():
            await proxy.close()


def env_without_faketime() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith(("FAKETIME", "LD_PRELOAD"))}
