"""What chat-watch needs from the space, for one device: its record and its calls.

Owns seeding the reserved chat responder record (created when missing, never
overwritten, retried with backoff until it holds: a space that appears while the
device runs gets its responder without a restart) and the client calls chat-watch
makes (send, edit, history; `explain`: why a trigger fired or not), whose answers it
decodes typed and hands on as the JSON objects chat-watch and the responders take.
Recording each turn (the `agent_turns` entry and the stamps on chat-watch's record) is
runtime.fire.recorder's, the one writer of stamps.
Must not decide when chat-watch answers (that is `runtime.chat.watch`). Time only through
the injected `Clock`.
"""

from __future__ import annotations

import logging

import msgspec

from core.aio import Backoff
from core.chatwire import WIRE_MESSAGE, AgentIn, Message, MessageEdit, MessageIn, each
from runtime.chat.responders import MessageJson
from runtime.client.api import JSON, ApiError
from runtime.client.seat import Seat
from triggers.records import CHAT_WATCH_PROGRAM, RESERVED_CHAT_WATCH

log = logging.getLogger("baton.device")

CHAT_WATCH_NAME = "Chat responder"
SEED_RETRY = Backoff(base=1.0, cap=30.0, jitter=False)


class ChatLink:
    """The space side of chat-watch on one device."""

    def __init__(self, seat: Seat) -> None:
        self._client, self._space, _, self._clock = seat

    async def keep_seeding(self) -> None:
        """Retry the seed until it holds."""
        streak = SEED_RETRY.streak()
        while not await self.seed():
            await self._clock.sleep(streak.failed())

    async def seed(self) -> bool:
        """Create the reserved chat responder record if it is missing; never overwrite it.

        True when the record exists now (made here or before)."""
        try:
            space = await self._client.space_get(self._space)
            body = {
                "name": CHAT_WATCH_NAME,
                "kind": "event",
                "program": CHAT_WATCH_PROGRAM,
                "spec": {"dataset": "chat_messages", "objectId": space.generalChat},
                "owner": "",
                "enabled": True,
            }
            await self._client.trigger_put(self._space, RESERVED_CHAT_WATCH, body)
        except ApiError as exc:
            if exc.status == 409:
                return True
            log.warning("chat-watch: could not seed the record: %s", exc)
            return False
        return True

    async def send(self, space: str, object_id: str, text: str, agent: AgentIn) -> MessageJson:
        """Post an agent message; the message as the space stored it (a JSON object, as
        chat-watch and the responders take messages)."""
        sent = await self._client.chat_send(space, object_id, MessageIn(text=text, agent=agent))
        return as_json(sent)

    async def edit(
        self, space: str, object_id: str, message_id: str, body: MessageEdit
    ) -> MessageJson:
        """Grow an agent message in place; the message as it stands now (a JSON object)."""
        return as_json(await self._client.chat_edit(space, object_id, message_id, body))

    async def history(self, space: str, object_id: str, limit: int) -> list[MessageJson]:
        """The chat's most recent `limit` messages, oldest first (never its oldest ones), as
        the responders take them; one that does not fit is logged and left out."""
        page = await self._client.chat_messages(space, object_id, limit=limit, latest=True)
        found, errors = each(page.messages, WIRE_MESSAGE)
        for error in errors:
            log.warning("chat-watch: chat %s: history message left out: %s", object_id, error)
        return [as_json(message) for message in found]

    async def explain(self, trigger: str) -> JSON | None:
        """`why` of the trigger with this id or name (its last due slot); None if there is no
        such trigger."""
        found = (await self._client.triggers(self._space))["triggers"]
        named = [r for r in found if trigger in (r.get("id"), r.get("name"))]
        if not named:
            return None
        return await self._client.trigger_why(self._space, named[0]["id"])


def as_json(message: Message) -> MessageJson:
    """A message as chat-watch and the responders take it: a JSON object."""
    found: MessageJson = msgspec.to_builtins(message)
    return found
