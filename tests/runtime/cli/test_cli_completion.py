"""`baton completion bash|zsh`: the script, printed by the command, completes in a real shell.

The bash script is sourced in a `bash` process, which is handed `COMP_WORDS` and
`COMP_CWORD` as bash's completion would set them, runs `_baton` and prints `COMPREPLY`.
What it must offer is read from the parser, so the test goes stale no sooner than the script.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
from pathlib import Path

import pytest
from clikit import Cli

from runtime.cli.completion import shape
from runtime.cli.main import build_parser

COMMANDS = shape(build_parser())
DRIVE = """
source "$1"
read -ra COMP_WORDS <<< "$2"
[[ "$2" == *" " ]] && COMP_WORDS+=("")
COMP_CWORD=$((${#COMP_WORDS[@]} - 1))
_baton
printf '%s\\n' "${COMPREPLY[@]}"
"""


@pytest.fixture
async def bash_script(cli: Cli, tmp_path: Path) -> Path:
    code, out, err = await cli.process("completion", "bash", flags=False)
    assert (code, err) == (0, "")
    path = tmp_path / "baton.bash"
    path.write_text(out)
    return path


async def complete(script: Path, line: str, cwd: Path) -> list[str]:
    """What bash offers for `line` (a trailing space: a new, empty word)."""
    proc = await asyncio.create_subprocess_exec(
        "bash",
        "--norc",
        "--noprofile",
        "-c",
        DRIVE,
        "bash",
        str(script),
        line,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 15)
    assert (proc.returncode, err) == (0, b""), err
    return out.decode().split()


@pytest.mark.skipif(shutil.which("bash") is None, reason="no bash")
async def test_bash_completes_commands_verbs_and_flags(bash_script: Path, tmp_path: Path) -> None:
    assert await complete(bash_script, "baton tri", tmp_path) == ["triggers"]
    verbs = await complete(bash_script, "baton triggers ", tmp_path)
    assert verbs == list(COMMANDS[("triggers",)].verbs)
    assert {"add", "edit", "list", "show", "pause", "resume", "rm", "repin", "run"} <= set(verbs)
    assert await complete(bash_script, "baton triggers sh", tmp_path) == ["show"]
    assert await complete(bash_script, "baton space token r", tmp_path) == [
        "revoke",
        "rotate-admin",
    ]
    assert await complete(bash_script, "baton completion ", tmp_path) == ["bash", "zsh"]
    flags = await complete(bash_script, "baton triggers add --m", tmp_path)
    assert flags == ["--memory-mb", "--max-queue", "--max-runs"]
    # the value of a flag is not a verb: `--since 15m` is skipped on the way to `sh`
    assert await complete(bash_script, "baton runs --since 15m sh", tmp_path) == ["show"]
    (tmp_path / "triggers.json").write_text("[]")
    assert await complete(bash_script, "baton triggers apply -f tri", tmp_path) == ["triggers.json"]


async def test_zsh_script_names_every_verb_and_registers(cli: Cli) -> None:
    code, out, _ = await cli.process("completion", "zsh", flags=False)
    assert code == 0 and out.startswith("#compdef baton\n")
    assert "compdef _baton baton" in out
    for path, command in COMMANDS.items():
        if command.verbs:
            assert f'"{" ".join(path)}") echo "{" ".join(command.verbs)}" ;;' in out
    if shutil.which("zsh"):
        check = subprocess.run(["zsh", "-n"], input=out.encode(), capture_output=True, check=False)
        assert check.returncode == 0, check.stderr


async def test_an_unknown_shell_is_exit_2(cli: Cli) -> None:
    err = await cli.fails(2, "completion", "fish")
    assert err.startswith("baton: argument SHELL: invalid choice: 'fish'"), err


def test_the_shape_is_the_parsers() -> None:
    assert ("runs", "show") in COMMANDS and ("turns",) in COMMANDS
    assert "--json" in COMMANDS[("runs", "show")].flags
    assert "--limit" in COMMANDS[("turns",)].valued and "--json" not in COMMANDS[("turns",)].valued
