"""`baton programs` against a real space server: publish, list, show, run, and bad input.

The CLI's `main([...])` runs in a thread (it has its own event loop) while the server
runs in the test's loop; `--url`, `--token-file` and `--space` point it at the server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clikit import SPACE, Cli, World
from pages import read_all

from runtime.client.api import SpaceClient

TRIAGE = '''"""Label a chat message and post a short ack."""

__any_tool__ = False


def classify(text):
    return "question" if text.rstrip().endswith("?") else "note"


def main(args):
    ev = args["event"]
    if ev.get("agent"):
        return {"ok": True, "skipped": "agent message"}
    c = use("any@v1")
    label = classify(ev["text"])
    c.chat_send(ev["space"], ev["objectId"],
                {"text": f"filed under {label}", "agent": {"name": "triage", "done": True}})
    return {"ok": True, "label": label}
'''
FAILING = "import sys\n\ndef main(args):\n    print('about to fail', file=sys.stderr)\n    raise ValueError('bad ' + args['x'])\n"  # noqa: E501


@pytest.fixture
def space(world: World) -> tuple[str, Path, SpaceClient, str]:
    """The conftest's space as these tests take it: URL, token file, admin client, chat."""
    return world.url, world.token_file, world.admin, world.chat


@pytest.fixture
def triage(tmp_path: Path) -> Path:
    path = tmp_path / "triage.py"
    path.write_text(TRIAGE)
    return path


async def test_publish_then_again_is_a_no_op_and_other_source_is_refused(
    cli: Cli, triage: Path, tmp_path: Path
):
    code, out, _ = await cli("programs", "publish", str(triage), "--as", "triage@v1")
    assert code == 0 and out.startswith("published triage@v1 (sha256 ")
    code, again, _ = await cli("programs", "publish", str(triage), "--as", "triage@v1")
    assert (code, again) == (0, "triage@v1 is already published with this source: nothing to do\n")
    assert (await cli.json("programs", "publish", str(triage), "--as", "triage@v1"))["unchanged"]
    other = tmp_path / "other.py"
    other.write_text("def main(args):\n    return {'ok': True}\n")
    code, _, err = await cli("programs", "publish", str(other), "--as", "triage@v1")
    assert code == 1
    assert "triage@v1 is published with other source" in err and "triage@v2" in err


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def main(args):\n    return (\n", "line 2"),
        ("x = 1\n\ndef helper(args):\n    pass\n", "no top-level `def main(args)`"),
        ("def main(a, b):\n    pass\n", "line 1: `main` must accept exactly one argument"),
    ],
)
async def test_publish_refuses_a_broken_program_locally(
    cli: Cli, space: Any, tmp_path: Path, source: str, reason: str
):
    broken = tmp_path / "broken.py"
    broken.write_text(source)
    code, out, err = await cli("programs", "publish", str(broken), "--as", "broken@v1")
    assert (code, out) == (2, "")
    assert err.startswith("baton: FILE: ") and reason in err and len(err.splitlines()) == 1
    assert (await space[2].programs(SPACE)).programs == []  # nothing was sent


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["publish", "FILE", "--as", "Triage@v1"], "--as: "),
        (["publish", "FILE", "--as", "triage"], "--as: "),
        (["publish", "/nonexistent/t.py", "--as", "t@v1"], "FILE: cannot read"),
        (["show", "triage@v0"], "name@vN: "),
        (["run", "triage@v1", "--args", "{nope"], "--args: not JSON"),
        (["run", "triage@v1", "--args", "[1, 2]"], "--args: must be a JSON object"),
        (["run", "triage@v1", "--timeout", "0"], "--timeout: must be > 0"),
        (["run", "triage@v1", "--memory-mb", "lots"], "--memory-mb: 'lots' is not a number"),
        (["run", "internal:chat-watch"], "name@vN: internal:chat-watch is run by the runtime"),
    ],
)
async def test_bad_input_exits_2_naming_the_field(
    cli: Cli, triage: Path, argv: list[str], field: str
):
    argv = [str(triage) if a == "FILE" else a for a in argv]
    code, out, err = await cli("programs", *argv)
    assert (code, out) == (2, "")
    assert err.startswith(f"baton: {field}"), err


