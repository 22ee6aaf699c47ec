"""The executor through a real pool of worker processes: every failure mode costs one run."""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import textwrap
from pathlib import Path

import pytest
from waiting import eventually

from core.vocab import RunStatus
from programs.context import RunContext
from programs.executor import Executor, ExecutorClosed, Job
from programs.outcome import Outcome
from programs.process import StartFailed
from programs.tail import LIMIT

OK = "def main(args):\n    return {'ok': True, 'args': args}\n"
PID = "import os\ndef main(args):\n    return os.getpid()\n"
WORKER = "import os\ndef main(args):\n    return os.getppid()\n"  # runs are forked by the worker
LOOP = "def main(args):\n    while True:\n        pass\n"


def job(source: str, **overrides: object) -> Job:
    fields: dict = {"ref": "prog@v1", "timeout_seconds": 5.0} | overrides
    return Job(source=textwrap.dedent(source), **fields)


@pytest.fixture
async def pool():
    async with Executor(size=2) as executor:
        yield executor


async def next_run_ok(pool: Executor) -> Outcome:
    outcome = await pool.run(job(OK, args={"n": 1}))
    assert outcome.status is RunStatus.OK, outcome
    assert outcome.result == {"ok": True, "args": {"n": 1}}
    return outcome


async def test_plain_main_returns_its_result(pool: Executor) -> None:
    outcome = await next_run_ok(pool)
    assert outcome.error == ""
    assert outcome.main_latency_ms is not None and outcome.main_latency_ms > 0
    assert outcome.duration_ms >= outcome.main_latency_ms


async def test_the_daemons_working_directory_does_not_shadow_the_workers_modules(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = tmp_path / "shadowed"
    for module in ("programs/__init__.py", "programs/worker.py", "json.py"):
        (tmp_path / module).parent.mkdir(exist_ok=True)
        (tmp_path / module).write_text(f"open({str(marker)!r}, 'a').write({module!r})\n")
    monkeypatch.chdir(tmp_path)  # a daemon started where a user keeps such files
    async with Executor(size=1) as executor:
        await next_run_ok(executor)
    assert not marker.exists()


async def test_async_main_runs_in_its_own_loop(pool: Executor) -> None:
    source = """
        import asyncio
        async def main(args):
            await asyncio.sleep(0)
            return {"doubled": args["x"] * 2}
    """
    outcome = await pool.run(job(source, args={"x": 21}))
    assert (outcome.status, outcome.result) == (RunStatus.OK, {"doubled": 42})


async def test_each_run_is_a_fresh_process_with_a_fresh_namespace(pool: Executor) -> None:
    first = "leftover = 1\ndef main(args):\n    return 0\n"
    assert (await pool.run(job(first))).status is RunStatus.OK
    probe = """
        import builtins, os
        runs = globals().setdefault("runs", []); runs.append(1)
        def main(args):
            names = sorted(k for k in globals() if not k.startswith("__"))
            marked = getattr(builtins, "marker", False)
            builtins.marker = True
            return {"pid": os.getpid(), "worker": os.getppid(), "name": __name__,
                    "runs": len(runs), "names": names, "marked": marked}
    """
    results = [(await pool.run(job(probe))).result for _ in range(3)]
    assert len({r["pid"] for r in results}) == 3  # a new process each run
    assert len({r["worker"] for r in results}) <= 2  # forked by the two workers
    for result in results:
        assert result["name"] == "__baton_program__"
        assert (result["runs"], result["marked"]) == (1, False)
        assert result["names"] == ["builtins", "main", "os", "runs", "use"]


async def test_each_run_has_an_empty_scratch_directory_of_its_own_removed_after(
    pool: Executor,
) -> None:
    source = """
        import os
        def main(args):
            found = os.listdir(".")
            os.makedirs("left/behind")
            with open("left/behind/file", "w") as f:
                f.write("x")
            return {"home": os.environ["HOME"], "cwd": os.getcwd(), "found": found}
    """
    results = [(await pool.run(job(source))).result for _ in range(4)]
    assert len({r["cwd"] for r in results}) == 4, results  # a new one each run
    for result in results:
        assert result["home"] == result["cwd"] and result["found"] == [], result
        assert not os.path.exists(result["cwd"]), result  # removed, with what it held
    assert len({os.path.dirname(r["cwd"]) for r in results}) <= 2  # under its worker's own
    for worker in {os.path.dirname(r["cwd"]) for r in results}:
        assert os.stat(worker).st_mode & 0o777 == 0o700


async def test_an_exception_is_an_error_with_the_program_traceback(pool: Executor) -> None:
    source = """
        def helper(x):
            raise ValueError(f"boom {x}")
        def main(args):
            helper(args["x"])
    """
    outcome = await pool.run(job(source, ref="triage@v1", args={"x": 7}))
    assert outcome.status is RunStatus.ERROR
    assert 'File "triage@v1", line 5, in main' in outcome.error
    assert 'File "triage@v1", line 3, in helper' in outcome.error
    assert 'raise ValueError(f"boom {x}")' in outcome.error
    assert outcome.error.endswith("ValueError: boom 7")
    assert "worker.py" not in outcome.error
    await next_run_ok(pool)


@pytest.mark.parametrize(
    ("source", "reason"),
    [
        ("def main(args):\n    return (\n", "SyntaxError"),
        ("x = 1\n", "program defines no callable main(args)"),
        ("raise KeyError('at import')\ndef main(args):\n    pass\n", "KeyError: 'at import'"),
    ],
)
async def test_broken_programs_are_errors(pool: Executor, source: str, reason: str) -> None:
    outcome = await pool.run(job(source))
    assert outcome.status is RunStatus.ERROR
    assert reason in outcome.error
    await next_run_ok(pool)


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        ("import sys; sys.exit(3)", "program called sys.exit(3)"),
        ("import os; os._exit(7)", "worker exited with code 7"),
        ("import ctypes; ctypes.string_at(0)", "worker killed by SIGSEGV"),
        ("import os, signal; os.kill(os.getpid(), signal.SIGKILL)", "worker killed by SIGKILL"),
    ],
)
async def test_exits_and_crashes_cost_the_run_only(pool: Executor, body: str, reason: str) -> None:
    outcome = await pool.run(job(f"def main(args):\n    {body}\n"))
    assert (outcome.status, outcome.error) == (RunStatus.CRASHED, reason)
    await next_run_ok(pool)
    stats = await pool.settled()
    assert (stats.alive, stats.idle) == (2, 2)


