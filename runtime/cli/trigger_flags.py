"""The flags of `baton triggers add|edit`: declared here, turned into a record body or a patch.

Owns the flags and their translation (`--cron/--tz/--catchup/--grace` → a cron spec, `--at`
→ a once spec, `--chat` → an event spec on `chat_messages`, `--args` JSON, `--program` a
ref; the limits' (`trigger_limits`) and the policies' (`policies`) flags beside them) and
checking the result with the same validator the space uses
(`triggers.records.validate_input`), so bad input is refused before anything is sent, in
one line: the flag, then the sentence the space's 400 would say, naming the field
(``--timeout: Expected `float` <= 86400.0 - at `$.limits.timeoutSeconds` ``). Pure: no I/O.
"""

from __future__ import annotations

import argparse
import re

from runtime.cli import policies, trigger_limits
from runtime.cli.common import Record
from runtime.cli.main import UsageError
from runtime.cli.next import instant
from runtime.cli.programs import parse_object, parse_ref_flag
from triggers import records
from triggers.bounds import CRON_LATEST_GRACE, LIVE_SLACK

FLAGS = {
    "$.spec.expr": "--cron",
    "$.spec.tz": "--tz",
    "$.spec.catchup": "--catchup",
    "$.spec.at": "--at",
    "$.spec.objectId": "--chat",
    "$.spec.graceSeconds": "--grace",
    "$.spec": "--cron/--at/--chat",
    "$.args": "--args",
    "$.program": "--program",
    "$.name": "--name",
    "$.owner": "--pin",
    "$.enabled": "--paused",
    **trigger_limits.FLAGS,
    **policies.FLAGS,
}
_PATH = re.compile(r" - at `(\$[^`]*)`$")
NONE = policies.NONE


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> argparse.ArgumentParser:
    add = sub.add_parser("add", help="create a trigger")
    add.add_argument("--name", required=True, metavar="N")
    when = add.add_mutually_exclusive_group(required=True)
    when.add_argument("--cron", metavar="EXPR", help="cron expression (5 fields, or 6)")
    when.add_argument("--at", metavar="TIME", help="once: RFC 3339 with offset, or unix seconds")
    when.add_argument("--chat", metavar="OBJECTID", help="on each new message of this chat")
    _spec_flags(add)
    add.add_argument("--program", required=True, metavar="REF", help="name@vN")
    add.add_argument("--args", metavar="JSON", help="main's args (a JSON object)")
    add.add_argument("--pin", metavar="PEER", help="run on this device only (default floating)")
    add.add_argument("--force", action="store_true", help="--pin even to a peer never seen")
    add.add_argument("--paused", action="store_true", help="create it paused")
    trigger_limits.add_flags(add)
    policies.add_flags(add)
    return add


def edit_parser(
    sub: argparse._SubParsersAction[argparse.ArgumentParser],
) -> argparse.ArgumentParser:
    edit = sub.add_parser("edit", help="change any field a user writes")
    edit.add_argument("id", metavar="ID")
    edit.add_argument("--name", metavar="N")
    when = edit.add_mutually_exclusive_group()
    when.add_argument("--cron", metavar="EXPR", help="a new expression (a once becomes a cron)")
    when.add_argument("--at", metavar="TIME", help="a new instant (a cron becomes a once)")
    when.add_argument("--chat", metavar="OBJECTID", help="fire on this chat (becomes an event)")
    _spec_flags(edit)
    edit.add_argument("--program", metavar="REF")
    edit.add_argument("--args", metavar="JSON", help="replaces the args whole")
    trigger_limits.add_flags(edit)
    policies.add_flags(edit)
    return edit


def _spec_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tz", metavar="TZ", help="IANA zone of --cron (default UTC)")
    parser.add_argument("--catchup", choices=("none", "latest"), help="cron: fire a missed slot")
    parser.add_argument(
        "--grace", metavar="S", help="cron, once: how late a fire may still happen (none: default)"
    )


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
    body.update(trigger_limits.fields_of(args))
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
    patch.update(trigger_limits.fields_of(args, current))
    patch.update(policies.fields_of(args, current))
    if not patch:
        raise UsageError("nothing to change: give the flag of a field (`--help` lists them)")
    patch = {k: v for k, v in patch.items() if current.get(k) != v}
    check({k: v for k, v in {**current, **patch}.items() if k in records.USER_FIELDS})
    return patch


