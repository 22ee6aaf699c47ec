"""`baton space create|list`, `baton devices`, `baton --version`, and what every verb shares:
the defaults from the environment, an unreachable server, a refused token, JSON errors."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import socket
from pathlib import Path

import aiohttp
import pytest
from aiohttp import web
from clikit import SPACE, Cli, World

from runtime.cli import space as space_cli
from runtime.cli.main import build_parser, main
from runtime.client.api import ApiError
from space.dbthread import db_call
from space.opening import WAKES
from space.store import STORE
from space.store.postgres import PostgresStore
from space.token_store import Role


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


async def test_space_create_prints_the_id_and_general_chat_then_list(cli: Cli, world: World):
    code, out, _ = await cli("space", "create", "work", "--name", "Work")
    header, row = out.splitlines()
    assert code == 0 and header.split() == ["ID", "GENERAL", "CHAT"]
    space_id, chat = row.split()
    assert space_id == "work" and chat.startswith("chat_")
    created = await cli.json("space", "create", "play")
    assert created["id"] == "play" and created["generalChat"].startswith("chat_")
    listed = await cli.json("space", "list")
    assert [s["id"] for s in listed["spaces"]] == sorted([SPACE, "work", "play"])
    code, out, _ = await cli("space", "list")
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["ID", "NAME", "GENERAL"]
    assert any(line.startswith("work ") and " Work " in line and chat in line for line in lines)
    err = await cli.fails(1, "space", "create", "work")
    assert err.startswith("baton: space_exists: ")
    err = await cli.fails(2, "space", "create", "Not Valid")
    assert err.startswith("baton: ID: 'Not Valid' must match")
    # the new space is usable at once: a chat message to its general chat
    code, out, _ = await cli("chat", "send", "hi", "--space", "work")
    assert code == 0 and f"to chat {chat}" in out


async def test_devices_shows_who_is_live_and_holds_the_lease(cli: Cli, world: World):
    code, out, _ = await cli("devices")
    assert (code, out) == (0, "no device has joined space home yet\n")
    await world.admin.device_put(SPACE, "box", {"name": "Box", "priority": 10})
    await world.admin.device_put(SPACE, "phone", {"name": "Phone"})
    await world.admin.election_claim(SPACE, {"peer": "box", "term": 0})
    code, out, _ = await cli("devices")
    header, box, phone, _, lease = out.splitlines()
    assert header.split()[:3] == ["ACTIVE", "PEER", "NAME"]
    assert box.split()[:5] == ["*", "box", "Box", "10", "yes"]
    assert phone.split()[:4] == ["phone", "Phone", "0", "yes"]
    assert box.index("box") == header.index("PEER") == phone.index("phone")
    assert lease.startswith("lease: term 1, until ") and lease.endswith("Z")
    found = await cli.json("devices")
    assert [d["peer"] for d in found["devices"]] == ["box", "phone"]
    assert found["election"]["active"] == "box"


def test_version(capsys: pytest.CaptureFixture[str]):
    assert main(["--version"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("baton ") and out.strip() != "baton"


@pytest.mark.parametrize(
    ("argv", "verbs"),
    [
        (["device", "--peer", "p"], {"up", "device"}),  # `baton device` loads its module alone
        (["status"], {"status"}),
        (["--help"], {"up", "device", "status", "space", "triggers", "next"}),  # all of them
        (["nonsense"], {"up", "device", "status", "space", "triggers", "next"}),
    ],
)
def test_the_parser_loads_the_module_of_the_verb_asked_for(argv: list[str], verbs: set[str]):
    parser = build_parser(argv)
    (sub,) = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    assert verbs <= set(sub.choices) and (len(sub.choices) == len(verbs)) == (len(verbs) < 3)


@pytest.mark.parametrize(
    "argv",
    [
        ["triggers", "list"],
        ["triggers", "show", "trg_x"],
        ["triggers", "add", "--name", "t", "--cron", "* * * * *", "--program", "p@v1"],
        ["triggers", "pause", "trg_x"],
        ["triggers", "run", "trg_x"],
        ["runs"],
        ["runs", "--follow"],
        ["chat", "send", "hi"],
        ["chat", "tail"],
        ["devices"],
        ["space", "list"],
        ["space", "create", "x"],
        ["status"],
        ["programs", "list"],
    ],
)
async def test_an_unreachable_server_is_exit_1_with_one_line(
    argv: list[str], world: World, capsys: pytest.CaptureFixture[str]
):
    url = f"http://127.0.0.1:{closed_port()}"
    flags = ["--url", url, "--token-file", str(world.token_file)]
    assert await cli_main([*argv, *flags]) == 1
    out, err = capsys.readouterr()
    assert (out, err) == ("", f"baton: unreachable: cannot reach {url} (is `baton up` running?)\n")
    assert await cli_main([*argv, *flags, "--json"]) == 1
    out, err = capsys.readouterr()
    assert out == "" and json.loads(err) == {
        "error": "unreachable",
        "detail": f"cannot reach {url} (is `baton up` running?)",
    }


async def test_a_refused_token_and_an_unreadable_token_file(
    cli: Cli, world: World, tmp_path: Path, capsys: pytest.CaptureFixture[str]
):
    wrong = tmp_path / "wrong.token"
    wrong.touch(mode=0o600)  # owner-only, as a token file must be
    wrong.write_text("not-a-token\n")
    code = await cli_main(["triggers", "list", "--url", world.url, "--token-file", str(wrong)])
    err = capsys.readouterr().err
    assert code == 1 and err.startswith(f"baton: unauthorized: {world.url} refused the token")
    code = await cli_main(["devices", "--url", world.url, "--token-file", str(tmp_path / "no")])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("baton: --token-file: cannot read ")


async def test_the_environment_names_the_space(
    world: World, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
):
    monkeypatch.setenv("BATON_URL", world.url)
    monkeypatch.setenv("BATON_TOKEN_FILE", str(world.token_file))
    monkeypatch.setenv("BATON_SPACE", SPACE)
    assert await cli_main(["chat", "send", "from the environment", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["objectId"] == world.chat
    monkeypatch.setenv("BATON_SPACE", "nowhere")
    assert await cli_main(["triggers", "list"]) == 1
    assert capsys.readouterr().err.startswith("baton: unknown_space: ")


async def cli_main(argv: list[str]) -> int:
    return await asyncio.to_thread(main, argv)


async def test_status_says_when_the_space_cannot_write(cli: Cli, world: World):
    code, out, _ = await cli("status")
    assert code == 0 and "storage" not in out
    await db_call(world.app, lambda db: db.execute("PRAGMA query_only = ON"))
    with contextlib.suppress(ApiError):
        await world.admin.device_put(SPACE, "box", {"name": "Box"})
    code, out, _ = await cli("status")
    assert code == 0
    line = out.splitlines()[1]
    assert line.startswith("space storage unavailable (read_only since ") and "Z)" in line
    found = await cli.json("status")
    assert found["health"]["status"] == "storage_unavailable"
    await db_call(world.app, lambda db: db.execute("PRAGMA query_only = OFF"))
    await world.admin.device_put(SPACE, "box", {"name": "Box"})
    assert (await cli.json("status"))["health"] == {"status": "ok"}


@pytest.mark.parametrize("verb", [["space", "serve"], ["up"]])
def test_history_days_is_a_flag_of_the_servers_checked_before_anything_starts(verb: list[str]):
    args = build_parser([*verb]).parse_args([*verb, "--history-days", "45"])
    assert args.history_days == 45.0
    assert build_parser([*verb]).parse_args(verb).history_days == 30.0
    assert main([*verb, "--history-days", "0"]) == 2


async def test_serve_runs_on_postgresql(
    pg_dsn: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    """`--db postgresql://…` (or `$BATON_DB`) builds a server on the PostgreSQL store, its
    token file in the data directory, no SQLite file."""
    monkeypatch.setenv("BATON_DATA", str(tmp_path / "data"))
    monkeypatch.setenv("BATON_DB", pg_dsn)
    argv = ["space", "serve", "--port", "0", "--pg-pool", "3", "--pg-poll-only"]
    args = build_parser(argv).parse_args(argv)
    assert args.db is None
    app, token_file = space_cli.build_app(args)
    assert token_file == tmp_path / "data" / "admin.token"
    runner = web.AppRunner(app)
    await runner.setup()
    try:
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        async with aiohttp.ClientSession() as session, session.get(f"{url}/healthz") as resp:
            assert resp.status == 200
        assert app[WAKES].listen is False and app[STORE].pool.pool.get_max_size() == 3
        assert sorted(p.name for p in (tmp_path / "data").iterdir()) == ["admin.token"]
    finally:
        await runner.cleanup()
    argv = ["space", "serve", "--db", pg_dsn, "--pg-pool", "0"]
    assert main(argv) == 2  # a pool of no connection is refused before anything opens


def test_space_token_mints_into_a_postgresql_store(
    pg_dsn: str, capsys: pytest.CaptureFixture[str]
) -> None:
    async def make_space() -> None:
        store = await PostgresStore.open(pg_dsn)
        try:
            await store.create_space("attic", "Attic")
        finally:
            await store.close()

    async def whose(token: str) -> tuple[Role, str | None, str | None]:
        store = await PostgresStore.open(pg_dsn)
        try:
            who = await store.lookup_token(token)
        finally:
            await store.close()
        return who.role, who.peer, who.space

    argv = ["space", "token", "--peer", "box", "--space", "attic", "--db", pg_dsn]
    assert main(argv) == 2  # no such space yet
    assert "--space: no space 'attic' in the PostgreSQL store" in capsys.readouterr().err
    asyncio.run(make_space())
    assert main(argv) == 0
    token = capsys.readouterr().out.strip()
    assert asyncio.run(whose(token)) == (Role.DEVICE, "box", "attic")


REPORT = {  # what a device says of itself in its heartbeat while it runs
    "responder": "builtin",
    "chatWatch": {"ready": True, "reason": "", "chats": []},
    "containment": {"level": "full", "weaker": []},
    "subscriptions": [{"chat": "chat_x", "state": "live", "triggers": ["chat-watch"]}],
}


@pytest.mark.e2e  # `baton status` as a process
async def test_status_never_shows_an_offline_device_ready(cli: Cli, world: World):
    """What a device last said of itself is not how it stands once it is offline."""
    await world.admin.device_put(SPACE, "box", {"name": "Box", "status": REPORT})
    await world.admin.device_put(SPACE, "box", {"stopped": True})  # signed off: offline
    code, out, err = await cli.process("status")
    assert code == 0, err
    box = [line for line in out.splitlines() if line.startswith("box ")]
    assert box and all("  ready" not in line and "full" not in line for line in box), out
    assert any("not ready: offline since " in line for line in box), out
    assert not any(line.split()[2:3] == ["live"] for line in box), out
    code, out, err = await cli.process("status", "--json")
    found = json.loads(out)
    (responder,) = found["responders"]
    assert responder["ready"] is False and responder["reason"].startswith("offline since ")
    assert [s["state"] for s in found["subscriptions"]] == ["stopped"]


@pytest.mark.e2e  # `baton` as processes, exactly as a user types it
async def test_the_cli_edges_say_what_they_mean(cli: Cli, world: World):
    code, out, err = await cli.process(flags=False)
    assert (code, out) == (2, "") and err.startswith("baton: a command is needed: one of next, ")
    code, out, err = await cli.process("triggers", "bogus", flags=False)
    assert (code, out) == (2, "")
    assert err.startswith("baton: triggers: unknown verb 'bogus': one of add, "), err
    assert "triggers_command" not in err
    code, out, err = await cli.process("runs", "--url", "not-a-url", flags=False)
    assert (code, out) == (2, "") and err.startswith("baton: --url: 'not-a-url' is not an http")
    code, out, err = await cli.process("runs", "--trigger", "trg_nope")
    assert (code, out) == (0, "no runs in space home matching --trigger trg_nope\n"), err
    code, out, err = await cli.process("space", "token", "list")
    header = out.splitlines()[0].split()
    assert code == 0 and "CREATEDAT" not in header and header[4:6] == ["CREATED", "EXPIRES"]
    token = [f for f in world.flags() if f.endswith(".token")]
    code, out, err = await cli.process(  # minted over the API, with --url as list takes it
        "space",
        "token",
        "--peer",
        "box",
        "--space",
        SPACE,
        "--url",
        world.url,
        "--token-file",
        token[0],
        flags=False,
    )
    assert code == 0 and out.startswith("btd_"), err
    for argv in (("status", "--json"), ("space", "token", "list", "--json")):
        code, out, err = await cli.process(*argv)
        assert code == 0 and out.count("\n") == 1, (argv, out)  # one style: one compact line


async def test_status_shows_each_devices_clock_offset_and_warns_past_two_seconds(
    cli: Cli, world: World
):
    clock = {"offsetMs": -30000.0, "rttMs": 1.2, "warning": True}
    await world.admin.device_put(SPACE, "fast", {"name": "Fast", "status": {"clock": clock}})
    near = {"offsetMs": 400.0, "rttMs": 1.0, "warning": False}
    await world.admin.device_put(SPACE, "near", {"name": "Near", "status": {"clock": near}})
    code, out, _ = await cli("status")
    assert code == 0
    lines = out.splitlines()
    assert lines[2].split()[-1] == "CLOCK"
    assert next(line for line in lines if line.startswith("fast ")).endswith("+30.0 s")
    assert next(line for line in lines if line.startswith("near ")).endswith("-0.4 s")
    warned = lines.index("clock more than 2 s off the space's (it fires by the space's):")
    assert lines[warned + 1 :][:1] == ["  fast: +30.0 s"]