async def test_a_segfault_leaves_the_program_traceback_on_stderr(pool: Executor) -> None:
    source = "import ctypes\ndef main(args):\n    ctypes.string_at(0)\n"
    outcome = await pool.run(job(source, ref="seg@v1"))
    assert outcome.status is RunStatus.CRASHED
    assert 'File "seg@v1", line 3 in main' in outcome.stderr_tail


async def test_an_endless_loop_times_out_and_the_worker_ends_it(pool: Executor) -> None:
    outcome = await pool.run(job(LOOP, timeout_seconds=0.5))
    assert (outcome.status, outcome.error) == (RunStatus.TIMEOUT, "exceeded the timeout of 0.5 s")
    stats = await pool.settled()
    assert (stats.alive, stats.idle, stats.spawned) == (2, 2, 2)  # the run died, not the worker
    await next_run_ok(pool)


async def test_a_memory_blowup_is_an_error_naming_the_limit(pool: Executor) -> None:
    source = "def main(args):\n    return len(bytearray(1024 * 1024 * 1024))\n"
    outcome = await pool.run(job(source, memory_mb=64))
    assert outcome.status is RunStatus.ERROR
    assert outcome.error.startswith("memory limit of 64 MB exceeded")
    assert "MemoryError" in outcome.error
    await next_run_ok(pool)


async def test_memory_within_the_limit_is_fine(pool: Executor) -> None:
    source = "def main(args):\n    return len(bytearray(32 * 1024 * 1024))\n"
    outcome = await pool.run(job(source, memory_mb=64))
    assert (outcome.status, outcome.result) == (RunStatus.OK, 32 * 1024 * 1024)


