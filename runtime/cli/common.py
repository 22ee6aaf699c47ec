"""What every command that talks to a space shares (SPEC "CLI conventions").

`--url`, `--token-file` and `--space`, each falling back to `BATON_URL`,
`BATON_TOKEN_FILE`, `BATON_SPACE`, then to what the local `baton up` wrote in its
data directory (`local.json`: url and space; `admin.token`), then to the defaults.
The data directory is `--data`, else `BATON_DATA`, else `~/.baton`. A token file
that group or others may access is refused (exit 2, one line), never read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import threading
from collections.abc import Awaitable
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import msgspec

from runtime.cli.main import UsageError
from space.token_store import TokenFileError, read_private

DEFAULT_PORT = 8377
DEFAULT_URL = f"http://127.0.0.1:{DEFAULT_PORT}"
DEFAULT_SPACE = "default"
LOCAL_FILE = "local.json"
ADMIN_TOKEN_FILE = "admin.token"
SPACE_DB = "space.db"  # in the data directory: the store `baton up` serves


Record = dict[str, Any]
"""A trigger record, or a JSON merge patch of one, as JSON: as a person writes it and the
space keeps it, a newer build's fields and undecodable records included (`triggers.records`
reads it typed, `load`, and salvages what does not decode)."""


class Target(msgspec.Struct, frozen=True, kw_only=True):
    """Where a command talks to: the space API, its bearer token, the space id."""

    url: str
    token: str
    space: str


def port(text: str) -> int:
    """An argparse type: a TCP port, 0 meaning any free one."""
    if not text.isdigit() or int(text) > 65535:
        raise argparse.ArgumentTypeError(f"expected 0..65535, got {text!r}")
    return int(text)


def seconds(text: str) -> float:
    """An argparse type: a duration between half a second and an hour."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 0.5 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"expected 0.5..3600 seconds, got {text!r}")
    return value


HISTORY_DAYS = 30.0  # how far back `baton why` answers (SPEC "History and `why`")


def days(text: str) -> float:
    """An argparse type: a retention in days, 1 to 3650 (ten years)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not 1 <= value <= 3650:
        raise argparse.ArgumentTypeError(f"expected 1..3650 days, got {text!r}")
    return value


def add_history_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--history-days",
        type=days,
        default=HISTORY_DAYS,
        help="how long the history `baton why` answers from is kept (default 30)",
    )


def data_dir(explicit: Path | None = None) -> Path:
    return explicit or Path(os.environ.get("BATON_DATA") or Path.home() / ".baton")


def add_data_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data",
        type=Path,
        default=None,
        help="data directory (default $BATON_DATA, else ~/.baton)",
    )


def add_space_options(parser: argparse.ArgumentParser) -> None:
    """`--url`, `--token-file`, `--space`, `--data` and `--json`."""
    parser.add_argument("--url", default=None, help="space API (default: the local `baton up`)")
    parser.add_argument(
        "--token-file",
        type=Path,
        default=None,
        help="bearer token file (default: the local admin token)",
    )
    parser.add_argument("--space", default=None, help="space id (default: the local space)")
    add_data_option(parser)
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def local_settings(data: Path) -> dict[str, str]:
    """What `baton up` wrote about itself in `data`, or nothing."""
    try:
        found = json.loads((data / LOCAL_FILE).read_text())
    except (OSError, ValueError):
        return {}
    return {k: v for k, v in found.items() if isinstance(v, str)} if isinstance(found, dict) else {}


def write_local_settings(data: Path, **values: str) -> None:
    path = data / LOCAL_FILE
    path.write_text(json.dumps(values, indent=2) + "\n")


def target(args: argparse.Namespace) -> Target:
    """Resolve the flags, the environment and the local data directory into a `Target`."""
    data = data_dir(getattr(args, "data", None))
    local = local_settings(data)
    url = checked_url(args.url or os.environ.get("BATON_URL") or local.get("url") or DEFAULT_URL)
    space = args.space or os.environ.get("BATON_SPACE") or local.get("space") or DEFAULT_SPACE
    return Target(url=url, token=read_token(token_file(args)), space=space)


def checked_url(url: str) -> str:
    """`--url` (or `BATON_URL`): an http:// or https:// URL with a host, else bad input."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  # raises on a port that is not a number
    except ValueError:
        parts = None
    if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"--url: {url!r} is not an http:// or https:// URL (e.g. {DEFAULT_URL})")
    return url.rstrip("/")


def token_file(args: argparse.Namespace) -> Path:
    """`--token-file`, else `BATON_TOKEN_FILE`, else the local admin token."""
    data = data_dir(getattr(args, "data", None))
    return args.token_file or _env_path("BATON_TOKEN_FILE") or data / ADMIN_TOKEN_FILE


def read_token(path: Path, flag: str = "--token-file") -> str:
    """The token in `path`; a file group or others may access is refused, never read."""
    try:
        return read_private(path)
    except TokenFileError as exc:
        raise UsageError(f"{flag}: {exc}") from None
    except OSError as exc:
        raise UsageError(f"{flag}: cannot read {path}: {exc.strerror}") from None


def _env_path(name: str) -> Path | None:
    value = os.environ.get(name)
    return Path(value) if value else None


async def until_signalled(work: Awaitable[object]) -> None:
    """Run `work` until it ends or SIGINT/SIGTERM arrives; then cancel it and wait for it."""
    task = asyncio.ensure_future(work)
    loop = asyncio.get_running_loop()
    signals = (signal.SIGINT, signal.SIGTERM) if _main_thread() else ()  # else: not ours to take
    for sig in signals:
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()
