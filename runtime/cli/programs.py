"""`baton programs`: publish, list, show and run the space's programs.

    baton programs publish triage.py --as triage@v1
    baton programs list [--json]
    baton programs show triage@v1 [--json]
    baton programs run triage@v1 --args '{"space": "home"}' [--timeout S] [--memory-mb M]

Owns the verbs: `publish` checks the source locally first (`programs.source`); `run` is a
manual run (runtime.fire.manual), recorded under `manual:<name@vN>`; exits 0 ok, 1 not,
2 bad input (docs/architecture.md, "Module notes"). A shell: parse, call, print.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TypeVar

from core.answers import RunOut
from core.jsonobject import json_object
from core.vocab import RunStatus
from core.wire import ProgramOut
from programs.refs import ProgramRef, parse_published
from programs.source import InvalidProgram, inspect_source
from runtime.cli.common import Target, add_space_options
from runtime.cli.main import UsageError, flag_value
from runtime.cli.table import align
from runtime.cli.talk import read, talk
from runtime.client.api import ApiError, SpaceClient
from runtime.fire.manual import Manual, run_by_hand
from runtime.fire.secrets import Args

MANUAL_PREFIX = "manual:"
N = TypeVar("N", int, float)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("programs", help="publish, list, show and run programs")
    sub = p.add_subparsers(dest="programs_command", required=True, parser_class=type(p))
    listing = sub.add_parser("list", help="the programs published to the space")
    publish = sub.add_parser("publish", help="check a program file and publish it as name@vN")
    publish.add_argument("file", metavar="FILE", type=Path, help="the program's Python source")
    publish.add_argument("--as", dest="ref", required=True, metavar="name@vN", help="its ref")
    show = sub.add_parser("show", help="a program's metadata and source")
    show.add_argument("ref", metavar="name@vN")
    run = sub.add_parser("run", help="run a program once by hand; recorded as a run")
    run.add_argument("ref", metavar="name@vN")
    run.add_argument("--args", default="{}", metavar="JSON", help="main's args (a JSON object)")
    run.add_argument("--timeout", default="60", metavar="S", help="seconds (default 60)")
    run.add_argument("--memory-mb", default="512", metavar="M", help="memory cap (default 512)")
    for parser, func in (
        (publish, cmd_publish),
        (listing, cmd_list),
        (show, cmd_show),
        (run, cmd_run),
    ):
        add_space_options(parser)
        parser.set_defaults(func=func)


# --- commands ----------------------------------------------------------------------------


def cmd_publish(args: argparse.Namespace) -> int:
    ref = parse_ref_flag("--as", args.ref)
    source = read_program(args.file)
    return talk(args, lambda client, where: publish(client, where, ref, source, args.json))


def cmd_list(args: argparse.Namespace) -> int:
    return talk(args, lambda client, where: list_programs(client, where, args.json))


def cmd_show(args: argparse.Namespace) -> int:
    ref = parse_ref_flag("name@vN", args.ref)
    return talk(args, lambda client, where: show(client, where, ref, args.json))


def cmd_run(args: argparse.Namespace) -> int:
    ref = parse_ref_flag("name@vN", args.ref)
    limits = RunLimits(
        parse_object("--args", args.args),
        parse_positive("--timeout", args.timeout, float),
        parse_positive("--memory-mb", args.memory_mb, int),
    )
    return talk(args, lambda client, where: run_manual(client, where, ref, limits, args.json))


# --- parsing -----------------------------------------------------------------------------


class RunLimits:
    def __init__(self, args: Args, timeout: float, memory_mb: int) -> None:
        self.args, self.timeout, self.memory_mb = args, timeout, memory_mb


def parse_ref_flag(flag: str, text: str) -> ProgramRef:
    return flag_value(flag, parse_published, text)


def read_program(path: Path) -> str:
    try:
        source = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"FILE: cannot read {path}: {getattr(exc, 'strerror', exc)}") from None
    try:
        inspect_source(source, filename=str(path))
    except InvalidProgram as exc:
        raise UsageError(f"FILE: {path}: {exc}") from None
    return source


def parse_object(flag: str, text: str) -> Args:
    return flag_value(flag, json_object, text)


def parse_positive(flag: str, text: str, kind: type[N]) -> N:
    try:
        value = kind(text)
    except ValueError:
        raise UsageError(f"{flag}: {text!r} is not a number") from None
    if not value > 0 or value != value:
        raise UsageError(f"{flag}: must be > 0, got {text}")
    return value


# --- publish, list, show -------------------------------------------------------------------


async def publish(
    client: SpaceClient, where: Target, ref: ProgramRef, source: str, as_json: bool
) -> int:
    before = await published(client, where, ref)
    try:
        answer = await client.program_put(where.space, str(ref), {"source": source})
    except ApiError as exc:
        if exc.code != "program_exists":
            raise
        print(
            f"baton: {ref} is published with other source; publish it as a new version "
            f"(e.g. {ref.name}@v{(ref.version or 0) + 1})",
            file=sys.stderr,
        )
        return 1
    if as_json:
        print(json.dumps({**answer, "unchanged": before is not None}))
    elif before is not None:
        print(f"{ref} is already published with this source: nothing to do")
    else:
        sha = read(answer, ProgramOut, "program_put").sha256
        print(f"published {ref} (sha256 {sha[:12]}, space {where.space})")
    return 0


async def published(client: SpaceClient, where: Target, ref: ProgramRef) -> ProgramOut | None:
    try:
        return await client.program_get(where.space, str(ref))
    except ApiError as exc:
        if exc.status == 404:
            return None
        raise


async def list_programs(client: SpaceClient, where: Target, as_json: bool) -> int:
    found = (await client.call("programs", space=where.space))["programs"]  # printed as answered
    if as_json:
        print(json.dumps({"programs": found}))
    elif not found:
        print(f"no programs in space {where.space}")
    else:
        rows: list[tuple[object, ...]] = [("REF", "ANY TOOL", "SHA256", "PUBLISHED")]
        rows += [
            (p.ref, "yes" if p.anyTool else "no", p.sha256[:12], p.createdAt)
            for p in read(found, list[ProgramOut], "programs")
        ]
        print(table(rows))
    return 0


async def show(client: SpaceClient, where: Target, ref: ProgramRef, as_json: bool) -> int:
    found = await client.call("program_get", space=where.space, ref=str(ref))  # as answered
    if as_json:
        print(json.dumps(found))
        return 0
    program = read(found, ProgramOut, "program_get")
    rows = [
        ("ref", program.ref),
        ("space", where.space),
        ("sha256", program.sha256),
        ("any tool", "yes" if program.anyTool else "no"),
        ("published", program.createdAt),
    ]
    print(table(rows))
    print()
    source = program.source or ""
    print(source, end="" if source.endswith("\n") else "\n")
    return 0


# --- run -----------------------------------------------------------------------------------


async def run_manual(
    client: SpaceClient, where: Target, ref: ProgramRef, limits: RunLimits, as_json: bool
) -> int:
    manual = Manual(
        trigger_id=MANUAL_PREFIX + str(ref),
        program=str(ref),
        args=limits.args,
        timeout_seconds=limits.timeout,
        memory_mb=limits.memory_mb,
    )
    stored, outcome = await run_by_hand(client, where.space, where.url, manual)
    if as_json:
        print(json.dumps(stored))
    else:
        print(render_run(read(stored, RunOut, "run_create"), outcome.stdout_tail))
    return 0 if outcome.status is RunStatus.OK else 1


def render_run(record: RunOut, stdout: str) -> str:
    rows = [
        ("run", record.run_id),
        ("program", record.program),
        ("trigger", record.trigger_id),
        ("status", record.status),
        ("reason", record.reason),
        ("duration", f"{record.duration_ms or 0:g} ms"),
        ("result", json.dumps(record.result)),
    ]
    out = [table([r for r in rows if r[1] != ""])]
    for name, text in (
        ("error", record.error),
        ("stderr", record.stderr_tail),
        ("stdout", stdout),
    ):
        if text:
            out.append(f"{name}:\n" + "\n".join("  " + line for line in text.rstrip().splitlines()))
    return "\n".join(out)


def table(rows: Sequence[tuple[object, ...]]) -> str:
    """Rows as aligned columns."""
    return "\n".join(align(rows))
