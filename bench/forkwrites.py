"""What a real worker writes between two forks: the pages each fork makes it copy.

Run: .venv/bin/python bench/forkwrites.py [runs]   (20; reads the worker's /proc/PID/pagemap)

After a fork every page of the worker is shared with the new process until one of them
writes it: the worker's next write to it is a copy-on-write fault, once per fork. This
drives bench/zygote.py's worker (distinct runs of a trivial program, no warm key) and says
how many pages that is and where they are:

- pages written per run, by mapping: spares are readied first (`Prepare`), so every page is
  shared with one; at each run's reply the worker is stopped (SIGSTOP) and the pages it
  maps alone are counted from /proc/PID/pagemap (the "exclusively mapped" bit): those it
  wrote since its last fork. The worker's pymalloc arenas are the anonymous mappings.
- the worker's minor faults a run when it forks a spare after each reply (the executor's
  way between bursts), when the runs take spares readied before them (no fork between
  them), and a fork alone (a `Prepare` of 24 spares).
"""

from __future__ import annotations

import collections
import os
import signal
import struct
import sys
import time
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))

from zygote import Worker, channel, children, medians, request, stat  # noqa: E402

PAGE = os.sysconf("SC_PAGE_SIZE")
EXCLUSIVE, PRESENT = 1 << 56, 1 << 63  # /proc/PID/pagemap bits (Documentation/admin-guide/mm)


def written(pid: int) -> collections.Counter[str]:
    """The writable pages `pid` maps alone, by mapping (anonymous ones as "[anon]")."""
    found: collections.Counter[str] = collections.Counter()
    with open(f"/proc/{pid}/pagemap", "rb") as pagemap:
        for line in Path(f"/proc/{pid}/maps").read_text().splitlines():
            span, perms, *rest = line.split()
            if "w" not in perms:
                continue
            low, high = (int(x, 16) for x in span.split("-"))
            name = rest[3].rsplit("/", 1)[-1] if len(rest) > 3 else "[anon]"
            pagemap.seek(low // PAGE * 8)
            entries = struct.iter_unpack("Q", pagemap.read((high - low) // PAGE * 8))
            found[name] += sum(1 for (e,) in entries if e & PRESENT and e & EXCLUSIVE)
    return found


def prepare(w: Worker, spares: int) -> None:
    """A `Prepare` of `spares`, until the worker has that many children."""
    w.sock.sendall(channel.frame(channel.Prepare(spares=spares)))
    deadline = time.monotonic() + 10
    while len(children(w.proc.pid)) < spares:
        assert time.monotonic() < deadline, "spares not forked"
        time.sleep(0.02)
    time.sleep(0.3)  # their confinement done


def pages_per_run(w: Worker, runs: int) -> collections.Counter[str]:
    total: collections.Counter[str] = collections.Counter()
    for _ in range(runs):
        prepare(w, 6)
        w.sock.sendall(channel.frame(request()))
        w.receive()
        os.kill(w.proc.pid, signal.SIGSTOP)
        try:
            total.update(written(w.proc.pid))
        finally:
            os.kill(w.proc.pid, signal.SIGCONT)
    return total


def faults(w: Worker, runs: int) -> dict[str, float]:
    pid, row = w.proc.pid, {}
    while len(children(pid)) > 1:  # spares readied before are used up: one forked a run
        w.run()
    before = stat(pid)
    for _ in range(runs):
        w.run()
    after = stat(pid)
    row["a fork after each reply: worker faults / run"] = (after[0] - before[0]) / runs
    prepare(w, runs + 1)
    before = stat(pid)
    for _ in range(runs):
        w.run()
    after = stat(pid)
    row["spares readied before: worker faults / run"] = (after[0] - before[0]) / runs
    time.sleep(0.3)
    had, before = len(children(pid)), stat(pid)
    prepare(w, 24)
    forked, after = len(children(pid)) - had, stat(pid)
    row["a fork alone (Prepare of 24): worker faults / fork"] = (after[0] - before[0]) / forked
    return row


def main(runs: int) -> None:
    print(f"load average at the start: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    w = Worker()
    try:
        for _ in range(40):  # its first runs: caches, the first spare
            w.run()
        pages = pages_per_run(w, runs)
        rows = [faults(w, runs) for _ in range(3)]
    finally:
        w.close()
    print(f"{runs} runs; pages the worker wrote between its last fork and a run's reply:")
    print("| mapping | pages / run |\n|---|---:|")
    for name, count in pages.most_common(6):
        print(f"| {name} | {count / runs:.1f} |")
    print(f"| all | {sum(pages.values()) / runs:.1f} |")
    print("\n3 rounds, median (min–max):")
    medians(rows)


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20)