async def test_an_output_flood_is_drained_and_kept_to_its_tail(pool: Executor) -> None:
    source = """
        import os, sys
        def main(args):
            for i in range(20000):
                print("out", i, "x" * 100)
                sys.stderr.write(f"err {i} {'y' * 100}\\n")
            os.write(1, b"z" * 2_000_000)
            print("\\nlast out")
            print("last err", file=sys.stderr)
            return "done"
    """
    outcome = await pool.run(job(source, timeout_seconds=30))
    assert (outcome.status, outcome.result) == (RunStatus.OK, "done")
    for text, last in ((outcome.stdout_tail, "last out\n"), (outcome.stderr_tail, "last err\n")):
        assert text.startswith("…[truncated ")
        assert text.endswith(last)
        _, body = text.split("\n", 1)
        assert len(body.encode()) == LIMIT
    following = await pool.run(job("def main(args):\n    print('only mine')\n"))
    assert (following.stdout_tail, following.stderr_tail) == ("only mine\n", "")


async def test_output_of_a_killed_run_is_kept(pool: Executor) -> None:
    source = "def main(args):\n    print('before')\n    while True:\n        pass\n"
    outcome = await pool.run(job(source, timeout_seconds=0.5))
    assert (outcome.status, outcome.stdout_tail) == (RunStatus.TIMEOUT, "before\n")


async def test_an_oversized_result_is_an_error_with_its_start_kept(pool: Executor) -> None:
    outcome = await pool.run(job("def main(args):\n    return ['x' * 100] * 1000\n"))
    assert outcome.status is RunStatus.ERROR
    assert outcome.error.startswith("result too large: 103001 bytes of JSON")
    assert outcome.result.startswith('["xxx')
    assert outcome.result.endswith(f"…[truncated {103001 - LIMIT} bytes]")
    await next_run_ok(pool)


async def test_an_unserialisable_result_is_an_error(pool: Executor) -> None:
    outcome = await pool.run(job("def main(args):\n    return {'when': object()}\n"))
    assert outcome.status is RunStatus.ERROR
    assert outcome.error.startswith("result is not JSON-serialisable: ")
    assert "object" in outcome.error
    await next_run_ok(pool)


async def test_workers_see_a_filtered_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BATON_FAKE_SECRET", "hunter2")
    async with Executor(size=2, env={"BATON_EXTRA": "yes"}) as executor:
        source = "import os\ndef main(args):\n    return dict(os.environ)\n"
        outcome = await executor.run(job(source))
    assert outcome.status is RunStatus.OK
    assert "BATON_FAKE_SECRET" not in outcome.result
    assert "hunter2" not in str(outcome.result)
    assert outcome.result["BATON_EXTRA"] == "yes"
    assert outcome.result["PATH"] == os.environ["PATH"]
    assert set(outcome.result) <= {
        "PATH",
        "LANG",
        "LC_ALL",
        "LC_CTYPE",
        "TZ",
        "HOME",
        "TMPDIR",
        "PYTHONPATH",
        "BATON_EXTRA",
    }


async def test_use_without_a_context_names_the_missing_capabilities(pool: Executor) -> None:
    outcome = await pool.run(job("def main(args):\n    use('any@v1')\n"))
    assert outcome.status is RunStatus.ERROR
    assert "LookupError: no capabilities: this run has no context; cannot use 'any@v1'" in (
        outcome.error
    )


async def test_use_with_a_context_comes_from_the_capability_registry(pool: Executor) -> None:
    context = RunContext(
        run_id="run_1",
        trigger_id="trg_1",
        program="p@v1",
        peer="laptop",
        space="bao",
        url="http://127.0.0.1:9",
        token="tok",
    )
    source = "def main(args):\n    return [callable(use), type(use).__module__]\n"
    outcome = await pool.run(job(source, context=context))
    assert (outcome.status, outcome.result) == (RunStatus.OK, [True, "programs.use"])


async def test_args_that_cannot_be_sent_are_refused_naming_the_field(pool: Executor) -> None:
    with pytest.raises(ValueError, match=r"^args: cannot be sent"):
        await pool.run(job(OK, args={"x": object()}))
    await next_run_ok(pool)


