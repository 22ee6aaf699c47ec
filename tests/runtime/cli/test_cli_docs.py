"""docs/cli.md lists every verb and every flag the parser defines, and nothing it does not.

The parser is walked (`runtime.cli.completion.shape`, the walk the completion scripts come
from); docs/cli.md's "Every verb and flag" table has a row per command that takes flags or
has no verbs of its own, its third column naming the flags ("the space flags" standing for
the five every command that talks to a space shares).
"""

from __future__ import annotations

import re
from pathlib import Path

from runtime.cli.completion import shape
from runtime.cli.main import build_parser

DOC = Path(__file__).resolve().parents[3] / "docs" / "cli.md"
SPACE_FLAGS = ("--url", "--token-file", "--space", "--data", "--json")
HELP = ("-h", "--help")
ROW = re.compile(r"^\| `baton(?P<path>[a-z -]*)` \| [^|]* \| (?P<flags>[^|]*) \|$", re.M)
FLAG = re.compile(r"`(-{1,2}[A-Za-z0-9][A-Za-z0-9-]*)`")


def parsed() -> dict[str, set[str]]:
    """Each command that needs a row: its flags, `--help` aside."""
    return {
        " ".join(path): {f for f in c.flags if f not in HELP}
        for path, c in shape(build_parser()).items()
        if not c.verbs or set(c.flags) - set(HELP)
    }


def documented() -> dict[str, set[str]]:
    section = DOC.read_text().split("\n## Every verb and flag\n", 1)
    assert len(section) == 2, "docs/cli.md has no section '## Every verb and flag'"
    rows: dict[str, set[str]] = {}
    for row in ROW.finditer(section[1]):
        cell = row["flags"]
        flags = set(FLAG.findall(cell)) | (set(SPACE_FLAGS) if "the space flags" in cell else set())
        path = row["path"].strip()
        assert path not in rows, f"`baton {path}` has two rows"
        rows[path] = flags
    return rows


def test_every_verb_of_the_parser_has_its_row_and_no_row_is_stale() -> None:
    want, have = parsed(), documented()
    missing = sorted(f"baton {p}".strip() for p in set(want) - set(have))
    stale = sorted(f"baton {p}".strip() for p in set(have) - set(want))
    assert not missing, f"docs/cli.md does not list: {', '.join(missing)}"
    assert not stale, f"docs/cli.md lists commands the parser does not have: {', '.join(stale)}"


def test_every_flag_of_every_verb_is_listed_and_none_is_stale() -> None:
    want, have = parsed(), documented()
    problems = []
    for path in sorted(set(want) & set(have)):
        name = f"baton {path}".strip()
        if missing := sorted(want[path] - have[path]):
            problems.append(f"{name} lacks {' '.join(missing)}")
        if stale := sorted(have[path] - want[path]):
            problems.append(f"{name} lists {' '.join(stale)}, which it does not take")
    assert not problems, "docs/cli.md: " + "; ".join(problems)


def test_every_verb_appears_in_the_synopsis_or_the_text_too() -> None:
    text = DOC.read_text().split("\n## Every verb and flag\n", 1)[0]
    absent = [p for p in parsed() if p and f"baton {p}" not in text]
    assert not absent, f"docs/cli.md's text never shows: {', '.join(f'baton {p}' for p in absent)}"
