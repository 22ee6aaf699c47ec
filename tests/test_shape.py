"""Shape of the code, checked on the source: the formatter lays it out, the design sizes it.

A module over 300 lines is reported as a warning (a concept may need the room) and fails
over 400. A function's body (its statements, not the signature the formatter spreads
over lines) over 40 lines fails unless the line before its `def` (or its decorators), or
its docstring, says why with `long:` (`# long: one table of all routes`). Today's
offenders are listed in KNOWN; a test fails when an entry is no longer needed, so the list
only shrinks. A module's docstring says what it owns and what it must not do in at most
12 lines; the story is docs/architecture.md's. No formatter opt-out comment anywhere:
`ruff format --check` is in CI.
"""

import ast
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "triggers", "programs", "runtime", "space")
WARN_MODULE_LINES = 300
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 40
MAX_DOCSTRING_LINES = 12
# fixed by the restructure; remove when gone
KNOWN: set[str] = set()
LOOSE = "dict[str, " + "Any]"
# where a JSON object handed on or read generically is the real thing (a program's args and
# result, an event or a message as a program or a responder gets it, a stored record or
# stamp, an answer kept as sent); everything else is a Struct. The CLI's are in CLI_EDGE_DICTS.
EDGE_DICTS = {
    "runtime/client/api.py": 1,  # /healthz's answer, as sent (it is no /v1 route)
    "runtime/chat/responders.py": 1,  # MessageJson: a message as a responder gets it
    "runtime/feeds/followed.py": 1,  # a message's `agent`, handed on in the event as sent
    "runtime/feeds/pages.py": 1,  # a stored record, fingerprinted as stored
    "runtime/fire/dispatch.py": 1,  # Event: a fire's event as its program gets it
    "runtime/fire/recorder.py": 1,  # StoredRun: the run as the space stored it (printed whole)
    "runtime/fire/secrets.py": 1,  # a program's args, its secrets resolved
    "runtime/health/verdicts.py": 1,  # a stamp (breaker, rollup) read generically
}
CLI_EDGE_DICTS = {  # the CLI reads the space's answers as `core` Structs; prints them as sent
    "runtime/cli/common.py": 1,  # Record: a trigger record (or merge patch) as a person writes it
    "runtime/cli/status.py": 1,  # Doc: what `baton status --json` prints, the answers as sent
}
MAX_LOOSE = 15  # in all of runtime/, the CLI included (issue 18)


def package_files() -> dict[str, str]:
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for package in PACKAGES
        if (ROOT / package).is_dir()
        for path in sorted((ROOT / package).rglob("*.py"))
    }


def explained(node: ast.FunctionDef | ast.AsyncFunctionDef, lines: list[str]) -> bool:
    """Whether the line above the def (or its decorators) or the docstring says `long:`."""
    first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
    above = lines[first - 2] if first >= 2 else ""
    return "long:" in above or "long:" in (ast.get_docstring(node) or "")


def long_functions(tree: ast.AST, lines: list[str], prefix: str = "") -> list[str]:
    """Qualified names of functions over the limit without a reason, nested ones included."""
    found = []
    for node in ast.iter_child_nodes(tree):
        name = f"{prefix}{getattr(node, 'name', '')}"
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            size = node.end_lineno - node.body[0].lineno + 1
            if size > MAX_FUNCTION_LINES and not explained(node, lines):
                found.append(name)
        scope = isinstance(node, ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        nested = f"{name}." if scope else prefix
        found.extend(long_functions(node, lines, nested))
    return found


def offenders(files: dict[str, str]) -> set[str]:
    """`path` for a module over the limit, `path:Qual.name` for a function over it."""
    found = set()
    for path, text in files.items():
        lines = text.splitlines()
        if len(lines) > MAX_MODULE_LINES:
            found.add(path)
        found.update(f"{path}:{name}" for name in long_functions(ast.parse(text), lines))
    return found


def docstring_lines(tree: ast.Module) -> int:
    """How many source lines the module's docstring spans, its quotes included (0: none)."""
    first = tree.body[0] if tree.body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)):
        return 0
    is_text = isinstance(first.value.value, str)
    return (first.end_lineno or first.lineno) - first.lineno + 1 if is_text else 0


def long_docstrings(files: dict[str, str]) -> set[str]:
    return {
        path
        for path, text in files.items()
        if docstring_lines(ast.parse(text)) > MAX_DOCSTRING_LINES
    }


def large_modules(files: dict[str, str]) -> list[str]:
    return sorted(
        f"{path} ({n} lines)"
        for path, text in files.items()
        if WARN_MODULE_LINES < (n := len(text.splitlines())) <= MAX_MODULE_LINES
    )


@pytest.mark.filterwarnings("default")
def test_large_modules_are_reported():
    large = large_modules(package_files())
    if large:
        warnings.warn(f"modules over {WARN_MODULE_LINES} lines: {', '.join(large)}", stacklevel=1)
    assert all(path in package_files() for path in (name.split(" ")[0] for name in large))


