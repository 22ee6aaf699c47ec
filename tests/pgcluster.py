"""A real PostgreSQL for the tests: Debian's binaries, a cluster in a temporary directory.

`initdb` refuses to run as root, so the cluster belongs to the `postgres` system user
(Debian's package creates it; `.ci/run` installs the package when it is missing) and
every server command runs through `runuser`. The server listens on a Unix socket in
the cluster's directory only (no TCP), with `fsync=off` and `full_page_writes=off`:
a test cluster need not survive a power cut. Each test gets a
database of its own (`create_database`, copied from a template).
"""

from __future__ import annotations

import glob
import itertools
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path

OWNER = "postgres"


def binaries() -> Path | None:
    """The newest installed PostgreSQL's bin directory, or None when there is none."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=_major)
    return Path(found[-1]).parent if found else None


def _major(path: str) -> int:
    part = Path(path).parent.parent.name
    return int(part) if part.isdigit() else 0


class Cluster:
    """One running server; `dsn(name)` reaches database `name` over its socket."""

    def __init__(self, bin_dir: Path) -> None:
        self.bin = bin_dir
        self.dir = Path(tempfile.mkdtemp(prefix="baton-pg-"))
        self.data = self.dir / "data"
        self._names = itertools.count(1)
        owner = pwd.getpwnam(OWNER)
        if os.geteuid() == 0:
            os.chown(self.dir, owner.pw_uid, owner.pw_gid)

    def _run(self, tool: str, *args: str) -> None:
        command = [str(self.bin / tool), *args]
        if os.geteuid() == 0:
            command = ["runuser", "-u", OWNER, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr or done.stdout}")

    def start(self) -> None:
        self._run("initdb", "-D", str(self.data), "-A", "trust", "-U", OWNER, "--no-sync")
        options = (
            f"-k {self.dir} -c listen_addresses='' -c fsync=off -c full_page_writes=off "
            "-c synchronous_commit=off -c max_connections=200"
        )
        log = self.dir / "server.log"
        self._run("pg_ctl", "-D", str(self.data), "-l", str(log), "-o", options, "-w", "start")

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)

    def dsn(self, database: str = "postgres") -> str:
        return f"postgresql://{OWNER}@/{database}?host={self.dir}"

    def create_database(self, name: str, template: str = "template1") -> None:
        self._run("createdb", "-h", str(self.dir), "-U", OWNER, "-T", template, name)

    def next_name(self) -> str:
        return f"t{os.getpid()}_{next(self._names)}"
