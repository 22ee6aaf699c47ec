"""A trigger's run limits in the CLI (`limits`, docs/records.md): flags in, one field out.

Owns the flags of `triggers add|edit` that write `limits` — `--timeout S`, `--memory-mb N`,
`--overlap`, `--max-queue N`, `--network`, `--disk-mb N` — and the flag each validator path
under `$.limits` names. On `edit` the limits the record has are kept and the flags given
change theirs. Only the form is checked here (a number, one of the choices); the bounds are
the space's own validator's (runtime.cli.trigger_flags.check). Pure: no I/O.
"""

from __future__ import annotations

import argparse
import math
from typing import Any

from core.vocab import Overlap
from runtime.cli.common import Record
from runtime.cli.main import UsageError
from triggers.records import Network

FLAGS = {  # the most specific path first
    "$.limits.timeoutSeconds": "--timeout",
    "$.limits.memoryMB": "--memory-mb",
    "$.limits.overlap": "--overlap",
    "$.limits.maxQueue": "--max-queue",
    "$.limits.network": "--network",
    "$.limits.diskMB": "--disk-mb",
    "$.limits": "--timeout/--memory-mb/--overlap/--max-queue/--network/--disk-mb",
}
_FIELDS = (  # dest, field, flag, type
    ("timeout", "timeoutSeconds", "--timeout", float),
    ("memory_mb", "memoryMB", "--memory-mb", int),
    ("max_queue", "maxQueue", "--max-queue", int),
    ("disk_mb", "diskMB", "--disk-mb", int),
)


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("limits", "how a run is held (docs/records.md)")
    group.add_argument("--timeout", metavar="S", help="a run longer than S seconds is killed")
    group.add_argument("--memory-mb", metavar="N", help="the worker's memory cap in MB")
    overlaps = ", ".join(o.value for o in Overlap)
    group.add_argument(
        "--overlap", choices=[o.value for o in Overlap], help=f"a fire while one runs: {overlaps}"
    )
    group.add_argument("--max-queue", metavar="N", help="--overlap queue: fires beyond N rejected")
    networks = [n.value for n in Network]
    group.add_argument("--network", choices=networks, help="what a run may reach over TCP")
    group.add_argument("--disk-mb", metavar="N", help="the run's scratch directory quota in MB")


def fields_of(args: argparse.Namespace, current: Record | None = None) -> Record:
    """`{"limits": …}` when a limit flag is given (over the limits `current` has), else `{}`."""
    given: Record = {
        field: number(flag, text, kind)
        for dest, field, flag, kind in _FIELDS
        if (text := getattr(args, dest)) is not None
    }
    for dest, field in (("overlap", "overlap"), ("network", "network")):
        if getattr(args, dest) is not None:
            given[field] = getattr(args, dest)
    if not given:
        return {}
    was = (current or {}).get("limits")
    return {"limits": {**(was if isinstance(was, dict) else {}), **given}}


def number(flag: str, text: str, kind: type[float] | type[int] = float) -> Any:
    """`text` as the number `flag` takes; else bad input naming the flag."""
    try:
        value = kind(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{flag}: {text!r} is not {what}")
    return value
