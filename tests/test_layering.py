"""The layering rules, checked on the source (docs/architecture.md draws them).

- `core/` imports none of our packages; `triggers/` and `programs/` import only `core/`,
  and `triggers/` does no I/O and reads no clock.
- Only the CLI imports `space/`; `space/` imports no `runtime/`, and of `triggers/` and
  `programs/` only the shared pure rules (`SPACE_MAY_IMPORT`).
- The rooms of `runtime/` import only what `ROOMS` gives them (the architecture page's
  rooms table is the same); only the Clock reads a clock in `runtime/` and `space/`.
- No import circles. Where the code breaks a rule today, a KNOWN list names the place;
  a test fails when an entry is no longer needed, so the lists only shrink.
"""

import ast
import functools
import re
from collections.abc import Iterator
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


# --- who may import space/ -----------------------------------------------------------

PACKAGES = ("core", "triggers", "programs", "runtime", "space")
CLI = ("runtime/cli/",)
CLOCK_MODULES = {"runtime/clock.py", "core/clock.py"}
# fixed by the restructure; remove when gone
KNOWN_SPACE_ON_RUNTIME: set[str] = set()


@functools.cache
def package_files() -> dict[str, str]:
    """`runtime/clock.py` → its source, for every module of our packages (read once)."""
    return {
        path.relative_to(ROOT).as_posix(): path.read_text()
        for package in PACKAGES
        if (ROOT / package).is_dir()
        for path in sources(package)
    }


@functools.cache
def parse(text: str) -> ast.Module:
    return ast.parse(text)


def space_importers(files: dict[str, str]) -> set[str]:
    """Modules outside space/ and the CLI that import space/."""
    return {
        name
        for name, text in files.items()
        if not name.startswith(("space/", *CLI)) and "space" in imported_roots(parse(text))
    }


def runtime_importers(files: dict[str, str]) -> set[str]:
    """Modules of space/ that import runtime/."""
    return {
        name
        for name, text in files.items()
        if name.startswith("space/") and "runtime" in imported_roots(parse(text))
    }


def test_only_the_cli_imports_space():
    assert space_importers(package_files()) == set()


def test_space_imports_nothing_from_runtime():
    found = runtime_importers(package_files())
    assert found <= KNOWN_SPACE_ON_RUNTIME, f"space/ imports runtime/: {sorted(found)}"
    stale = KNOWN_SPACE_ON_RUNTIME - found
    assert not stale, f"no longer import runtime/, remove from KNOWN_SPACE_ON_RUNTIME: {stale}"


# --- the rooms of runtime/ ----------------------------------------------------------

# room → the rooms of runtime/ its modules may import ("" is runtime/ itself: the device,
# its bus and its supervisor). core/ and the pure packages are open to every room but
# the client and the chat, which see only `triggers.records` of them.
ROOMS: dict[str, set[str]] = {
    "client": set(),
    "chat": {"client"},
    "election": {"client", ""},
    "fire": {"client", "health", ""},
    "feeds": {"client", "fire", "health", ""},
    "health": {"client", "election", "fire", ""},
    "": {"client", "chat", "election", "fire", "feeds", "health", ""},
    "cli": {"client", "chat", "election", "fire", "feeds", "health", "", "cli"},
}
STANDALONE = {"client", "chat"}  # of triggers/ and programs/, only `triggers.records`
SPACE_MAY_IMPORT = {
    "triggers.records",
    "triggers.bounds",
    "programs.refs",
    "programs.source",
    "triggers.why",  # `why` answers from the space's history with the pure chain
    "triggers.whychain",
    "triggers.facts",
    "triggers.slots",
    "triggers.policies",  # the claim fence's window and retry keys
    "triggers.backfill",
    "triggers.schedule",  # a record's next fires (`GET …/next`), as `triggers show` lists them
    "programs.breaker",  # `/metrics` reads a record's breaker stamp as a device does
}


def room_of(file: str) -> str | None:
    """`runtime/fire/ticker.py` → "fire"; `runtime/device.py` → ""; elsewhere None."""
    parts = file.split("/")
    if parts[0] != "runtime":
        return None
    return parts[1] if len(parts) > 2 else ""


def imported_modules(tree: ast.AST) -> set[str]:
    """Every dotted name imported (`from a.b import c` gives a.b and a.b.c)."""
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def room_breaches(files: dict[str, str]) -> set[str]:
    rooms = {room_of(f) for f in files} - {None}
    breaches = set()
    for name, text in files.items():
        room = room_of(name)
        if room is None:
            continue
        for imported in imported_modules(parse(text)):
            parts = imported.split(".")
            if parts[0] == "runtime" and len(parts) > 1:
                target = parts[1] if parts[1] in rooms else ""
                if target != room and target not in ROOMS[room]:
                    breaches.add(f"{name} imports {imported}")
            elif (
                room in STANDALONE
                and parts[0] in {"triggers", "programs", "space"}
                and imported not in {"triggers", "triggers.records"}
                and not imported.startswith("triggers.records.")
            ):
                breaches.add(f"{name} imports {imported}")
    return breaches


