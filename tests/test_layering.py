"""The one-way layering rule, checked on the source: triggers/ and programs/ stay independent.

- `triggers/` imports nothing from `programs/` or `runtime/`, does no I/O and reads no clock.
- `programs/` imports nothing from `runtime/` or `triggers/`.
- `core/` (the clock and the async kit) imports none of the packages.
"""

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

FORBIDDEN_IMPORTS = {
    "triggers": {
        "programs",
        "runtime",
        "aiohttp",
        "sqlite3",
        "sqlite_utils",
        "socket",
        "subprocess",
        "asyncio",
        "os",
        "pathlib",
        "io",
        "shutil",
        "time",
        "urllib",
        "http",
        "random",
    },
    "programs": {"runtime", "triggers"},
    "core": {"triggers", "programs", "runtime", "space"},  # the bottom: imports no package
}
# Calls that read a clock or touch files, whatever module they come through.
FORBIDDEN_CALLS = {"now", "utcnow", "today", "time", "monotonic", "perf_counter", "open", "sleep"}


def sources(package: str) -> list[Path]:
    return sorted((ROOT / package).rglob("*.py"))


def imported_roots(tree: ast.AST) -> set[str]:
    roots: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            roots.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            roots.add(node.module.split(".")[0])
    return roots


def called_names(tree: ast.AST) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            func = node.func
            if isinstance(func, ast.Attribute):
                names.add(func.attr)
            elif isinstance(func, ast.Name):
                names.add(func.id)
    return names


@pytest.mark.parametrize("package", sorted(FORBIDDEN_IMPORTS))
def test_package_imports_stay_inside_its_layer(package):
    assert sources(package), f"{package}/ has no modules"
    for path in sources(package):
        bad = imported_roots(ast.parse(path.read_text())) & FORBIDDEN_IMPORTS[package]
        assert not bad, f"{path.relative_to(ROOT)} imports {sorted(bad)}"


def test_triggers_reads_no_clock_and_opens_no_file():
    for path in sources("triggers"):
        bad = called_names(ast.parse(path.read_text())) & FORBIDDEN_CALLS
        assert not bad, f"{path.relative_to(ROOT)} calls {sorted(bad)}"


def test_the_checks_catch_a_violation():
    tree = ast.parse(
        "import os\nfrom runtime.x import y\nfrom datetime import datetime\ndatetime.now()"
    )
    assert imported_roots(tree) == {"os", "runtime", "datetime"}
    assert "now" in called_names(tree)
