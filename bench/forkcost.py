"""What a run process's fork and exit scale with: the forking process's mappings and pages.

Run: .venv/bin/python -P bench/forkcost.py [MODULES ...]   (each a comma list; "": none but
     programs.forking, imported by every child)
     .venv/bin/python -P bench/forkcost.py --worker

For each comma list of modules, a child Python imports them, freezes its heap
(`gc.freeze()`, as the worker does) and forks 400 children that `_exit` at once, with
`os.fork()` and with libc's (`programs.forking.fork`): the parent's time in the fork, the
children's CPU and minor faults (getrusage), beside the parent's mappings (VMAs) and
anonymous memory. With `--worker`, a real worker (bench/zygote.py's) after 50 runs: its
memory by mapping (smaps), the largest anonymous ones first.
"""

from __future__ import annotations

import collections
import os
import subprocess
import sys
from pathlib import Path

_HERE = Path(__file__).resolve().parent
FORKS = 400

CHILD = """
import gc, importlib, os, resource, sys, time
for name in filter(None, sys.argv[1].split(",")):
    importlib.import_module(name)
from programs.forking import fork as libc_fork
gc.freeze()
maps = open("/proc/self/maps").read().splitlines()
anon = sum(int(l.split()[1]) for l in open("/proc/self/smaps") if l.startswith("Anonymous:"))
for label, fork in (("os.fork", os.fork), ("libc fork", libc_fork)):
    parent, before = 0.0, resource.getrusage(resource.RUSAGE_CHILDREN)
    for _ in range({forks}):
        start = time.perf_counter()
        pid = fork()
        if pid == 0:
            os._exit(0)
        parent += time.perf_counter() - start
        os.waitpid(pid, 0)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    faults = (after.ru_minflt - before.ru_minflt) / {forks}
    what = sys.argv[1] or "(forking only)"
    print(f"| {{what}} | {{label}} | {{len(maps)}} | {{anon / 1024:.1f}} | "
          f"{{parent / {forks} * 1e3:.3f}} | {{cpu / {forks} * 1e3:.3f}} | {{faults:.0f}} |")
"""


def forks(modules: list[str]) -> None:
    print("| modules | fork | VMAs | anonymous MB | parent ms / fork | child CPU ms | faults |")
    print("|---|---|---:|---:|---:|---:|---:|")
    code = CHILD.format(forks=FORKS)
    for names in modules:
        cmd = [sys.executable, "-P", "-c", code, names]
        subprocess.run(cmd, check=True, cwd=_HERE.parent)


def worker_maps() -> None:
    sys.path.insert(0, str(_HERE))
    import zygote

    w = zygote.Worker()
    try:
        for _ in range(50):
            w.run()
        by: dict[str, list[int]] = collections.defaultdict(lambda: [0, 0, 0])
        entry = by["[anon]"]
        for line in Path(f"/proc/{w.proc.pid}/smaps").read_text().splitlines():
            parts = line.split()
            if not parts[0].endswith(":"):  # a mapping's first line: its range, then its name
                entry = by[parts[5] if len(parts) > 5 else "[anon]"]
                entry[2] += 1
            elif parts[0] in ("Rss:", "Anonymous:"):
                entry[parts[0] == "Anonymous:"] += int(parts[1])
    finally:
        w.close()
    total = [sum(v[i] for v in by.values()) for i in range(3)]
    print(f"worker after 50 runs: RSS {total[0]} kB, anonymous {total[1]} kB, {total[2]} VMAs")
    print("| mapping | RSS kB | anonymous kB | VMAs |\n|---|---:|---:|---:|")
    for name, (rss, anon, vmas) in sorted(by.items(), key=lambda kv: -kv[1][1])[:10]:
        print(f"| {os.path.basename(name) or name} | {rss} | {anon} | {vmas} |")


if __name__ == "__main__":
    if sys.argv[1:] == ["--worker"]:
        worker_maps()
    else:
        forks(sys.argv[1:] or ["", "msgspec", "shutil,tempfile", "programs.worker"])
