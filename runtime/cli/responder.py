"""Which chat responder this device runs: flags, then the environment, then the config file.

Owns the device's responder settings (SPEC chat-watch: "chosen per device"):
`--responder builtin|openai|command:ARGV|python:MOD:FN`, and for `openai`
`--llm-url`, `--llm-model`, `--llm-key-file`, `--system-prompt-file`. Each comes
from its flag, else `BATON_RESPONDER` / `BATON_LLM_URL` / `BATON_LLM_MODEL` /
`BATON_LLM_KEY_FILE` / `BATON_SYSTEM_PROMPT_FILE`, else the same key in the data
directory's `config.toml` (`responder = "openai"`, `llm_url = "…"`, …; relative
paths there are relative to the data directory), else the default (`builtin`).
A bad value is a `UsageError` naming the flag. Must not start the responder.
"""

from __future__ import annotations

import argparse
import os
import tomllib
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

from runtime.chat.choose import load_responder
from runtime.chat.openai import LlmConfig
from runtime.chat.responders import InvalidResponderSpec, Responder
from runtime.cli.main import UsageError

CONFIG_FILE = "config.toml"
FIELDS = ("responder", "llm_url", "llm_model", "llm_key_file", "system_prompt_file")
PATHS = frozenset({"llm_key_file", "system_prompt_file"})
DEFAULTS = {"responder": "builtin"}


def flag(field: str) -> str:
    return "--" + field.replace("_", "-")


def env_name(field: str) -> str:
    return "BATON_" + field.upper()


def add_options(parser: argparse.ArgumentParser) -> None:
    """The responder flags of `baton up` and `baton device` (defaults: env, then file)."""
    helps = {
        "responder": "chat responder: builtin, openai, command:ARGV, python:MOD:FN",
        "llm_url": "openai: the endpoint's base URL, e.g. http://127.0.0.1:11434/v1",
        "llm_model": "openai: the model name",
        "llm_key_file": "openai: a file holding the API key (sent as a bearer token)",
        "system_prompt_file": "openai: a file holding the system prompt",
    }
    for field in FIELDS:
        parser.add_argument(flag(field), dest=field, default=None, help=helps[field])


def read_file(data: Path) -> dict[str, str]:
    """The responder keys of `data/config.toml` (paths made absolute); {} without the file."""
    path = data / CONFIG_FILE
    try:
        found = tomllib.loads(path.read_text())
    except FileNotFoundError:
        return {}
    except (OSError, tomllib.TOMLDecodeError) as exc:
        raise UsageError(f"{path}: cannot read it: {exc}") from None
    out: dict[str, str] = {}
    for field in FIELDS:
        value = found.get(field)
        if value is None:
            continue
        if not isinstance(value, str):
            raise UsageError(f"{path}: `{field}` must be a string")
        out[field] = str(data / value) if field in PATHS else value
    return out


def resolve(
    flags: Mapping[str, Any], env: Mapping[str, str], file: Mapping[str, str]
) -> dict[str, str]:
    """Each field from the flag, else the environment, else the file, else its default."""
    out: dict[str, str] = {}
    for field in FIELDS:
        value = flags.get(field) or env.get(env_name(field)) or file.get(field)
        value = value or DEFAULTS.get(field, "")
        if value:
            out[field] = value
    return out


def settings(args: argparse.Namespace, data: Path) -> dict[str, str]:
    flags = {field: getattr(args, field, None) for field in FIELDS}
    return resolve(flags, os.environ, read_file(data))


def llm_config(chosen: Mapping[str, str]) -> LlmConfig:
    return LlmConfig(
        url=chosen.get("llm_url", ""),
        model=chosen.get("llm_model", ""),
        key=_contents(chosen, "llm_key_file"),
        system_prompt=_contents(chosen, "system_prompt_file"),
    )


def build(chosen: Mapping[str, str], now: Callable[[], datetime]) -> Responder:
    """The responder `chosen` describes; `UsageError` naming the flag when it cannot be."""
    spec = chosen.get("responder", "builtin")
    llm = llm_config(chosen) if spec.strip() == "openai" else None
    try:
        return load_responder(spec, now=now, llm=llm)
    except InvalidResponderSpec as exc:
        text = str(exc).removeprefix("responder: ")
        raise UsageError(text if text.startswith("--") else f"--responder: {text}") from None


def _contents(chosen: Mapping[str, str], field: str) -> str:
    path = chosen.get(field)
    if not path:
        return ""
    try:
        return Path(path).expanduser().read_text().strip()
    except OSError as exc:
        raise UsageError(f"{flag(field)}: cannot read {path}: {exc.strerror}") from None
