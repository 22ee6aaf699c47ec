"""`baton space`: run the embedded space server, mint device tokens.

    baton space serve --db PATH|postgresql://… [--host H] [--port P] [--lease-seconds S] …
    baton space migrate --from FILE.db --to postgresql://… [--merge]   (runtime.cli.migrate)
    baton space token --peer NAME [--space ID] [--url U | --db PATH|URL] [--out FILE]
    baton space token list|revoke ID|rotate-admin   (runtime.cli.tokens)
    baton space create ID [--name N] | list   (over the API: --url, --token-file, --json)

Owns the verbs' flags and defaults (`$BATON_DB`, `$BATON_SPACE`, the data directory; files
0600 in a 0700 directory); `token` mints over the API of the space the user named (`--url`,
`$BATON_URL`, else the local `baton up`) unless `--db` names a store. A shell over `space`.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import sys
from pathlib import Path

from aiohttp import web

from core.wire import Space, TokenOut
from runtime.cli import migrate, tokens
from runtime.cli.common import (
    DEFAULT_PORT,
    DEFAULT_SPACE,
    SPACE_DB,
    Target,
    add_data_option,
    add_history_option,
    add_space_options,
    data_dir,
    local_settings,
    port,
    seconds,
    target,
    until_signalled,
)
from runtime.cli.main import UsageError
from runtime.cli.table import render
from runtime.cli.talk import emit, read, talk
from runtime.client.api import ApiError, SpaceClient
from space import pghealth, spaces, token_store
from space.app import ADMIN_TOKEN_FILE, create_app, default_admin_token_file
from space.db import open_db
from space.opening import PgOptions
from space.servertime import system_clock
from space.serving import SpaceRunner
from space.store.postgres import PostgresStore

PEER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,199}")


def default_db() -> Path | str:
    env = os.environ.get("BATON_DB")
    if env and _is_url(env):
        return env
    return Path(env or data_dir() / SPACE_DB)


def store_target(text: str) -> Path | str:
    """An argparse type: the space's SQLite file, or a PostgreSQL URL."""
    return text if _is_url(text) else Path(text)


def _is_url(text: str) -> bool:
    return text.startswith(("postgresql://", "postgres://"))


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("space", help="the embedded space server")
    sub = p.add_subparsers(dest="space_command", required=True, parser_class=type(p))
    serve = sub.add_parser("serve", help="run the space server")
    _serve_options(serve)
    serve.set_defaults(func=run_serve)
    migrate.register(sub)
    token = sub.add_parser("token", help="mint a device token (printed once); list, revoke")
    token.add_argument("--peer", default=None, help="the device's peer id (to mint)")
    token.add_argument("--space", default=None, help="the space it is bound to (to mint)")
    token.add_argument(
        "--db",
        type=store_target,
        default=None,
        help="mint in this SQLite file or postgresql:// store (default: over the API)",
    )
    token.add_argument("--out", type=Path, default=None, help="write it to FILE (0600), not stdout")
    token.add_argument("--url", default=None, help="space API (default: the local `baton up`)")
    token.add_argument("--token-file", type=Path, default=None, help="admin token file")
    add_data_option(token)
    token.set_defaults(func=run_token)
    _register_spaces(sub)
    tokens.register(token, type(p))


def _serve_options(serve: argparse.ArgumentParser) -> None:
    serve.add_argument(
        "--db",
        type=store_target,
        default=None,
        help="SQLite file (created if missing) or postgresql:// URL (default $BATON_DB)",
    )
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", type=port, default=DEFAULT_PORT, help="port (0: any free port)")
    serve.add_argument(
        "--admin-token-file",
        type=Path,
        default=None,
        help="admin token file (default admin.token beside the SQLite file, or in the data "
        "directory on PostgreSQL)",
    )
    serve.add_argument(
        "--pg-pool", type=int, default=10, metavar="N", help="PostgreSQL connections (default 10)"
    )
    serve.add_argument(
        "--pg-poll-only",
        action="store_true",
        help="no LISTEN: read the feeds every second (PgBouncer in transaction mode)",
    )
    for flag in ("--lease-seconds", "--live-seconds"):
        serve.add_argument(flag, type=seconds, default=15.0, help="seconds (default 15)")
    add_history_option(serve)


def run_serve(args: argparse.Namespace) -> int:
    app, token_file = build_app(args)
    asyncio.run(serve(app, args.host, args.port, token_file))
    return 0


def build_app(args: argparse.Namespace) -> tuple[web.Application, Path]:
    """The server `serve` runs: on the SQLite file, or on PostgreSQL (opened at startup)."""
    db = args.db or default_db()
    if args.pg_pool < 1:
        raise UsageError(f"--pg-pool: at least 1 connection, not {args.pg_pool}")
    on_pg = isinstance(db, str)
    default_token = data_dir() / ADMIN_TOKEN_FILE if on_pg else default_admin_token_file(db)
    token_file = args.admin_token_file or default_token
    pg = PgOptions(pool_size=args.pg_pool, listen=not args.pg_poll_only)
    try:
        app = create_app(
            db,
            pg=pg,
            admin_token_file=token_file,
            lease_seconds=args.lease_seconds,
            live_seconds=args.live_seconds,
            history_days=args.history_days,
        )
    except token_store.TokenFileError as exc:
        raise UsageError(f"--admin-token-file: {exc}") from None
    return app, token_file


