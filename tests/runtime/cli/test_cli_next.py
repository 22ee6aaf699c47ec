"""`baton next`: fire times of a spec or a record, DST notes, JSON, and bad input (exit 2)."""

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

from core.clock import FakeClock
from runtime.cli.main import build_parser, main
from runtime.cli.next import run

BERLIN = ["--cron", "30 2 * * *", "--tz", "Europe/Berlin"]


def baton_json(capsys, *argv: str) -> list[dict]:
    assert main(["next", *argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)["fires"]


def test_autumn_in_berlin_merges_the_repeated_hour(capsys):
    fires = baton_json(capsys, *BERLIN, "--from", "2026-10-24", "-n", "3")
    assert fires == [
        {"at": "2026-10-24T00:30:00.000Z", "local": "2026-10-24T02:30:00.000+02:00", "dst": None},
        {
            "at": "2026-10-25T00:30:00.000Z",
            "local": "2026-10-25T02:30:00.000+02:00",
            "dst": "merged",
        },
        {"at": "2026-10-26T01:30:00.000Z", "local": "2026-10-26T02:30:00.000+01:00", "dst": None},
    ]


def test_spring_in_berlin_shifts_out_of_the_gap(capsys):
    fires = baton_json(capsys, *BERLIN, "--from", "2026-03-29T00:00:00.000Z", "-n", "2")
    assert fires[0] == {
        "at": "2026-03-29T01:00:00.000Z",
        "local": "2026-03-29T03:00:00.000+02:00",
        "dst": "shifted",
    }
    assert fires[1]["at"] == "2026-03-30T00:30:00.000Z"


def test_a_fire_at_from_is_listed(capsys):
    fires = baton_json(
        capsys, "--cron", "0 9 * * *", "--from", "2026-01-01T09:00:00.000Z", "-n", "1"
    )
    assert [f["at"] for f in fires] == ["2026-01-01T09:00:00.000Z"]


def test_a_date_is_midnight_in_the_zone_even_when_midnight_is_in_the_gap(capsys):
    argv = ["--cron", "*/30 * * * *", "--tz", "America/Santiago", "-n", "1"]
    assert baton_json(capsys, *argv, "--from", "2026-01-10")[0]["at"] == "2026-01-10T03:00:00.000Z"
    # 6 Sep 2026 begins at 01:00 local (04:00Z): 00:00-01:00 does not exist
    assert baton_json(capsys, *argv, "--from", "2026-09-06")[0]["at"] == "2026-09-06T04:00:00.000Z"


def test_six_field_seconds_first(capsys):
    fires = baton_json(capsys, "--cron", "*/20 0 9 * * *", "--from", "2026-01-01", "-n", "4")
    assert [f["at"] for f in fires] == [
        "2026-01-01T09:00:00.000Z",
        "2026-01-01T09:00:20.000Z",
        "2026-01-01T09:00:40.000Z",
        "2026-01-02T09:00:00.000Z",
    ]


def test_human_table_is_aligned_and_explains_notes(capsys):
    assert main(["next", *BERLIN, "--from", "2026-10-24", "-n", "3"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["UTC", "LOCAL", "(Europe/Berlin)", "DST"]
    assert lines[2].startswith("2026-10-25T00:30:00.000Z  2026-10-25T02:30:00.000+02:00")
    assert lines[2].endswith("merged")
    assert lines[2].index("merged") == lines[0].index("DST")
    assert lines[-1].startswith("merged: ")


def test_once_at(capsys):
    at = "2026-12-01T09:00:00.000+01:00"
    fires = baton_json(capsys, "--at", at, "--from", "2026-11-01")
    assert fires == [{"at": "2026-12-01T08:00:00.000Z", "local": at, "dst": None}]
    assert baton_json(capsys, "--at", at, "--tz", "UTC", "--from", "2026-11-01")[0]["local"] == (
        "2026-12-01T08:00:00.000+00:00"
    )
    assert baton_json(capsys, "--at", at, "--from", "2026-12-02") == []
    assert main(["next", "--at", "1764576000", "--from", "2025-01-01"]) == 0
    assert "2025-12-01T08:00:00.000Z" in capsys.readouterr().out


def test_default_from_is_now_by_the_clock(capsys):
    args = build_parser().parse_args(["next", "--cron", "0 * * * *", "-n", "2", "--json"])
    assert run(args, FakeClock(datetime(2026, 5, 5, 10, 20, tzinfo=UTC))) == 0
    fires = json.loads(capsys.readouterr().out)["fires"]
    assert [f["at"] for f in fires] == ["2026-05-05T11:00:00.000Z", "2026-05-05T12:00:00.000Z"]


def write(tmp_path: Path, record: dict) -> str:
    path = tmp_path / "record.json"
    path.write_text(json.dumps(record))
    return str(path)


def test_record_file(tmp_path, capsys):
    record = {
        "id": "trg_1",
        "kind": "cron",
        "name": "nightly",
        "program": "nightly@v1",
        "spec": {"expr": "30 2 * * *", "tz": "Europe/Berlin", "future": "ignored"},
        "newerField": 1,
    }
    fires = baton_json(capsys, "--record", write(tmp_path, record), "--from", "2026-03-29")
    assert fires[0]["dst"] == "shifted"
    once = {"kind": "once", "spec": {"at": "2026-12-01T09:00:00.000+01:00"}}
    fires = baton_json(capsys, "--record", write(tmp_path, once), "--from", "2026-01-01")
    assert [f["at"] for f in fires] == ["2026-12-01T08:00:00.000Z"]


@pytest.mark.parametrize(
    ("argv", "prefix"),
    [
        (["--cron", "61 * * * *"], "baton: --cron: "),
        (["--cron", "* * *"], "baton: --cron: "),
        (["--cron", "0 9 * * *", "--tz", "Mars/Olympus"], "baton: --tz: unknown time zone"),
        (["--cron", "0 9 * * *", "--from", "yesterday"], "baton: --from: "),
        (["--cron", "0 9 * * *", "--from", "2026-01-01T00:00"], "baton: --from: "),
        (["--cron", "0 9 * * *", "--from", "0001-01-01"], "baton: --from: "),
        (["--cron", "0 9 * * *", "--from", "9999-12-31T23:59:59.000Z"], "baton: --from: "),
        (["--cron", "0 9 * * *", "-n", "0"], "baton: -n: "),
        (["--cron", "0 9 * * *", "-n", "lots"], "baton: -n: "),
        (["--at", "2026-12-01T09:00"], "baton: --at: "),
        (["--at", "soon"], "baton: --at: "),
        (["--record", "/nonexistent/record.json"], "baton: --record: cannot read"),
        ([], "baton: one of the arguments --cron --at --record is required"),
        (["--cron", "0 9 * * *", "--at", "2026-12-01T09:00:00.000Z"], "baton: argument --at"),
    ],
)
def test_bad_input_exits_2_with_one_line(capsys, argv, prefix):
    assert main(["next", *argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(prefix)
    assert captured.err.count("\n") == 1


@pytest.mark.parametrize(
    ("record", "message"),
    [
        ({"kind": "cron", "spec": {"expr": "nope"}}, "baton: --record: undecodable record: "),
        ({"kind": "cron", "spec": {"expr": "0 9 * * *", "tz": "X/Y"}}, "$.spec.tz"),
        ({"kind": "teleport", "spec": {}}, "baton: --record: undecodable record: "),
        ({"kind": "event", "spec": {"dataset": "chat_messages"}}, "event trigger has no fire"),
    ],
)
def test_bad_record_exits_2(tmp_path, capsys, record, message):
    assert main(["next", "--record", write(tmp_path, record)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("baton: --record: ") and message in err
    assert err.count("\n") == 1


def test_tz_is_refused_with_a_record(tmp_path, capsys):
    path = write(tmp_path, {"kind": "cron", "spec": {"expr": "0 9 * * *"}})
    assert main(["next", "--record", path, "--tz", "UTC"]) == 2
    assert capsys.readouterr().err.startswith("baton: --tz: ")


@pytest.mark.e2e  # the installed `baton` as a process
def test_installed_command_runs():
    baton = Path(sys.executable).parent / "baton"
    argv = [str(baton), "next", *BERLIN, "--from", "2026-10-24", "-n", "2", "--json"]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert [f["dst"] for f in json.loads(done.stdout)["fires"]] == [None, "merged"]
    bad = subprocess.run([*argv[:2], "--cron", "x"], capture_output=True, text=True, timeout=60)
    assert bad.returncode == 2
    assert bad.stderr.startswith("baton: --cron: ")
