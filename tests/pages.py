"""A chat history page in a test: every message decoded, none skipped in silence."""

import msgspec

from core.chatwire import WIRE_MESSAGE, Message, MessagePage, each


def read_all(page: MessagePage[msgspec.Raw]) -> list[Message]:
    """The page's messages; a message that does not decode fails the test."""
    found, errors = each(page.messages, WIRE_MESSAGE)
    assert not errors, errors
    return found