def space_reaches(files: dict[str, str]) -> set[str]:
    """What space/ imports of triggers/ and programs/ beyond the shared pure rules."""
    found = set()
    for name, text in files.items():
        if not name.startswith("space/"):
            continue
        for imported in imported_modules(parse(text)):
            if imported.split(".")[0] in {"triggers", "programs"} and "." in imported:
                module = ".".join(imported.split(".")[:2])
                if module not in SPACE_MAY_IMPORT:
                    found.add(f"{name} imports {imported}")
    return found


def test_each_room_imports_only_the_rooms_it_may():
    files = package_files()
    assert {room_of(f) for f in files} - {None} == set(ROOMS), "a room without a rule"
    assert room_breaches(files) == set()


def test_space_imports_only_the_shared_pure_rules():
    assert space_reaches(package_files()) == set()


def test_the_room_checks_catch_a_violation():
    files = {
        "runtime/fire/firing.py": "from runtime.chat.watch import ChatWatch\n",
        "runtime/chat/watch.py": "from triggers import health\nfrom triggers.records import X\n",
        "runtime/client/api.py": "from core import wire\n",
        "runtime/device.py": "from runtime.cli import demo\n",
        "runtime/cli/up.py": "from runtime.device import Device\n",
        "space/programs.py": (
            "from programs.loader import ProgramCache\nfrom programs import refs\n"
        ),
    }
    assert room_breaches(files) == {
        "runtime/fire/firing.py imports runtime.chat.watch",
        "runtime/fire/firing.py imports runtime.chat.watch.ChatWatch",
        "runtime/chat/watch.py imports triggers.health",
        "runtime/device.py imports runtime.cli",
        "runtime/device.py imports runtime.cli.demo",
    }
    assert space_reaches(files) == {
        "space/programs.py imports programs.loader",
        "space/programs.py imports programs.loader.ProgramCache",
    }


# --- only the Clock reads a clock ----------------------------------------------------

CLOCK_READS = {"time", "monotonic", "perf_counter", "time_ns", "monotonic_ns", "perf_counter_ns"}
WALL_READS = {"now", "utcnow", "today"}
LOOP_DEADLINES = {"timeout", "timeout_at", "call_later", "call_at"}
# fixed by the restructure; remove when gone
KNOWN_CLOCK_READS: set[tuple[str, str]] = set()


def dotted(node: ast.expr) -> str:
    """`a.b.c` for a chain of names and attributes; calls in it read as `f()`."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return f"{dotted(node.value)}.{node.attr}"
    if isinstance(node, ast.Call):
        return f"{dotted(node.func)}()"
    return "?"


def reads_a_clock(name: str, from_time: set[str]) -> bool:
    head, _, last = name.rpartition(".")
    if "clock" in head.lower():
        return False  # through a Clock
    return (
        (last in CLOCK_READS and (head == "time" or "loop" in head))
        or (last in WALL_READS and head.rpartition(".")[2] in {"datetime", "date"})
        or (last in LOOP_DEADLINES and (head == "asyncio" or "loop" in head))
        or (not head and last in from_time & CLOCK_READS)
    )


def clock_reads(tree: ast.AST) -> set[str]:
    """Calls that read the machine's or the loop's clock, named as written."""
    from_time = {
        alias.asname or alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "time"
        for alias in node.names
    }
    calls = (dotted(node.func) for node in ast.walk(tree) if isinstance(node, ast.Call))
    return {name for name in calls if reads_a_clock(name, from_time)}


def clock_readers(files: dict[str, str]) -> set[tuple[str, str]]:
    return {
        (name, read)
        for name, text in files.items()
        if name.startswith(("runtime/", "space/")) and name not in CLOCK_MODULES
        for read in clock_reads(parse(text))
    }


def test_only_the_clock_reads_a_clock():
    found = clock_readers(package_files())
    new = found - KNOWN_CLOCK_READS
    assert not new, f"clock reads outside the Clock: {sorted(new)}"
    stale = KNOWN_CLOCK_READS - found
    assert not stale, f"gone, remove from KNOWN_CLOCK_READS: {sorted(stale)}"


# --- no import circles ---------------------------------------------------------------

# fixed by the restructure; remove when gone
KNOWN_CIRCLES: set[tuple[str, ...]] = set()


def module_name(file: str) -> str:
    parts = file.removesuffix(".py").split("/")
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_names(tree: ast.AST, me: str, is_package: bool) -> Iterator[str]:
    """Every module name an import may load, at any depth, except under `if TYPE_CHECKING:`."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and dotted(node.test).endswith("TYPE_CHECKING"):
            for inner in node.orelse:
                yield from imported_names(inner, me, is_package)
            continue
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                package = me.split(".")[: len(me.split(".")) - node.level + is_package]
                base = ".".join([*package, base] if base else package)
            yield base
            yield from (f"{base}.{alias.name}" for alias in node.names)
        yield from imported_names(node, me, is_package)