@pytest.mark.parametrize(
    ("field", "value"), [("timeout_seconds", 0), ("timeout_seconds", -1.0), ("memory_mb", 0)]
)
def test_job_limits_must_be_positive(field: str, value: float) -> None:
    with pytest.raises(ValueError, match=f"^{field}: must be > 0"):
        job(OK, **{field: value})


FIND_CONTROL = """
    import os, stat, time
    def control_fd():
        return next(fd for fd in range(3, 256) if _is_socket(fd))
    def _is_socket(fd):
        try:
            return stat.S_ISSOCK(os.fstat(fd).st_mode)
        except OSError:
            return False
"""


@pytest.mark.parametrize(
    ("write", "reason"),
    [
        (b"\x00\x00\x00\x05garba", "worker protocol error: undecodable frame"),
        (b"\xff\xff\xff\xff", "worker protocol error: frame of 4294967295 bytes announced"),
        (b"\x00\x00\x00\x01\xc0", "worker protocol error: undecodable frame"),
    ],
)
async def test_garbage_on_the_control_channel_costs_the_run_only(
    pool: Executor, write: bytes, reason: str
) -> None:
    source = FIND_CONTROL + f"    def main(args):\n        os.write(control_fd(), {write!r})\n"
    source += "        time.sleep(30)\n"
    outcome = await pool.run(job(source))
    assert outcome.status is RunStatus.CRASHED
    assert outcome.error.startswith(reason)
    await next_run_ok(pool)


async def test_a_worker_that_stalls_mid_frame_times_out(pool: Executor) -> None:
    stall = b"\x00\x00\x10\x00ab"  # announces 4096 bytes, sends two
    source = FIND_CONTROL + f"    def main(args):\n        os.write(control_fd(), {stall!r})\n"
    source += "        time.sleep(30)\n"
    outcome = await pool.run(job(source, timeout_seconds=0.5))
    assert outcome.status is RunStatus.TIMEOUT
    await next_run_ok(pool)


async def test_more_runs_than_workers_wait_their_turn(pool: Executor) -> None:
    source = "import time\ndef main(args):\n    time.sleep(0.05)\n    return args['i']\n"
    outcomes = await asyncio.gather(*(pool.run(job(source, args={"i": i})) for i in range(5)))
    assert [o.result for o in outcomes] == list(range(5))
    assert {o.status for o in outcomes} == {RunStatus.OK}


async def test_a_cancelled_run_kills_its_worker_and_the_pool_recovers(pool: Executor) -> None:
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.3):
            await pool.run(job(LOOP))
    stats = await pool.settled()
    assert (stats.alive, stats.idle) == (2, 2)
    await next_run_ok(pool)


def run_processes(executor: Executor) -> list[int]:
    """The run processes the executor's workers have forked and not yet ended (each idle
    worker has one: a spare, forked and confined ahead of its run)."""
    found = []
    for worker in executor._workers:
        with contextlib.suppress(OSError):
            found += [
                int(p)
                for p in Path(f"/proc/{worker.pid}/task/{worker.pid}/children").read_text().split()
            ]
    return found


def _spinning(pid: int) -> bool:
    """Running, with over 0.1 s of CPU time: a program in LOOP, not a spare being confined."""
    with contextlib.suppress(OSError):
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return fields[0] == "R" and int(fields[11]) >= os.sysconf("SC_CLK_TCK") // 10
    return False


async def a_busy_run_process(executor: Executor) -> int:
    """The pid of a run process spinning in its program (LOOP)."""
    await eventually(lambda: any(_spinning(p) for p in run_processes(executor)), timeout=10)
    return next(p for p in run_processes(executor) if _spinning(p))


async def test_close_ends_runs_in_flight_and_reaps_every_worker() -> None:
    executor = Executor(size=2)
    await executor.start()
    pids = {(await executor.run(job(WORKER))).result, *(w.pid for w in executor._workers)}
    in_flight = asyncio.ensure_future(executor.run(job(LOOP, timeout_seconds=30)))
    pids.add(await a_busy_run_process(executor))
    await executor.close()
    outcome = await in_flight
    assert (outcome.status, outcome.error) == (RunStatus.CRASHED, "executor closed")
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)  # killed and reaped: not even a zombie
    with pytest.raises(ExecutorClosed):
        await executor.run(job(OK))


