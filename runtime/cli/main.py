"""The `baton` command: a thin shell over the verbs, one module each in `runtime/cli/`.

Each subcommand module has `register(subparsers)`, which adds its parser and sets
`func(args) -> int`. Exit codes: 0 success, 1 the thing asked for failed,
2 bad input (one line on stderr naming the field; with `--json` a JSON error
object `{"error": "bad_input", "detail": …}`). Failures of the space are reported
by `runtime.cli.talk`. `baton --version` prints the installed version.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn, TypeVar

COMMANDS = (
    "next",
    "space",
    "programs",
    "triggers",
    "why",
    "runs",
    "turns",
    "chat",
    "devices",
    "up",
    "status",
    "completion",
)
MODULE_OF = {"device": "up"}  # subcommands registered by a module of another name


class UsageError(ValueError):
    """Bad input on the command line; the message names the field."""


T = TypeVar("T")


def flag_value(flag: str, parse: Callable[[str], T], text: str) -> T:
    """`parse(text)`; the ValueError it raises becomes a UsageError naming `flag`."""
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        raise UsageError(self._said(message))

    def _said(self, message: str) -> str:
        """argparse's words about a missing or unknown command in ours, never its `dest`:
        `baton triggers: unknown verb 'bogus': one of add, edit, list …`."""
        verbs = next(
            (list(a.choices) for a in self._actions if isinstance(a, argparse._SubParsersAction)),
            [],
        )
        where = self.prog.removeprefix("baton").strip()
        word, head = ("verb", f"{where}: ") if where else ("command", "")
        listed = ", ".join(verbs)
        if (found := _INVALID.search(message)) is not None and verbs:
            return f"{head}unknown {word} {found.group(1)!r}: one of {listed}"
        if _REQUIRED.search(message) is not None and verbs:
            return f"{head}a {word} is needed: one of {listed} (--help says more)"
        return message


_INVALID = re.compile(r"^argument \w*command: invalid choice: '(.*)' \(choose from")
_REQUIRED = re.compile(r"^the following arguments are required: \w*command$")


def build_parser(argv: Sequence[str] = ()) -> argparse.ArgumentParser:
    """The parser; given the arguments, only the module of the subcommand they name is
    imported (`baton device` needs neither the space's store nor the other verbs)."""
    parser = _Parser(prog="baton", description="baton: the agent's event-trigger runtime")
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    named = MODULE_OF.get(argv[0], argv[0]) if argv else None
    for name in (named,) if named in COMMANDS else COMMANDS:
        importlib.import_module(f"runtime.cli.{name}").register(sub)
    return parser


class _Version(argparse.Action):
    """`--version`, the installed version looked up only when asked."""

    def __call__(self, parser: argparse.ArgumentParser, *_: object) -> None:
        print(f"baton {version()}")
        parser.exit()


def version() -> str:
    from importlib import metadata  # ≈ 30 ms to import: not on every start

    try:
        return metadata.version("baton")
    except metadata.PackageNotFoundError:  # run from a checkout that was never installed
        return "unknown"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    try:
        args = build_parser(argv).parse_args(argv)
        return int(args.func(args))
    except UsageError as exc:
        if "--json" in argv:
            print(json.dumps({"error": "bad_input", "detail": str(exc)}), file=sys.stderr)
        else:
            print(f"baton: {exc}", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help and --version
        return exc.code if isinstance(exc.code, int) else 0
    except KeyboardInterrupt:
        return 130
