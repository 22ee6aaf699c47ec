"""One command's conversation with the space, and how its failures reach the user.

Owns `talk(args, work)`: resolve the target (`common.target`), open one
`SpaceClient`, run `work(client, where)` and turn what goes wrong into an exit code
and one line on stderr (SPEC "CLI conventions"): a refusal of bad input (400, 413,
422) is exit 2, any other refusal, an unknown id or an unreachable server exit 1.
With `--json` the line is a JSON error object `{"error", "detail"}` instead. Raw
exception text never reaches the user. `Failure` is how a command says "the thing
asked for failed" itself. Must not know any one command.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

import msgspec

from runtime.cli.common import Target, target
from runtime.client.api import ApiError, SpaceClient

BAD_INPUT = frozenset({400, 413, 422})
Work = Callable[[SpaceClient, Target], Awaitable[int]]
T = TypeVar("T")


class Failure(Exception):
    """The thing asked for failed: exit `code` (1 by default) with `detail` on stderr."""

    def __init__(self, error: str, detail: str, code: int = 1) -> None:
        super().__init__(detail)
        self.error, self.detail, self.code = error, detail, code


def talk(args: argparse.Namespace, work: Work) -> int:
    """Run `work` against the space the flags name; its exit code, or the failure's."""
    where = target(args)

    async def go() -> int:
        async with SpaceClient(where.url, where.token) as client:
            return await work(client, where)

    try:
        return asyncio.run(go())
    except ApiError as exc:
        failure = from_api(exc, where)
    except Failure as exc:
        failure = exc
    return report(failure, as_json=getattr(args, "json", False))


def from_api(exc: ApiError, where: Target) -> Failure:
    """A refusal (or no answer) as the user should read it."""
    if exc.status == 0:
        return Failure("unreachable", f"cannot reach {where.url} (is `baton up` running?)")
    if exc.status == 401:
        return Failure(exc.code, f"{where.url} refused the token: {exc.detail}")
    return Failure(exc.code, exc.detail or exc.code, 2 if exc.status in BAD_INPUT else 1)


def report(failure: Failure, *, as_json: bool) -> int:
    if as_json:
        print(json.dumps({"error": failure.error, "detail": failure.detail}), file=sys.stderr)
    else:
        print(f"baton: {failure.error}: {failure.detail}", file=sys.stderr)
    return failure.code


def warn(text: str) -> None:
    """A warning: the command did what it was asked, but the user should know this."""
    print(f"baton: warning: {text}", file=sys.stderr, flush=True)


def emit(data: Any) -> None:
    """One JSON document on stdout, flushed (followers read it line by line)."""
    print(json.dumps(data), flush=True)


def read(found: Any, type: type[T], what: str) -> T:
    """The space's answer `found` (its JSON, as `--json` prints it) read as `type` (a
    lenient `core.wire.Answer`) for a table; one that does not fit is the space's fault, an
    `ApiError` as `SpaceClient.typed` raises it (exit 1, `malformed_answer`)."""
    try:
        return msgspec.convert(found, type)
    except msgspec.ValidationError as exc:
        raise ApiError(200, "malformed_answer", f"{what}: {exc}") from None
