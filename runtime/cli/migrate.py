"""`baton space migrate --from FILE.db --to postgresql://… [--merge]`: SQLite to PostgreSQL.

Owns the verb's flags and its one line of outcome; the copy is `space.migrate`'s (one
PostgreSQL transaction, the file opened read-only). A refusal is exit 2 naming the flag.
"""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

from runtime.cli.main import UsageError
from space.migrate import Refused, migrate


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("migrate", help="copy a space's SQLite file into PostgreSQL")
    p.add_argument(
        "--from",
        dest="source",
        type=Path,
        required=True,
        metavar="FILE",
        help="the SQLite file (read only; stop its server first)",
    )
    p.add_argument(
        "--to",
        dest="target",
        required=True,
        metavar="URL",
        help="postgresql://… (an empty database, unless --merge)",
    )
    p.add_argument(
        "--merge",
        action="store_true",
        help="add to a database that has rows (refused for a space with history in both)",
    )
    p.set_defaults(func=run_migrate)


def run_migrate(args: argparse.Namespace) -> int:
    if not str(args.target).startswith(("postgresql://", "postgres://")):
        raise UsageError(f"--to: {args.target!r} is not a postgresql:// URL")
    try:
        copied = asyncio.run(migrate(args.source, args.target, args.merge))
    except Refused as exc:
        raise UsageError(str(exc)) from None
    spaces, rows = copied["spaces"], sum(copied.values())
    print(
        f"baton space migrate: {spaces} spaces, {rows} rows of {len(copied)} tables "
        f"copied from {args.source}"
        + ("" if not args.merge else " (rows whose keys were there already left as they were)")
    )
    return 0