def check(body: Record) -> None:
    try:
        records.validate_input(body)
    except records.InvalidRecord as exc:
        raise UsageError(_named(str(exc))) from None


def _named(message: str) -> str:
    """`--cron: <reason> - at `$.spec.expr`` from the validator's `<reason> - at `$.spec.expr``."""
    found = _PATH.search(message)
    if found is None:
        return f"record: {message}"
    path = found.group(1)
    flag = next((f for p, f in FLAGS.items() if path == p or path.startswith(p + ".")), path)
    return f"{flag}: {message}"


def _spec(args: argparse.Namespace) -> tuple[str, Record]:
    if args.tz is not None and args.cron is None:
        raise UsageError("--tz: only with --cron")
    if args.catchup is not None and args.cron is None:
        raise UsageError("--catchup: only with --cron")
    if args.grace is not None and args.chat is not None:
        raise UsageError("--grace: only with --cron or --at (an event trigger has no grace)")
    grace = {} if args.grace in (None, NONE) else {"graceSeconds": _grace(args.grace)}
    if args.cron is not None:
        spec = {"expr": args.cron, "tz": args.tz or "UTC"}
        return "cron", spec | ({"catchup": args.catchup} if args.catchup else {}) | grace
    if args.at is not None:
        return "once", {"at": at_value(args.at)} | grace
    return "event", {"dataset": records.CHAT_DATASET, "objectId": args.chat}


def _spec_change(args: argparse.Namespace, current: Record) -> Record:
    """`kind` and `spec` after `--cron`, `--at`, `--chat`, `--tz`, `--catchup`, `--grace`; the
    other spec fields stay while the kind does."""
    flags = (args.cron, args.at, args.chat, args.tz, args.catchup, args.grace)
    if all(f is None for f in flags):
        return {}
    kind = current.get("kind")
    new = "cron" if args.cron else "once" if args.at else "event" if args.chat else kind
    for flag, value in (("--tz", args.tz), ("--catchup", args.catchup)):
        if value is not None and new != "cron":
            raise UsageError(f"{flag}: trigger {current.get('id')} is a {new} trigger, not a cron")
    if args.grace is not None and new == "event":
        raise UsageError(f"--grace: trigger {current.get('id')} is an event trigger: no grace")
    spec = current["spec"] if isinstance(current.get("spec"), dict) else {}
    base = dict(spec) if new == kind else _fresh(str(new))
    if args.catchup is not None and args.grace is None and new == kind:
        _drop_default_grace(base)  # the grace of the old catch-up was its default: so is the new
    changes = {
        "expr": args.cron,
        "tz": args.tz,
        "catchup": args.catchup,
        "at": None if args.at is None else at_value(args.at),
        "objectId": args.chat,
    }
    base.update((k, v) for k, v in changes.items() if v is not None)
    if args.grace == NONE:
        base.pop("graceSeconds", None)
    elif args.grace is not None:
        base["graceSeconds"] = _grace(args.grace)
    return {"kind": new, "spec": base}


def _fresh(kind: str) -> Record:
    return {"cron": {"tz": "UTC"}, "event": {"dataset": records.CHAT_DATASET}}.get(kind, {})


def _drop_default_grace(spec: Record) -> None:
    """A cron's grace as GET fills it in (the default of its catch-up) is no choice of the
    user's: dropped, so the new catch-up's default applies."""
    default = CRON_LATEST_GRACE if spec.get("catchup") == "latest" else LIVE_SLACK
    if spec.get("graceSeconds") == default:
        del spec["graceSeconds"]


def _grace(text: str) -> float:
    return float(trigger_limits.number("--grace", text))


def at_value(text: str) -> str | float:
    """`--at`: an RFC 3339 instant with offset (kept as written), or unix seconds."""
    instant("--at", text, allow_unix=True)
    try:
        return float(text)
    except ValueError:
        return text
