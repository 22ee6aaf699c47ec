"""A responder that is a model behind an OpenAI-compatible `/v1/chat/completions` endpoint.

Owns the wire to Ollama, a llama.cpp server, vLLM or a hosted API, through aiohttp directly:
the request (system prompt, snapshot, waiting messages), the streamed or whole answer, and
`probe()`. An endpoint that cannot be reached is `ResponderUnavailable` (messages wait);
any other refusal is `ResponderFailed` with the server's words. Must not post messages or
decide readiness policy (runtime.chat.readiness does).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import msgspec

from runtime.chat.responders import MessageJson, ResponderFailed, ResponderUnavailable

UNAVAILABLE_STATUSES = frozenset({502, 503, 504})
PROBE_SECONDS = 5.0
ERROR_TEXT = 300  # characters of a refusal's body kept in the reason


class LlmConfig(msgspec.Struct, frozen=True, kw_only=True):
    """Where the model is and how to ask it; `key` and `system_prompt` are file contents."""

    url: str  # the base URL, e.g. http://127.0.0.1:11434/v1
    model: str
    key: str = ""
    system_prompt: str = ""
    stream: bool = True
    timeout: float = 120.0


def chat_messages(
    system: str, snapshot: list[MessageJson], pending: list[MessageJson]
) -> list[dict[str, str]]:
    """The OpenAI `messages`: the system prompt, the snapshot's turns, then what waits."""
    out = [{"role": "system", "content": system}] if system else []
    out += [_turn(m) for m in snapshot]
    out += [{"role": "user", "content": _text(m)} for m in pending]
    return out


def _turn(message: MessageJson) -> dict[str, str]:
    agent = message.get("agent")
    name = agent.get("name", "") if isinstance(agent, dict) else ""
    mine = bool(agent) and not str(name).startswith("trigger:")  # a nudge reads as input
    return {"role": "assistant" if mine else "user", "content": _text(message)}


def _text(message: MessageJson) -> str:
    agent = message.get("agent")
    text = str(message.get("text", ""))
    name = agent.get("name", "") if isinstance(agent, dict) else ""
    return f"[{name}] {text}" if str(name).startswith("trigger:") else text


class OpenAIResponder:
    """Streams a reply from an OpenAI-compatible chat endpoint."""

    ready = False  # until runtime.chat.readiness has probed the endpoint

    def __init__(self, config: LlmConfig) -> None:
        self.config = config
        self._session: aiohttp.ClientSession | None = None

    @property
    def describe(self) -> str:
        return f"openai {self.config.model} at {self.config.url}"

    def _http(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession()
        return self._session

    def _headers(self) -> dict[str, str]:
        head = {"Content-Type": "application/json"}
        if self.config.key:
            head["Authorization"] = f"Bearer {self.config.key}"
        return head

    def _url(self, path: str) -> str:
        return self.config.url.rstrip("/") + path

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()

    async def probe(self) -> str:
        """'' when the endpoint answers `GET …/models` (or says it has no such route); else why."""
        timeout = aiohttp.ClientTimeout(total=PROBE_SECONDS)
        url = self._url("/models")
        try:
            async with self._http().get(url, headers=self._headers(), timeout=timeout) as resp:
                status = resp.status
                body = (await resp.text())[:ERROR_TEXT]
        except (aiohttp.ClientError, TimeoutError) as exc:
            return f"{url} unreachable: {_why(exc)}"
        if status in (401, 403):
            return f"{url} refused the key ({status}): {body.strip()}"
        if status in UNAVAILABLE_STATUSES or status >= 500:
            return f"{url} answered {status}: {body.strip()}"
        return ""

    async def respond(self, snapshot: list[MessageJson], pending: list[MessageJson]) -> str | None:
        parts = [chunk async for chunk in self.stream(snapshot, pending)]
        return "".join(parts) or None

    async def stream(
        self, snapshot: list[MessageJson], pending: list[MessageJson]
    ) -> AsyncIterator[str]:
        """The reply's text, piece by piece, as the model writes it."""
        body = {
            "model": self.config.model,
            "messages": chat_messages(self.config.system_prompt, snapshot, pending),
            "stream": self.config.stream,
        }
        url = self._url("/chat/completions")
        timeout = aiohttp.ClientTimeout(total=self.config.timeout)
        try:
            async with self._http().post(
                url, json=body, headers=self._headers(), timeout=timeout
            ) as resp:
                await _check(resp, url)
                if resp.content_type == "text/event-stream":
                    async for piece in _sse_pieces(resp):
                        yield piece
                else:
                    yield _whole(await resp.read())
        except (aiohttp.ClientConnectionError, TimeoutError) as exc:
            raise ResponderUnavailable(f"{url} unreachable: {_why(exc)}") from None


async def _check(resp: aiohttp.ClientResponse, url: str) -> None:
    if resp.status < 400:
        return
    text = (await resp.text())[:ERROR_TEXT].strip()
    if resp.status in UNAVAILABLE_STATUSES:
        raise ResponderUnavailable(f"{url} answered {resp.status}: {text}")
    raise ResponderFailed(f"{url} answered {resp.status}: {text}")


async def _sse_pieces(resp: aiohttp.ClientResponse) -> AsyncIterator[str]:
    """`choices[0].delta.content` of each `data:` line, until `data: [DONE]` or the end."""
    async for raw in resp.content:
        line = raw.decode("utf-8", errors="replace").strip()
        if not line.startswith("data:"):
            continue  # blank separators, `: keep-alive` comments, `event:` lines
        data = line[5:].strip()
        if data == "[DONE]":
            return
        piece = _delta(data)
        if piece:
            yield piece


def _delta(data: str) -> str:
    try:
        chunk = json.loads(data)
        choice = chunk["choices"][0] if chunk.get("choices") else {}
    except (ValueError, AttributeError, KeyError, IndexError, TypeError):
        raise ResponderFailed(f"a streamed chunk is not OpenAI JSON: {data[:ERROR_TEXT]}") from None
    if "error" in chunk:
        raise ResponderFailed(f"the model failed mid-reply: {chunk['error']}")
    content = (choice.get("delta") or {}).get("content")
    return content if isinstance(content, str) else ""


def _whole(raw: bytes) -> str:
    try:
        answer: Any = json.loads(raw)
        content = answer["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        raise ResponderFailed(f"the answer is not OpenAI JSON: {raw[:ERROR_TEXT]!r}") from None
    if not isinstance(content, str):
        raise ResponderFailed("the answer's choices[0].message.content is not a string")
    return content


def _why(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__
