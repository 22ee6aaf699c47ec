"""The flags of `baton triggers add|edit` turned into a record body or a patch, checked here.

Owns the translation (`--cron/--tz/--catchup` → a cron spec, `--at` → a once spec,
`--chat` → an event spec on `chat_messages`, `--args` JSON, `--program` a ref) and
checking the result with the same validator the space uses
(`triggers.records.validate_input`), so bad input is refused before anything is
sent, in one line naming the flag (`--cron: …`). A refusal names the flag through
the path the validator reports (``at `$.spec.expr` `` → `--cron`). Pure: no I/O.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from runtime.cli import policies
from runtime.cli.main import UsageError
from runtime.cli.next import instant
from runtime.cli.programs import parse_object, parse_ref_flag
from triggers import records

FLAGS = {
    "$.spec.expr": "--cron",
    "$.spec.tz": "--tz",
    "$.spec.catchup": "--catchup",
    "$.spec.at": "--at",
    "$.spec.objectId": "--chat",
    "$.spec": "--cron/--at/--chat",
    "$.args": "--args",
    "$.program": "--program",
    "$.name": "--name",
    "$.owner": "--pin",
    "$.enabled": "--paused",
    **policies.FLAGS,
}
_PATH = re.compile(r" - at `(\$[^`]*)`$")
Record = dict[str, Any]


def record_of(args: argparse.Namespace) -> Record:
    """The body of `triggers add`, checked."""
    if not args.name.strip():
        raise UsageError("--name: must not be empty")
    kind, spec = _spec(args)
    body = {
        "name": args.name,
        "kind": kind,
        "spec": spec,
        "program": str(parse_ref_flag("--program", args.program)),
        "args": parse_object("--args", args.args or "{}"),
        "owner": args.pin or "",
        "enabled": not args.paused,
    }
    body.update((k, v) for k, v in policies.fields_of(args).items() if v is not None)
    check(body)
    return body


def patch_of(args: argparse.Namespace, current: Record) -> Record:
    """The fields `triggers edit` changes on `current`, checked as the merged record."""
    patch: Record = {}
    if args.name is not None:
        if not args.name.strip():
            raise UsageError("--name: must not be empty")
        patch["name"] = args.name
    if args.program is not None:
        patch["program"] = str(parse_ref_flag("--program", args.program))
    if args.args is not None:
        patch["args"] = parse_object("--args", args.args)
    patch.update(_spec_change(args, current))
    patch.update(policies.fields_of(args, current))
    if not patch:
        raise UsageError(
            "nothing to change: give --name, --cron, --tz, --at, --program, --args or a policy"
        )
    patch = {k: v for k, v in patch.items() if current.get(k) != v}
    check({k: v for k, v in {**current, **patch}.items() if k in records.USER_FIELDS})
    return patch


def check(body: Record) -> None:
    try:
        records.validate_input(body)
    except records.InvalidRecord as exc:
        raise UsageError(_named(str(exc))) from None


def _named(message: str) -> str:
    """`--cron: <reason>` from the validator's `<reason> - at `$.spec.expr``."""
    found = _PATH.search(message)
    if found is None:
        return f"record: {message}"
    path = found.group(1)
    flag = next((f for p, f in FLAGS.items() if path == p or path.startswith(p + ".")), path)
    return f"{flag}: {message[: found.start()]}"


def _spec(args: argparse.Namespace) -> tuple[str, Record]:
    if args.tz is not None and args.cron is None:
        raise UsageError("--tz: only with --cron")
    if args.catchup is not None and args.cron is None:
        raise UsageError("--catchup: only with --cron")
    if args.cron is not None:
        spec = {"expr": args.cron, "tz": args.tz or "UTC"}
        return "cron", spec | ({"catchup": args.catchup} if args.catchup else {})
    if args.at is not None:
        return "once", {"at": at_value(args.at)}
    return "event", {"dataset": records.CHAT_DATASET, "objectId": args.chat}


def _spec_change(args: argparse.Namespace, current: Record) -> Record:
    """`kind` and `spec` after `--cron`, `--tz`, `--at`; other spec fields of the same kind stay."""
    spec = current["spec"] if isinstance(current.get("spec"), dict) else {}
    kind = current.get("kind")
    if args.at is not None:
        keep = {k: v for k, v in spec.items() if k == "graceSeconds"} if kind == "once" else {}
        return {"kind": "once", "spec": {**keep, "at": at_value(args.at)}}
    if args.cron is None and args.tz is None:
        return {}
    if args.cron is None and kind != "cron":
        raise UsageError(f"--tz: trigger {current.get('id')} is a {kind} trigger, not a cron")
    base = dict(spec) if kind == "cron" else {"tz": "UTC"}
    if args.cron is not None:
        base["expr"] = args.cron
    if args.tz is not None:
        base["tz"] = args.tz
    return {"kind": "cron", "spec": base}


def at_value(text: str) -> str | float:
    """`--at`: an RFC 3339 instant with offset (kept as written), or unix seconds."""
    instant("--at", text, allow_unix=True)
    try:
        return float(text)
    except ValueError:
        return text
