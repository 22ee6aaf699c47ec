"""`baton triggers get -o json` and `baton triggers apply -f FILE` against a real space:
the round trip changes nothing, apply goes by name (edit on the rev read, add, nothing else
touched), `--dry-run` prints the diff and sends nothing, bad input names file, record, field."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from clikit import SPACE, Cli

from runtime.cli.record_plan import WRITABLE

DIGEST = ("--name", "digest", "--cron", "0 8 * * 1-5", "--tz", "Europe/Berlin")
REMIND = ("--name", "remind", "--at", "2099-01-01T00:00:00+01:00", "--retry", "3")


async def seed(cli: Cli) -> dict[str, dict[str, Any]]:
    """Three records; `by name → record` as the space answers them."""
    for argv in (DIGEST, REMIND, ("--name", "chatty", "--chat", cli.world.chat)):
        await cli.json("triggers", "add", *argv, "--program", "p@v1")
    return await records(cli)


async def records(cli: Cli) -> dict[str, dict[str, Any]]:
    return {r["name"]: r for r in (await cli.world.admin.triggers(SPACE))["triggers"]}


def write(path: Path, docs: Any) -> str:
    path.write_text(json.dumps(docs, indent=2))
    return str(path)


async def test_get_gives_the_writable_fields_of_one_and_a_list_of_all(cli: Cli):
    space = await seed(cli)
    code, out, _ = await cli("triggers", "get", "digest", "-o", "json")
    one = json.loads(out)
    assert code == 0 and list(one) == [f for f in WRITABLE if f in one]
    assert set(one) >= {"name", "kind", "spec", "program", "args", "owner", "enabled", "limits"}
    assert one["spec"] == {"expr": "0 8 * * 1-5", "tz": "Europe/Berlin", "catchup": "none"} | {
        "graceSeconds": 30
    }
    assert one == {k: v for k, v in space["digest"].items() if k in one}  # as the API gives it
    assert "id" not in one and "rev" not in one and "lastStatus" not in one
    code, out, _ = await cli("triggers", "get")
    assert code == 0 and sorted(r["name"] for r in json.loads(out)) == sorted(space)
    assert (await cli.fails(1, "triggers", "get", "digets")).count("did you mean 'digest'")


async def test_applying_what_get_gave_changes_nothing_and_says_so(cli: Cli, tmp_path: Path):
    before = await seed(cli)
    _, out, _ = await cli("triggers", "get")
    code, said, _ = await cli(
        "triggers", "apply", "-f", write(tmp_path / "t.json", json.loads(out))
    )
    assert code == 0 and said.splitlines()[-1].endswith("nothing to change (3 as the file says)")
    assert await records(cli) == before  # not a rev moved


async def test_apply_edits_by_name_adds_a_new_one_and_touches_nothing_else(
    cli: Cli, tmp_path: Path
):
    before = await seed(cli)
    _, out, _ = await cli("triggers", "get", "digest")
    digest = json.loads(out) | {"args": {"lang": "de"}}
    digest["limits"]["timeoutSeconds"] = 30
    fresh = {"name": "weekly", "kind": "cron", "spec": {"expr": "0 9 * * 1"}, "program": "w@v1"}
    path = write(tmp_path / "t.json", [digest, fresh])

    code, out, err = await cli("triggers", "apply", "-f", path, "--dry-run")
    assert code == 0, err
    assert out.splitlines() == [
        f"digest ({before['digest']['id']}): would edit",
        '  args.lang: - → "de"',
        "  limits.timeoutSeconds: 60 → 30",
        "weekly: would create",
        '  name: - → "weekly"',
        '  kind: - → "cron"',
        '  spec.expr: - → "0 9 * * 1"',
        '  program: - → "w@v1"',
        f"{path}: dry run, nothing changed: 1 to create, 1 to edit, 0 unchanged",
    ]
    assert await records(cli) == before

    code, out, _ = await cli("triggers", "apply", "-f", path, "--note", "from git")
    assert code == 0 and out.splitlines()[-1] == f"applied {path}: 1 created, 1 edited, 0 unchanged"
    after = await records(cli)
    assert after["digest"]["rev"] == before["digest"]["rev"] + 1
    assert after["digest"]["args"] == {"lang": "de"}
    assert after["digest"]["limits"]["timeoutSeconds"] == 30
    assert after["digest"]["spec"] == before["digest"]["spec"]  # fire times untouched
    assert after["weekly"]["program"] == "w@v1" and after["weekly"]["rev"] == 1
    assert (after["remind"], after["chatty"]) == (before["remind"], before["chatty"])
    code, out, _ = await cli("triggers", "apply", "-f", path)  # idempotent
    assert code == 0 and "nothing to change (2 as the file says)" in out
    assert await records(cli) == after


async def test_apply_json_reports_each_step(cli: Cli, tmp_path: Path):
    await seed(cli)
    path = write(tmp_path / "t.json", {"name": "remind", "retry": None})
    done = await cli.json("triggers", "apply", "-f", path)
    (step,) = done["triggers"]
    assert (done["dryRun"], step["action"], step["body"]) == (False, "edit", {"retry": None})
    (change,) = step["changes"]  # the retry as the runtime goes by it: defaults filled in
    assert (change["field"], change["old"]["attempts"], change["new"]) == ("retry", 3, None)
    assert (await records(cli))["remind"]["retry"] is None


async def test_an_instant_written_another_way_is_the_same_instant(cli: Cli, tmp_path: Path):
    before = await seed(cli)
    path = write(tmp_path / "t.json", {"name": "remind", "spec": {"at": "2098-12-31T23:00:00Z"}})
    code, out, _ = await cli("triggers", "apply", "-f", path)
    assert code == 0 and "nothing to change" in out and await records(cli) == before


@pytest.mark.parametrize(
    ("docs", "said"),
    [
        ("{not json", "t.json: not JSON: "),
        ("[1]", "t.json: [0]: a record is a JSON object"),
        ('"digest"', "t.json: holds str, not a record or a list"),
        ('[{"kind": "cron"}]', "t.json: [0]: `name` is required (apply goes by it) - at `$.name`"),
        ('[{"name": "a"}, {"name": "a"}]', "t.json: [1] 'a': the name of [0] too"),
    ],
)
async def test_a_file_that_is_no_list_of_records_is_exit_2(cli: Cli, tmp_path: Path, docs, said):
    (tmp_path / "t.json").write_text(docs)
    err = await cli.fails(2, "triggers", "apply", "-f", str(tmp_path / "t.json"))
    assert said in err


@pytest.mark.parametrize(
    ("doc", "said"),
    [
        (
            {"name": "digest", "limits": {"timeoutSeconds": 0}},
            "[1] 'digest': Expected `float` > 0.0 - at `$.limits.timeoutSeconds`",
        ),
        (
            {"name": "new", "kind": "cron", "spec": {"expr": "61 * * * *"}, "program": "n@v1"},
            "[1] 'new': invalid cron expression '61 * * * *'",
        ),
        (
            {"name": "new", "kind": "cron", "program": "n@v1"},
            "[1] 'new': Object missing required field `spec`",
        ),
        ({"name": "digest", "id": "trg_x"}, "[1] 'digest': `id` is written by the server"),
        ({"name": "digest", "color": "red"}, "[1] 'digest': Object contains unknown field `color`"),
    ],
)
async def test_a_bad_record_is_exit_2_naming_file_record_and_field_and_nothing_changes(
    cli: Cli, tmp_path: Path, doc, said
):
    before = await seed(cli)
    good = {"name": "remind", "enabled": False}  # valid, before the bad one: not applied either
    path = write(tmp_path / "t.json", [good, doc])
    err = await cli.fails(2, "triggers", "apply", "-f", path)
    assert f"baton: {path}: {said}" in err, err
    assert await records(cli) == before


async def test_apply_of_a_file_that_is_not_there_is_exit_2(cli: Cli, tmp_path: Path):
    err = await cli.fails(2, "triggers", "apply", "-f", str(tmp_path / "none.json"))
    assert err.startswith("baton: -f: cannot read ") and "none.json" in err


@pytest.mark.e2e  # get and apply as processes, as a user runs them
async def test_get_then_apply_as_processes(cli: Cli, tmp_path: Path):
    before = await seed(cli)
    code, out, err = await cli.process("triggers", "get", "-o", "json")
    assert code == 0, err
    path = write(tmp_path / "triggers.json", json.loads(out))
    code, out, err = await cli.process("triggers", "apply", "-f", path)
    assert (code, err) == (0, "") and out.endswith("nothing to change (3 as the file says)\n")
    assert await records(cli) == before

    docs = json.loads(Path(path).read_text())
    for doc in docs:
        if doc["name"] == "digest":
            doc["spec"]["expr"] = "0 9 * * 1-5"
    docs.append({"name": "extra", "kind": "once", "spec": {"at": "2099-06-01T00:00:00Z"}})
    docs[-1] |= {"program": "p@v1"}
    write(tmp_path / "triggers.json", docs)
    code, out, err = await cli.process("triggers", "apply", "-f", path, "--dry-run")
    assert code == 0 and '  spec.expr: "0 8 * * 1-5" → "0 9 * * 1-5"' in out.splitlines()
    assert "extra: would create" in out and await records(cli) == before
    code, out, err = await cli.process("triggers", "apply", "-f", path)
    assert code == 0 and out.endswith("1 created, 1 edited, 2 unchanged\n"), out + err
    after = await records(cli)
    assert after["digest"]["spec"]["expr"] == "0 9 * * 1-5" and "extra" in after
    assert after["remind"] == before["remind"]

    docs[-1]["limits"] = {"memoryMB": 0}
    write(tmp_path / "triggers.json", docs)
    code, out, err = await cli.process("triggers", "apply", "-f", path)
    assert (code, out) == (2, "") and err.count("\n") == 1
    assert err.startswith(f"baton: {path}: [3] 'extra': ") and "`$.limits.memoryMB`" in err
    assert await records(cli) == after