async def test_a_pool_whose_workers_cannot_start_says_why() -> None:
    executor = Executor(size=2, env={"PYTHONHOME": "/nonexistent"}, start_timeout=5)
    with pytest.raises(StartFailed, match="worker ended before reporting ready"):
        await executor.start()
    outcome = await executor.run(job(OK))
    assert outcome.status is RunStatus.CRASHED
    assert "PYTHONHOME" in outcome.error or "encodings" in outcome.error
    await executor.close()


@pytest.mark.parametrize("daemon", [True, False])
async def test_threads_a_program_leaves_end_with_its_run(pool: Executor, daemon: bool) -> None:
    source = f"""
        import threading, time
        def main(args):
            stop = threading.Event()
            threading.Thread(target=stop.wait, args=(30,), daemon={daemon}).start()
            return "left a thread"
    """
    outcome = await pool.run(job(source))
    assert (outcome.status, outcome.result) == (RunStatus.OK, "left a thread")
    stats = await pool.settled()
    assert (stats.alive, stats.idle, stats.spawned) == (2, 2, 2)
    # the run and its thread are gone: only the workers' spares
    await eventually(lambda: len(run_processes(pool)) == 2)
    await next_run_ok(pool)


async def test_a_worker_is_replaced_after_max_runs() -> None:
    async with Executor(size=2, max_runs=2) as executor:
        pids = [(await executor.run(job(WORKER))).result for _ in range(3)]
        stats = await executor.settled()
    assert pids[0] == pids[2] != pids[1]  # the idle worker used longest ago goes first
    assert (stats.alive, stats.spawned) == (2, 3)


async def test_close_wakes_runs_waiting_for_a_worker() -> None:
    executor = Executor(size=1)
    await executor.start()
    busy = asyncio.ensure_future(executor.run(job(LOOP, timeout_seconds=30)))
    await a_busy_run_process(executor)
    waiting = asyncio.ensure_future(executor.run(job(OK)))
    async with asyncio.timeout(5):
        while executor.stats().waiting == 0:
            await asyncio.sleep(0)
    await executor.close()
    assert (await busy).error == "executor closed"
    with pytest.raises(ExecutorClosed):
        await waiting


async def test_a_forked_child_of_a_program_does_not_answer_for_it(pool: Executor) -> None:
    source = """
        import os
        def main(args):
            child = os.fork()
            if child == 0:
                return "child"
            os.waitpid(child, 0)
            return "parent"
    """
    outcome = await pool.run(job(source))
    assert (outcome.status, outcome.result) == (RunStatus.OK, "parent")
    for _ in range(3):
        await next_run_ok(pool)


DAEMON = """
import asyncio
from programs.executor import Executor, Job
SPIN = "def main(a):\\n    while True:\\n        pass\\n"
async def main():
    executor = Executor(size=2)
    await executor.start()
    runs = [asyncio.ensure_future(executor.run(Job(source=SPIN, ref="spin@v1"))) for _ in range(2)]
    await asyncio.gather(*runs)
asyncio.run(main())
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie is dead
    except FileNotFoundError:
        return True


def _children(pid: int) -> list[int]:
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _grandchildren(pid: int) -> list[int]:
    return [g for child in _children(pid) for g in _children(child)]


async def test_workers_die_with_a_daemon_that_was_killed(tmp_path: Path) -> None:
    daemon = await asyncio.create_subprocess_exec(sys.executable, "-c", DAEMON, cwd=tmp_path)
    try:
        # both workers have forked a busy run
        await eventually(lambda: len(_grandchildren(daemon.pid)) >= 2, timeout=10)
        pids = [*_children(daemon.pid), *_grandchildren(daemon.pid)]
    finally:
        daemon.kill()
        await daemon.wait()
    await eventually(lambda: all(_gone(pid) for pid in pids))
