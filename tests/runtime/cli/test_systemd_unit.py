"""The systemd user unit of docs/operations.md: what it runs is a real `baton up`, and it verifies.

That `baton up` stops with exit 0 on SIGTERM (so `Restart=on-failure` leaves a stopped
unit stopped) is tested with the process in tests/e2e/test_credential_files.py.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from runtime.cli.main import build_parser
from runtime.cli.up import run_up

DOC = Path(__file__).resolve().parents[3] / "docs" / "operations.md"


def unit() -> str:
    found = re.search(
        r"`~/\.config/systemd/user/baton\.service`.*?```ini\n(.*?)```", DOC.read_text(), re.S
    )
    assert found, "docs/operations.md has no ini block after ~/.config/systemd/user/baton.service"
    return found.group(1)


def settings(text: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in text.splitlines() if "=" in line)


def test_the_unit_runs_baton_up_restarts_on_failure_and_starts_at_login() -> None:
    got = settings(unit())
    assert got["Restart"] == "on-failure" and got["WantedBy"] == "default.target"
    assert got["RestartPreventExitStatus"] == "2"  # bad input is not retried
    command = shlex.split(got["ExecStart"])
    assert command[0].startswith("%h/") and command[0].endswith("/baton")
    args = build_parser(command[1:]).parse_args(command[1:])
    assert args.func is run_up
    text = DOC.read_text()
    for step in ("systemctl --user daemon-reload", "systemctl --user enable --now baton"):
        assert step in text


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="no systemd-analyze")
def test_systemd_verifies_the_unit(tmp_path: Path) -> None:
    baton = Path(sys.executable).with_name("baton")  # the venv's entry point stands for %h/…
    assert baton.exists()
    path = tmp_path / "baton.service"
    path.write_text(re.sub(r"^ExecStart=\S+", f"ExecStart={baton}", unit(), flags=re.M))
    done = subprocess.run(
        ["systemd-analyze", "verify", str(path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0 and "baton.service" not in done.stderr, done.stderr
