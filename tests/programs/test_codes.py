"""Each program version compiled once in the worker: its run processes inherit the code.

`Codes` alone (bounded, keyed by ref and checked against the source), then real workers
(`Executor`) and their run processes: a run after the first finds the code compiled (its
CPU before `main()` shows it), a changed source under one ref runs the new text, and a
program's traceback is the same from inherited code.
"""

from __future__ import annotations

import gc
import linecache
import os
import subprocess
import sys
import textwrap

from core.vocab import RunStatus
from programs import runchild, warm
from programs.codes import Codes
from programs.executor import Executor, Job

ONE = "def main(args):\n    return 1\n"
TWO = "def main(args):\n    return 2\n"


def test_a_learned_version_is_found_by_its_ref_and_its_source_only() -> None:
    codes = Codes()
    assert codes.get("p@v1", ONE) is None
    assert codes.learn("p@v1", ONE) is True
    assert codes.learn("p@v1", ONE) is False  # known: not compiled again
    assert codes.compiled == 1
    code = codes.get("p@v1", ONE)
    assert code is not None and code.co_filename == "p@v1"
    assert codes.get("p@v1", TWO) is None  # another text under the same ref
    assert codes.get("p@v2", ONE) is None
    assert codes.learn("p@v1", TWO) is True  # replaces it
    assert codes.get("p@v1", ONE) is None and codes.get("p@v1", TWO) is not None
    assert len(codes) == 1


def test_the_table_is_bounded_in_entries_and_in_source_the_oldest_going_first() -> None:
    codes = Codes(entries=3)
    for n in range(5):
        codes.learn(f"p@v{n}", ONE)
    assert len(codes) == 3
    assert codes.get("p@v1", ONE) is None and codes.get("p@v4", ONE) is not None
    big = "x = 1\n" * 100 + ONE
    sized = Codes(budget=2 * len(big))
    for n in range(3):
        sized.learn(f"b@v{n}", big)
    assert len(sized) == 2 and sized.get("b@v0", big) is None
    assert sized.learn("huge@v1", big * 3) is False  # over the whole budget: never kept


def test_a_source_that_does_not_compile_is_left_to_the_run_and_no_ref_is_never_kept() -> None:
    codes = Codes()
    assert codes.learn("bad@v1", "def main(:\n") is False
    assert codes.learn("", ONE) is False
    assert len(codes) == 0


def test_learning_freezes_the_new_code_with_the_rest_of_the_heap() -> None:
    gc.unfreeze()
    try:
        Codes().learn("p@v1", "def main(args):\n    return [args]\n")
        assert gc.get_freeze_count() > 0
    finally:
        gc.unfreeze()


def helpers(n: int) -> str:
    return "".join(f"def helper_{i}(x):\n    return [x, {i}]\n" for i in range(n))


BIG = helpers(1500) + "import time\ndef main(args):\n    return time.process_time()\n"


async def test_a_version_run_again_is_not_compiled_again_in_its_run_process() -> None:
    """Compiling 3,000 lines is tens of ms of the run process's CPU before `main()`; from the
    second run on the worker's compiled code is inherited and that CPU is gone."""
    async with Executor(size=1) as executor:
        job = Job(source=BIG, ref="big@v1", timeout_seconds=30.0)
        first = await executor.run(job)
        later = [await executor.run(job) for _ in range(4)]
    assert first.status is RunStatus.OK and all(o.status is RunStatus.OK for o in later)
    assert isinstance(first.result, float)
    cpu = sorted(o.result for o in later)
    assert cpu[1] < first.result / 3, (first.result, cpu)  # type: ignore[operator]


async def test_a_changed_source_under_one_ref_runs_the_new_text() -> None:
    async with Executor(size=1) as executor:
        results = [
            (await executor.run(Job(source=source, ref="inline@v1"))).result
            for source in (ONE, ONE, TWO, TWO, ONE)
        ]
    assert results == [1, 1, 2, 2, 1]


FAILS = textwrap.dedent(
    """
    def main(args):
        value = args["missing"]
        return value
    """
)


async def test_a_traceback_from_inherited_code_quotes_the_programs_line() -> None:
    async with Executor(size=1) as executor:
        outcomes = [await executor.run(Job(source=FAILS, ref="fails@v1")) for _ in range(3)]
    assert all(o.status is RunStatus.ERROR for o in outcomes)
    assert 'value = args["missing"]' in outcomes[-1].error
    assert "line 3" in outcomes[-1].error and "KeyError" in outcomes[-1].error
    assert outcomes[-1].error == outcomes[0].error


ASYNC = "import asyncio\nasync def main(args):\n    await asyncio.sleep(0)\n    return args['n']\n"


def test_an_async_main_compiled_in_the_worker_loads_asyncio_there() -> None:
    probe = (
        "import sys\n"
        "from programs.codes import Codes\n"
        "c = Codes()\n"
        "c.learn('s@v1', 'def main(args):\\n    return 1\\n')\n"
        "print('asyncio' in sys.modules)\n"
        f"c.learn('a@v1', {ASYNC!r})\n"
        "print('asyncio' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True"]


async def test_an_async_main_runs_before_and_after_its_worker_learned_it() -> None:
    async with Executor(size=1) as executor:
        outcomes = [
            await executor.run(Job(source=ASYNC, ref="async@v1", args={"n": n})) for n in range(3)
        ]
    assert [o.result for o in outcomes] == [0, 1, 2]


def test_the_rehearsal_in_the_worker_leaves_no_program_behind() -> None:
    """`runchild.rehearse` walks a run's path in this process with baton's own program:
    nothing of it stays (no linecache entry, no learned code, the descriptors closed)."""

    class Place:  # the two parts of `runproc.Place` a rehearsal reads
        modules = warm.Modules() if warm.SUPPORTED else None
        codes = Codes()

    before = len(os.listdir("/proc/self/fd"))
    runchild.rehearse(Place(), times=3)  # type: ignore[arg-type]
    assert runchild.REHEARSAL.ref not in linecache.cache
    assert len(Place.codes) == 0
    assert len(os.listdir("/proc/self/fd")) == before