def test_nothing_opts_out_of_the_formatter():
    texts = {
        **package_files(),
        **{
            p.relative_to(ROOT).as_posix(): p.read_text()
            for d in ("tests", "bench")
            for p in (ROOT / d).rglob("*.py")
        },
    }
    marks = ("fmt: " + "skip", "fmt: " + "off")
    found = sorted(path for path, text in texts.items() if any(m in text for m in marks))
    assert found == []


def test_no_module_or_function_is_over_its_limit():
    found = offenders(package_files())
    new = found - KNOWN
    limits = f"{MAX_MODULE_LINES} lines a module, {MAX_FUNCTION_LINES} a function"
    assert not new, f"over {limits}: {sorted(new)}"
    stale = KNOWN - found
    assert not stale, f"within the limits now, remove from KNOWN: {sorted(stale)}"


def test_module_docstrings_are_short():
    found = long_docstrings(package_files())
    assert not found, f"module docstrings over {MAX_DOCSTRING_LINES} lines: {sorted(found)}"


def loose_dicts(files: dict[str, str]) -> dict[str, int]:
    """How often each module of the daemon (the CLI aside) spells a loose JSON object."""
    return {
        path: n
        for path, text in files.items()
        if path.startswith("runtime/") and not path.startswith("runtime/cli/")
        if (n := text.count(LOOSE))
    }


def test_loose_dicts_stand_only_at_the_edges():
    found = loose_dicts(package_files())
    more = {p: n for p, n in found.items() if n > EDGE_DICTS.get(p, 0)}
    assert not more, f"{LOOSE} beyond the edges in EDGE_DICTS (make it a Struct): {more}"
    fewer = {p: n for p, n in EDGE_DICTS.items() if found.get(p, 0) < n}
    assert not fewer, f"fewer now, lower EDGE_DICTS: {fewer}"


def runtime_loose_dicts(files: dict[str, str]) -> dict[str, int]:
    """How often each module of runtime/, the CLI included, spells a loose JSON object."""
    return {
        p: n for p, text in files.items() if p.startswith("runtime/") if (n := text.count(LOOSE))
    }


def test_runtime_holds_at_most_fifteen_loose_dicts_the_cli_included():
    found = runtime_loose_dicts(package_files())
    assert sum(found.values()) <= MAX_LOOSE, f"{LOOSE} in runtime/ over {MAX_LOOSE}: {found}"
    cli = {p: n for p, n in found.items() if p.startswith("runtime/cli/")}
    assert cli == CLI_EDGE_DICTS, f"the CLI reads answers as Structs (core.answers): {cli}"


def test_the_runtime_loose_dict_count_catches_a_violation():
    line = f"def f(x: {LOOSE}) -> {LOOSE}: ...\n"
    files = {"runtime/fire/x.py": line, "runtime/cli/y.py": line, "space/z.py": line}
    assert runtime_loose_dicts(files) == {"runtime/fire/x.py": 2, "runtime/cli/y.py": 2}


def test_the_loose_dict_count_catches_a_violation():
    line = f"def f(x: {LOOSE}) -> {LOOSE}: ...\n"
    files = {"runtime/fire/x.py": line, "runtime/cli/y.py": line, "space/z.py": line}
    assert loose_dicts(files) == {"runtime/fire/x.py": 2}


def test_the_docstring_check_catches_a_violation():
    def module(lines: int) -> str:
        return '"""Summary.\n' + "story\n" * (lines - 2) + '"""\nx = 1\n'

    files = {
        "core/long.py": module(MAX_DOCSTRING_LINES + 1),
        "core/fits.py": module(MAX_DOCSTRING_LINES),
        "core/none.py": "x = 1\n",
        "core/late.py": 'x = 1\n"""' + "not a docstring\n" * 20 + '"""\n',
    }
    assert docstring_lines(ast.parse(files["core/fits.py"])) == MAX_DOCSTRING_LINES
    assert long_docstrings(files) == {"core/long.py"}


def test_the_check_catches_a_violation():
    def body(indent: int, lines: int = MAX_FUNCTION_LINES + 1) -> str:
        return "".join(f"{' ' * indent}x{i} = {i}\n" for i in range(lines))

    files = {
        "space/big.py": "x = 1\n" * (MAX_MODULE_LINES + 1),
        "space/fine.py": "x = 1\n" * MAX_MODULE_LINES,
        "space/wide.py": "def f(\n" + "    a,\n" * 50 + "):\n    return a\n",
        "runtime/a.py": f"class A:\n    def run(self):\n{body(8)}",
        "runtime/b.py": f"# long: one table of every route\n@cache\ndef routes():\n{body(4)}",
        "runtime/c.py": f'def f():\n    """long: the loop reads in one place"""\n{body(4)}',
        "runtime/d.py": f"def outer():\n    def inner():\n{body(8)}",
        "runtime/e.py": f"def ok():\n{body(4, MAX_FUNCTION_LINES)}",
    }
    assert offenders(files) == {
        "space/big.py",
        "runtime/a.py:A.run",
        "runtime/d.py:outer",
        "runtime/d.py:outer.inner",
    }
