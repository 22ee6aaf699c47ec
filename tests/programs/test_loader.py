import asyncio

import pytest

from programs.loader import ProgramCache, UnknownProgram
from programs.refs import InvalidRef, ProgramRef, parse_ref
from programs.source import MAX_SOURCE_BYTES, InvalidProgram, ProgramMeta, inspect_source

TRIAGE = '''"""Route incoming requests."""

__any_tool__ = True


def main(args):
    return {"ok": True}
'''


def test_inspect_reads_meta_without_running() -> None:
    meta = inspect_source("raise SystemExit(3)\nasync def main(args):\n    return 1\n")
    assert meta.main_is_async is True
    assert meta.any_tool is False
    assert meta.size == len(b"raise SystemExit(3)\nasync def main(args):\n    return 1\n")
    assert len(meta.sha256) == 64


def test_inspect_any_tool_and_hash() -> None:
    meta = inspect_source(TRIAGE)
    assert meta == ProgramMeta(
        main_is_async=False, any_tool=True, sha256=meta.sha256, size=len(TRIAGE)
    )
    assert inspect_source(TRIAGE).sha256 == meta.sha256
    assert inspect_source(TRIAGE + "\n").sha256 != meta.sha256


@pytest.mark.parametrize(
    ("source", "says"),
    [
        ("def main(args):\n    return (\n", "line 2"),
        ("x = 1\n\ndef main(args)\n    pass\n", "line 3"),
        ("def main(args):\n    pass\n  x = 1\n", "line 3"),
        ("def main(args):\n    return\nreturn 5\n", "line 3"),  # only the compiler sees it
        ("def helper(args):\n    pass\n", "no top-level `def main"),
        ("main = lambda args: 1\n", "no top-level `def main"),
        ("class X:\n    def main(self, args):\n        pass\n", "no top-level `def main"),
        ("def main():\n    pass\n", "exactly one argument"),
        ("def main(a, b):\n    pass\n", "exactly one argument"),
        ("def main(a, *, k):\n    pass\n", "exactly one argument"),
        ("__any_tool__ = 'yes'\ndef main(a):\n    pass\n", "line 1: __any_tool__ must be"),
        ("import os\n__any_tool__ = os.name\ndef main(a):\n    pass\n", "line 2"),
        ("def main(a):\n    pass\n\x00", "null bytes"),
    ],
)
def test_inspect_refuses(source: str, says: str) -> None:
    with pytest.raises(InvalidProgram) as exc:
        inspect_source(source)
    assert says in str(exc.value)


@pytest.mark.parametrize(
    ("main", "is_async"),
    [
        ("def main(args):", False),
        ("async def main(args):", True),
        ("def main(args, extra=1):", False),
        ("def main(*args):", False),
        ("def main(args, /):", False),
        ("def main(args, *, k=2):", False),
    ],
)
def test_inspect_accepts_main_shapes(main: str, is_async: bool) -> None:
    assert inspect_source(f"{main}\n    return 1\n").main_is_async is is_async


def test_inspect_last_main_wins_and_any_tool_annotated() -> None:
    src = "__any_tool__: bool = True\ndef main(a): pass\nasync def main(a): pass\n"
    meta = inspect_source(src)
    assert meta.main_is_async is True
    assert meta.any_tool is True


def test_inspect_size_cap() -> None:
    src = "def main(a):\n    pass\n" + "#" * MAX_SOURCE_BYTES
    with pytest.raises(InvalidProgram, match="bytes, the limit is"):
        inspect_source(src)


def test_inspect_refuses_non_text() -> None:
    with pytest.raises(InvalidProgram, match="must be text"):
        inspect_source(b"def main(a): pass")  # type: ignore[arg-type]


class Space:
    """The edge of the world: a published-programs table answering like a fetch call."""

    def __init__(self, programs: dict[str, str]) -> None:
        self.programs = programs
        self.calls: list[str] = []
        self.gate: asyncio.Event | None = None

    async def fetch(self, ref: ProgramRef) -> str | None:
        self.calls.append(str(ref))
        if self.gate is not None:
            await self.gate.wait()
        return self.programs.get(str(ref))


