"""A real worker process seen from outside: page faults, CPU and memory of its run processes.

Run: [BENCH_LINES=N] .venv/bin/python bench/zygote.py [runs] [spares] [rounds]   (300, 32, 3)

Starts `python -m programs.worker` (its environment as the executor makes it) and drives it
over its control socket, as the executor does, with distinct runs of a trivial program (no
warm key: a fresh run process each). Per round: `runs` runs back to back (each reply, then
the next request; the worker forks the next spare after each reply), then a `Prepare` of
`spares`, measured once every spare is confined and waiting, then `spares` runs into them.
From /proc: the worker's own minor faults and those of the run processes it reaped
(`minflt`, `cminflt` of its stat), CPU (utime + stime + cutime + cstime), and each spare's
PSS and private memory (smaps_rollup) and CPU (schedstat). Another tree's worker is
measured with PYTHONPATH=THAT_TREE (the worker is found on PYTHONPATH first).
"""

from __future__ import annotations

import os
import socket
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import BinaryIO

_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]

from programs import channel  # noqa: E402
from programs.executor import worker_env  # noqa: E402

TRIVIAL = 'def main(args):\n    return {"ok": True}\n'
# BENCH_LINES=N: a program of ≈ N lines instead (helpers defined, one called), to see compiling
HELPER = (
    "def helper_{i}(x, y=2):\n    z = [x * y for _ in range(3)]\n    return {{'v': z, 'i': {i}}}\n"
)
LINES = int(os.environ.get("BENCH_LINES", "0"))
SOURCE = "".join(HELPER.format(i=i) for i in range(LINES // 3)) + (
    'def main(args):\n    return {"ok": True}\n'
    if not LINES
    else 'def main(args):\n    return {"ok": bool(helper_0(1))}\n'
)
TICK = os.sysconf("SC_CLK_TCK")


def request() -> channel.Request:
    return channel.Request(
        source=SOURCE, ref="bench@v1", args={}, context=None, memory_mb=512, marker=b"\0end\0"
    )


def stat(pid: int) -> list[int]:
    """minflt, cminflt, CPU seconds (own and reaped children's)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(") ")[2].split()
    return [int(fields[7]), int(fields[8]), sum(int(x) for x in fields[11:15])]


def children(pid: int) -> list[int]:
    return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def memory(pid: int) -> tuple[float, float, float]:
    """PSS, private memory and RSS of `pid`, in kB."""
    pss = private = rss = 0.0
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, value = line.split(":", 1)
        if name == "Rss":
            rss += float(value.split()[0])
        elif name == "Pss":
            pss += float(value.split()[0])
        elif name.startswith("Private_"):
            private += float(value.split()[0])
    return pss, private, rss


def run_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def drain(pipe: BinaryIO) -> None:
    while pipe.read1(1 << 16):
        pass


class Worker:
    def __init__(self) -> None:
        self.sock, theirs = socket.socketpair()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "programs.worker", str(theirs.fileno()), "200"],
            env=worker_env(),
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            cwd="/",  # `-m` puts the working directory first on the worker's path
        )
        theirs.close()
        for pipe in (self.proc.stdout, self.proc.stderr):
            threading.Thread(target=drain, args=(pipe,), daemon=True).start()
        self.stream = self.sock.makefile("rb")
        self.receive()

    def receive(self) -> channel.Ready | channel.Reply:
        size = channel.body_length(self.stream.read(channel.HEADER))
        return channel.decode_to_parent(self.stream.read(size))

    def run(self) -> None:
        self.sock.sendall(channel.frame(request()))
        reply = self.receive()
        assert isinstance(reply, channel.Reply) and reply.status == "ok", reply

    def close(self) -> None:
        self.stream.close()
        self.sock.close()
        self.proc.wait()


def settled(pids: list[int]) -> None:
    """Until the spares stop using CPU: each confined, waiting for its request."""
    before = -1
    while (now := sum(run_ns(p) for p in pids)) != before:
        before = now
        time.sleep(0.1)


def one_round(w: Worker, runs: int, spares: int) -> dict[str, float]:
    pid = w.proc.pid
    before, start = stat(pid), time.perf_counter()
    for _ in range(runs):
        w.run()
    took, after = time.perf_counter() - start, stat(pid)
    row = {
        "runs/s (back to back)": runs / took,
        "worker faults / run": (after[0] - before[0]) / runs,
        "run process faults / run (exit included)": (after[1] - before[1]) / runs,
        "worker + run CPU ms / run": (after[2] - before[2]) * 1e3 / TICK / runs,
    }
    time.sleep(0.3)
    base, old = stat(pid), set(children(pid))
    w.sock.sendall(channel.frame(channel.Prepare(spares=spares)))
    deadline = time.monotonic() + 30
    while len(new := [p for p in children(pid) if p not in old]) < spares - len(old):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    settled(new)
    forked = stat(pid)
    mem = [memory(p) for p in new]
    row["fork CPU ms / spare (worker)"] = (forked[2] - base[2]) * 1e3 / TICK / len(new)
    row["confine CPU ms / spare (its own)"] = sum(map(run_ns, new)) / 1e6 / len(new)
    row["PSS kB / spare"] = sum(m[0] for m in mem) / len(new)
    row["private kB / spare"] = sum(m[1] for m in mem) / len(new)
    row["worker RSS MB"] = memory(pid)[2] / 1024
    before = stat(pid)
    for _ in range(spares):
        w.run()
    after = stat(pid)
    row["run process faults / run, spare ready"] = (after[1] - before[1]) / spares
    return row


def main(runs: int, spares: int, rounds: int) -> None:
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    w = Worker()
    try:
        for _ in range(30):  # its first runs: caches, the first spare
            w.run()
        rows = [one_round(w, runs, spares) for _ in range(rounds)]
    finally:
        w.close()
    lines = len(SOURCE.splitlines())
    print(f"{runs} runs, {spares} spares, {rounds} rounds, {lines}-line program; median (min–max)")
    medians(rows)


def medians(rows: list[dict[str, float]]) -> None:
    """Each figure of `rows` (one a round) as median (min–max), then the load average."""
    print("| what | value |\n|---|---|")
    for name in rows[0]:
        values = [r[name] for r in rows]
        print(f"| {name} | {statistics.median(values):.4g} ({min(values):.4g}–{max(values):.4g}) |")
    print(f"load average at the end: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [300, 32, 3][len(args) :]))
