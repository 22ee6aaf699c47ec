"""`baton triggers`: manage trigger records as `temporal schedule` and `kubectl` do.

    baton triggers add --name N (--cron EXPR | --at TIME | --chat OBJECTID) --program REF …
    baton triggers list | show ID | edit ID [--name|--cron|--at|--chat|--program|--timeout …]
    baton triggers pause ID [--until T] | resume ID | float ID | rm ID | run ID
    baton triggers repin ID PEER [--force] | backfill ID --from T1 --to T2 [--dry-run]

Owns the verbs: flags checked before anything is sent (`trigger_flags`, with the limits and
the policies), `edit` a compare-and-set on the rev it read, `--note` on the verbs that change
a record (`add` too), `run` asked of the device that runs it (`trigger_run`); details in
docs/architecture.md and docs/cli.md. A shell: parse, call, print.
"""

from __future__ import annotations

import argparse
import json

from core.clock import SystemClock, iso
from runtime.cli import apply as declared
from runtime.cli import trigger_flags as flags
from runtime.cli import trigger_run, watch
from runtime.cli import trigger_views as views
from runtime.cli.common import Record, Target, add_space_options
from runtime.cli.main import UsageError
from runtime.cli.next import instant
from runtime.cli.talk import Failure, emit, read, talk, warn
from runtime.cli.trigger_names import resolve
from runtime.client.api import ApiError, SpaceClient
from space.backfills import BackfillOut
from space.chats import ChatList
from triggers.records import RESERVED_CHAT_WATCH


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("triggers", help="add, list, show, edit, pause, run triggers")
    sub = p.add_subparsers(dest="triggers_command", required=True, parser_class=type(p))
    flags.add_parser(sub).set_defaults(func=cmd_add)
    flags.edit_parser(sub).set_defaults(func=cmd_edit)
    declared.register(sub)  # get, apply
    for name, func, text in VERBS:
        verb = sub.add_parser(name, help=text)
        if name != "list":
            verb.add_argument("id", metavar="ID")
        else:
            watch.add_option(verb)
        verb.set_defaults(func=func)
    repin = sub.add_parser("repin", help="pin a trigger to one device")
    repin.add_argument("id", metavar="ID")
    repin.add_argument("peer", metavar="PEER")
    repin.add_argument("--force", action="store_true", help="even to a peer never seen")
    repin.set_defaults(func=cmd_repin)
    sub.choices["pause"].add_argument(
        "--until", metavar="TIME", help="a snooze: it resumes by itself then"
    )
    _backfill_parser(sub)
    trigger_run.add_flags(sub.choices["run"])
    for name, parser in sub.choices.items():
        add_space_options(parser)
        if name in NOTED:
            parser.add_argument("--note", metavar="TEXT", help="why (kept in its history)")


def _backfill_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    fill = sub.add_parser("backfill", help="run the slots of a range that never fired")
    fill.add_argument("id", metavar="ID")
    fill.add_argument("--from", dest="start", required=True, metavar="T1", help="RFC 3339")
    fill.add_argument("--to", dest="end", required=True, metavar="T2", help="RFC 3339")
    fill.add_argument("--dry-run", action="store_true", help="list the slots, run nothing")
    fill.set_defaults(func=cmd_backfill)


# --- commands: parse, call one function --------------------------------------------------


def cmd_add(args: argparse.Namespace) -> int:
    body = flags.record_of(args)
    return talk(args, lambda c, w: add(c, w, body, args))


def cmd_list(args: argparse.Namespace) -> int:
    title = "baton triggers list"
    return talk(args, lambda c, w: watch.show(lambda: list_text(c, w, args.json), args, w, title))


def cmd_show(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: show(c, w, args.id, args.json))


def cmd_edit(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: edit(c, w, args, args.json))


