"""What the benchmarks share: the space server in a child process, and bounded concurrency.

Run as a script, it is that child: `python bench/serving.py DB [OK_RUNS_KEPT]` serves the
space on 127.0.0.1 (port 0), prints the port, and stops when its stdin closes.
"""

from __future__ import annotations

import asyncio
import os
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

# `python -c PROFILED OUT.prof -m MODULE ARGS…` (or `… SCRIPT ARGS…`): MODULE or SCRIPT run
# under cProfile, the stats written to OUT.prof when it ends, SIGTERM included.
PROFILED = """
import cProfile, runpy, signal, sys
out, what = sys.argv[1], sys.argv[2:]
def stop(*_):
    raise SystemExit(0)
signal.signal(signal.SIGTERM, stop)
profile = cProfile.Profile()
profile.enable()
try:
    if what[0] == "-m":
        sys.argv = what[1:]
        runpy.run_module(what[1], run_name="__main__", alter_sys=True)
    else:
        sys.argv = what
        runpy.run_path(what[0], run_name="__main__")
finally:
    profile.disable()
    profile.dump_stats(out)
"""


def python(name: str, *args: str) -> list[str]:
    """The interpreter and `args`; under cProfile when BENCH_PROFILE names a directory
    (the stats go to BENCH_PROFILE/NAME.prof)."""
    where = os.environ.get("BENCH_PROFILE")
    if not where:
        return [sys.executable, *args]
    return [sys.executable, "-c", PROFILED, str(Path(where) / f"{name}.prof"), *args]


async def serve(db_path: str, ok_runs_kept: int | None) -> None:
    """Child: run the space server until stdin closes; print its port first."""
    sys.path.insert(0, str(ROOT))
    from aiohttp import web

    from space.app import create_app
    from space.appstate import RunRetention

    retention = RunRetention(ok_per_trigger=ok_runs_kept) if ok_runs_kept else None
    runner = web.AppRunner(create_app(db_path, retention=retention))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    print(runner.addresses[0][1], flush=True)
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.read)
    await runner.cleanup()


async def start_server(
    tmp: Path, ok_runs_kept: int | None = None
) -> tuple[asyncio.subprocess.Process, str, dict[str, str]]:
    """A space server on a fresh SQLite file in `tmp`: its process, base URL, admin header."""
    extra = [str(ok_runs_kept)] if ok_runs_kept else []
    proc = await asyncio.create_subprocess_exec(
        *python("space", __file__, str(tmp / "space.db"), *extra),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    port = int((await proc.stdout.readline()).decode())
    token = (tmp / "admin.token").read_text().strip()
    return proc, f"http://127.0.0.1:{port}", {"Authorization": f"Bearer {token}"}


async def stop_server(proc: asyncio.subprocess.Process) -> None:
    assert proc.stdin is not None
    proc.stdin.close()
    await proc.wait()


async def in_parallel(jobs: list[Callable[[], Awaitable[Any]]], concurrency: int) -> None:
    """Run `jobs` in order, at most `concurrency` at once."""
    queue = list(reversed(jobs))

    async def worker() -> None:
        while queue:
            await queue.pop()()

    await asyncio.gather(*(worker() for _ in range(concurrency)))


if __name__ == "__main__":
    asyncio.run(serve(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else None))
