"""Reconcile cost at 1k / 10k / 100k records: full diffs and one incremental change.

Run: .venv/bin/python bench/reconcile.py [--wall] [sizes...]

A mix of cron, once and event records, pinned here, elsewhere or floating; each figure the
best of 7 runs in CPU milliseconds (`--wall`: wall time): cold, full with nothing changed,
one changed, every record restamped, and one change applied from the feed. Details in
docs/performance.md, "Benchmark notes".
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

import msgspec

from triggers.diffing import reconcile, reconcile_one
from triggers.records import Loaded, PeerId, load
from triggers.registry import Registry, apply

ME, OTHER = PeerId("laptop"), PeerId("box")
SPECS = [
    ("cron", {"expr": "*/5 * * * *", "tz": "Europe/Berlin"}),
    ("once", {"at": "2026-12-01T09:00:00+01:00"}),
    ("event", {"dataset": "chat_messages", "objectId": "chat_1"}),
]
OWNERS = [ME, OTHER, "", ""]


def raw(i: int, **over: object) -> bytes:
    kind, spec = SPECS[i % 3]
    record = {
        "id": f"trg_{i:06d}",
        "kind": kind,
        "name": f"job {i}",
        "program": "job@v1",
        "args": {"n": i, "space": "bao"},
        "spec": spec,
        "owner": OWNERS[i % 4],
        "rev": 3,
        "lastStatus": "ok",
        "lastRunAt": "2026-11-01T10:00:00+00:00",
        "updatedAt": "2026-11-01T10:00:00+00:00",
    }
    return msgspec.json.encode({**record, **over})


CLOCK = time.process_time


def best(fn: Callable[[], object], repeat: int = 7) -> float:
    times = []
    for _ in range(repeat):
        start = CLOCK()
        fn()
        times.append(CLOCK() - start)
    return min(times) * 1000


def measure(n: int) -> list[float]:
    raws = [raw(i) for i in range(n)]
    records: list[Loaded] = [load(r) for r in raws]
    registry = apply(Registry(), reconcile(Registry(), records, ME, active=True))
    edited = load(raw(0, rev=4, spec={"expr": "*/7 * * * *", "tz": "UTC"}))
    fresh = [load(r) for r in raws]
    fresh[0] = edited
    restamped = [load(raw(i, rev=4, lastStatus="error")) for i in range(n)]
    assert len(reconcile(registry, fresh, ME, active=True).rearm) == 1
    assert reconcile(registry, restamped, ME, active=True).empty
    return [
        best(lambda: reconcile(Registry(), records, ME, active=True)),
        best(lambda: reconcile(registry, records, ME, active=True)),
        best(lambda: reconcile(registry, fresh, ME, active=True)),
        best(lambda: reconcile(registry, restamped, ME, active=True)),
        best(lambda: apply(registry, reconcile_one(registry, edited, ME, active=True))),
    ]


def main(argv: list[str]) -> None:
    global CLOCK
    if "--wall" in argv:
        CLOCK = time.perf_counter
    sizes = [int(a) for a in argv if a != "--wall"] or [1_000, 10_000, 100_000]
    heads = ["records", "cold", "full, none", "full, 1 changed", "full, restamped", "one + apply"]
    print(" | ".join(f"{h:>15}" for h in heads))
    for n in sizes:
        cells = [f"{n:>15,}"] + [f"{ms:>12.2f} ms" for ms in measure(n)]
        print(" | ".join(cells), flush=True)
    raws = [raw(i) for i in range(1_000)]
    decode = best(lambda: [load(r) for r in raws])
    print(f"for scale: decoding 1,000 records with records.load takes {decode:.1f} ms")


if __name__ == "__main__":
    main(sys.argv[1:])
