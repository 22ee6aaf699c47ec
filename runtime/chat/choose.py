"""How a spec names a chat responder: `load_responder(spec)`.

Owns the forms of `--responder` (SPEC chat-watch, "chosen per device"): `builtin`,
`openai` (runtime.chat.openai: a model behind an OpenAI-compatible endpoint, given
its `LlmConfig`), `command:<path or JSON argv list>` (runtime.chat.command) and
`python:<module>:<function>` (a `CallableResponder`). A spec that cannot be parsed or
loaded is an `InvalidResponderSpec` starting `responder: ` (or naming the `--llm-…`
flag). Must not start the responder; where the spec comes from is
runtime.cli.responder's.
"""

from __future__ import annotations

import importlib
import json
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from runtime.chat.command import CommandResponder
from runtime.chat.responders import (
    BuiltinResponder,
    CallableResponder,
    InvalidResponderSpec,
    Responder,
)

if TYPE_CHECKING:
    from runtime.chat.openai import LlmConfig

SPEC_FORMS = "builtin, openai, command:<path or JSON argv list>, python:<module>:<function>"


def load_responder(
    spec: str,
    *,
    now: Callable[[], datetime],
    command_timeout: float = 60.0,
    llm: LlmConfig | None = None,
) -> Responder:
    """The responder `spec` names (see `SPEC_FORMS`); `InvalidResponderSpec` names the problem.

    `openai` needs `llm` with a URL and a model."""
    kind, _, value = spec.strip().partition(":")
    if kind == "builtin" and not value:
        return BuiltinResponder(now)
    if kind == "openai" and not value:
        return _openai(llm)
    if kind == "command":
        return CommandResponder(_argv(value), command_timeout)
    if kind == "python":
        return CallableResponder(_function(value))
    raise InvalidResponderSpec(f"responder: unknown spec {spec!r}; expected one of {SPEC_FORMS}")


def _openai(llm: LlmConfig | None) -> Responder:
    from runtime.chat.openai import OpenAIResponder

    if llm is None or not llm.url:
        raise InvalidResponderSpec("--llm-url: the openai responder needs the endpoint's base URL")
    if not llm.url.startswith(("http://", "https://")):
        raise InvalidResponderSpec(f"--llm-url: expected http(s)://…, got {llm.url!r}")
    if not llm.model:
        raise InvalidResponderSpec("--llm-model: the openai responder needs a model name")
    return OpenAIResponder(llm)


def _argv(value: str) -> list[str]:
    value = value.strip()
    if not value:
        raise InvalidResponderSpec("responder: command: needs a path or a JSON argv list")
    if not value.startswith("["):
        return [value]  # a plain path, never split by a shell
    try:
        argv = json.loads(value)
    except ValueError as exc:
        raise InvalidResponderSpec(f"responder: command: argv is not valid JSON: {exc}") from None
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) and a for a in argv):
        raise InvalidResponderSpec("responder: command: argv must be a non-empty list of strings")
    return argv


def _function(value: str) -> Callable[..., Any]:
    module_name, _, attr = value.rpartition(":")
    if not module_name or not attr:
        raise InvalidResponderSpec(
            f"responder: python: expected <module>:<function>, got {value!r}"
        )
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise InvalidResponderSpec(
            f"responder: python: cannot import module {module_name!r}: {exc}"
        ) from None
    fn: object = getattr(module, attr, None)
    if fn is None:
        raise InvalidResponderSpec(f"responder: python: {module_name!r} has no {attr!r}")
    if not callable(fn):
        raise InvalidResponderSpec(f"responder: python: {module_name}:{attr} is not callable")
    return fn
