"""`baton up` and `baton device`: run a device, with the embedded space (`up`) or joining one.

    baton up [--data DIR] [--host H] [--port P] [--peer NAME] [--space ID] [--demo] … [RESPONDER]
    baton device --peer NAME [--url U] [--token-file F] [--space ID] [--data DIR] … [RESPONDER]

Owns the flags of a device and its data directory (`space.db`, the tokens, `local.json`),
the dashboard's URL it prints (the admin token only to a terminal; to a pipe, the token
file's path), and a clean stop on Ctrl-C or SIGTERM; RESPONDER is runtime.cli.responder's;
every flag in docs/cli.md. A shell over `runtime.device.Device` and `space.app.create_app`:
must not decide what a device does.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import os
import socket
import sys
from collections.abc import Awaitable
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import quote

from aiohttp import web

from core.clock import SystemClock, iso
from core.peerwire import LeaseIn
from runtime.chat.responders import Responder
from runtime.cli import demo
from runtime.cli import responder as responder_config
from runtime.cli.common import (
    ADMIN_TOKEN_FILE,
    DEFAULT_PORT,
    DEFAULT_SPACE,
    SPACE_DB,
    Target,
    add_data_option,
    add_history_option,
    add_space_options,
    data_dir,
    port,
    read_token,
    seconds,
    target,
    until_signalled,
    write_local_settings,
)
from runtime.cli.main import UsageError
from runtime.client.api import ApiError, SpaceClient
from runtime.device import Device, DeviceSettings
from runtime.election import decision as lease
from runtime.fire.ledger import LEDGER_FILE
from runtime.fire.secrets import default_path as default_secrets
from runtime.supervise import PartFailed
from space.token_store import TokenFileError, token_id, write_private

log = logging.getLogger("baton")


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    up = subparsers.add_parser("up", help="run the space and a device on this machine")
    add_data_option(up)
    up.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    up.add_argument(
        "--port", type=port, default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT})"
    )
    up.add_argument("--space", default=DEFAULT_SPACE, help="space id (created if missing)")
    _device_options(up, peer_required=False)
    add_history_option(up)
    up.add_argument("--demo", action="store_true", help="publish and wire example triggers")
    up.set_defaults(func=run_up)
    device = subparsers.add_parser("device", help="run a device joining an existing space")
    add_space_options(device)
    _device_options(device, peer_required=True)
    device.set_defaults(func=run_device)


def _device_options(parser: argparse.ArgumentParser, *, peer_required: bool) -> None:
    parser.add_argument(
        "--peer",
        required=peer_required,
        default=None,
        help="this device's peer id (default: the host name)",
    )
    parser.add_argument(
        "--priority",
        type=int,
        default=0,
        help="election priority: a higher one takes the lease over (default 0)",
    )
    parser.add_argument("--name", default="", help="a name for people (default: the peer id)")
    parser.add_argument("--workers", type=int, default=None, help="program worker processes")
    parser.add_argument(
        "--lease-seconds",
        type=seconds,
        default=lease.Config().lease_s,
        help="election lease length; the other timings follow it (default 15)",
    )
    parser.add_argument(
        "--health-seconds",
        type=seconds,
        default=30.0,
        help="how often the health pass runs besides after changes (default 30)",
    )
    parser.add_argument(
        "--programs-from",
        choices=("own", "any"),
        default="own",
        help="whose programs this device runs: the admin's and its own (default), or any device's",
    )
    responder_config.add_options(parser)


def _setup_logging() -> None:
    level = os.environ.get("BATON_LOG", "INFO").upper()
    handler = logging.StreamHandler()
    handler.setFormatter(OneFormat("%(asctime)s %(name)s %(levelname)s %(message)s"))
    logging.basicConfig(level=level, handlers=[handler])
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)  # one line per request is noise
    # Refused stream connects are reported once by our own loop, with what it does next.
    logging.getLogger("aiohttp_sse_client").setLevel(logging.CRITICAL)


class OneFormat(logging.Formatter):
    """Log lines stamped with the one instant format (`2026-12-01T09:00:00.000Z`)."""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return iso(datetime.fromtimestamp(record.created, UTC))


def _freeze_imports() -> None:
    """Take what the imports made (modules, classes, functions: ≈ 100,000 objects living as
    long as the process) out of the cycle collector's sight, so a full collection does not
    walk them again each time (≈ 80 ms over a start with 100,000 triggers)."""
    gc.freeze()


def run_up(args: argparse.Namespace) -> int:
    _setup_logging()
    _freeze_imports()
    data = data_dir(args.data)
    data.mkdir(mode=0o700, parents=True, exist_ok=True)  # tokens and the space live here
    responder = _responder(args, data)
    try:
        asyncio.run(_up(args, data, responder))
    except OSError as exc:
        print(f"baton up: cannot listen on {args.host}:{args.port}: {exc.strerror}")
        return 1
    except PartFailed as exc:
        print(f"baton up: {exc}", file=sys.stderr)
        return 1
    except TokenFileError as exc:
        raise UsageError(str(exc)) from None
    return 0


def _responder(args: argparse.Namespace, data: Path) -> Responder:
    """The chat responder the flags, environment or config file choose (exit 2 if bad)."""
    return responder_config.build(responder_config.settings(args, data), SystemClock().wall)


async def _up(args: argparse.Namespace, data: Path, responder: Responder) -> None:
    from space.app import create_app
    from space.serving import SpaceRunner

    admin_file = data / ADMIN_TOKEN_FILE
    runner = SpaceRunner(
        create_app(
            data / SPACE_DB,
            admin_token_file=admin_file,
            lease_seconds=args.lease_seconds,
            live_seconds=args.lease_seconds,
            history_days=args.history_days,
        ),
        handle_signals=False,
    )
    await runner.setup()
    try:
        site = web.TCPSite(runner, args.host, args.port)
        await site.start()
        port = runner.addresses[0][1]
        url = f"http://{'127.0.0.1' if args.host in ('0.0.0.0', '::') else args.host}:{port}"
        peer = args.peer or socket.gethostname().split(".")[0] or "local"
        token, chat = await _prepare(url, read_token(admin_file), args.space, peer, data, args.demo)
        write_local_settings(data, url=url, space=args.space, peer=peer)
        print(f"baton: space API on {url}/v1 (space {args.space!r}, general chat {chat})")
        print(f"baton: admin token in {admin_file}")
        print(f"baton: dashboard on {_dashboard_line(url, admin_file)}")
        print(f"baton: device {peer!r} running ({_named(responder)}); Ctrl-C stops it", flush=True)
        here = Target(url=url, token=token, space=args.space)
        await until_signalled(_device(args, here, peer, responder))
    finally:
        await runner.cleanup()
    print("baton: stopped", flush=True)


async def _prepare(
    url: str, admin: str, space: str, peer: str, data: Path, with_demo: bool
) -> tuple[str, str]:
    """Make sure the space exists, the device has a token, and (with --demo) the demo is wired."""
    async with SpaceClient(url, admin) as client:
        try:
            found = await client.space_create({"id": space})
        except ApiError as exc:
            if exc.code != "space_exists":
                raise
            found = await client.space_get(space)
        token = await _device_token(client, data / f"device-{peer}.token", space, peer)
        if with_demo:
            added = await demo.install(client, space, found.generalChat or "")
            print(f"baton: demo wired: {', '.join(added) or 'already there'}")
    return token, found.generalChat or ""


async def _device_token(admin: SpaceClient, path: Path, space: str, peer: str) -> str:
    """This device's token, bound to `space` and `peer`: the one in `path` if the space still
    takes it there, else a new one (0600), the old one revoked."""
    if path.exists():
        old = read_token(path)
        if await _accepted(admin.url, old, space):
            return old
        with contextlib.suppress(ApiError):  # unknown already, or from an older build
            await admin.token_revoke(token_id(old))
    minted = await admin.token_device({"peer": peer, "space": space})
    write_private(path, minted["token"] + "\n")
    return str(minted["token"])


async def _accepted(url: str, token: str, space: str) -> bool:
    async with SpaceClient(url, token) as client:
        try:
            await client.space_get(space)
        except ApiError as exc:
            if exc.status in (401, 403):
                return False
            raise
    return True


def _dashboard_line(url: str, admin_file: Path) -> str:
    """To a terminal, the dashboard logged in (the admin token in the URL); to a pipe or a
    log file, where the token is instead: a log must not hold it."""
    if sys.stdout.isatty():
        return dashboard_url(url, read_token(admin_file))
    return f"{url}/ (sign in with the admin token in {admin_file})"


def dashboard_url(url: str, token: str) -> str:
    """The dashboard, logged in by the token in the fragment (never sent to the server)."""
    return f"{url}/#token={quote(token, safe='')}"


def _named(responder: Responder) -> str:
    told = getattr(responder, "describe", None)
    return f"responder {told if isinstance(told, str) else type(responder).__name__}"


def run_device(args: argparse.Namespace) -> int:
    _setup_logging()
    _freeze_imports()
    where = target(args)
    responder = _responder(args, data_dir(args.data))
    print(
        f"baton: device {args.peer!r} joining {where.url} (space {where.space!r}, "
        f"{_named(responder)})",
        flush=True,
    )
    refused = asyncio.run(refusal(where, args.peer))
    if refused is not None:
        print(f"baton device: refused by the space: {refused}", file=sys.stderr)
        return 1
    try:
        asyncio.run(until_signalled(_device(args, where, args.peer, responder)))
    except PartFailed as exc:
        print(f"baton device: {exc}", file=sys.stderr)
        return 1
    print("baton: stopped", flush=True)
    return 0


async def refusal(where: Target, peer: str) -> str | None:
    """Why the space refuses this device for good, or None (admitted, or not up yet: the
    device waits for it). Permanent: a token it does not know (401), one of another space
    or another peer (403), a space it does not have (404), any 4xx but 408 and 429. The peer
    is proven by a release at term 0, a term nobody ever holds: after checking who asks,
    the space refuses it (409) and changes nothing."""
    async with SpaceClient(where.url, where.token) as client:
        try:
            await client.space_get(where.space)
            await client.election_release(where.space, LeaseIn(peer=peer, term=0))
        except ApiError as exc:
            lasting = 400 <= exc.status < 500 and exc.status not in (408, 409, 429)
            return str(exc) if lasting else None
    return None


def _device(
    args: argparse.Namespace, where: Target, peer: str, responder: Responder
) -> Awaitable[None]:
    """The device the flags describe, running."""
    settings = DeviceSettings(
        url=where.url,
        token=where.token,
        space=where.space,
        peer=peer,
        name=args.name,
        priority=args.priority,
        executor_size=args.workers,
        lease=lease.scaled(args.lease_seconds),
        health_interval=args.health_seconds,
        programs_from=args.programs_from,
        secrets_file=default_secrets(data_dir(args.data)),
        ledger_file=data_dir(args.data) / LEDGER_FILE,
    )
    return Device(settings, responder=responder).run()
