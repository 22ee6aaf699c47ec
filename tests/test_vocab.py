"""One vocabulary, checked on the source: statuses and their sets live in `core/vocab.py` only.

- No module but `core/vocab.py` defines an enum of run statuses or turn outcomes (by name,
  or by values: a second enum spelling `ok`/`error`/… is the same vocabulary again).
- No module but `core/vocab.py` writes a set of run-status literals (`{"error", "timeout"}`,
  `x in ("skipped", "rejected")`, a dict keyed by them): which statuses failed, ran or did
  not run is `core.vocab.FAILED`, `RAN`, `NOT_RAN`.
- `core/` imports the standard library and msgspec only: every package may import it.
"""

import ast
import sys
from pathlib import Path

import pytest

from core import vocab

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("core", "triggers", "programs", "runtime", "space", "bench")
HOME = ROOT / "core" / "vocab.py"
NAMES = {"RunStatus", "TurnOutcome", "RunReason", "HealthReason", "Overlap"}
STATUSES = {s.value for s in vocab.RunStatus} | {o.value for o in vocab.TurnOutcome}


def sources() -> list[Path]:
    return sorted(p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py") if p != HOME)


def _strings(nodes: list[ast.expr]) -> set[str]:
    return {n.value for n in nodes if isinstance(n, ast.Constant) and isinstance(n.value, str)}


def second_vocabulary(tree: ast.AST) -> list[str]:
    """What in `tree` restates the vocabulary: enum classes and status literal sets."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            values = _strings([s.value for s in node.body if isinstance(s, ast.Assign)])
            if node.name in NAMES or len(values & STATUSES) >= 2:
                found.append(f"class {node.name} (line {node.lineno})")
        elif isinstance(node, ast.Set | ast.Tuple | ast.List):
            if len(_strings(node.elts) & STATUSES) >= 2:
                found.append(f"status set {sorted(_strings(node.elts))} (line {node.lineno})")
        elif isinstance(node, ast.Dict):
            keys = _strings([k for k in node.keys if k is not None])
            if len(keys & STATUSES) >= 2:
                found.append(f"dict keyed by statuses {sorted(keys)} (line {node.lineno})")
    return found


def test_the_vocabulary_is_written_once():
    assert sources(), "no modules found"
    for path in sources():
        bad = second_vocabulary(ast.parse(path.read_text()))
        assert not bad, f"{path.relative_to(ROOT)}: {bad}; use core.vocab"


def test_core_imports_the_standard_library_and_msgspec_only():
    allowed = set(sys.stdlib_module_names) | {"msgspec", "core"}
    for path in sorted((ROOT / "core").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                roots = {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                roots = {node.module.split(".")[0]}
            else:
                continue
            assert roots <= allowed, f"{path.relative_to(ROOT)} imports {sorted(roots - allowed)}"


@pytest.mark.parametrize(
    "source",
    [
        "class RunStatus(enum.StrEnum):\n    OK = 'ok'",
        "class Ending(enum.StrEnum):\n    A = 'ok'\n    B = 'error'",
        "FAILURES = frozenset({'error', 'timeout', 'crashed'})",
        "ran = status not in ('skipped', 'rejected')",
        "FIELD = {'ok': 'ok', 'error': 'errors'}",
    ],
)
def test_the_check_catches_a_second_vocabulary(source):
    assert second_vocabulary(ast.parse(source))


def test_the_check_leaves_single_words_alone():
    assert not second_vocabulary(ast.parse("status = 'ok' if ok else 'error'\nx = {'ok': 1}"))
