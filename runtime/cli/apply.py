"""`baton triggers get [ID] [-o json]` and `apply -f FILE [--dry-run]`: schedules as a file.

`get` prints what a user may write of a record (`record_plan.writable`, as the API gives it:
defaults filled in), indented for a file; without ID, a list of every record (an
undecodable one is left out, said on stderr). `apply` reads FILE (`-` is stdin: one record
or a list, JSON), plans by name (`record_plan`), checks every record before anything is
sent, then creates and edits (compare-and-set on the rev it read) in the file's order and
prints each step's diff (`field: old → new`); `--dry-run` prints it and sends nothing.
Owns reading the file and the conversation; the plan is `record_plan`'s.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import msgspec

from runtime.cli.common import Record, Target
from runtime.cli.main import UsageError
from runtime.cli.record_plan import PlanStep, plan, shown, writable
from runtime.cli.talk import BAD_INPUT, Failure, emit, talk, warn
from runtime.cli.trigger_names import resolve
from runtime.client.api import ApiError, SpaceClient

VERB = {"create": "created", "edit": "edited", "unchanged": "unchanged"}
WOULD = {"create": "would create", "edit": "would edit", "unchanged": "unchanged"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    get = sub.add_parser("get", help="a record's writable fields as JSON, or all (for apply)")
    get.add_argument("id", metavar="TRIGGER", nargs="?", help="id or name (default: all)")
    get.add_argument("-o", "--output", choices=("json",), default="json", help="format: json")
    get.set_defaults(func=cmd_get)
    apply = sub.add_parser("apply", help="create or edit triggers by name from a file")
    apply.add_argument("-f", "--file", required=True, metavar="FILE", help="JSON; - is stdin")
    apply.add_argument("--dry-run", action="store_true", help="print the diff, change nothing")
    apply.set_defaults(func=cmd_apply)


def cmd_get(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: get(c, w, args.id))


def cmd_apply(args: argparse.Namespace) -> int:
    given = read(args.file)
    return talk(args, lambda c, w: apply(c, w, args, given))


async def get(client: SpaceClient, where: Target, ref: str | None) -> int:
    if ref is not None:
        tid = await resolve(client, where, ref)
        record = await client.trigger_get(where.space, tid)
        if record.get("undecodable"):
            raise Failure("undecodable_record", f"trigger {tid} does not decode; delete it")
        print(json.dumps(writable(record), indent=2))
        return 0
    found = []
    for record in (await client.triggers(where.space))["triggers"]:
        if record.get("undecodable"):
            warn(f"trigger {record.get('id')} does not decode: left out")
        else:
            found.append(writable(record))
    print(json.dumps(found, indent=2))
    return 0


def read(source: str) -> list[Record]:
    """The records of FILE: one object or a list of them, each with a unique `name`."""
    try:
        text = sys.stdin.read() if source == "-" else Path(source).read_text()
    except OSError as exc:
        raise UsageError(f"-f: cannot read {source}: {exc.strerror}") from None
    try:
        found = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise UsageError(f"{source}: not JSON: {exc}") from None
    docs = [found] if isinstance(found, dict) else found
    if not isinstance(docs, list):
        raise UsageError(f"{source}: holds {type(found).__name__}, not a record or a list")
    seen: dict[str, int] = {}
    for index, doc in enumerate(docs):
        if not isinstance(doc, dict):
            raise UsageError(f"{source}: [{index}]: a record is a JSON object")
        name = doc.get("name")
        if not isinstance(name, str) or not name.strip():
            raise UsageError(
                f"{source}: [{index}]: `name` is required (apply goes by it) - at `$.name`"
            )
        if name in seen:
            raise UsageError(f"{source}: [{index}] {name!r}: the name of [{seen[name]}] too")
        seen[name] = index
    return docs


async def apply(
    client: SpaceClient, where: Target, args: argparse.Namespace, given: list[Record]
) -> int:
    steps = plan(args.file, given, (await client.triggers(where.space))["triggers"])
    await _warn(client, where, [s for s in steps if s.action != "unchanged"])
    done: list[PlanStep] = []
    for step in steps:  # each said once sent: a refusal midway leaves the ones above applied
        done.append(step if args.dry_run else await _send(client, where, args, step))
        if not args.json:
            print("\n".join(_lines(done[-1], WOULD if args.dry_run else VERB)), flush=True)
    if args.json:
        emit({"file": args.file, "dryRun": args.dry_run, "triggers": msgspec.to_builtins(done)})
    else:
        print(_summary(args.file, done, args.dry_run))
    return 0


async def _send(
    client: SpaceClient, where: Target, args: argparse.Namespace, step: PlanStep
) -> PlanStep:
    note = args.note or ""
    try:
        if step.action == "create":
            made = await client.trigger_create(where.space, step.body, note=note)
            return msgspec.structs.replace(step, id=made["id"], rev=made["rev"])
        if step.action == "edit":
            made = await client.trigger_patch(
                where.space, step.id, step.body, rev=step.rev, note=note
            )
            return msgspec.structs.replace(step, rev=made["rev"])
    except ApiError as exc:
        at = f"{args.file}: [{step.index}] {step.name!r}"
        if exc.status in BAD_INPUT:
            raise Failure(exc.code, f"{at}: {exc.detail}", 2) from None
        if exc.status == 409:
            raise Failure(exc.code, f"{at}: {exc.detail}; run apply again") from None
        raise
    return step


async def _warn(client: SpaceClient, where: Target, steps: list[PlanStep]) -> None:
    """A program not published, a pin to a device never seen: allowed, said (as `add` does)."""
    programs = {str(s.body["program"]) for s in steps if "program" in s.body}
    owners = {str(s.body["owner"]) for s in steps if s.body.get("owner")}
    if programs:
        published = {p.ref for p in (await client.programs(where.space)).programs}
        for ref in sorted(programs - published):
            warn(f"program {ref} is not published in space {where.space}: its fires are skipped")
    if owners:
        seen = {d.peer for d in (await client.devices(where.space)).devices}
        for peer in sorted(owners - seen):
            warn(f"space {where.space} has never seen device {peer!r}: nothing runs its pins yet")


def _lines(step: PlanStep, words: dict[str, str]) -> list[str]:
    label = f"{step.name} ({step.id})" if step.id else step.name
    changes = [] if step.action == "unchanged" else step.changes
    return [f"{label}: {words[step.action]}"] + [
        f"  {c.field}: {shown(c.old)} → {shown(c.new)}" for c in changes
    ]


def _summary(source: str, steps: list[PlanStep], dry_run: bool) -> str:
    count = {a: sum(s.action == a for s in steps) for a in VERB}
    if not count["create"] and not count["edit"]:
        return f"{source}: nothing to change ({count['unchanged']} as the file says)"
    if dry_run:
        return (
            f"{source}: dry run, nothing changed: {count['create']} to create, "
            f"{count['edit']} to edit, {count['unchanged']} unchanged"
        )
    return (
        f"applied {source}: {count['create']} created, {count['edit']} edited, "
        f"{count['unchanged']} unchanged"
    )