async def test_list_and_show(cli: Cli, triage: Path):
    code, out, _ = await cli("programs", "list")
    assert (code, out.strip()) == (0, f"no programs in space {SPACE}")
    await cli("programs", "publish", str(triage), "--as", "triage@v1")
    await cli("programs", "publish", str(triage), "--as", "triage@v2")
    code, out, _ = await cli("programs", "list")
    lines = out.splitlines()
    assert code == 0 and lines[0].split() == ["REF", "ANY", "TOOL", "SHA256", "PUBLISHED"]
    assert [line.split()[0] for line in lines[1:]] == ["triage@v1", "triage@v2"]
    assert lines[0].index("SHA256") == lines[1].index(lines[1].split()[2])  # aligned
    listed = await cli.json("programs", "list")
    assert [p["ref"] for p in listed["programs"]] == ["triage@v1", "triage@v2"]
    code, out, _ = await cli("programs", "show", "triage@v1")
    assert code == 0 and out.startswith("ref        triage@v1\n")
    assert out.endswith("\n\n" + TRIAGE)
    shown = await cli.json("programs", "show", "triage@v1")
    assert (shown["source"], shown["anyTool"]) == (TRIAGE, False)
    code, _, err = await cli("programs", "show", "ghost@v1")
    assert code == 1 and "unknown_program" in err


async def test_a_manual_run_posts_to_the_chat_and_is_recorded(cli: Cli, space: Any, triage: Path):
    _, _, admin, chat = space
    await cli("programs", "publish", str(triage), "--as", "triage@v1")
    event = {"space": SPACE, "objectId": chat, "messageId": "m1", "text": "where is it?"}
    args = json.dumps({"space": SPACE, "event": event})
    record = await cli.json("programs", "run", "triage@v1", "--args", args)
    assert (record["status"], record["result"]) == ("ok", {"ok": True, "label": "question"})
    assert (record["triggerId"], record["program"]) == ("manual:triage@v1", "triage@v1")
    [stored] = (await admin.runs(SPACE, trigger="manual:triage@v1"))["runs"]
    assert stored == record
    texts = [m.text for m in read_all(await admin.chat_messages(SPACE, chat))]
    assert texts == ["filed under question"]
    code, out, _ = await cli("programs", "run", "triage@v1", "--args", args)
    assert code == 0
    assert "status    ok\n" in out and 'result    {"ok": true, "label": "question"}' in out


async def test_a_failing_manual_run_exits_1_with_its_traceback(cli: Cli, tmp_path: Path):
    path = tmp_path / "failing.py"
    path.write_text(FAILING)
    await cli("programs", "publish", str(path), "--as", "failing@v1")
    code, out, _ = await cli("programs", "run", "failing@v1", "--args", '{"x": "input"}')
    assert code == 1
    assert "status    error\n" in out
    assert 'File "failing@v1", line 5, in main' in out
    assert "ValueError: bad input" in out and "stderr:\n  about to fail" in out
    code, out, _ = await cli("programs", "run", "failing@v1", "--args", "{}", "--json")
    record = json.loads(out)
    assert code == 1 and record["status"] == "error" and record["error"].endswith("KeyError: 'x'")


async def test_a_manual_run_past_its_timeout_is_a_timeout(cli: Cli, tmp_path: Path):
    path = tmp_path / "slow.py"
    path.write_text("import time\n\ndef main(args):\n    time.sleep(30)\n")
    await cli("programs", "publish", str(path), "--as", "slow@v1")
    code, out, _ = await cli("programs", "run", "slow@v1", "--timeout", "0.5", "--json")
    assert code == 1 and json.loads(out)["status"] == "timeout"


async def test_a_manual_run_of_an_unknown_program_is_an_error_run(cli: Cli):
    code, out, _ = await cli("programs", "run", "ghost@v1", "--json")
    record = json.loads(out)
    assert code == 1 and (record["status"], record["reason"]) == ("error", "unknown_program")
