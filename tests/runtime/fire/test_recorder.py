"""The recorder is the one writer of runs, stamps and turns: no other device module calls
the routes that write them (the CLI's `baton space` commands are the user's own writes)."""

from __future__ import annotations

import ast
from pathlib import Path

RUNTIME = Path(__file__).resolve().parents[3] / "runtime"
WRITES = {"run_create", "trigger_status", "turn_create"}
ALLOWED = {"fire/recorder.py", "client/api.py"}  # the writer, and the client that defines the calls


def calls_of_writes(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(), filename=str(path))
    return [
        f"{path.name}:{node.lineno} {node.func.attr}"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in WRITES
    ]


def test_only_the_recorder_writes_runs_stamps_and_turns() -> None:
    modules = [
        p
        for p in RUNTIME.rglob("*.py")
        if p.relative_to(RUNTIME).as_posix() not in ALLOWED and p.parent.name != "cli"
    ]
    assert len(modules) > 10  # the scan sees the device's modules
    found = [hit for path in modules for hit in calls_of_writes(path)]
    assert found == []
    assert calls_of_writes(RUNTIME / "fire" / "recorder.py")  # and the recorder does write them