async def serve(app: web.Application, host: str, port: int, token_file: Path) -> None:
    runner = SpaceRunner(app, handle_signals=False)
    try:
        await runner.setup()  # on PostgreSQL: the store opens (and migrates) here
    except token_store.TokenFileError as exc:
        raise UsageError(f"--admin-token-file: {exc}") from None
    except pghealth.LOST as exc:
        raise UsageError(f"--db: the PostgreSQL store cannot be opened: {exc}") from None
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        print(f"baton space: listening on http://{host}:{bound}", flush=True)
        print(f"baton space: admin token in {token_file}", flush=True)
        await until_signalled(asyncio.Event().wait())  # serve until Ctrl-C or SIGTERM
    finally:
        await runner.cleanup()
    print("baton space: stopped", flush=True)


def run_token(args: argparse.Namespace) -> int:
    if args.peer is None:
        raise UsageError("--peer: required to mint a device token (or: list, revoke, rotate-admin)")
    if not PEER.fullmatch(args.peer):
        raise UsageError(f"--peer: {args.peer!r} must be 1-200 of letters, digits, '.', '_', '-'")
    space = _space(args)
    if not spaces.SPACE_ID.fullmatch(space):
        raise UsageError(f"--space: {space!r} must match [a-z0-9][a-z0-9_-]{{0,63}}")
    db_path = args.db or (default_db() if os.environ.get("BATON_DB") else None)
    if db_path is None:  # the space the user named (--url, BATON_URL, the local one)
        where = target(args)
        try:
            token = asyncio.run(_mint_over_api(where, args.peer, space))
        except ApiError as exc:
            print(f"baton: {where.url}: {exc.code}: {exc.detail or exc}", file=sys.stderr)
            return 2 if exc.status in (400, 404) else 1
    elif isinstance(db_path, str):  # a PostgreSQL URL
        token = asyncio.run(_mint_in_postgres(db_path, args.peer, space))
    else:
        token = _mint_in_store(db_path, args.peer, space)
    if args.out is not None:
        token_store.write_private(args.out, token + "\n")
    else:
        sys.stdout.write(token + "\n")
    return 0


def _mint_in_store(path: Path, peer: str, space: str) -> str:
    db = open_db(path)
    try:
        token_store.ensure_schema(db)
        spaces.ensure_schema(db)
        if not spaces.space_exists(db, space):
            raise UsageError(f"--space: no space {space!r} in {path} (create it first)")
        who = token_store.Principal(role=token_store.Role.DEVICE, peer=peer, space=space)
        return token_store.mint_token(db, who, system_clock().timestamp())
    finally:
        db.conn.close()


async def _mint_in_postgres(dsn: str, peer: str, space: str) -> str:
    store = await PostgresStore.open(dsn, max_size=1)
    try:
        if not await store.space_exists(space):
            raise UsageError(
                f"--space: no space {space!r} in the PostgreSQL store (create it first)"
            )
        who = token_store.Principal(role=token_store.Role.DEVICE, peer=peer, space=space)
        return await store.mint_token(who)
    finally:
        await store.close()


async def _mint_over_api(where: Target, peer: str, space: str) -> str:
    async with SpaceClient(where.url, where.token) as client:
        minted = await client.token_device({"peer": peer, "space": space})
    return read(minted, TokenOut, "token_device").token


# --- spaces over the API: create, list -----------------------------------------------------


def _register_spaces(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    create = sub.add_parser("create", help="create a space (with its general chat)")
    create.add_argument("id", metavar="ID", help="[a-z0-9][a-z0-9_-]{0,63}")
    create.add_argument("--name", default=None, metavar="N", help="a name for people")
    create.set_defaults(func=run_create)
    listing = sub.add_parser("list", help="the spaces of the server")
    listing.set_defaults(func=run_list)
    for parser in (create, listing):
        add_space_options(parser)


def run_create(args: argparse.Namespace) -> int:
    if not spaces.SPACE_ID.fullmatch(args.id):
        raise UsageError(f"ID: {args.id!r} must match [a-z0-9][a-z0-9_-]{{0,63}}")
    body = {"id": args.id} | ({"name": args.name} if args.name is not None else {})
    return talk(args, lambda client, where: create_space(client, body, args.json))


def run_list(args: argparse.Namespace) -> int:
    return talk(args, lambda client, where: list_spaces(client, where, args.json))


async def create_space(client: SpaceClient, body: dict[str, str], as_json: bool) -> int:
    created = await client.call("space_create", body)  # printed as the space answers it
    if as_json:
        emit(created)
    else:
        made = read(created, Space, "space_create")
        print("\n".join(render(["id", "general chat"], [[made.id, made.generalChat]])))
    return 0


async def list_spaces(client: SpaceClient, where: Target, as_json: bool) -> int:
    found = (await client.call("spaces"))["spaces"]  # printed as the space answers them
    if as_json:
        emit({"spaces": found})
    elif not found:
        print(f"no spaces on {where.url}")
    else:
        rows = [
            [s.id, s.name, s.generalChat or "-", s.createdAt or ""]
            for s in read(found, list[Space], "spaces")
        ]
        print("\n".join(render(["id", "name", "general chat", "created"], rows)))
    return 0


def _space(args: argparse.Namespace) -> str:
    local = local_settings(data_dir())
    return args.space or os.environ.get("BATON_SPACE") or local.get("space") or DEFAULT_SPACE