def deepest(imported: str, modules: dict[str, str]) -> str | None:
    """The module of ours that `imported` names: itself, or the nearest package above it."""
    parts = imported.split(".")
    names = (".".join(parts[:i]) for i in range(len(parts), 0, -1))
    return next((name for name in names if name in modules), None)


def import_graph(modules: dict[str, str]) -> dict[str, set[str]]:
    """Module → the modules of ours it imports (`from a import b` counts `a.b` if a module)."""
    packages = {name.rpartition(".")[0] for name in modules if "." in name}
    graph: dict[str, set[str]] = {}
    for name, text in modules.items():
        found = imported_names(parse(text), name, name in packages)
        targets = {deepest(imported, modules) for imported in found}
        graph[name] = {t for t in targets if t is not None and t != name}
    return graph


def circles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected parts of more than one module (Tarjan's, without recursion)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: set[tuple[str, ...]] = set()
    for root in sorted(graph):
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        work = [(root, iter(sorted(graph[root])))]
        while work:
            node, edges = work[-1]
            child = next((e for e in edges if e not in index or e in stack), None)
            if child is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    part = stack[stack.index(node) :]
                    del stack[stack.index(node) :]
                    if len(part) > 1:
                        found.add(tuple(sorted(part)))
            elif child in index:
                low[node] = min(low[node], index[child])
            else:
                index[child] = low[child] = len(index)
                stack.append(child)
                work.append((child, iter(sorted(graph[child]))))
    return found


def a_cycle(graph: dict[str, set[str]], part: tuple[str, ...]) -> list[str]:
    """One circle through the first module of `part`, for the message: a → b → a."""
    start, inside = part[0], set(part)
    paths = {start: [start]}
    queue = [start]
    while queue:
        node = queue.pop(0)
        for nxt in sorted(graph[node] & inside):
            if nxt == start:
                return [*paths[node], start]
            if nxt not in paths:
                paths[nxt] = [*paths[node], nxt]
                queue.append(nxt)
    return list(part)


def test_no_import_circles():
    graph = import_graph({module_name(f): text for f, text in package_files().items()})
    found = circles(graph)
    new = [part for part in found if not any(set(part) <= set(k) for k in KNOWN_CIRCLES)]
    assert not new, "import circles: " + "; ".join(" → ".join(a_cycle(graph, p)) for p in new)
    stale = KNOWN_CIRCLES - found
    assert not stale, f"changed or gone, update KNOWN_CIRCLES: {sorted(stale)}"


def test_the_new_checks_catch_a_violation():
    files = {
        "runtime/device.py": "from space import app\n",
        "runtime/cli/up.py": "import space.app\n",
        "space/fires.py": "from runtime.fire.firing import Firing\n",
        "space/chats.py": "import time\nfrom time import perf_counter\n"
        "def f(loop):\n    time.monotonic(); datetime.now(UTC); loop.time()\n"
        "    asyncio.get_running_loop().call_later(1, f); perf_counter()\n"
        "    self._clock.monotonic(); clock.wall(); time.sleep(1)\n",
        "runtime/clock.py": "time.monotonic()\n",
    }
    assert space_importers(files) == {"runtime/device.py"}
    assert runtime_importers(files) == {"space/fires.py"}
    assert {read for _, read in clock_readers(files)} == {
        "time.monotonic",
        "datetime.now",
        "loop.time",
        "asyncio.get_running_loop().call_later",
        "perf_counter",
    }
    graph = import_graph(
        {
            "space.a": "def f():\n    from space import b\n",
            "space.b": "from . import c\n",
            "space.c": "import space.a\n",
            "space.d": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import space.a\n",
            "space.e": "import space.d\n",
            "space": "",
        }
    )
    assert circles(graph) == {("space.a", "space.b", "space.c")}
    assert a_cycle(graph, ("space.a", "space.b", "space.c")) == [
        "space.a",
        "space.b",
        "space.c",
        "space.a",
    ]


def documented_rooms(text: str) -> dict[str, set[str]]:
    """The rooms table of docs/architecture.md: room → the rooms it may import."""
    found = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.split("|")[1:-1]]
        if len(cells) == 3 and (head := re.match(r"`runtime/(\w*)/?`", cells[0])):
            names = set(re.findall(r"`(\w+)`", cells[2].split("(")[0]))
            found[head.group(1)] = {"" if n == "device" else n for n in names}
    return found


def test_the_architecture_page_draws_the_rooms_as_they_are():
    drawn = documented_rooms((ROOT / "docs" / "architecture.md").read_text())
    assert drawn == ROOMS
