"""The floor of a contained run here: a fresh Landlock-confined Python process per run.

Run (bench/compare.py starts it): python bench/floor.py one|burst N SLOT   → one JSON line

A small parent (this module, `programs.landlock` and `programs.confine` imported) builds one
Landlock ruleset of the read-only paths a baton run process gets, compiles the stamp program
once, and per run forks a child that restricts itself with that ruleset, runs the program and
writes the `time.time()` its `main()` read at entry to a pipe, then exits. `one`: a run at
each of N whole seconds from SLOT (epoch seconds). `burst`: N runs due at SLOT, forked on
demand one after another without waiting, reaped as they end (compare.py starts two such
forkers for 1,000). Printed: main() − slot per run (ms), the last reap − SLOT (s) and the
CPU per run of this process and its children (ms).
"""

from __future__ import annotations

import json
import os
import resource
import struct
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path[:] = [str(ROOT), *(p for p in sys.path if Path(p or ".").resolve() != ROOT / "bench")]

from programs import confine, landlock  # noqa: E402

STAMP = "import time\n\n\ndef main(args):\n    t = time.time()\n    return {'ok': True, 't': t}\n"


def ruleset() -> int:
    """A Landlock ruleset's descriptor: read-only to the interpreter, the devices read-write."""
    rules = landlock.Ruleset(landlock.abi())
    for path in confine.read_only_paths():
        rules.allow(path, landlock.READ)
    for path in confine.DEVICES:
        rules.allow(path, landlock.READ_FILE | landlock.WRITE_FILE)
    return rules.detach()


def child(rules: int, code: object, out: int, due: float) -> None:
    """In the fresh process: confine, run the program, write main()'s clock; never returns."""
    try:
        landlock.restrict_self(rules)
        space: dict[str, object] = {"__name__": "stamp"}
        exec(code, space)
        t = space["main"]({})["t"]  # type: ignore[operator,index]
        os.write(out, struct.pack("dd", due, t))
    finally:
        os._exit(0)


def reap(block: bool) -> int:
    """Reap the children that ended (all of them when `block`); how many."""
    count = 0
    while True:
        try:
            pid, _ = os.waitpid(-1, 0 if block else os.WNOHANG)
        except ChildProcessError:
            return count
        if pid == 0:
            return count
        count += 1


def cpu() -> float:
    own, kids = (resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def run(workload: str, n: int, slot: float) -> dict[str, object]:
    rules, (read, out) = ruleset(), os.pipe()
    code = compile(STAMP, "stamp.py", "exec")
    time.sleep(max(0.0, slot - 0.5 - time.time()))
    cpu0 = cpu()
    for i in range(n):
        due = slot + (i if workload == "one" else 0)
        time.sleep(max(0.0, due - time.time()))
        if os.fork() == 0:
            child(rules, code, out, due)
        reap(block=workload == "one")
    reap(block=True)
    last, spent = time.time() - slot, cpu() - cpu0
    os.close(out)
    data = b""
    while chunk := os.read(read, 65536):
        data += chunk
    late = [(t - due) * 1e3 for due, t in struct.iter_unpack("dd", data)]
    return {"late": late, "last": last, "cpu_ms": spent / n * 1e3}


if __name__ == "__main__":
    print(json.dumps(run(sys.argv[1], int(sys.argv[2]), float(sys.argv[3]))), flush=True)