def cmd_pause(args: argparse.Namespace) -> int:
    if args.until is None:
        patch: Record = {"enabled": False}
        done = "paused"
    else:  # a snooze: enabled stays, nothing before `until` fires
        until = iso(instant("--until", args.until))
        patch, done = {"pausedUntil": until}, f"snoozed until {until}:"
    return talk(args, lambda c, w: change(c, w, args, patch, done))


def cmd_resume(args: argparse.Namespace) -> int:
    patch = {"enabled": True, "pausedUntil": None}  # a snooze ends now too
    return talk(args, lambda c, w: change(c, w, args, patch, "resumed"))


def cmd_backfill(args: argparse.Namespace) -> int:
    body = {
        "from": iso(instant("--from", args.start)),
        "to": iso(instant("--to", args.end)),
        "dryRun": args.dry_run,
    }
    return talk(args, lambda c, w: backfill(c, w, args.id, body, args.json))


def cmd_float(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: change(c, w, args, {"owner": ""}, "floating"))


def cmd_repin(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: repin(c, w, args))


def cmd_rm(args: argparse.Namespace) -> int:
    return talk(args, lambda c, w: remove(c, w, args.id, args.json, args.note or ""))


NOTED = (
    "add",
    "edit",
    "pause",
    "resume",
    "float",
    "repin",
    "rm",
    "apply",
)  # verbs that change a record (`run` takes its own, trigger_run)
VERBS = (
    ("list", cmd_list, "the space's triggers"),
    ("show", cmd_show, "a record, its next 10 fires and last 10 runs"),
    ("pause", cmd_pause, "stop it firing (what passes meanwhile never fires)"),
    ("resume", cmd_resume, "let it fire again, from now on"),
    ("float", cmd_float, "unpin: the active device runs it"),
    ("run", trigger_run.cmd_run, "its device runs it now (a claimed manual: fire); prints the run"),
    ("rm", cmd_rm, "delete it"),
)


# --- the conversations -----------------------------------------------------------------------


async def add(client: SpaceClient, where: Target, body: Record, args: argparse.Namespace) -> int:
    if body["owner"]:
        await require_seen(client, where, body["owner"], args.force, flag="--pin")
    if body["kind"] == "event":
        await require_chat(client, where, body["spec"]["objectId"])
    created = await client.trigger_create(where.space, body, note=args.note or "")
    await warn_unpublished(client, where, body["program"])
    _done(created, f"created {created['id']} ({created['name']})", args.json)
    return 0


async def list_text(client: SpaceClient, where: Target, as_json: bool) -> str:
    found = (await client.triggers(where.space))["triggers"]
    if as_json:
        return json.dumps({"triggers": found})
    if not found:
        return f"no triggers in space {where.space}"
    return "\n".join(views.list_rows(found, SystemClock().wall()))


async def show(client: SpaceClient, where: Target, tid: str, as_json: bool) -> int:
    tid = await resolve(client, where, tid)
    record = await client.trigger_get(where.space, tid)
    runs = (await client.runs(where.space, trigger=tid, limit=views.NEXT_FIRES))["runs"]
    fires = views.next_fires(record, SystemClock().wall())
    try:  # the verdict of its last due slot (a space without `why` answers none)
        why = await client.trigger_why(where.space, tid)
    except ApiError:
        why = None
    if as_json:
        emit({"record": record, "next": fires, "runs": runs, "why": why})
    else:
        print(views.show_text(record, fires, views.runs_of(runs), views.why_of(why)))
    return 0


async def edit(client: SpaceClient, where: Target, args: argparse.Namespace, as_json: bool) -> int:
    args.id = await resolve(client, where, args.id)
    current = await client.trigger_get(where.space, args.id)
    if current.get("undecodable"):
        raise Failure("undecodable_record", f"trigger {args.id} does not decode; delete it")
    patch = flags.patch_of(args, current)
    if args.chat is not None and "spec" in patch:
        await require_chat(client, where, args.chat)
    if not patch:
        _done(current, f"{args.id} already says so: nothing changed", as_json)
        return 0
    changed = await client.trigger_patch(
        where.space, args.id, patch, rev=current["rev"], note=args.note or ""
    )
    if "program" in patch:
        await warn_unpublished(client, where, patch["program"])
    _done(changed, f"edited {args.id}: {', '.join(sorted(patch))}", as_json)
    return 0


