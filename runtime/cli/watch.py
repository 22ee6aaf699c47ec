"""`--watch S` on `triggers list` and `status`: the same output redrawn every S seconds.

Owns `show(draw, args, where, title)`: without `--watch`, print one frame; with it, print a
frame every S seconds (through the Clock) until Ctrl-C or SIGTERM, then exit 0. A frame is
a head line (`every 2s: baton status  <instant>`) and the output; on a terminal the screen
is cleared first, as `watch(1)` does. With `--json`, one JSON document a line, no head. A
space that does not answer is said in the frame, and the next frame asks again.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Awaitable, Callable

from core.clock import Clock, SystemClock, iso
from runtime.cli.common import Target, seconds, until_signalled
from runtime.cli.talk import from_api
from runtime.client.api import ApiError

Draw = Callable[[], Awaitable[str]]
CLEAR = "\x1b[H\x1b[2J"


def add_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--watch", type=seconds, metavar="S", help="redraw every S seconds until Ctrl-C"
    )


async def show(
    draw: Draw, args: argparse.Namespace, where: Target, title: str, clock: Clock | None = None
) -> int:
    if args.watch is None:
        print(await draw())
        return 0
    await until_signalled(_frames(draw, args, where, title, clock or SystemClock()))
    return 0


async def _frames(
    draw: Draw, args: argparse.Namespace, where: Target, title: str, clock: Clock
) -> None:
    tty = sys.stdout.isatty()
    while True:
        try:
            text = await draw()
        except ApiError as exc:
            failure = from_api(exc, where)
            text = f"baton: {failure.error}: {failure.detail}"
        if args.json:
            print(text, flush=True)
        else:
            head = f"every {args.watch:g}s: {title}  {iso(clock.wall())}"
            print(f"{CLEAR if tty else ''}{head}\n\n{text}\n", flush=True)
        await clock.sleep(args.watch)
