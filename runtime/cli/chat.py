"""`baton chat`: post to a chat of the space, read its history, follow it live.

    baton chat send TEXT [--chat ID] [--json]
    baton chat tail [--chat ID] [--limit N] [--follow] [--json]

Owns the verbs' flags and output: `send` posts as the user, `tail` prints the newest
messages and `--follow` the new ones over the chat's stream (runtime.client.stream), until
Ctrl-C or SIGTERM (exit 0); what each prints is in docs/architecture.md, "Module notes".
A shell: must not decide anything the space or chat-watch decides.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import msgspec

from core.chatwire import Message
from runtime.cli.common import Target, add_space_options, until_signalled
from runtime.cli.main import UsageError
from runtime.cli.talk import emit, read, talk
from runtime.client.api import SpaceClient
from runtime.client.sse import SseEvent

PAGE = 1000
Sent = Any  # a message as the space sent it: what `--json` prints (read as a `Message`)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = subparsers.add_parser("chat", help="send to a chat, read and follow it")
    sub = p.add_subparsers(dest="chat_command", required=True, parser_class=type(p))
    send = sub.add_parser("send", help="post a message as the user")
    send.add_argument("text", metavar="TEXT")
    send.set_defaults(func=cmd_send)
    tail = sub.add_parser("tail", help="the newest messages; --follow for new ones")
    tail.add_argument("--limit", default="20", metavar="N", help="how many (default 20)")
    tail.add_argument("--follow", "-f", action="store_true", help="keep printing new messages")
    tail.set_defaults(func=cmd_tail)
    for parser in (send, tail):
        parser.add_argument("--chat", metavar="ID", help="chat objectId (default: general chat)")
        add_space_options(parser)


def cmd_send(args: argparse.Namespace) -> int:
    if not args.text.strip():
        raise UsageError("TEXT: must not be empty")
    return talk(args, lambda client, where: send(client, where, args.chat, args.text, args.json))


def cmd_tail(args: argparse.Namespace) -> int:
    if not args.limit.isdigit() or not 1 <= int(args.limit) <= PAGE:
        raise UsageError(f"--limit: must be a whole number from 1 to {PAGE}, got {args.limit!r}")
    limit = int(args.limit)
    return talk(
        args, lambda client, where: tail(client, where, args.chat, limit, args.follow, args.json)
    )


async def chat_of(client: SpaceClient, where: Target, chat: str | None) -> str:
    """`--chat`, else the space's general chat."""
    return chat or (await client.space_get(where.space)).generalChat or ""


async def send(
    client: SpaceClient, where: Target, chat: str | None, text: str, as_json: bool
) -> int:
    object_id = await chat_of(client, where, chat)
    body = {"text": text}  # printed as the space answers it
    sent = await client.call("chat_send", body, space=where.space, objectId=object_id)
    if as_json:
        emit(sent)
    else:
        got = read(sent, Message, "chat_send")
        print(f"sent {got.message_id} (seq {got.seq}) to chat {got.object_id}")
    return 0


async def tail(
    client: SpaceClient, where: Target, chat: str | None, limit: int, follow: bool, as_json: bool
) -> int:
    object_id = await chat_of(client, where, chat)
    if follow:  # signals are handled from here on, so a stop is always clean
        await until_signalled(_tail(client, where, object_id, limit, True, as_json))
    else:
        await _tail(client, where, object_id, limit, False, as_json)
    return 0


async def _tail(
    client: SpaceClient, where: Target, object_id: str, limit: int, follow: bool, as_json: bool
) -> None:
    page = await client.chat_messages(where.space, object_id, limit=limit, latest=True)
    messages: list[Sent] = [msgspec.json.decode(raw) for raw in page.messages]  # printed as sent
    if as_json and not follow:
        emit({"messages": messages})
        return
    got = read(messages, list[Message], "chat_messages")
    last = got[-1].seq if got else 0  # an empty chat: from its start
    if follow:  # a reply still growing comes over the stream, as it is by then, and grows on
        last = min((m.seq - 1 for m in got if growing(m)), default=last)
    for message, seen in zip(messages, got, strict=True):
        if seen.seq <= last:
            show(message, as_json)
    if follow:
        await _follow(client, where, object_id, last, as_json)


async def _follow(
    client: SpaceClient, where: Target, object_id: str, last: int, as_json: bool
) -> None:
    async def on_event(event: SseEvent) -> None:
        if event.event in ("message", "update"):  # update: a reply growing in place
            show(event.json(), as_json)
        elif event.event == "gap":
            print(f"baton: messages skipped by the stream: {event.data}", file=sys.stderr)

    await client.chat_stream(where.space, object_id, last_id=last).run(on_event)


def show(message: Sent, as_json: bool) -> None:
    if as_json:
        emit(message)
    else:
        got = read(message, Message, "message")
        print(f"{got.created_at}  {who(got):<12}  {got.text}", flush=True)


def who(message: Message) -> str:
    if message.agent is None:
        return "user"
    return (message.agent.name or "agent") + (" …" if growing(message) else "")


def growing(message: Message) -> bool:
    """An agent message still being written (`agent.done` false)."""
    return message.agent is not None and message.agent.done is False
