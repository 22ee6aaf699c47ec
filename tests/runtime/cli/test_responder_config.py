"""Which responder a device runs: flag over environment over `config.toml`, and clear refusals.

The settings are resolved by `runtime.cli.responder` from real argparse flags, a given
environment and a real file in `tmp_path`; `build` makes the responder they name.
"""

from __future__ import annotations

import argparse
import re
from datetime import UTC, datetime

import pytest

from runtime.chat.command import CommandResponder
from runtime.chat.openai import OpenAIResponder
from runtime.chat.responders import BuiltinResponder, CallableResponder
from runtime.cli import responder as rc
from runtime.cli.main import UsageError

NOON = datetime(2026, 12, 1, 12, tzinfo=UTC)


def flags(*argv: str) -> dict[str, str | None]:
    parser = argparse.ArgumentParser()
    rc.add_options(parser)
    return vars(parser.parse_args(argv))


def test_a_flag_wins_over_the_environment_which_wins_over_the_file():
    file = {"responder": "openai", "llm_url": "http://file/v1", "llm_model": "file-model"}
    env = {"BATON_LLM_URL": "http://env/v1", "BATON_LLM_MODEL": "env-model"}
    chosen = rc.resolve(flags("--llm-model", "flag-model"), env, file)
    assert chosen == {"responder": "openai", "llm_url": "http://env/v1", "llm_model": "flag-model"}


def test_nothing_given_is_the_builtin_responder():
    chosen = rc.resolve(flags(), {}, {})
    assert chosen == {"responder": "builtin"}
    assert isinstance(rc.build(chosen, lambda: NOON), BuiltinResponder)


def test_the_config_file_names_paths_relative_to_the_data_directory(tmp_path):
    (tmp_path / "key").write_text("sk-secret\n")
    (tmp_path / "prompt.txt").write_text("Be brief.\n")
    (tmp_path / "config.toml").write_text(
        'responder = "openai"\nllm_url = "http://127.0.0.1:11434/v1"\nllm_model = "qwen"\n'
        'llm_key_file = "key"\nsystem_prompt_file = "prompt.txt"\n'
    )
    chosen = rc.resolve(flags(), {}, rc.read_file(tmp_path))
    responder = rc.build(chosen, lambda: NOON)
    assert isinstance(responder, OpenAIResponder)
    config = responder.config
    assert (config.url, config.model) == ("http://127.0.0.1:11434/v1", "qwen")
    assert (config.key, config.system_prompt) == ("sk-secret", "Be brief.")


def test_environment_variables_name_each_setting(tmp_path):
    env = {
        "BATON_RESPONDER": "command:/bin/cat",
        "BATON_LLM_URL": "u",
        "BATON_LLM_MODEL": "m",
        "BATON_LLM_KEY_FILE": "k",
        "BATON_SYSTEM_PROMPT_FILE": "p",
    }
    chosen = rc.resolve(flags(), env, {})
    assert chosen == {
        "responder": "command:/bin/cat",
        "llm_url": "u",
        "llm_model": "m",
        "llm_key_file": "k",
        "system_prompt_file": "p",
    }
    assert isinstance(rc.build(chosen, lambda: NOON), CommandResponder)


def test_a_python_callable_is_built_from_its_spec():
    responder = rc.build({"responder": "python:json:dumps"}, lambda: NOON)
    assert isinstance(responder, CallableResponder)


@pytest.mark.parametrize(
    ("chosen", "message"),
    [
        ({"responder": "openai"}, "--llm-url: the openai responder needs"),
        ({"responder": "openai", "llm_url": "ftp://x"}, "--llm-url: expected http(s)"),
        ({"responder": "openai", "llm_url": "http://x/v1"}, "--llm-model: the openai"),
        ({"responder": "gpt"}, "--responder: unknown spec 'gpt'"),
        (
            {
                "responder": "openai",
                "llm_url": "http://x/v1",
                "llm_model": "m",
                "llm_key_file": "/nonexistent/key",
            },
            "--llm-key-file: cannot read /nonexistent/key",
        ),
    ],
)
def test_bad_settings_name_the_flag(chosen, message):
    with pytest.raises(UsageError, match="^" + re.escape(message)):
        rc.build(chosen, lambda: NOON)


def test_a_bad_config_file_is_refused_with_its_path(tmp_path):
    (tmp_path / "config.toml").write_text("responder = 3\n")
    with pytest.raises(UsageError, match="`responder` must be a string"):
        rc.read_file(tmp_path)
    (tmp_path / "config.toml").write_text("responder = \n")
    with pytest.raises(UsageError, match=re.escape("config.toml: cannot read it")):
        rc.read_file(tmp_path)
