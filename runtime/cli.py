"""The `baton` command: a thin shell over the subcommands in `runtime.commands`.

Each subcommand module has `register(subparsers)`, which adds its parser and sets
`func(args) -> int`. Exit codes: 0 success, 1 the thing asked for failed,
2 bad input (one line on stderr naming the field).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

COMMANDS = ("next", "space", "programs", "up", "status")


class UsageError(ValueError):
    """Bad input on the command line; the message names the field."""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="baton", description="baton: the agent's event-trigger runtime")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"runtime.commands.{name}").register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        return int(args.func(args))
    except UsageError as exc:
        print(f"baton: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # `python -m runtime.cli`: the commands raise runtime.cli's errors
    from runtime.cli import main as _main

    sys.exit(_main())
