# aiohttp-sse-client 0.2.1's client module, as far as runtime/client/ uses it: the pin in
# pyproject.toml is what makes these signatures true.
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any

from aiohttp import ClientSession

READY_STATE_CONNECTING: int
READY_STATE_OPEN: int
READY_STATE_CLOSED: int

class MessageEvent:
    type: str
    message: str
    data: str
    origin: str
    last_event_id: str

class EventSource:
    _event_id: str
    def __init__(
        self,
        url: str,
        option: dict[str, Any] | None = None,
        reconnection_time: timedelta = ...,
        max_connect_retry: int = ...,
        session: ClientSession | None = None,
        on_open: Callable[[], None] | None = None,
        on_message: Callable[[MessageEvent], None] | None = None,
        on_error: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None: ...
    @property
    def ready_state(self) -> int: ...
    async def __aenter__(self) -> EventSource: ...
    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...
    def __aiter__(self) -> EventSource: ...
    async def __anext__(self) -> MessageEvent: ...
    async def close(self) -> None: ...
    def _dispatch_event(self) -> MessageEvent | None: ...
