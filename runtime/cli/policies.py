"""The trigger policies in the CLI (SPEC "Trigger policies"): flags in, lines out.

Owns the flags of `triggers add|edit` — `--retry N --backoff S`, `--start-at/--end-at`,
`--max-runs`, `--jitter`, `--budget N/PERIOD`, `--quiet-chat CHAT:SECONDS` — each turned
into its record field (on `edit`, merged with what the record has; `none` clears one), the
flag each validator path names, and the policy lines of `triggers show` (`--overlap` is a
limit: runtime.cli.trigger_limits). Values are checked by the space's own validator
(runtime.cli.trigger_flags.check). Pure: no I/O.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from core.vocab import iso
from runtime.cli.common import Record
from runtime.cli.main import UsageError
from runtime.cli.next import instant

NONE = "none"
"""The value that clears a policy on `edit`."""

FLAGS = {  # the most specific path first
    "$.retry.backoffSeconds": "--backoff",
    "$.retry": "--retry",
    "$.window.startAt": "--start-at",
    "$.window.endAt": "--end-at",
    "$.window": "--start-at/--end-at",
    "$.maxRuns": "--max-runs",
    "$.jitterSeconds": "--jitter",
    "$.budget": "--budget",
    "$.quietChat": "--quiet-chat",
    "$.pausedUntil": "--until",
}
_UNITS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86_400}
_PERIOD = re.compile(r"^(\d+(?:\.\d+)?)([smhd]?)$")


def add_flags(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("policies", "each clears with `none` on edit")
    group.add_argument("--retry", metavar="N", help="attempts in all for a failed run (1–10)")
    group.add_argument("--backoff", metavar="S", help="--retry: seconds before attempt 2, doubling")
    group.add_argument("--start-at", metavar="TIME", help="no fire before this instant")
    group.add_argument("--end-at", metavar="TIME", help="no fire at or after this instant")
    group.add_argument("--max-runs", metavar="N", help="done after N runs that ended ok")
    group.add_argument("--jitter", metavar="S", help="cron: each slot runs up to S seconds late")
    group.add_argument("--budget", metavar="N/PERIOD", help="at most N runs per PERIOD (3/1h)")
    group.add_argument(
        "--quiet-chat", metavar="CHAT:S", help="skip while a person wrote within S s"
    )


def fields_of(args: argparse.Namespace, current: Record | None = None) -> Record:
    """The record fields the policy flags set (merged with `current` on `edit`)."""
    was = current or {}
    out: Record = {}
    if args.retry is not None or args.backoff is not None:
        out["retry"] = _retry(args, was.get("retry"))
    if args.start_at is not None or args.end_at is not None:
        out["window"] = _window(args, was.get("window"))
    if args.max_runs is not None:
        out["maxRuns"] = (
            None if args.max_runs == NONE else _number("--max-runs", args.max_runs, int)
        )
    if args.jitter is not None:
        out["jitterSeconds"] = 0.0 if args.jitter == NONE else _number("--jitter", args.jitter)
    if args.budget is not None:
        out["budget"] = None if args.budget == NONE else budget(args.budget)
    if args.quiet_chat is not None:
        out["quietChat"] = None if args.quiet_chat == NONE else quiet_chat(args.quiet_chat)
    return out


def _retry(args: argparse.Namespace, was: object) -> Record | None:
    if args.retry == NONE:
        return None
    retry = dict(was) if isinstance(was, dict) else {}
    if args.retry is not None:
        retry["attempts"] = _number("--retry", args.retry, int)
    if args.backoff is not None:
        retry["backoffSeconds"] = _number("--backoff", args.backoff)
    return retry


def _window(args: argparse.Namespace, was: object) -> Record | None:
    window = dict(was) if isinstance(was, dict) else {}
    for flag, key, text in (
        ("--start-at", "startAt", args.start_at),
        ("--end-at", "endAt", args.end_at),
    ):
        if text == NONE:
            window.pop(key, None)
        elif text is not None:
            window[key] = iso(instant(flag, text))
    return window or None


def budget(text: str) -> Record:
    """`--budget N/PERIOD`: `3/60`, `3/1h`, `100/1d`."""
    runs, slash, period = text.partition("/")
    found = _PERIOD.match(period.strip())
    if not slash or found is None:
        raise UsageError(f"--budget: {text!r} is not N/PERIOD (e.g. 3/1h; units s, m, h, d)")
    seconds = float(found.group(1)) * _UNITS[found.group(2)]
    return {"runs": _number("--budget", runs.strip(), int), "perSeconds": seconds}


def quiet_chat(text: str) -> Record:
    """`--quiet-chat CHAT:SECONDS`."""
    chat, colon, seconds = text.rpartition(":")
    if not colon or not chat:
        raise UsageError(f"--quiet-chat: {text!r} is not CHAT:SECONDS")
    return {"objectId": chat, "seconds": _number("--quiet-chat", seconds)}


def _number(flag: str, text: str, kind: type[float] | type[int] = float) -> Any:
    try:
        return kind(text)
    except ValueError:
        what = "a whole number" if kind is int else "a number"
        raise UsageError(f"{flag}: {text!r} is not {what}") from None


# --- lines of `triggers show` ------------------------------------------------------------------


def rows(raw: Record) -> list[tuple[str, str]]:
    """`(label, text)` for each policy the record sets, in the order of SPEC's list."""
    found: list[tuple[str, str]] = []
    if isinstance(retry := raw.get("retry"), dict) and retry.get("attempts", 1) > 1:
        backoff, cap = retry.get("backoffSeconds", 10), retry.get("maxBackoffSeconds", 600)
        found.append(
            ("retry", f"{retry['attempts']} attempts, {backoff:g} s doubling, ≤ {cap:g} s")
        )
    if raw.get("pausedUntil"):
        found.append(("snoozed until", str(raw["pausedUntil"])))
    if isinstance(window := raw.get("window"), dict):
        found.append(("window", f"{window.get('startAt') or '…'} to {window.get('endAt') or '…'}"))
    if raw.get("maxRuns") is not None:
        ok = (raw.get("rollup") or {}).get("ok", 0)
        found.append(("max runs", f"{raw['maxRuns']} ({ok} ok so far)"))
    if raw.get("jitterSeconds"):
        found.append(("jitter", f"up to {raw['jitterSeconds']:g} s after each slot"))
    if isinstance(b := raw.get("budget"), dict):
        found.append(("budget", f"{b.get('runs')} runs per {b.get('perSeconds', 0):g} s"))
    if isinstance(q := raw.get("quietChat"), dict):
        found.append(("quiet chat", f"{q.get('objectId')}: {q.get('seconds', 0):g} s"))
    overlap = (raw.get("limits") or {}).get("overlap")
    if overlap:
        found.append(("overlap", str(overlap)))
    return found