async def test_cache_fetches_once_per_version() -> None:
    space = Space({"triage@v1": TRIAGE})
    cache = ProgramCache(space.fetch)
    first = await cache.get("triage@v1")
    again = await cache.get(parse_ref("triage@v1"))
    assert first is again
    assert space.calls == ["triage@v1"]
    assert first.meta.any_tool is True
    assert first.code.co_filename == "triage@v1"
    namespace: dict = {}
    exec(first.code, namespace)
    assert namespace["main"]({}) == {"ok": True}


async def test_cache_shares_compiles_by_content_hash() -> None:
    space = Space({"a@v1": TRIAGE, "b@v3": TRIAGE})
    cache = ProgramCache(space.fetch)
    a = await cache.get("a@v1")
    b = await cache.get("b@v3")
    assert (cache.fetches, cache.compiles) == (2, 1)
    assert b.ref == ProgramRef(name="b", version=3)
    assert a.code is b.code


async def test_cache_unknown_program() -> None:
    cache = ProgramCache(Space({}).fetch)
    with pytest.raises(UnknownProgram, match="nope@v1 is not published"):
        await cache.get("nope@v1")
    assert len(cache) == 0


async def test_cache_fetch_lookup_error_is_unknown() -> None:
    def fetch(ref: ProgramRef) -> str:
        raise KeyError(str(ref))

    with pytest.raises(UnknownProgram):
        await ProgramCache(fetch).get("x@v1")


async def test_cache_sync_fetch_and_invalid_source() -> None:
    sources = {"ok@v1": TRIAGE, "bad@v1": "def main(:\n"}
    cache = ProgramCache(lambda ref: sources.get(str(ref)))
    assert (await cache.get("ok@v1")).meta.sha256 == inspect_source(TRIAGE).sha256
    with pytest.raises(InvalidProgram, match="line 1"):
        await cache.get("bad@v1")


async def test_cache_refuses_internal_refs() -> None:
    cache = ProgramCache(Space({}).fetch)
    with pytest.raises(InvalidRef, match="run by the runtime"):
        await cache.get("internal:chat-watch")


async def test_cache_is_bounded_lru() -> None:
    space = Space({f"p{i}@v1": TRIAGE + f"# {i}\n" for i in range(5)})
    cache = ProgramCache(space.fetch, max_entries=3)
    for i in range(4):
        await cache.get(f"p{i}@v1")
    await cache.get("p1@v1")  # touch: p1 is now the most recent
    await cache.get("p4@v1")  # evicts p2, the least recent
    assert len(cache) == 3
    assert cache.cached(parse_ref("p1@v1")) is not None
    assert cache.cached(parse_ref("p2@v1")) is None
    await cache.get("p2@v1")
    assert space.calls.count("p2@v1") == 2


async def test_cache_concurrent_gets_share_one_fetch() -> None:
    space = Space({"t@v1": TRIAGE})
    space.gate = asyncio.Event()
    cache = ProgramCache(space.fetch)
    async with asyncio.timeout(5):
        tasks = [asyncio.create_task(cache.get("t@v1")) for _ in range(3)]
        while not space.calls:
            await asyncio.sleep(0)
        space.gate.set()
        results = await asyncio.gather(*tasks)
    assert space.calls == ["t@v1"]
    assert results[0] is results[1] is results[2]


async def test_cache_concurrent_failure_reaches_every_waiter() -> None:
    space = Space({})
    space.gate = asyncio.Event()
    cache = ProgramCache(space.fetch)
    async with asyncio.timeout(5):
        tasks = [asyncio.create_task(cache.get("t@v1")) for _ in range(2)]
        while not space.calls:
            await asyncio.sleep(0)
        await asyncio.sleep(0)
        space.gate.set()
        results = await asyncio.gather(*tasks, return_exceptions=True)
    assert all(isinstance(r, UnknownProgram) for r in results)
    assert space.calls == ["t@v1"]
