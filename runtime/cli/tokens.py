"""`baton space token list|revoke|rotate-admin`: the space's credentials, managed by the admin.

    baton space token list [--all] [--url U] [--token-file F] [--data DIR] [--json]
    baton space token revoke ID [--url U] [--token-file F] [--data DIR] [--json]
    baton space token rotate-admin [--url U] [--token-file F] [--data DIR] [--json]

Owns the verbs: `list` shows live tokens without their secrets (`--all`: revoked and
expired too), `revoke` ends one at once, `rotate-admin` mints a new admin token and revokes
every other. A shell over the `/v1/tokens` routes: must not touch the store itself.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any

from core.wire import TokenOut
from runtime.cli.common import add_space_options, target, token_file
from runtime.cli.table import render
from runtime.cli.talk import read
from runtime.client.api import ApiError, SpaceClient
from space.token_store import write_private
from space.tokens import TokenInfo

COLUMNS = ("id", "role", "peer", "space", "createdAt", "expiresAt", "lastUsedAt", "state")
HEADERS = ("id", "role", "peer", "space", "created", "expires", "last used", "state")


def register(token: argparse.ArgumentParser, parser_class: type[argparse.ArgumentParser]) -> None:
    """Add `list`, `revoke` and `rotate-admin` under `baton space token`."""
    sub = token.add_subparsers(dest="token_command", parser_class=parser_class)
    listing = sub.add_parser("list", help="tokens without their secrets")
    listing.add_argument("--all", action="store_true", help="revoked and expired ones too")
    listing.set_defaults(func=run_list)
    revoke = sub.add_parser("revoke", help="end a token at once")
    revoke.add_argument("id", help="the token's id, as `list` shows it")
    revoke.set_defaults(func=run_revoke)
    rotate = sub.add_parser("rotate-admin", help="a new admin token; the old ones stop working")
    rotate.set_defaults(func=run_rotate)
    for parser in (listing, revoke, rotate):
        add_space_options(parser)


def run_list(args: argparse.Namespace) -> int:
    async def work(client: SpaceClient) -> Any:
        return (await client.tokens(all=True if args.all else None))["tokens"]

    return _talk(args, work, human=_table)


def run_revoke(args: argparse.Namespace) -> int:
    async def work(client: SpaceClient) -> Any:
        return await client.token_revoke(args.id)

    return _talk(args, work, human=_revoked)


def run_rotate(args: argparse.Namespace) -> int:
    path = token_file(args)

    async def work(client: SpaceClient) -> Any:
        rotated = read(await client.token_rotate_admin(), TokenOut, "token_rotate_admin")
        write_private(path, rotated.token + "\n")  # the server rewrote its own file
        return {"id": rotated.id, "file": str(path)}

    return _talk(args, work, human=lambda r: f"new admin token {r['id']} written to {r['file']}")


def _talk(
    args: argparse.Namespace,
    work: Callable[[SpaceClient], Awaitable[Any]],
    human: Callable[[Any], str],
) -> int:
    where = target(args)

    async def go() -> Any:
        async with SpaceClient(where.url, where.token) as client:
            return await work(client)

    try:
        found = asyncio.run(go())
    except ApiError as exc:
        error = {"error": exc.code, "detail": exc.detail}
        print(
            json.dumps(error) if args.json else f"baton: {exc.code}: {exc.detail or exc}",
            file=sys.stderr,
        )
        return 2 if exc.status in (400, 404, 413, 422) else 1
    print(json.dumps(found) if args.json else human(found))
    return 0


def _revoked(sent: Any) -> str:
    t = read(sent, TokenInfo, "token_revoke")
    return f"revoked {t.id} ({t.role} {t.peer or ''})"


def _table(sent: Any) -> str:
    """The tokens as listed (`sent`: as the space sent them, what `--json` prints)."""
    tokens = read(sent, list[TokenInfo], "tokens")
    rows = [[_cell(getattr(t, c)) for c in COLUMNS] for t in tokens]
    return "\n".join(render(HEADERS, rows))


def _cell(value: str | None) -> str:
    return "-" if value is None else value