async def change(
    client: SpaceClient, where: Target, args: argparse.Namespace, patch: Record, done: str
) -> int:
    tid = args.id = await resolve(client, where, args.id)
    changed = await client.trigger_patch(where.space, tid, patch, note=args.note or "")
    _done(changed, f"{done} {tid} ({changed.get('name', '')})", args.json)
    return 0


async def backfill(
    client: SpaceClient, where: Target, tid: str, body: Record, as_json: bool
) -> int:
    tid = await resolve(client, where, tid)
    answer = await client.trigger_backfill(where.space, tid, body)
    if as_json:
        emit(answer)
        return 0
    planned = read(answer, BackfillOut, "trigger_backfill")
    verb = "would run" if body["dryRun"] else "runs"
    print(f"{tid} {verb} {len(planned.keys)} slot(s); {planned.skipped} already fired")
    print("\n".join(f"  {k}" for k in planned.keys))
    return 0


async def repin(client: SpaceClient, where: Target, args: argparse.Namespace) -> int:
    peer = args.peer
    args.id = await resolve(client, where, args.id)  # an unknown one: exit 1 before the peer check
    await require_seen(client, where, peer, args.force, flag="PEER")
    return await change(client, where, args, {"owner": peer}, f"pinned to {peer}:")


async def remove(
    client: SpaceClient, where: Target, tid: str, as_json: bool, note: str = ""
) -> int:
    if tid != RESERVED_CHAT_WATCH:  # seeded by a device: the space may not have it yet
        tid = await resolve(client, where, tid)
    if tid == RESERVED_CHAT_WATCH:
        raise UsageError(
            f"ID: {tid} is the chat responder, seeded again as soon as it is deleted; "
            f"`baton triggers pause {tid}` stops the agent answering"
        )
    gone = await client.trigger_delete(where.space, tid, note=note)
    _done(gone, f"deleted {tid}", as_json)
    return 0


# --- checks ----------------------------------------------------------------------------------


async def require_seen(
    client: SpaceClient, where: Target, peer: str, force: bool, *, flag: str
) -> None:
    """A peer the space has never seen is refused (exit 2) unless `force`; one that is
    offline is a warning (nothing runs the trigger until it is back)."""
    devices = (await client.devices(where.space)).devices
    found = next((d for d in devices if d.peer == peer), None)
    if found is None and not force:
        seen = ", ".join(d.peer for d in devices) or "none yet"
        raise UsageError(
            f"{flag}: space {where.space} has never seen device {peer!r} "
            f"(seen: {seen}); --force pins it anyway"
        )
    if found is not None and not found.live:
        warn(
            f"device {peer!r} is offline (last seen {iso(found.lastSeen)}): "
            "nothing runs this trigger until it is back"
        )


async def warn_unpublished(client: SpaceClient, where: Target, ref: str) -> None:
    """A program not published yet is allowed (each due fire is skipped until it is): said."""
    published = {p.ref for p in (await client.programs(where.space)).programs}
    if ref not in published:
        warn(
            f"program {ref} is not published in space {where.space}: each due fire is "
            f"skipped (unknown_program) until `baton programs publish` puts it there"
        )


async def require_chat(client: SpaceClient, where: Target, object_id: str) -> None:
    chats = [c.objectId for c in read(await client.chats(where.space), ChatList, "chats").chats]
    if object_id not in chats:
        raise UsageError(f"--chat: space {where.space} has no chat {object_id!r}")


def _done(record: Record, text: str, as_json: bool) -> None:
    if as_json:
        emit(record)
    else:
        print(text)
